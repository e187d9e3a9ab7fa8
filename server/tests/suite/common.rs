//! A server under test and a minimal HTTP client for its API.

use std::net::SocketAddr;

use std::time::Duration;

use bimodal_agent::sample::bpf::{MapSizes, UnwindMode};
use bimodal_agent::sample::events::{EventKind, Rates};
use bimodal_agent::ship::{RunOptions, Symbolize};
use bimodal_server::storage::writer::WriterConfig;
use bimodal_server::{Config, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

/// `selector=<the selector, URL-encoded>`, for API paths.
pub fn selector(s: &str) -> String {
    let encoded: String = form_urlencoded::byte_serialize(s.as_bytes()).collect();
    format!("selector={encoded}")
}

/// One ClickHouse for every server of this test binary, each server on a database of its own
/// ([`test_config`]); started at the first use, on a thread that lives as long as the process
/// (the ClickHouse it starts ends with that thread: PR_SET_PDEATHSIG). A ClickHouse per server
/// cost its start and an empty server's migrations for each of some 50 tests. Tests that stop,
/// freeze or kill ClickHouse start their own (`storage::SharedClickHouse`, the cluster).
fn test_clickhouse() -> String {
    static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    URL.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-clickhouse");
        // Earlier runs' directories, their ClickHouse gone with their process.
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                let alive = e
                    .file_name()
                    .to_str()
                    .and_then(|pid| pid.parse::<u32>().ok())
                    .is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
                if !alive {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = dir.join(std::process::id().to_string());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("test-clickhouse".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for the test ClickHouse");
                runtime.block_on(async move {
                    let clickhouse = bimodal_server::storage::managed::ManagedClickHouse::start(&dir)
                        .await
                        .expect("the test ClickHouse starts");
                    tx.send(clickhouse.url.clone()).expect("the test waits for the URL");
                    // Its supervisor runs on this runtime, for the rest of the process.
                    let _kept = clickhouse;
                    std::future::pending::<()>().await
                })
            })
            .expect("a thread for the test ClickHouse");
        rx.recv().expect("the test ClickHouse started")
    })
    .clone()
}

/// A database name no other server of this test binary uses.
fn fresh_database() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!("test_{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// A running server on the test binary's ClickHouse (a database of its own), or one it manages.
pub struct TestServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _dir: Option<tempfile::TempDir>,
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_on("127.0.0.1:0".parse().unwrap()).await
    }

    /// A server listening on `listen`.
    pub async fn start_on(listen: SocketAddr) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let config = test_config(listen, dir.path());
        Self::with_config(config, Some(dir)).await
    }

    /// A server with its own managed ClickHouse whose settings are [`test_config`]'s as
    /// `change` makes them.
    pub async fn start_changed(change: impl FnOnce(Config) -> Config) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let config = change(test_config("127.0.0.1:0".parse().unwrap(), dir.path()));
        Self::with_config(config, Some(dir)).await
    }

    /// A server with these settings; `dir` (holding its files) lives as long as it.
    pub async fn with_config(config: Config, dir: Option<tempfile::TempDir>) -> TestServer {
        log_if_asked();
        let server = Server::bind(&config).await.expect("server starts");
        let addr = server.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(async {
            let _ = stopped.await;
        }));
        TestServer {
            addr,
            stop: Some(stop),
            task: Some(task),
            _dir: dir,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// GET `path`; returns the status code and body as text.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let (status, body) = self.get_bytes(path).await;
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// GET `path`; returns the status code and body.
    pub async fn get_bytes(&self, path: &str) -> (u16, Vec<u8>) {
        http_get(self.addr, path).await.unwrap()
    }

    /// Stops the server and its ClickHouse.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            match t.await {
                Ok(served) => served.expect("the server ends without an error"),
                // Said last, after the task's own panic message and backtrace, so that the end
                // of a long test log names what failed.
                Err(e) if e.is_panic() => {
                    let payload = e.into_panic();
                    let message = payload
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| payload.downcast_ref::<&str>().copied())
                        .unwrap_or("(not text)");
                    eprintln!("the server's task panicked: {message}");
                    std::panic::resume_unwind(payload);
                }
                Err(e) => panic!("the server's task did not end: {e}"),
            }
        }
    }
}

/// With RUST_LOG set (e.g. `RUST_LOG=bimodal_server=debug`), the server's log goes to the
/// failing test's output.
pub fn log_if_asked() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// Settings of a test server with its files under `dir`, on a database of its own in the test
/// binary's ClickHouse ([`test_clickhouse`]): flushes every 100 ms so tests do not wait a second
/// per batch. A restarted server is given the same settings (its database).
pub fn test_config(listen: SocketAddr, dir: &std::path::Path) -> Config {
    Config {
        listen,
        clickhouse_url: Some(test_clickhouse()),
        clickhouse_database: fresh_database(),
        clickhouse_user: None,
        clickhouse_password: None,
        clickhouse_cluster: None,
        data_dir: dir.to_owned(),
        retention_days: 30,
        debuginfo_max_bytes: 1 << 30,
        symbol_cache_bytes: 64 << 20,
        cache_entries: 1 << 16,
        writer: WriterConfig {
            flush_interval: Duration::from_millis(100),
            ..WriterConfig::default()
        },
        alerts: None,
        token_file: None,
        allow_unauthenticated: false,
        tls: None,
        max_streams: 20_000,
        max_streams_per_address: 5_000,
        stream_idle: Duration::from_secs(300),
        connections: bimodal_server::serve::Limits::new(bimodal_server::serve::default_max_connections()),
        max_in_flight_bytes: bimodal_server::ingest::DEFAULT_MAX_IN_FLIGHT_BYTES,
        node_batches: bimodal_server::rate::Rate::NODE_BATCHES,
        node_streams: bimodal_server::rate::Rate::NODE_STREAMS,
        new_nodes: bimodal_server::rate::Rate::NEW_NODES,
        debuginfo_calls: bimodal_server::rate::Rate::DEBUGINFO_CALLS,
        api_requests: bimodal_server::rate::Rate::API_REQUESTS,
        max_building_stacks: bimodal_server::api::StackBudget::DEFAULT_STACKS,
    }
}

/// A token file in `dir` holding `entries` (as `new_token` writes them), and a loopback server's
/// config that reads it (its data under `dir/server`).
pub fn with_tokens(dir: &std::path::Path, entries: &[&str]) -> (std::path::PathBuf, Config) {
    let tokens = dir.join("tokens.yaml");
    std::fs::write(&tokens, format!("tokens:\n{}", entries.concat())).unwrap();
    let config = Config {
        token_file: Some(tokens.clone()),
        ..test_config("127.0.0.1:0".parse().unwrap(), &dir.join("server"))
    };
    (tokens, config)
}

/// A GET of `path` with an optional bearer token: (status, body, the answer's `header`).
pub async fn get_with(
    server: &TestServer,
    path: &str,
    token: Option<&str>,
    header: &'static str,
) -> (u16, String, Option<String>) {
    let url = format!("{}{path}", server.url());
    let token = token.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let mut request = ureq::get(&url);
        if let Some(t) = &token {
            request = request.set("Authorization", &format!("Bearer {t}"));
        }
        match request.call() {
            Ok(r) => {
                let value = r.header(header).map(str::to_owned);
                (r.status(), r.into_string().unwrap_or_default(), value)
            }
            Err(ureq::Error::Status(code, r)) => {
                let value = r.header(header).map(str::to_owned);
                (code, r.into_string().unwrap_or_default(), value)
            }
            Err(e) => panic!("{e}"),
        }
    })
    .await
    .unwrap()
}

/// GET `path` from the HTTP server at `addr`: the status code and body; an error when nothing
/// answers there.
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await?;
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{what} from {addr}"));
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no HTTP response"))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let body = &raw[split + 4..];
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status code"))?;
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_vec()
    };
    Ok((status, body))
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = body.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&body[..line_end]).unwrap_or("0");
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        let chunk = &body[line_end + 2..];
        out.extend_from_slice(&chunk[..n]);
        body = &chunk[n + 2..];
    }
    out
}

/// Agent settings for a test: `events` of process `pid` only, drained every second, no placement.
pub fn agent_options(server_url: String, node: &str, pid: u32, events: Vec<EventKind>) -> RunOptions {
    RunOptions {
        server: bimodal_proto::client::ServerAddress::new(server_url, None),
        node: node.into(),
        labels: Default::default(),
        events,
        pid: Some(pid),
        interval: Duration::from_secs(1),
        rates: Rates::default(),
        map_sizes: MapSizes::default(),
        unwind: UnwindMode::Auto,
        symbolize: Symbolize::Server,
        upload_max_bytes: 1 << 30,
        debug_dirs: bimodal_agent::host::debugfile::default_dirs(),
        cached_images: bimodal_agent::symbolize::DEFAULT_CACHED_IMAGES,
        test_refusals: Default::default(),
        spool: bimodal_proto::spool::SpoolOptions::memory(64 << 20),
        placement_every: 0,
        placement_processes: 0,
        kubernetes: None,
        work_uprobe: None,
        work_metric: None,
        output_dir: None,
        metrics_listen: None,
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// Where tests leave files for people to look at (screenshots, answers): target/artifacts.
pub fn artifacts() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs a browser check of web/test (Playwright driving Debian's Chromium), which prints
/// `ok: …` on success; returns its output.
pub fn web_test(script: &str, args: &[&str]) -> String {
    let web = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../web");
    assert!(
        web.join("node_modules/playwright-core").exists(),
        "web/node_modules is missing: run `make setup` (npm ci in web/)"
    );
    let out = std::process::Command::new("node")
        .current_dir(&web)
        .arg(script)
        .args(args)
        .output()
        .expect("run node (install nodejs)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script} failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("ok:"), "{stdout}");
    stdout
}

/// The value of counter `name` with `reason`, from the server's /metrics (0 when absent).
pub async fn refusals(server: &TestServer, name: &str, reason: &str) -> f64 {
    let (_, metrics) = server.get("/metrics").await;
    let prefix = format!("{name}{{reason=\"{reason}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}
