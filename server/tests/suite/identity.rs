//! A process in its own cgroup, named the way Kubernetes and containerd name them, gets its
//! container and pod identity, and the flame graph can be selected by them.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bimodal_agent::events::EventKind;
use bimodal_agent::ship;

use super::common::{agent_options, TestServer};
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
                "/api/v1/flamegraph?event=page_fault&container={CONTAINER}&format=folded"
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
        .get(&format!("/api/v1/flamegraph?event=page_fault&pod={POD}&format=folded"))
        .await;
    assert!(by_pod.contains("touch_fresh_pages"), "{by_pod}");
    let other = "f".repeat(64);
    let (_, none) = server
        .get(&format!(
            "/api/v1/flamegraph?event=page_fault&container={other}&format=folded"
        ))
        .await;
    assert_eq!(none, "", "another container's selection must be empty");

    let _ = stop_agent.send(true);
    agent.await.unwrap().unwrap();
    drop(workload);
    server.stop().await;
}
