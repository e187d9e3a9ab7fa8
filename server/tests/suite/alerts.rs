//! Alerts end to end with real parts: real agents each scoped to its own paced workload under its
//! own node name, the server evaluating a rule file, a real Alertmanager (Debian's
//! `prometheus-alertmanager`) on loopback routing to a webhook receiver, the server's own
//! webhook beside it, and a real Prometheus scraping the server's and the agents' `/metrics`.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bimodal_agent::sample::events::EventKind;
use bimodal_agent::ship;
use bimodal_server::alerts::{rules, AlertConfig};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::common::{agent_options, test_config, unix_now, TestServer};
use crate::fixture;

const ALERTMANAGER: &str = "/usr/bin/prometheus-alertmanager";
const PROMETHEUS: &str = "/usr/bin/prometheus";

/// An HTTP receiver on loopback that keeps every JSON body POSTed to it, by path.
#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Receiver {
    async fn start() -> (Receiver, SocketAddr) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let r = Receiver::default();
        let got = r.got.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let got = got.clone();
                tokio::spawn(async move {
                    let mut stream = BufReader::new(stream);
                    // Several requests per connection (Alertmanager keeps it alive).
                    loop {
                        let mut line = String::new();
                        if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let path = line.split(' ').nth(1).unwrap_or("").to_owned();
                        let mut length = 0;
                        loop {
                            let mut header = String::new();
                            if stream.read_line(&mut header).await.unwrap_or(0) == 0 {
                                return;
                            }
                            if header == "\r\n" {
                                break;
                            }
                            if let Some((k, v)) = header.split_once(':') {
                                if k.eq_ignore_ascii_case("content-length") {
                                    length = v.trim().parse().unwrap_or(0);
                                }
                            }
                        }
                        let mut body = vec![0; length];
                        if stream.read_exact(&mut body).await.is_err() {
                            return;
                        }
                        if let Ok(v) = serde_json::from_slice(&body) {
                            got.lock().unwrap().push((path, v));
                        }
                        let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
                        if stream.get_mut().write_all(reply).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (r, addr)
    }

    /// Payloads received on `path`.
    fn on(&self, path: &str) -> Vec<Value> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, v)| v.clone())
            .collect()
    }
}

/// A server with its own ClickHouse evaluating `rules`, sending to `alertmanagers` and
/// `webhooks`; alert links start with `http://bimodal.example:7070`.
async fn alerting_server(rules: rules::RuleFile, alertmanagers: Vec<String>, webhooks: Vec<String>) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config("127.0.0.1:0".parse().unwrap(), dir.path());
    config.alerts = Some(alert_config(rules, alertmanagers, webhooks));
    TestServer::with_config(config, Some(dir)).await
}

fn alert_config(rules: rules::RuleFile, alertmanagers: Vec<String>, webhooks: Vec<String>) -> AlertConfig {
    AlertConfig {
        rules,
        alertmanagers,
        webhooks,
        external_url: "http://bimodal.example:7070".into(),
    }
}

/// [`alerting_server`] over a store that holds `fleet()` (each node's stream: its Hello, then
/// its batches) before the server evaluates any rule: the first evaluation that sees a split sees
/// every node of it. (Sent to a running alerting server, the fleet arrives a node at a time, and
/// on a busy machine a split can fire on the first nodes alone, too few for any function to be
/// told apart.) The fleet is made once the store is ready, so that its batches' times, relative
/// to when they are made, are as recent when the rules first read them.
async fn alerting_server_over(
    rules: rules::RuleFile,
    webhooks: Vec<String>,
    fleet: impl FnOnce() -> Vec<Vec<bimodal_proto::v1::IngestRequest>>,
) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config("127.0.0.1:0".parse().unwrap(), dir.path());
    let ingest = TestServer::with_config(config.clone(), None).await;
    for messages in fleet() {
        let sent = messages.len() - 1;
        let acks = super::wire::exchange(&ingest, messages).await.unwrap();
        assert_eq!(acks.len(), sent, "{acks:?}");
        assert!(
            acks.iter()
                .all(|a| a.status == bimodal_proto::v1::ack::Status::Stored as i32),
            "{acks:?}"
        );
    }
    ingest.stop().await;
    config.alerts = Some(alert_config(rules, Vec::new(), webhooks));
    TestServer::with_config(config, Some(dir)).await
}

/// Nodes of the alerts with `status` in webhook payloads (Alertmanager's format).
fn nodes_with(payloads: &[Value], status: &str) -> BTreeSet<String> {
    payloads
        .iter()
        .flat_map(|p| p["alerts"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["status"] == status)
        .filter_map(|a| a["labels"]["node"].as_str().map(str::to_owned))
        .collect()
}

/// A real Alertmanager or Prometheus on loopback, stopped on drop.
struct Daemon {
    child: Child,
    url: String,
    dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    /// Starts `binary` with `config` written as `config_name` in its own directory, with the
    /// arguments `args` gives for (config path, data directory, listen address), and waits for
    /// `/-/ready`.
    async fn start(
        binary: &str,
        config_name: &str,
        config: &str,
        args: impl Fn(&str, &str, &str) -> Vec<String>,
    ) -> Daemon {
        assert!(
            std::path::Path::new(binary).exists(),
            "{binary} is missing: run make setup"
        );
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join(config_name);
        std::fs::write(&config_path, config).unwrap();
        // A port free a moment ago: neither daemon reports the port it bound.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log_path = dir.path().join("log");
        let log = std::fs::File::create(&log_path).unwrap();
        let listen = format!("127.0.0.1:{port}");
        let data = dir.path().join("data");
        let child = Command::new(binary)
            .args(args(
                &config_path.display().to_string(),
                &data.display().to_string(),
                &listen,
            ))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {binary}: {e}"));
        let daemon = Daemon {
            child,
            url: format!("http://{listen}"),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let url = format!("{}/-/ready", daemon.url);
            if tokio::task::spawn_blocking(move || ureq::get(&url).call().is_ok())
                .await
                .unwrap()
            {
                return daemon;
            }
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            assert!(Instant::now() < deadline, "{binary} never became ready:\n{log}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A real Alertmanager routing every alert to `webhook` at once (1 s group wait and
    /// interval).
    async fn alertmanager(webhook: &str) -> Daemon {
        let config = format!(
            "route:\n  receiver: hook\n  group_by: ['alertname']\n  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n\
             receivers:\n  - name: hook\n    webhook_configs:\n      - url: '{webhook}'\n        send_resolved: true\n"
        );
        Daemon::start(ALERTMANAGER, "alertmanager.yml", &config, |config, data, listen| {
            vec![
                format!("--config.file={config}"),
                format!("--storage.path={data}"),
                format!("--web.listen-address={listen}"),
                // No cluster: no gossip port.
                "--cluster.listen-address=".into(),
            ]
        })
        .await
    }

    /// A real Prometheus scraping `targets` (job name, host:port) every second.
    async fn prometheus(targets: &[(&str, String)]) -> Daemon {
        let mut config = String::from("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n");
        for (job, target) in targets {
            config.push_str(&format!(
                "  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n"
            ));
        }
        Daemon::start(PROMETHEUS, "prometheus.yml", &config, |config, data, listen| {
            vec![
                format!("--config.file={config}"),
                format!("--storage.tsdb.path={data}"),
                format!("--web.listen-address={listen}"),
            ]
        })
        .await
    }

    /// Prometheus: the value of each series `query` returns, by its `job` label.
    async fn query(&self, query: &str) -> HashMap<String, f64> {
        let url = format!(
            "{}/api/v1/query?query={}",
            self.url,
            form_urlencoded::byte_serialize(query.as_bytes()).collect::<String>()
        );
        let body = tokio::task::spawn_blocking(move || ureq::get(&url).call().ok()?.into_string().ok())
            .await
            .unwrap()
            .unwrap_or_default();
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        v["data"]["result"]
            .as_array()
            .map(|r| {
                r.iter()
                    .filter_map(|s| {
                        let job = s["metric"]["job"].as_str()?.to_owned();
                        let value = s["value"][1].as_str()?.parse().ok()?;
                        Some((job, value))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a child process this test started.
    let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(rc, 0, "kill {pid}: {}", std::io::Error::last_os_error());
}

/// Five nodes serve the same paced workload (1,000 requests a second, page faults on one in
/// sixteen). A rule holds each node's page faults per CPU-second to 1.5 times the median of its
/// hardware class. Two nodes spike (SIGUSR1: faults on every request, 16 times the faults and
/// about 3 times the faults per CPU-second, since faulting takes CPU too): the rule fires for exactly those two, Alertmanager delivers it to the webhook receiver
/// in its format with the rule's labels, the link to the compare view of the node and window,
/// and the function that faults (`load_session`); the server's own webhook carries the same.
/// When the spike stops, both resolve, through both paths, and `/api/v1/alerts` lists them
/// resolved. No other node ever alerts. A real Prometheus scrapes the server's and the agents'
/// `/metrics` meanwhile and holds their ingest, evaluation, delivery and sampling figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_fault_spike_fires_through_alertmanager_and_resolves() {
    let (receiver, receiver_addr) = Receiver::start().await;
    let am = Daemon::alertmanager(&format!("http://{receiver_addr}/am")).await;
    let rules = rules::read(
        "evaluation_interval: 1s\n\
         rules:\n\
         \x20 - alert: PageFaultsAbovePeers\n\
         \x20   event: page_fault\n\
         \x20   window: 1m\n\
         \x20   condition:\n\
         \x20     above_peers: {factor: 1.5, min_peers: 3}\n\
         \x20   for: 2s\n\
         \x20   labels: {severity: page}\n\
         \x20   annotations:\n\
         \x20     summary: '{{ $labels.node }}: {{ $value }} page faults per CPU-second'\n",
    )
    .unwrap();
    let server = alerting_server(
        rules,
        vec![am.url.clone()],
        vec![format!("http://{receiver_addr}/direct")],
    )
    .await;
    // The agents' metrics (one registry for the agents of this process) and the server's, both
    // scraped by a real Prometheus.
    let agent_metrics = bimodal_agent::metrics::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let prometheus = Daemon::prometheus(&[
        ("bimodal-server", server.addr.to_string()),
        ("bimodal-agent", agent_metrics.to_string()),
    ])
    .await;

    let names = ["node-a", "node-b", "node-c", "node-d", "node-e"];
    let spiking = ["node-b", "node-d"];
    let (stop_agents, agents_stopped) = tokio::sync::watch::channel(false);
    let mut workloads: HashMap<&str, fixture::Running> = HashMap::new();
    let mut agents = Vec::new();
    for name in names {
        let workload = fixture::spawn(fixture::workload(), &["paced", "300", "1000", "16"]);
        agents.push(tokio::spawn(ship::run(
            agent_options(
                server.url(),
                name,
                workload.pid(),
                vec![EventKind::PageFault, EventKind::Cpu],
            ),
            agents_stopped.clone(),
        )));
        workloads.insert(name, workload);
    }

    // Every node's page faults arrive before the spike.
    let start = unix_now();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (status, body) = server
            .get(&format!(
                "/api/v1/totals?event=page_fault&from={start}&to={}",
                unix_now() + 1
            ))
            .await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let reporting: BTreeSet<&str> = v["sources"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["nodes"].as_array().unwrap().iter())
            .filter_map(|n| n["node"].as_str())
            .collect();
        if reporting.len() == names.len() {
            break;
        }
        assert!(Instant::now() < deadline, "not every node reported page faults: {v:#}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for name in spiking {
        signal(workloads[name].pid(), libc::SIGUSR1);
    }

    // Both spiking nodes fire through Alertmanager and through the server's own webhook.
    let expected: BTreeSet<String> = spiking.iter().map(|s| s.to_string()).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while nodes_with(&receiver.on("/am"), "firing") != expected
        || nodes_with(&receiver.on("/direct"), "firing") != expected
    {
        let (_, alerts) = server.get(&format!("/api/v1/alerts?from={start}")).await;
        assert!(
            Instant::now() < deadline,
            "the spike did not fire on {expected:?}: Alertmanager sent {:#?}, the webhook {:#?}, the server has {alerts}",
            receiver.on("/am"),
            receiver.on("/direct")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let firing = receiver
        .on("/am")
        .into_iter()
        .find(|p| p["status"] == "firing")
        .unwrap();
    assert_eq!(firing["version"], "4", "{firing:#}");
    assert_eq!(firing["groupLabels"]["alertname"], "PageFaultsAbovePeers", "{firing:#}");
    let alert = &firing["alerts"][0];
    let node = alert["labels"]["node"].as_str().unwrap();
    assert_eq!(alert["labels"]["alertname"], "PageFaultsAbovePeers", "{alert:#}");
    assert_eq!(alert["labels"]["severity"], "page", "{alert:#}");
    assert_eq!(alert["labels"]["event"], "page_fault", "{alert:#}");
    assert!(
        alert["labels"]["source"].as_str().is_some_and(|s| !s.is_empty()),
        "{alert:#}"
    );
    assert!(
        alert["annotations"]["summary"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{node}: ")),
        "{alert:#}"
    );
    assert_eq!(alert["annotations"]["top_function"], "load_session", "{alert:#}");
    let link = alert["generatorURL"].as_str().unwrap();
    let expected_selector: String =
        form_urlencoded::byte_serialize(format!("{{node=\"{node}\"}}").as_bytes()).collect();
    assert!(
        link.starts_with(&format!(
            "http://bimodal.example:7070/compare.html?selector={expected_selector}&from="
        )) && link.contains("&event=page_fault&q=%2F%5Eload_session%24%2F"),
        "{link}"
    );
    let direct = receiver.on("/direct");
    assert!(
        direct.iter().all(|p| p["receiver"] == "bimodal" && p["version"] == "4"),
        "{direct:#?}"
    );

    // The spike stops: both resolve, through both paths.
    for name in spiking {
        signal(workloads[name].pid(), libc::SIGUSR1);
    }
    let spike_stopped = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(120);
    while nodes_with(&receiver.on("/am"), "resolved") != expected
        || nodes_with(&receiver.on("/direct"), "resolved") != expected
    {
        assert!(
            Instant::now() < deadline,
            "the alerts did not resolve: Alertmanager sent {:#?}, the webhook {:#?}",
            receiver.on("/am"),
            receiver.on("/direct")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A rate over the rule's minute falls through the threshold while the spike leaves the
    // window: near it, noise can start a new pending alert just after one resolved (legitimately:
    // the condition held again). The lists below judge a fleet at rest, once the spike has left
    // the window and no alert is active.
    tokio::time::sleep((spike_stopped + Duration::from_secs(65)).saturating_duration_since(Instant::now())).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = server.get(&format!("/api/v1/alerts?from={start}")).await;
        assert_eq!(status, 200, "{body}");
        let listed: Value = serde_json::from_str(&body).unwrap();
        let active = listed["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["state"] == "pending" || a["state"] == "firing");
        if !active {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "alerts still active a minute after the spike left the window: {listed:#}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // No other node alerted at any time.
    for path in ["/am", "/direct"] {
        let all = nodes_with(&receiver.on(path), "firing");
        assert_eq!(all, expected, "{path}: {:#?}", receiver.on(path));
    }
    let (status, body) = server.get(&format!("/api/v1/alerts?from={start}")).await;
    assert_eq!(status, 200, "{body}");
    let listed: Value = serde_json::from_str(&body).unwrap();
    let alerts = listed["alerts"].as_array().unwrap();
    let resolved: BTreeSet<String> = alerts
        .iter()
        .filter(|a| a["state"] == "resolved" && a["ends_at"].is_string())
        .filter_map(|a| a["labels"]["node"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(resolved, expected, "{listed:#}");
    assert!(
        alerts
            .iter()
            .all(|a| a["top_function"] == "load_session" && a["selector"].as_str().unwrap().contains("node=")),
        "{listed:#}"
    );
    let artifacts = super::common::artifacts();
    std::fs::write(artifacts.join("alerts.json"), format!("{listed:#}")).unwrap();
    // The alerts page lists both, resolved, each linked to the compare view of its node.
    let url = format!("{}/", server.url());
    let shot = artifacts.join("alerts.png").display().to_string();
    let mut args = vec![
        "--url",
        &url,
        "--rule",
        "PageFaultsAbovePeers",
        "--function",
        "load_session",
        "--screenshot",
        &shot,
    ];
    for node in spiking {
        args.extend(["--node", node]);
    }
    super::common::web_test("test/alerts-browser.mjs", &args);
    std::fs::write(
        artifacts.join("alertmanager-webhook.json"),
        format!("{:#}", Value::Array(receiver.on("/am"))),
    )
    .unwrap();

    // Prometheus scraped both: the server's ingest, rule evaluations and deliveries, the
    // agents' samples per event and source, and each process's own CPU time.
    let deadline = Instant::now() + Duration::from_secs(60);
    for (query, job) in [
        ("up", "bimodal-server"),
        ("up", "bimodal-agent"),
        ("bimodal_ingest_samples_total", "bimodal-server"),
        (
            "sum by (job) (bimodal_ingest_batches_total{outcome=\"stored\"})",
            "bimodal-server",
        ),
        (
            "sum by (job) (bimodal_rule_evaluations_total{result=\"ok\"})",
            "bimodal-server",
        ),
        (
            "sum by (job) (bimodal_alert_notifications_total{receiver=\"alertmanager\",result=\"sent\"})",
            "bimodal-server",
        ),
        (
            "sum by (job) (bimodal_http_request_duration_seconds_count)",
            "bimodal-server",
        ),
        (
            "sum by (job) (bimodal_agent_samples_total{event=\"page_fault\"})",
            "bimodal-agent",
        ),
        ("bimodal_agent_drain_duration_seconds_count", "bimodal-agent"),
        ("process_cpu_seconds_total", "bimodal-agent"),
        ("process_resident_memory_bytes", "bimodal-server"),
    ] {
        loop {
            let values = prometheus.query(query).await;
            if values.get(job).is_some_and(|v| *v > 0.0) {
                break;
            }
            let log = std::fs::read_to_string(prometheus.dir.path().join("log")).unwrap_or_default();
            assert!(
                Instant::now() < deadline,
                "Prometheus has no positive `{query}` for {job}: {values:?}\n{log}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    stop_agents.send(true).unwrap();
    for a in agents {
        a.await.unwrap().unwrap();
    }
    drop(workloads);
    drop(am);
    drop(prometheus);
    server.stop().await;
}

/// The rule of the failover test: a node's page faults per CPU-second above `threshold`,
/// evaluated every second.
fn spike_rule(threshold: f64) -> String {
    format!(
        "evaluation_interval: 1s\n\
         rules:\n\
         \x20 - alert: PageFaultSpike\n\
         \x20   event: page_fault\n\
         \x20   window: 1m\n\
         \x20   condition: {{rate_above: {threshold}}}\n\
         \x20   for: 1s\n"
    )
}

/// A node's page faults per CPU-second from `start` to now, once the server has some.
async fn page_fault_rate(server: &TestServer, node: &str, start: u64) -> Option<f64> {
    let path = format!(
        "/api/v1/compare?{}&from={start}&to={}&metric=page_fault",
        super::common::selector(&format!("{{node=\"{node}\"}}")),
        unix_now() + 1
    );
    let (status, body) = server.get(&path).await;
    let v: Value = serde_json::from_str(&body).ok()?;
    (status == 200).then_some(())?;
    v["metrics"].as_array()?.first()?["values"]
        .as_array()?
        .first()?
        .as_f64()
}

/// Two servers with the same rules on one ClickHouse, a third taking the agent's batches: one
/// server evaluates and notifies (one `firing` webhook, not two). The evaluating one stops;
/// the other takes over and continues the alert from its stored state (no second `firing`, the
/// same start) and sends its resolution once the spike stops. The rule's threshold is 1.5 times
/// the node's rate measured before the spike (the spike triples it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_servers_notifies_and_the_other_takes_over() {
    let clickhouse = super::storage::SharedClickHouse::start().await;
    let (receiver, receiver_addr) = Receiver::start().await;
    let ingest = TestServer::with_config(clickhouse.server_config("ingest"), None).await;
    let workload = fixture::spawn(fixture::workload(), &["paced", "300", "1000", "16"]);
    let (stop_agent, agent_stopped) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(ship::run(
        agent_options(
            ingest.url(),
            "node-x",
            workload.pid(),
            vec![EventKind::PageFault, EventKind::Cpu],
        ),
        agent_stopped,
    ));
    // The node's usual rate, over 8 s of its samples.
    let measuring = unix_now();
    let deadline = Instant::now() + Duration::from_secs(120);
    while page_fault_rate(&ingest, "node-x", measuring).await.is_none() {
        assert!(Instant::now() < deadline, "node-x never reported page faults");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(8)).await;
    let usual = page_fault_rate(&ingest, "node-x", measuring).await.unwrap();
    let with_rules = |name: &str| {
        let mut config = clickhouse.server_config(name);
        config.alerts = Some(AlertConfig {
            rules: rules::read(&spike_rule((1.5 * usual).round())).unwrap(),
            alertmanagers: Vec::new(),
            webhooks: vec![format!("http://{receiver_addr}/direct")],
            external_url: "http://bimodal.example".into(),
        });
        config
    };
    // The first server takes the lease (about a second) before the second starts and waits.
    let first = TestServer::with_config(with_rules("first"), None).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let second = TestServer::with_config(with_rules("second"), None).await;
    let start = unix_now();
    signal(workload.pid(), libc::SIGUSR1);
    let firing = |r: &Receiver| -> Vec<Value> {
        r.on("/direct")
            .into_iter()
            .filter(|p| p["status"] == "firing")
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while firing(&receiver).is_empty() {
        let (_, alerts) = first.get(&format!("/api/v1/alerts?from={start}")).await;
        assert!(
            Instant::now() < deadline,
            "the spike never fired; the server has {alerts}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let starts_at = firing(&receiver)[0]["alerts"][0]["startsAt"].clone();
    // Both servers run the same rules: had both evaluated, each would have sent it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(firing(&receiver).len(), 1, "{:#?}", receiver.on("/direct"));
    first.stop().await;
    // The second takes over (its lease attempts settle in about a second), evaluates the alert
    // still firing, and sends nothing: the alert did not change.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(firing(&receiver).len(), 1, "{:#?}", receiver.on("/direct"));
    signal(workload.pid(), libc::SIGUSR1);
    let resolved = |r: &Receiver| -> Vec<Value> {
        r.on("/direct")
            .into_iter()
            .filter(|p| p["status"] == "resolved")
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while resolved(&receiver).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the alert did not resolve: {:#?}",
            receiver.on("/direct")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sent = receiver.on("/direct");
    assert_eq!(firing(&receiver).len(), 1, "{sent:#?}");
    assert_eq!(resolved(&receiver).len(), 1, "{sent:#?}");
    assert_eq!(resolved(&receiver)[0]["alerts"][0]["startsAt"], starts_at, "{sent:#?}");
    let (status, body) = second.get(&format!("/api/v1/alerts?from={start}")).await;
    assert_eq!(status, 200, "{body}");
    let listed: Value = serde_json::from_str(&body).unwrap();
    let alerts = listed["alerts"].as_array().unwrap();
    assert_eq!(alerts.len(), 1, "{listed:#}");
    assert_eq!(alerts[0]["state"], "resolved", "{listed:#}");
    assert_eq!(alerts[0]["starts_at"], starts_at, "{listed:#}");

    stop_agent.send(true).unwrap();
    agent.await.unwrap().unwrap();
    drop(workload);
    second.stop().await;
    ingest.stop().await;
    clickhouse.stop().await;
}

/// A server without rules answers `/api/v1/alerts` with 404 and says why.
#[tokio::test]
async fn alerts_without_rules_are_not_found() {
    let server = TestServer::start().await;
    let (status, body) = server.get("/api/v1/alerts").await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("--rules"), "{body}");
    server.stop().await;
}

/// One node's second of history as its agent sends it, ending `ago` seconds before now: a
/// second of CPU (40% under `scan_table`) and `remote` NUMA hinting faults on remote pages under
/// `scan_table` (compare's NUMA batch, without placements).
fn remote_access_batch(node: usize, ago: i64, remote: u64) -> bimodal_proto::v1::Batch {
    let mut batch_id = [0u8; 16];
    batch_id[..8].copy_from_slice(&(node as u64).to_le_bytes());
    batch_id[8..].copy_from_slice(&ago.to_le_bytes());
    let end = super::wire::now_nanos() - ago * 1_000_000_000;
    let mut batch = super::compare::numa_batch_ending(batch_id.to_vec(), end, remote, false);
    batch.placements.clear();
    batch
}

/// The nodes of [`split_fleet`] that run five times their usual rate in the last two minutes.
const SPIKING: [usize; 3] = [2, 5, 7];

/// Ten nodes' streams, `db-0` to `db-9`: a batch a minute from 14 to 4 minutes ago, before any
/// window the rules read as "now" (two minutes, rounded down to whole minutes: at most three
/// back), at about a thousand remote accesses per CPU-second; then three batches in the last two
/// minutes, at five times that on [`SPIKING`]. `batch(node, ago, remote)` makes each batch.
fn split_fleet(batch: fn(usize, i64, u64) -> bimodal_proto::v1::Batch) -> Vec<Vec<bimodal_proto::v1::IngestRequest>> {
    (0..10)
        .map(|node| {
            let usual = 1_000 + 20 * node as u64;
            let mut messages = vec![super::wire::hello(&format!("db-{node}"))];
            for minute in 4..=14 {
                messages.push(super::wire::req(batch(node, minute * 60 - 20, usual)));
            }
            let now_rate = if SPIKING.contains(&node) { 5 * usual } else { usual };
            for ago in [100, 60, 20] {
                messages.push(super::wire::req(batch(node, ago, now_rate)));
            }
            messages
        })
        .collect()
}

/// The shipped rules' remaining conditions judged on stored history (batches over real gRPC
/// into a real ClickHouse, dated as agents would have sent them over the last quarter hour):
/// ten nodes ran at about a thousand remote accesses per CPU-second; in the last two minutes
/// three of them run at five times that. `above_baseline` (the default RemoteAccessSpike rule
/// with shorter windows) fires on exactly those three, each naming `scan_table`; `bands_appear`
/// (FleetSplitIntoBands) fires once for the fleet, since the window before had one band, naming
/// `scan_table` as compare's first code difference held out.
/// Delivered as Alertmanager's webhook payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_access_spike_and_a_split_fleet_fire_from_stored_history() {
    let (receiver, receiver_addr) = Receiver::start().await;
    let rules = rules::read(
        "evaluation_interval: 1s\n\
         rules:\n\
         \x20 - alert: RemoteAccessSpike\n\
         \x20   event: remote_access\n\
         \x20   window: 2m\n\
         \x20   condition:\n\
         \x20     above_baseline: {factor: 3, baseline: 10m}\n\
         \x20   for: 1s\n\
         \x20 - alert: FleetSplitIntoBands\n\
         \x20   window: 2m\n\
         \x20   condition:\n\
         \x20     bands_appear:\n\
         \x20   for: 1s\n",
    )
    .unwrap();
    let server = alerting_server_over(rules, vec![format!("http://{receiver_addr}/hook")], || {
        split_fleet(remote_access_batch)
    })
    .await;

    let expected: BTreeSet<String> = SPIKING.iter().map(|n| format!("db-{n}")).collect();
    let firing = |rule: &str| -> Vec<Value> {
        receiver
            .on("/hook")
            .iter()
            .flat_map(|p| p["alerts"].as_array().cloned().unwrap_or_default())
            .filter(|a| a["status"] == "firing" && a["labels"]["alertname"] == rule)
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let spikes: BTreeSet<String> = firing("RemoteAccessSpike")
            .iter()
            .filter_map(|a| a["labels"]["node"].as_str().map(str::to_owned))
            .collect();
        if spikes == expected && !firing("FleetSplitIntoBands").is_empty() {
            break;
        }
        let (_, alerts) = server.get("/api/v1/alerts").await;
        assert!(
            Instant::now() < deadline,
            "expected RemoteAccessSpike on {expected:?} and FleetSplitIntoBands; the webhook got {:#?}, the server has {alerts}",
            receiver.on("/hook")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for alert in firing("RemoteAccessSpike") {
        assert_eq!(alert["labels"]["event"], "remote_access", "{alert:#}");
        assert_eq!(alert["labels"]["source"], "task_numa_fault", "{alert:#}");
        assert_eq!(alert["annotations"]["top_function"], "scan_table", "{alert:#}");
        assert!(
            alert["generatorURL"]
                .as_str()
                .unwrap()
                .starts_with("http://bimodal.example:7070/compare.html?selector="),
            "{alert:#}"
        );
    }
    let splits = firing("FleetSplitIntoBands");
    let split = &splits[0];
    assert!(
        split["labels"]["node"].is_null(),
        "a fleet alert, not a node's: {split:#}"
    );
    assert!(
        split["labels"]["metric"]
            .as_str()
            .is_some_and(|m| m.starts_with("remote_access")),
        "{split:#}"
    );
    // The bands were cut on remote accesses per CPU-second: `scan_table`'s remote accesses made
    // those values, and it is named as the cause because it holds on the half of the window
    // that did not cut the bands.
    assert_eq!(split["annotations"]["top_function"], "scan_table", "{split:#}");
    // Once per fleet, however many evaluations saw the bands.
    let fingerprints: BTreeSet<String> = splits
        .iter()
        .map(|a| a["fingerprint"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(fingerprints.len(), 1, "{splits:#?}");
    server.stop().await;
}

/// [`remote_access_batch`] with the remote accesses spread over three functions under `main`
/// alike on every node (about 40%, 35% and 25%, a little apart per node), as remote memory slows
/// every stack of a node alike.
fn every_stack_batch(node: usize, ago: i64, remote: u64) -> bimodal_proto::v1::Batch {
    use bimodal_proto::v1;
    let mut batch = remote_access_batch(node, ago, remote);
    batch.frames.push(v1::Frame {
        function: "hash_key".into(),
        ..batch.frames[1].clone()
    });
    batch.stacks.push(v1::Stack {
        frame_indices: vec![3, 0],
    });
    let remote_sample = batch
        .samples
        .iter()
        .position(|s| s.event == v1::EventKind::RemoteAccess as i32)
        .expect("the batch's remote accesses");
    let template = batch.samples.remove(remote_sample);
    let jitter = 0.01 * (node % 3) as f64;
    for (stack, part) in [(0u32, 0.40 + jitter), (1, 0.35), (2, 0.25 - jitter)] {
        let count = (remote as f64 * part).round() as u64;
        batch.samples.push(v1::Sample {
            stack_index: stack,
            count,
            value: count,
            ..template.clone()
        });
    }
    batch
}

/// A split by a node-wide shift: ten nodes ran at about a thousand remote accesses per
/// CPU-second, spread over three functions alike; in the last two minutes three of them run
/// every stack at five times that, as remote memory would. `bands_appear` fires naming no
/// function (every function only follows the shift) and says what the bands differ by:
/// remote_access on every stack, node-wide, in its annotation and in the alerts API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_by_a_node_wide_shift_is_named_node_wide() {
    let (receiver, receiver_addr) = Receiver::start().await;
    let rules = rules::read(
        "evaluation_interval: 1s\n\
         rules:\n\
         \x20 - alert: FleetSplitIntoBands\n\
         \x20   window: 2m\n\
         \x20   condition:\n\
         \x20     bands_appear:\n\
         \x20   for: 1s\n",
    )
    .unwrap();
    let server = alerting_server_over(rules, vec![format!("http://{receiver_addr}/hook")], || {
        split_fleet(every_stack_batch)
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let split = loop {
        let firing: Vec<Value> = receiver
            .on("/hook")
            .iter()
            .flat_map(|p| p["alerts"].as_array().cloned().unwrap_or_default())
            .filter(|a| a["status"] == "firing" && a["labels"]["alertname"] == "FleetSplitIntoBands")
            .collect();
        if let Some(split) = firing.into_iter().next() {
            break split;
        }
        let (_, alerts) = server.get("/api/v1/alerts").await;
        assert!(
            Instant::now() < deadline,
            "FleetSplitIntoBands never fired; the server has {alerts}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let node_wide = split["annotations"]["node_wide"].as_str().unwrap_or_default();
    assert!(
        node_wide.starts_with("remote_access ×") && node_wide.contains("node-wide"),
        "{split:#}"
    );
    assert!(
        split["annotations"]["top_function"].is_null(),
        "no function is to blame: {split:#}"
    );
    let (status, body) = server.get("/api/v1/alerts").await;
    assert_eq!(status, 200, "{body}");
    let listed: Value = serde_json::from_str(&body).unwrap();
    assert!(
        listed["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["node_wide"].as_str() == Some(node_wide)),
        "{listed:#}"
    );
    server.stop().await;
}
