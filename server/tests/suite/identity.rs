//! A process in its own cgroup, named the way Kubernetes and containerd name them, gets its
//! container and pod identity, and the flame graph can be selected by them; with a Kubernetes
//! API server to ask, also by the pod's namespace and name.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bimodal_agent::node::kubernetes::ApiConfig;
use bimodal_agent::sample::events::EventKind;
use bimodal_agent::ship::{self, RunOptions};

use super::common::{agent_options, selector, TestServer};
use crate::fixture;

const POD: &str = "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d";
const CONTAINER: &str = "3f4b6a1c9d2e8f7a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a";

/// A cgroup v2 directory, removed (after its processes leave) when dropped.
struct Cgroup {
    root: PathBuf,
    leaf: PathBuf,
}

impl Cgroup {
    fn create(relative: &str) -> Cgroup {
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
        let root = mounts
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.get(2) == Some(&"cgroup2"))
            .map(|f| PathBuf::from(f[1]))
            .expect("a cgroup2 mount (needed to put a process into its own cgroup)");
        let leaf = root.join(relative);
        std::fs::create_dir_all(&leaf).unwrap_or_else(|e| panic!("failed to create {}: {e}", leaf.display()));
        Cgroup { root, leaf }
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.leaf.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let mut dir = self.leaf.clone();
        while dir != self.root {
            let _ = std::fs::remove_dir(&dir);
            dir.pop();
        }
    }
}

/// The fixture, moved into `kubepods/burstable/pod<uid>/<container id>`, is sampled with that
/// identity: selecting the flame graph by its container or pod finds its stack, another
/// container's selection finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_carry_the_container_and_pod_of_their_cgroup() {
    let cgroup = Cgroup::create(&format!("bimodal-test/kubepods/burstable/pod{POD}/{CONTAINER}"));
    let server = TestServer::start().await;
    let workload = fixture::start("fault", 60);
    cgroup.add(workload.pid());
    let (stop_agent, agent_stopped) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(ship::run(
        agent_options(
            server.url(),
            "container-node",
            workload.pid(),
            vec![EventKind::PageFault],
        ),
        agent_stopped,
    ));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = server
            .get(&format!(
                "/api/v1/flamegraph?event=page_fault&{}&format=folded",
                selector(&format!(r#"{{container_id="{CONTAINER}"}}"#))
            ))
            .await;
        assert_eq!(status, 200, "{body}");
        if body.contains("touch_fresh_pages") {
            break;
        }
        assert!(Instant::now() < deadline, "no samples selected by container id: {body}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (_, by_pod) = server
        .get(&format!(
            "/api/v1/flamegraph?event=page_fault&{}&format=folded",
            selector(&format!(r#"{{pod_uid="{POD}"}}"#))
        ))
        .await;
    assert!(by_pod.contains("touch_fresh_pages"), "{by_pod}");
    let other = "f".repeat(64);
    let (_, none) = server
        .get(&format!(
            "/api/v1/flamegraph?event=page_fault&{}&format=folded",
            selector(&format!(r#"{{container_id="{other}"}}"#))
        ))
        .await;
    assert_eq!(none, "", "another container's selection must be empty");

    let _ = stop_agent.send(true);
    agent.await.unwrap().unwrap();
    drop(workload);
    server.stop().await;
}

/// The node the agent names and the fake API server lists pods for.
const K8S_NODE: &str = "k8s-node";
const TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.test.sig";

/// This node's pods as the API server lists them (`kubectl get --raw`, trimmed): the fixture's
/// pod by its UID and container id, and another pod in another namespace.
fn pod_list() -> String {
    format!(
        r#"{{
  "kind": "PodList", "apiVersion": "v1", "metadata": {{"resourceVersion": "48213"}},
  "items": [
    {{
      "metadata": {{"name": "coredns-5d78c9869d-abcde", "namespace": "kube-system",
                    "uid": "9f8e7d6c-5b4a-4938-8271-605f4e3d2c1b"}},
      "spec": {{"nodeName": "{K8S_NODE}", "containers": [{{"name": "coredns"}}]}},
      "status": {{"phase": "Running", "containerStatuses": [{{"name": "coredns", "ready": true,
        "containerID": "containerd://{coredns}"}}]}}
    }},
    {{
      "metadata": {{"name": "checkout-7d9f8b6c5-x2k4p", "namespace": "shop", "uid": "{POD}",
                    "labels": {{"app": "checkout"}}}},
      "spec": {{"nodeName": "{K8S_NODE}", "containers": [{{"name": "checkout"}}]}},
      "status": {{"phase": "Running", "containerStatuses": [{{"name": "checkout", "ready": true,
        "containerID": "containerd://{CONTAINER}"}}]}}
    }}
  ]
}}"#,
        coredns = "c0ffee00".repeat(8),
    )
}

/// A plain-HTTP stand-in for the Kubernetes API server on loopback: `GET /api/v1/pods` with a
/// bearer token answers [`pod_list`] for `spec.nodeName=K8S_NODE` and an empty list for other
/// nodes, as the real one does; without the token it answers 401.
struct FakeKubernetesApi {
    url: String,
    requests: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeKubernetesApi {
    fn start() -> FakeKubernetesApi {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (requests, stop) = (requests.clone(), stop.clone());
            move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Ok(mut stream) = stream {
                        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                        answer(&mut stream, &requests);
                    }
                }
            }
        });
        FakeKubernetesApi {
            url,
            requests,
            stop,
            thread: Some(thread),
        }
    }

    /// The request targets seen so far.
    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for FakeKubernetesApi {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocked `accept` so the thread sees `stop`.
        let _ = TcpStream::connect(self.url.trim_start_matches("http://"));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads one request's head, records its target and answers it.
fn answer(stream: &mut TcpStream, requests: &Mutex<Vec<String>>) {
    let Some(head) = crate::http::read_request_head(stream) else {
        return;
    };
    let target = head.target.clone();
    let authorized = head.header("authorization") == Some(format!("Bearer {TOKEN}").as_str());
    requests.lock().unwrap().push(target.clone());
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let (status, body) = if !authorized {
        (
            "401 Unauthorized",
            r#"{"kind":"Status","status":"Failure","message":"Unauthorized","code":401}"#.to_owned(),
        )
    } else if path != "/api/v1/pods" {
        (
            "404 Not Found",
            r#"{"kind":"Status","status":"Failure","message":"not found","code":404}"#.to_owned(),
        )
    } else if query
        .split('&')
        .any(|p| p == format!("fieldSelector=spec.nodeName%3D{K8S_NODE}"))
    {
        ("200 OK", pod_list())
    } else {
        (
            "200 OK",
            r#"{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}"#.to_owned(),
        )
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes());
}

/// With a Kubernetes API server to ask, the agent names the fixture's pod UID (from its
/// kubepods cgroup) by the pod's namespace and name: the flame graph selected by them holds the
/// fixture's stack, and the same pod name in another namespace, or the other pod's namespace,
/// selects nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_carry_the_namespace_and_pod_name_the_kubernetes_api_gives_their_pod() {
    let cgroup = Cgroup::create(&format!("bimodal-test-k8s/kubepods/besteffort/pod{POD}/{CONTAINER}"));
    let api = FakeKubernetesApi::start();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let server = TestServer::start().await;
    let workload = fixture::start("fault", 60);
    cgroup.add(workload.pid());
    let (stop_agent, agent_stopped) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(ship::run(
        RunOptions {
            kubernetes: Some(ApiConfig::from_url(api.url.as_str(), Some(&token), None, K8S_NODE).unwrap()),
            ..agent_options(server.url(), K8S_NODE, workload.pid(), vec![EventKind::PageFault])
        },
        agent_stopped,
    ));
    let flame = |selection: &str| {
        let path = format!(
            "/api/v1/flamegraph?event=page_fault&{}&format=folded",
            selector(selection)
        );
        let server = &server;
        async move {
            let (status, body) = server.get(&path).await;
            assert_eq!(status, 200, "{path}: {body}");
            body
        }
    };
    let pod = r#"{namespace="shop",pod="checkout-7d9f8b6c5-x2k4p"}"#;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let body = flame(pod).await;
        if body.contains("touch_fresh_pages") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no samples selected by namespace and pod name: {body:?}; the API server saw {:?}",
            api.requests()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The names are stored beside the UID they came from.
    assert!(flame(&format!(r#"{{pod_uid="{POD}",namespace="shop"}}"#))
        .await
        .contains("touch_fresh_pages"));
    for other in [
        r#"{namespace="default",pod="checkout-7d9f8b6c5-x2k4p"}"#,
        r#"{namespace="kube-system"}"#,
        r#"{pod="coredns-5d78c9869d-abcde"}"#,
    ] {
        assert_eq!(flame(other).await, "", "{other} must select nothing");
    }

    let _ = stop_agent.send(true);
    agent.await.unwrap().unwrap();
    let requests = api.requests();
    assert!(!requests.is_empty());
    assert!(
        requests
            .iter()
            .all(|r| r.contains("fieldSelector=spec.nodeName%3Dk8s-node")),
        "pods are listed for the agent's node only: {requests:?}"
    );
    drop(workload);
    server.stop().await;
}
