//! Pod names for pod UIDs, asked of the Kubernetes API server — for an agent that runs as a
//! DaemonSet whose service account may list pods.
//!
//! `identity` reads a process's pod UID and container id from its cgroup; only the API server
//! knows which namespace, pod and container those are. [`PodResolver`] lists the pods of this node
//! once, keeps them by UID, and lists again on a miss at most once per [`REFRESH_INTERVAL`], so a
//! node with churning pods costs the API server one request per interval at most. It is optional:
//! when the server is unreachable or refuses, lookups give `None` and samples keep their UIDs.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use serde::Deserialize;

/// The service account token that Kubernetes mounts into every pod.
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
/// The CA bundle that signs the API server's certificate, mounted beside the token.
pub const SERVICE_ACCOUNT_CA: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
/// Shortest time between two pod lists; a miss within it is answered from the cache.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(30);
/// Longest wait for a connection, and for each read or write on it.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// Largest pod list read, in bytes (a full node of 110 pods lists in a few MiB).
const MAX_LIST_BYTES: u64 = 64 << 20;
/// Distinct errors remembered for warning once each; later new ones go unlogged.
const MAX_WARNED: usize = 64;

/// Why an API configuration or a resolver could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("not running in a Kubernetes pod: environment variable `{0}` is not set")]
    MissingEnv(&'static str),
    #[error("no node name given (pass the pod's `spec.nodeName` through the downward API)")]
    MissingNodeName,
    #[error("failed to read `{}`", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("API server URL `{0}` does not start with `http://` or `https://`")]
    BadUrl(String),
    #[error("CA bundle is not valid PEM")]
    Pem(#[source] rustls_pki_types::pem::Error),
    #[error("CA bundle holds no certificate")]
    NoCertificate,
    #[error("CA bundle holds an unusable certificate")]
    Certificate(#[source] rustls::Error),
}

/// Where the API server is and how to prove who we are to it. Its `Debug` never shows the token.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiConfig {
    /// `https://host:port` (or `http://` for `kubectl proxy`), without a trailing path.
    pub url: String,
    /// Sent as `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// PEM CA bundle; when given it is the only trust for `https://` (else the public web roots).
    pub ca_pem: Option<Vec<u8>>,
    /// The node whose pods are listed (`spec.nodeName`).
    pub node_name: String,
}

impl std::fmt::Debug for ApiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiConfig")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("ca_pem", &self.ca_pem.as_ref().map(|c| format!("{} bytes", c.len())))
            .field("node_name", &self.node_name)
            .finish()
    }
}

impl ApiConfig {
    /// The configuration a pod has: the API server from `KUBERNETES_SERVICE_HOST` and
    /// `KUBERNETES_SERVICE_PORT`, the service account's token and CA from [`SERVICE_ACCOUNT_TOKEN`]
    /// and [`SERVICE_ACCOUNT_CA`].
    pub fn in_cluster(node_name: impl Into<String>) -> Result<ApiConfig, Error> {
        in_cluster_from(
            |name| std::env::var(name).ok().filter(|v| !v.is_empty()),
            Path::new(SERVICE_ACCOUNT_TOKEN),
            Path::new(SERVICE_ACCOUNT_CA),
            node_name.into(),
        )
    }

    /// A configuration for an explicit API server `url`, with the token and CA bundle read from
    /// the files given.
    pub fn from_url(
        url: impl Into<String>,
        token_file: Option<&Path>,
        ca_file: Option<&Path>,
        node_name: impl Into<String>,
    ) -> Result<ApiConfig, Error> {
        let url = url.into();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(Error::BadUrl(url));
        }
        let node_name = node_name.into();
        if node_name.is_empty() {
            return Err(Error::MissingNodeName);
        }
        let token = token_file
            .map(|p| read(p).map(|t| String::from_utf8_lossy(&t).trim().to_owned()))
            .transpose()?;
        Ok(ApiConfig {
            url: url.trim_end_matches('/').to_owned(),
            token,
            ca_pem: ca_file.map(read).transpose()?,
            node_name,
        })
    }
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })
}

fn in_cluster_from(
    env: impl Fn(&str) -> Option<String>,
    token: &Path,
    ca: &Path,
    node_name: String,
) -> Result<ApiConfig, Error> {
    let host = env("KUBERNETES_SERVICE_HOST").ok_or(Error::MissingEnv("KUBERNETES_SERVICE_HOST"))?;
    let port = env("KUBERNETES_SERVICE_PORT").ok_or(Error::MissingEnv("KUBERNETES_SERVICE_PORT"))?;
    // An IPv6 service address needs brackets in a URL.
    let host = if host.contains(':') { format!("[{host}]") } else { host };
    ApiConfig::from_url(format!("https://{host}:{port}"), Some(token), Some(ca), node_name)
}

/// What the API server says about a pod UID and container id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodIdentity {
    pub namespace: String,
    pub pod_name: String,
    /// The container's name in the pod spec; empty when the container id is not (yet) listed.
    pub container_name: String,
}

/// A pod as kept in the cache.
#[derive(Debug)]
struct Pod {
    namespace: String,
    name: String,
    /// Bare container id (no `containerd://`) → container name, init containers included.
    containers: HashMap<String, String>,
}

/// Answers pod UIDs from a cached list of this node's pods, listing again on a miss at most once
/// per [`REFRESH_INTERVAL`]. Blocking: call it from a plain thread or `spawn_blocking`.
#[derive(Debug)]
pub struct PodResolver {
    agent: ureq::Agent,
    pods_url: String,
    authorization: Option<String>,
    node_name: String,
    pods: HashMap<String, Pod>,
    /// When the last list was tried, whether it worked or not.
    last_list: Option<Instant>,
    /// Errors already warned about, by their text.
    warned: HashSet<String>,
}

impl PodResolver {
    /// A resolver for `config`; lists nothing until the first lookup.
    pub fn new(config: ApiConfig) -> Result<PodResolver, Error> {
        let mut builder = ureq::AgentBuilder::new()
            .timeout_connect(TIMEOUT)
            .timeout_read(TIMEOUT)
            .timeout_write(TIMEOUT)
            .user_agent(concat!("bimodal-agent/", env!("CARGO_PKG_VERSION")));
        if let Some(pem) = &config.ca_pem {
            builder = builder.tls_config(Arc::new(tls_config(pem)?));
        }
        Ok(PodResolver {
            agent: builder.build(),
            pods_url: format!("{}/api/v1/pods", config.url.trim_end_matches('/')),
            authorization: config.token.map(|t| format!("Bearer {t}")),
            node_name: config.node_name,
            pods: HashMap::new(),
            last_list: None,
            warned: HashSet::new(),
        })
    }

    /// The namespace, name and container name of pod `pod_uid` (dashed) and container
    /// `container_id` (64 hex, with or without a `containerd://` scheme); `None` when the pod is
    /// not on this node's list or the API server cannot be asked.
    pub fn lookup(&mut self, pod_uid: &str, container_id: &str) -> Option<PodIdentity> {
        self.lookup_at(pod_uid, container_id, Instant::now())
    }

    fn lookup_at(&mut self, pod_uid: &str, container_id: &str, now: Instant) -> Option<PodIdentity> {
        if pod_uid.is_empty() {
            return None;
        }
        let container_id = bare_container_id(container_id);
        let known = |pods: &HashMap<String, Pod>| {
            pods.get(pod_uid)
                .is_some_and(|pod| container_id.is_empty() || pod.containers.contains_key(container_id))
        };
        // A new pod, or a restarted container, is a miss; the interval bounds how often one lists.
        if !known(&self.pods) && self.last_list.is_none_or(|t| now.duration_since(t) >= REFRESH_INTERVAL) {
            self.last_list = Some(now);
            match self.list() {
                Ok(pods) => {
                    tracing::debug!(pods = pods.len(), node = %self.node_name, "listed this node's pods");
                    self.pods = pods;
                }
                Err(e) => self.warn_once(e),
            }
        }
        let pod = self.pods.get(pod_uid)?;
        Some(PodIdentity {
            namespace: pod.namespace.clone(),
            pod_name: pod.name.clone(),
            container_name: pod.containers.get(container_id).cloned().unwrap_or_default(),
        })
    }

    fn list(&self) -> Result<HashMap<String, Pod>, ListError> {
        let mut request = self
            .agent
            .get(&self.pods_url)
            .query("fieldSelector", &format!("spec.nodeName={}", self.node_name))
            // Served from the API server's watch cache rather than etcd: a DaemonSet on every
            // node listing at once must not load etcd, and a list a moment old is good enough.
            .query("resourceVersion", "0");
        if let Some(authorization) = &self.authorization {
            request = request.set("Authorization", authorization);
        }
        let response = request.call().map_err(|e| match e {
            ureq::Error::Status(status, response) => ListError::Status {
                status,
                message: status_message(response),
            },
            ureq::Error::Transport(t) => ListError::Transport(t.to_string()),
        })?;
        let list: PodList =
            serde_json::from_reader(response.into_reader().take(MAX_LIST_BYTES)).map_err(ListError::Json)?;
        Ok(list
            .items
            .into_iter()
            .map(|p| {
                let status = p.status.unwrap_or_default();
                let containers = [
                    status.container_statuses,
                    status.init_container_statuses,
                    status.ephemeral_container_statuses,
                ]
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|c| Some((bare_container_id(c.container_id.as_deref()?).to_owned(), c.name)))
                .filter(|(id, _)| !id.is_empty())
                .collect();
                let pod = Pod {
                    namespace: p.metadata.namespace,
                    name: p.metadata.name,
                    containers,
                };
                (p.metadata.uid, pod)
            })
            .collect())
    }

    fn warn_once(&mut self, error: ListError) {
        let text = error.to_string();
        if self.warned.len() < MAX_WARNED && self.warned.insert(text.clone()) {
            tracing::warn!(url = %self.pods_url, "cannot list pods, pod names stay unknown: {text}");
        }
    }
}

/// Why one pod list failed; logged, never returned.
#[derive(Debug, thiserror::Error)]
enum ListError {
    #[error("API server answered {status}: {message}")]
    Status { status: u16, message: String },
    #[error("{0}")]
    Transport(String),
    #[error("pod list is not valid JSON")]
    Json(#[source] serde_json::Error),
}

/// The `message` of a Kubernetes `Status` body (`pods is forbidden: User … cannot list …`), else
/// the status text.
fn status_message(response: ureq::Response) -> String {
    #[derive(Deserialize)]
    struct Status {
        message: String,
    }
    let text = response.status_text().to_owned();
    let mut body = Vec::new();
    let _ = response.into_reader().take(64 << 10).read_to_end(&mut body);
    serde_json::from_slice::<Status>(&body).map_or(text, |s| s.message)
}

/// `containerd://abc…` → `abc…`; CRI-O (`cri-o://`) and Docker (`docker://`) alike.
fn bare_container_id(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, bare)| bare)
}

fn tls_config(ca_pem: &[u8]) -> Result<rustls::ClientConfig, Error> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(cert.map_err(Error::Pem)?).map_err(Error::Certificate)?;
    }
    if roots.is_empty() {
        return Err(Error::NoCertificate);
    }
    // The provider is named so that no process-wide default has to be installed first.
    Ok(
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(Error::Certificate)?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

// The parts of a `v1.PodList` read here; absent lists (no status yet) read as empty.
#[derive(Deserialize)]
struct PodList {
    items: Vec<PodJson>,
}

#[derive(Deserialize)]
struct PodJson {
    metadata: Metadata,
    status: Option<PodStatus>,
}

#[derive(Deserialize)]
struct Metadata {
    uid: String,
    name: String,
    namespace: String,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodStatus {
    container_statuses: Option<Vec<ContainerStatus>>,
    init_container_statuses: Option<Vec<ContainerStatus>>,
    ephemeral_container_statuses: Option<Vec<ContainerStatus>>,
}

#[derive(Deserialize)]
struct ContainerStatus {
    name: String,
    /// Absent while the container is being created.
    #[serde(rename = "containerID")]
    container_id: Option<String>,
}

#[cfg(test)]
mod tests {
    //! The resolver against a real HTTP (and HTTPS) server on loopback: requests go through
    //! ureq and the kernel's TCP stack; only the API server's answers are canned.

    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    use std::thread::JoinHandle;

    const CHECKOUT_UID: &str = "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d";
    const COREDNS_UID: &str = "9f8e7d6c-5b4a-4938-8271-605f4e3d2c1b";
    const CHECKOUT_ID: &str = "3f4b6a1c9d2e8f7a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a";
    const ENVOY_ID: &str = "aa11bb22cc33dd44ee55ff66aa11bb22cc33dd44ee55ff66aa11bb22cc33dd44";
    const MIGRATE_ID: &str = "1234567890abcdef1234567890abcdef1234567890abcdef1234567890abcdef";
    const COREDNS_ID: &str = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00";

    /// Two pods as `kubectl get --raw` shows them, trimmed: containerd with an init container,
    /// and CRI-O with a second container still being created (no `containerID` yet).
    fn pod_list() -> String {
        format!(
            r#"{{
  "kind": "PodList", "apiVersion": "v1", "metadata": {{"resourceVersion": "48213"}},
  "items": [
    {{
      "metadata": {{
        "name": "checkout-7d9f8b6c5-x2k4p", "namespace": "shop", "uid": "{CHECKOUT_UID}",
        "labels": {{"app": "checkout", "pod-template-hash": "7d9f8b6c5"}},
        "ownerReferences": [{{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "checkout-7d9f8b6c5"}}]
      }},
      "spec": {{"nodeName": "node-1", "containers": [{{"name": "checkout"}}, {{"name": "envoy"}}]}},
      "status": {{
        "phase": "Running", "podIP": "10.244.1.17", "qosClass": "Burstable",
        "initContainerStatuses": [
          {{"name": "migrate", "ready": true, "restartCount": 0, "image": "shop/migrate:1.4",
            "containerID": "containerd://{MIGRATE_ID}",
            "state": {{"terminated": {{"exitCode": 0, "reason": "Completed"}}}}}}
        ],
        "containerStatuses": [
          {{"name": "checkout", "ready": true, "restartCount": 2, "image": "shop/checkout:2.1",
            "containerID": "containerd://{CHECKOUT_ID}",
            "state": {{"running": {{"startedAt": "2026-11-20T08:14:03Z"}}}}}},
          {{"name": "envoy", "ready": true, "restartCount": 0, "image": "envoyproxy/envoy:v1.31",
            "containerID": "containerd://{ENVOY_ID}",
            "state": {{"running": {{"startedAt": "2026-11-20T08:14:01Z"}}}}}}
        ]
      }}
    }},
    {{
      "metadata": {{"name": "coredns-5d78c9869d-abcde", "namespace": "kube-system", "uid": "{COREDNS_UID}"}},
      "spec": {{"nodeName": "node-1"}},
      "status": {{
        "phase": "Pending",
        "containerStatuses": [
          {{"name": "coredns", "ready": true, "restartCount": 0, "containerID": "cri-o://{COREDNS_ID}",
            "state": {{"running": {{"startedAt": "2026-11-21T10:00:00Z"}}}}}},
          {{"name": "sidecar", "ready": false, "restartCount": 0,
            "state": {{"waiting": {{"reason": "ContainerCreating"}}}}}}
        ]
      }}
    }}
  ]
}}"#
        )
    }

    /// What the API server answers for `kubectl auth can-i list pods` = no.
    const FORBIDDEN: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
"message":"pods is forbidden: User \"system:serviceaccount:bimodal:agent\" cannot list resource \"pods\" in API group \"\" at the cluster scope",
"reason":"Forbidden","details":{"kind":"pods"},"code":403}"#;

    /// One request as the fake API server received it.
    #[derive(Clone, Debug)]
    struct Seen {
        target: String,
        authorization: Option<String>,
    }

    /// An API server on `127.0.0.1:0` that answers every request with one status and body,
    /// and records what it was asked. Stops, and its thread ends, when dropped.
    struct FakeApi {
        url: String,
        seen: Arc<Mutex<Vec<Seen>>>,
        stop: Arc<AtomicBool>,
        thread: Option<JoinHandle<()>>,
    }

    impl FakeApi {
        fn http(status: u16, body: String) -> FakeApi {
            FakeApi::start(status, body, None)
        }

        fn start(status: u16, body: String, tls: Option<Arc<rustls::ServerConfig>>) -> FakeApi {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
            let addr = listener.local_addr().expect("local addr");
            let scheme = if tls.is_some() { "https" } else { "http" };
            let seen = Arc::new(Mutex::new(Vec::new()));
            let stop = Arc::new(AtomicBool::new(false));
            let thread = {
                let (seen, stop) = (seen.clone(), stop.clone());
                std::thread::spawn(move || {
                    // Bounded: no test makes more than a handful of requests.
                    for stream in listener.incoming().take(100) {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let Ok(tcp) = stream else { continue };
                        tcp.set_read_timeout(Some(Duration::from_secs(5)))
                            .expect("read timeout");
                        match &tls {
                            Some(config) => {
                                let conn = rustls::ServerConnection::new(config.clone()).expect("tls server");
                                let mut tls = rustls::StreamOwned::new(conn, tcp);
                                answer(&mut tls, status, &body, &seen);
                                tls.conn.send_close_notify();
                                let _ = tls.flush();
                            }
                            None => answer(&mut &tcp, status, &body, &seen),
                        }
                    }
                })
            };
            FakeApi {
                url: format!("{scheme}://{addr}"),
                seen,
                stop,
                thread: Some(thread),
            }
        }

        fn seen(&self) -> Vec<Seen> {
            self.seen.lock().expect("seen lock").clone()
        }

        fn config(&self, token: Option<&str>) -> ApiConfig {
            ApiConfig {
                url: self.url.clone(),
                token: token.map(str::to_owned),
                ca_pem: None,
                node_name: "node-1".into(),
            }
        }
    }

    impl Drop for FakeApi {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            // Wake the blocked `accept` so the thread sees `stop`.
            let _ = TcpStream::connect(self.url.rsplit('/').next().unwrap_or_default());
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    /// Reads one request's head, records it (before answering, so the client never sees an
    /// answer to an unrecorded request) and writes the canned answer.
    fn answer(stream: &mut (impl Read + Write), status: u16, body: &str, seen: &Mutex<Vec<Seen>>) {
        let Some(head) = crate::test_http::read_request_head(stream) else {
            return; // the client went away, or refused our certificate
        };
        let authorization = head.header("authorization").map(str::to_owned);
        seen.lock().expect("seen lock").push(Seen {
            target: head.target,
            authorization,
        });
        let reason = if status == 200 { "OK" } else { "Forbidden" };
        let response = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(response.as_bytes()).and_then(|()| stream.flush());
    }

    fn identity(namespace: &str, pod_name: &str, container_name: &str) -> Option<PodIdentity> {
        Some(PodIdentity {
            namespace: namespace.into(),
            pod_name: pod_name.into(),
            container_name: container_name.into(),
        })
    }

    /// One list of this node's pods (selector url-encoded) answers containerd, CRI-O and init
    /// container ids by pod UID; a container not yet listed gives an empty container name.
    #[test]
    fn lookup_by_pod_uid_gives_namespace_pod_and_container_names() {
        let api = FakeApi::http(200, pod_list());
        let mut resolver = PodResolver::new(api.config(None)).expect("resolver");
        let now = Instant::now();
        let checkout = "checkout-7d9f8b6c5-x2k4p";
        assert_eq!(
            resolver.lookup_at(CHECKOUT_UID, CHECKOUT_ID, now),
            identity("shop", checkout, "checkout")
        );
        assert_eq!(
            resolver.lookup_at(CHECKOUT_UID, &format!("containerd://{ENVOY_ID}"), now),
            identity("shop", checkout, "envoy")
        );
        assert_eq!(
            resolver.lookup_at(CHECKOUT_UID, MIGRATE_ID, now),
            identity("shop", checkout, "migrate")
        );
        let coredns = "coredns-5d78c9869d-abcde";
        assert_eq!(
            resolver.lookup_at(COREDNS_UID, COREDNS_ID, now),
            identity("kube-system", coredns, "coredns")
        );
        assert_eq!(
            resolver.lookup_at(COREDNS_UID, "", now),
            identity("kube-system", coredns, "")
        );
        assert_eq!(
            resolver.lookup_at(COREDNS_UID, &"e".repeat(64), now),
            identity("kube-system", coredns, "")
        );
        let seen = api.seen();
        assert_eq!(seen.len(), 1, "one list serves all lookups: {seen:?}");
        assert_eq!(
            seen[0].target,
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1&resourceVersion=0"
        );
        assert_eq!(seen[0].authorization, None);
    }

    /// A UID not on the list lists again once the refresh interval has passed, and only once
    /// however many lookups miss within the interval.
    #[test]
    fn unknown_pod_uid_relists_at_most_once_per_refresh_interval() {
        let api = FakeApi::http(200, pod_list());
        let mut resolver = PodResolver::new(api.config(None)).expect("resolver");
        let unknown = "ffffffff-0000-4000-8000-000000000000";
        let start = Instant::now();
        assert_eq!(resolver.lookup_at(unknown, CHECKOUT_ID, start), None);
        assert_eq!(api.seen().len(), 1);
        for s in [1, 10, 29] {
            assert_eq!(resolver.lookup_at(unknown, "", start + Duration::from_secs(s)), None);
        }
        assert_eq!(api.seen().len(), 1, "misses within the interval do not list");
        let later = start + REFRESH_INTERVAL + Duration::from_secs(1);
        for s in [0, 1, 5] {
            assert_eq!(resolver.lookup_at(unknown, "", later + Duration::from_secs(s)), None);
        }
        assert_eq!(api.seen().len(), 2, "exactly one re-list after the interval");
        assert!(resolver.lookup_at(CHECKOUT_UID, CHECKOUT_ID, later).is_some());
        assert_eq!(api.seen().len(), 2, "hits never list");
    }

    /// A 403 from the API server (no RBAC to list pods) gives `None`, warns once, and is
    /// retried only after the interval.
    #[test]
    fn forbidden_answer_gives_none_and_warns_once() {
        let api = FakeApi::http(403, FORBIDDEN.to_owned());
        let mut resolver = PodResolver::new(api.config(Some("t"))).expect("resolver");
        let start = Instant::now();
        assert_eq!(resolver.lookup_at(CHECKOUT_UID, CHECKOUT_ID, start), None);
        assert_eq!(
            resolver.lookup_at(CHECKOUT_UID, CHECKOUT_ID, start + REFRESH_INTERVAL),
            None
        );
        assert_eq!(api.seen().len(), 2);
        assert_eq!(
            resolver.warned.len(),
            1,
            "the same error is remembered once: {:?}",
            resolver.warned
        );
        let warned = resolver.warned.iter().next().expect("one warning");
        assert!(
            warned.contains("403") && warned.contains("pods is forbidden"),
            "{warned}"
        );
    }

    /// A body that is not a pod list gives `None`, not a panic.
    #[test]
    fn malformed_pod_list_gives_none() {
        let api = FakeApi::http(200, r#"{"items": [{"metadata": 7}]"#.to_owned());
        let mut resolver = PodResolver::new(api.config(None)).expect("resolver");
        assert_eq!(resolver.lookup(CHECKOUT_UID, CHECKOUT_ID), None);
        assert_eq!(resolver.warned.len(), 1);
    }

    /// A refused connection gives `None` at once (well within the timeout).
    #[test]
    fn refused_connection_gives_none_quickly() {
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        let config = ApiConfig::from_url(format!("http://127.0.0.1:{port}"), None, None, "node-1").expect("config");
        let mut resolver = PodResolver::new(config).expect("resolver");
        let start = Instant::now();
        assert_eq!(resolver.lookup(CHECKOUT_UID, CHECKOUT_ID), None);
        assert!(start.elapsed() < TIMEOUT, "took {:?}", start.elapsed());
        assert_eq!(resolver.warned.len(), 1);
    }

    /// The token read from its file goes out as `Authorization: Bearer <token>`, trimmed.
    #[test]
    fn token_is_sent_as_bearer_authorization() {
        let api = FakeApi::http(200, pod_list());
        let dir = tempfile::tempdir().expect("tempdir");
        let token = dir.path().join("token");
        std::fs::write(&token, "eyJhbGciOiJSUzI1NiJ9.payload.sig\n").expect("write token");
        let config = ApiConfig::from_url(format!("{}/", api.url), Some(&token), None, "node-1").expect("config");
        let mut resolver = PodResolver::new(config).expect("resolver");
        assert!(resolver.lookup(CHECKOUT_UID, CHECKOUT_ID).is_some());
        assert_eq!(
            api.seen()[0].authorization.as_deref(),
            Some("Bearer eyJhbGciOiJSUzI1NiJ9.payload.sig")
        );
    }

    // A test-only CA and a server certificate it signed for IP 127.0.0.1, valid 2000–2100,
    // made with `openssl ca`; the key protects nothing.
    const TEST_CA: &str = "-----BEGIN CERTIFICATE-----
MIIBaDCCAQ2gAwIBAgIBATAKBggqhkjOPQQDAjAaMRgwFgYDVQQDDA9iaW1vZGFs
LXRlc3QtY2EwIBcNMDAwMTAxMDAwMDAwWhgPMjEwMDAxMDEwMDAwMDBaMBoxGDAW
BgNVBAMMD2JpbW9kYWwtdGVzdC1jYTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IA
BJFS68DVCC07srRlWZh63IPWNUVWRbN5X1oEoa/oaL3insGFCCpTinJtGVeHMgUB
0NA7pIQST/SeVsUCC+KcedyjQjBAMA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/
BAQDAgEGMB0GA1UdDgQWBBRwqQG529l5TnOMb2f+8dVaVbNfCzAKBggqhkjOPQQD
AgNJADBGAiEAjPBYO+8Bh+zdTi2xAMDGkCtsFThMhQt7Y/ySFm2KMVUCIQCsR5Xa
jPNxepYqgumwFgPWeXrFG+I5NR8CmILC9uCpSA==
-----END CERTIFICATE-----
";
    const TEST_SERVER_CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBrTCCAVKgAwIBAgIBAjAKBggqhkjOPQQDAjAaMRgwFgYDVQQDDA9iaW1vZGFs
LXRlc3QtY2EwIBcNMDAwMTAxMDAwMDAwWhgPMjEwMDAxMDEwMDAwMDBaMBkxFzAV
BgNVBAMMDmt1YmUtYXBpc2VydmVyMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE
rRsSTUiPg9rIqOOLCwYrOkwHp0qTX7LLnIyLwOf/VQKrc79aKAzJ3etxSu16/D4Y
F1XDhZuL5Wr6Beldcgwph6OBhzCBhDAMBgNVHRMBAf8EAjAAMA4GA1UdDwEB/wQE
AwIHgDATBgNVHSUEDDAKBggrBgEFBQcDATAPBgNVHREECDAGhwR/AAABMB0GA1Ud
DgQWBBQx/Wfw/2E52l2D6wiWlh5oj8nrlzAfBgNVHSMEGDAWgBRwqQG529l5TnOM
b2f+8dVaVbNfCzAKBggqhkjOPQQDAgNJADBGAiEA9jS8tcD43Ok818IdFP5WhaFo
DQagqUmL3s4bx1OYjMUCIQDxQHcTnQx8U2o6i1jUD5XAoTNMJXC1RyuPL27w5WP7
Jw==
-----END CERTIFICATE-----
";
    const TEST_SERVER_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg7yV4Qf21lpvEH2oV
dzCbAmpnPkKYiN04iq783TaLn7GhRANCAAStGxJNSI+D2sio44sLBis6TAenSpNf
ssucjIvA5/9VAqtzv1ooDMnd63FK7Xr8PhgXVcOFm4vlavoF6V1yDCmH
-----END PRIVATE KEY-----
";

    fn tls_server_config() -> Arc<rustls::ServerConfig> {
        let cert = CertificateDer::from_pem_slice(TEST_SERVER_CERT.as_bytes()).expect("server cert");
        let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(TEST_SERVER_KEY.as_bytes()).expect("server key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .expect("server config");
        Arc::new(config)
    }

    /// Over real TLS, the given CA is trusted and the token still sent; without it the same
    /// server is refused (the public web roots do not vouch for it) and the lookup gives `None`.
    #[test]
    fn https_trusts_the_given_ca_and_only_it() {
        let api = FakeApi::start(200, pod_list(), Some(tls_server_config()));
        let mut trusting = PodResolver::new(ApiConfig {
            ca_pem: Some(TEST_CA.as_bytes().to_vec()),
            ..api.config(Some("secret"))
        })
        .expect("resolver");
        assert_eq!(
            trusting.lookup(COREDNS_UID, COREDNS_ID),
            identity("kube-system", "coredns-5d78c9869d-abcde", "coredns")
        );
        assert_eq!(api.seen()[0].authorization.as_deref(), Some("Bearer secret"));

        let mut untrusting = PodResolver::new(api.config(Some("secret"))).expect("resolver");
        assert_eq!(untrusting.lookup(COREDNS_UID, COREDNS_ID), None);
        assert_eq!(api.seen().len(), 1, "no request is made over an untrusted connection");
    }

    /// A CA bundle without a certificate is refused when the resolver is made.
    #[test]
    fn ca_bundle_without_certificate_is_an_error() {
        let config = ApiConfig {
            url: "https://127.0.0.1:6443".into(),
            token: None,
            ca_pem: Some(b"not a pem\n".to_vec()),
            node_name: "node-1".into(),
        };
        assert!(matches!(PodResolver::new(config), Err(Error::NoCertificate)));
    }

    /// In a pod the API server comes from the service environment (IPv6 bracketed) and the token
    /// and CA from the service account; each missing piece is named.
    #[test]
    fn in_cluster_config_reads_service_env_and_account_and_names_what_is_missing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (token, ca) = (dir.path().join("token"), dir.path().join("ca.crt"));
        let env = |host: &'static str| {
            move |name: &str| match name {
                "KUBERNETES_SERVICE_HOST" => Some(host.to_owned()).filter(|h| !h.is_empty()),
                "KUBERNETES_SERVICE_PORT" => Some("443".to_owned()),
                _ => None,
            }
        };
        let missing = in_cluster_from(env(""), &token, &ca, "node-1".into());
        assert!(
            matches!(missing, Err(Error::MissingEnv("KUBERNETES_SERVICE_HOST"))),
            "{missing:?}"
        );
        let no_token = in_cluster_from(env("10.96.0.1"), &token, &ca, "node-1".into());
        assert!(
            matches!(&no_token, Err(Error::Read { path, .. }) if *path == token),
            "{no_token:?}"
        );
        std::fs::write(&token, "tok\n").expect("write token");
        let no_ca = in_cluster_from(env("10.96.0.1"), &token, &ca, "node-1".into());
        assert!(
            matches!(&no_ca, Err(Error::Read { path, .. }) if *path == ca),
            "{no_ca:?}"
        );
        std::fs::write(&ca, TEST_CA).expect("write ca");
        let no_node = in_cluster_from(env("10.96.0.1"), &token, &ca, String::new());
        assert!(matches!(no_node, Err(Error::MissingNodeName)), "{no_node:?}");

        let config = in_cluster_from(env("10.96.0.1"), &token, &ca, "node-1".into()).expect("config");
        assert_eq!(
            config,
            ApiConfig {
                url: "https://10.96.0.1:443".into(),
                token: Some("tok".into()),
                ca_pem: Some(TEST_CA.as_bytes().to_vec()),
                node_name: "node-1".into(),
            }
        );
        let v6 = in_cluster_from(env("fd00::1"), &token, &ca, "node-1".into()).expect("config");
        assert_eq!(v6.url, "https://[fd00::1]:443");
    }

    /// Only `http://` and `https://` API server URLs are accepted.
    #[test]
    fn from_url_rejects_other_schemes() {
        let bad = ApiConfig::from_url("10.96.0.1:443", None, None, "node-1");
        assert!(matches!(bad, Err(Error::BadUrl(_))), "{bad:?}");
    }

    /// The resolver can move into `spawn_blocking` or a thread.
    #[test]
    fn resolver_is_send() {
        fn send<T: Send>() {}
        send::<PodResolver>();
    }
}
