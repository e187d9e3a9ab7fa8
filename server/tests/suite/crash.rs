//! Nothing acknowledged is lost and nothing is stored twice when a process dies: real agent and
//! server processes, killed with SIGKILL, and a ClickHouse frozen (SIGSTOP) and killed under
//! load. What was stored is checked against the agents' own counts: the batches and samples each
//! agent says it took and had acknowledged, with none dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::common::{http_get, selector, TestServer};
use super::storage::SharedClickHouse;
use crate::fixture;

/// Page faults per sample: the server stores faults (samples × period), the agent counts samples.
const PERIOD: u64 = 100;

/// The agent binary beside the server's (`cargo test --workspace` builds both).
fn agent_binary() -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_bimodal-server")).with_file_name("bimodal-agent");
    assert!(
        path.exists(),
        "{} is missing: build it first (`cargo build -p bimodal-agent`; `make test` does)",
        path.display()
    );
    path
}

/// A `bimodal-agent run` process sampling page faults of one workload, its batches spooled on
/// disk; its stderr goes to a file, read for its summary when it stops.
struct Agent {
    child: Child,
    log: PathBuf,
}

/// What an agent said it did when it stopped.
#[derive(Debug, PartialEq, Eq)]
struct Summary {
    batches: u64,
    samples: u64,
    dropped_batches: u64,
}

impl Agent {
    fn start(server: SocketAddr, node: &str, pid: u32, spool: &Path, log: PathBuf) -> Agent {
        let stderr = std::fs::File::create(&log).unwrap();
        let child = Command::new(agent_binary())
            .args(["run", "--event", "page_fault", "--interval", "1s"])
            .arg(format!("--page-fault-period={PERIOD}"))
            .arg(format!("--server-url=http://{server}"))
            .arg(format!("--node-name={node}"))
            .arg(format!("--pid={pid}"))
            .arg(format!("--spool-dir={}", spool.display()))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("bimodal-agent starts");
        Agent { child, log }
    }

    fn kill(self) {
        drop(self);
    }

    /// SIGTERM: the agent sends what it holds, waits for the acks and prints its summary.
    async fn stop(mut self) -> Summary {
        // SAFETY: kill(2) on our own child, not reaped yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the agent did not stop: {}", self.log_text());
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let log = self.log_text();
        assert!(status.success(), "{status}: {log}");
        parse_summary(&log).unwrap_or_else(|| panic!("no summary line: {log}"))
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `bimodal-agent: ran 5s: B batches (S samples of page_fault, L lost), D batches dropped`.
fn parse_summary(log: &str) -> Option<Summary> {
    let line = log.lines().rev().find(|l| l.starts_with("bimodal-agent: ran "))?;
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    // ran N s: B batches (S samples …, L lost), D batches dropped
    let [.., batches, samples, _lost, dropped] = numbers[..] else {
        return None;
    };
    Some(Summary {
        batches,
        samples,
        dropped_batches: dropped,
    })
}

/// A `bimodal-server` process on a ClickHouse of its own choosing.
struct ServerProcess {
    child: Child,
    addr: SocketAddr,
}

impl ServerProcess {
    /// Starts it on `listen` (port 0: any) and waits until it is healthy.
    async fn start(listen: SocketAddr, clickhouse: &str, data: &Path) -> ServerProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_bimodal-server"))
            .arg(format!("--listen={listen}"))
            .arg(format!("--clickhouse-url={clickhouse}"))
            .arg(format!("--data-dir={}", data.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("bimodal-server starts");
        // `bimodal-server: listening on ADDR: …` names the port it bound.
        let stderr = child.stderr.take().unwrap();
        let addr = tokio::task::spawn_blocking(move || {
            use std::io::BufRead;
            let mut lines = std::io::BufReader::new(stderr).lines();
            let addr = lines.by_ref().map_while(Result::ok).find_map(|l| {
                let rest = l.strip_prefix("bimodal-server: listening on ")?;
                rest.split(':').take(2).collect::<Vec<_>>().join(":").parse().ok()
            });
            // Keep draining, so the server never blocks on a full pipe.
            std::thread::spawn(move || lines.for_each(drop));
            addr
        })
        .await
        .unwrap()
        .expect("the server says where it listens");
        let server = ServerProcess { child, addr };
        wait_healthy(addr).await;
        server
    }

    fn kill(self) {
        drop(self);
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn wait_healthy(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !matches!(http_get(addr, "/healthz").await, Ok((200, _))) {
        assert!(Instant::now() < deadline, "{addr} never became healthy");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Page faults stored for `node` since `from` (Unix seconds).
async fn stored_faults(addr: SocketAddr, node: &str, from: u64) -> u64 {
    let to = super::common::unix_now() + 120;
    let path = format!(
        "/api/v1/flamegraph?event=page_fault&{}&from={from}&to={to}",
        selector(&format!(r#"{{node="{node}"}}"#))
    );
    let (status, body) = http_get(addr, &path).await.expect("the server answers");
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 200, "{body}");
    let graph: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(graph["truncated_stacks"], 0, "{body}");
    graph["total"].as_u64().unwrap()
}

/// Waits until every node has more stored samples than it had.
async fn wait_for_progress(addr: SocketAddr, nodes: &[String], from: u64, before: &mut [u64]) {
    let deadline = Instant::now() + Duration::from_secs(90);
    for (node, seen) in nodes.iter().zip(before.iter_mut()) {
        loop {
            let now = stored_faults(addr, node, from).await;
            if now > *seen {
                *seen = now;
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{node} stored nothing new after {seen} samples"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// Three agents stream while the server is killed (SIGKILL) twice and restarted, ClickHouse is
/// frozen (SIGSTOP) for 30 s and then killed (SIGKILL, its supervisor restarts it): the server
/// says it is unhealthy while ClickHouse is frozen, recovers by itself, and in the end every
/// agent's samples are stored exactly once: the stored total equals what each agent says it
/// took and had acknowledged, with no batch dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_servers_and_clickhouse_lose_and_double_nothing_agents_were_told() {
    let ch = SharedClickHouse::start().await;
    let dir = tempfile::tempdir().unwrap();
    let from = super::common::unix_now() - 60;
    let server = ServerProcess::start("127.0.0.1:0".parse().unwrap(), &ch.url(), &dir.path().join("s")).await;
    let addr = server.addr;

    let nodes: Vec<String> = (1..=3).map(|i| format!("crash-{i}")).collect();
    let workloads: Vec<_> = nodes.iter().map(|_| fixture::start("fault", 600)).collect();
    let agents: Vec<Agent> = nodes
        .iter()
        .zip(&workloads)
        .map(|(node, w)| {
            Agent::start(
                addr,
                node,
                w.pid(),
                &dir.path().join("spool"),
                dir.path().join(format!("{node}.log")),
            )
        })
        .collect();
    let mut seen = vec![0u64; nodes.len()];
    wait_for_progress(addr, &nodes, from, &mut seen).await;

    // The server dies mid-stream, twice; each time it comes back on the same port.
    let mut server = server;
    for _ in 0..2 {
        server.kill();
        tokio::time::sleep(Duration::from_millis(500)).await;
        server = ServerProcess::start(addr, &ch.url(), &dir.path().join("s")).await;
        wait_for_progress(addr, &nodes, from, &mut seen).await;
    }

    // ClickHouse freezes for 30 s: the server says so, and answers again once it thaws.
    let pid = ch.pid();
    super::storage::freeze(pid).await;
    let frozen = Instant::now();
    let (status, _) = http_get(addr, "/healthz").await.unwrap();
    assert_eq!(status, 503, "healthy with ClickHouse frozen");
    tokio::time::sleep(Duration::from_secs(30).saturating_sub(frozen.elapsed())).await;
    // SAFETY: kill(2) with SIGCONT on the ClickHouse child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    wait_healthy(addr).await;
    wait_for_progress(addr, &nodes, from, &mut seen).await;

    // ClickHouse is killed; its supervisor starts it again on the same data and ports.
    // SAFETY: kill(2) on the ClickHouse child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    tokio::time::sleep(Duration::from_millis(200)).await;
    wait_healthy(addr).await;
    wait_for_progress(addr, &nodes, from, &mut seen).await;

    for ((node, agent), workload) in nodes.iter().zip(agents).zip(workloads) {
        let said = agent.stop().await;
        drop(workload);
        assert_eq!(said.dropped_batches, 0, "{node}: {said:?}");
        assert!(said.batches >= 5, "{node}: {said:?}");
        assert_eq!(
            stored_faults(addr, node, from).await,
            said.samples * PERIOD,
            "{node}: {said:?}"
        );
    }
    server.kill();
    ch.stop().await;
}

/// An agent killed (SIGKILL) while its server is down leaves its batches in the spool on disk;
/// the next agent of the node sends them first, and each is stored once: the stored total is
/// what the spooled files hold plus what the second agent says it took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_with_a_full_spool_delivers_it_once_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    // Nothing listens here until the server starts on it.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let from = super::common::unix_now() - 60;
    let workload = fixture::start("fault", 600);
    let node = "respawn-node";
    let agent = Agent::start(addr, node, workload.pid(), &spool, dir.path().join("1.log"));
    let files = || -> Vec<PathBuf> {
        let node_dirs = std::fs::read_dir(&spool).into_iter().flatten().filter_map(Result::ok);
        node_dirs
            .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().filter_map(Result::ok))
            .map(|f| f.path())
            .filter(|p| p.extension().is_some_and(|e| e == "batch"))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while files().len() < 4 {
        assert!(Instant::now() < deadline, "no batches spooled: {}", agent.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    agent.kill();

    // What the killed agent left: whole batches only.
    let spooled: Vec<bimodal_proto::v1::Batch> = files()
        .iter()
        .map(|f| prost::Message::decode(&std::fs::read(f).unwrap()[..]).expect("a whole batch"))
        .collect();
    let spooled_faults: u64 = spooled.iter().flat_map(|b| &b.samples).map(|s| s.value).sum();
    assert!(spooled_faults > 0);

    let server = TestServer::start_on(addr).await;
    let agent = Agent::start(addr, node, workload.pid(), &spool, dir.path().join("2.log"));
    // The spooled batches go first; then a few intervals of the second agent's own.
    let deadline = Instant::now() + Duration::from_secs(60);
    while stored_faults(addr, node, from).await < spooled_faults {
        assert!(
            Instant::now() < deadline,
            "the spool never arrived: {}",
            agent.log_text()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let said = agent.stop().await;
    assert_eq!(said.dropped_batches, 0, "{said:?}");
    assert_eq!(
        stored_faults(addr, node, from).await,
        spooled_faults + said.samples * PERIOD,
        "{} spooled batches, then {said:?}",
        spooled.len()
    );
    assert!(files().is_empty(), "acknowledged batches stay spooled: {:?}", files());
    server.stop().await;
}
