//! A ClickHouse server the bimodal server starts, watches and stops itself, so that storage
//! needs no set-up: its own config, data directory and free loopback ports.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};
use tokio::sync::watch;

/// Why the managed ClickHouse could not run.
#[derive(Debug, thiserror::Error)]
pub enum ManagedError {
    #[error("no clickhouse-server binary found (looked for {looked}); install it (`apt-get install clickhouse-server`) or pass --clickhouse-url")]
    NotInstalled { looked: String },
    #[error("failed to prepare `{path}`: {source}")]
    Prepare { path: PathBuf, source: std::io::Error },
    #[error("failed to start `{binary}`: {source}")]
    Spawn { binary: PathBuf, source: std::io::Error },
    #[error("clickhouse-server did not answer on {url} within {waited:?}; its log is `{log}`")]
    NotReady {
        url: String,
        waited: Duration,
        log: PathBuf,
    },
    #[error("clickhouse-server exited while starting ({status}): {output}")]
    Exited { status: String, output: String },
}

/// Binaries that run a ClickHouse server, in the order tried.
const CANDIDATES: &[&str] = &[
    "/usr/sbin/clickhouse-server",
    "/usr/bin/clickhouse-server",
    "/usr/bin/clickhouse",
];

/// The running child and what it takes to reach it. Dropping it kills the server.
#[derive(Debug)]
pub struct ManagedClickHouse {
    pub url: String,
    stop: watch::Sender<bool>,
    supervisor: Option<tokio::task::JoinHandle<()>>,
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn find_binary() -> Result<PathBuf, ManagedError> {
    if let Some(p) = std::env::var_os("BIMODAL_CLICKHOUSE_SERVER") {
        return Ok(p.into());
    }
    CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .ok_or_else(|| ManagedError::NotInstalled {
            looked: CANDIDATES.join(", "),
        })
}

/// The configuration of a ClickHouse server bimodal runs: its files under `dir`, loopback ports,
/// one passwordless user on loopback, small caches, ZSTD for every part (18.16 has no column
/// codecs), and `extra` XML inside `<yandex>` (a cluster's ZooKeeper, macros and shards).
pub fn config_xml(dir: &Path, http_port: u16, tcp_port: u16, extra: &str) -> String {
    let d = dir.display();
    // Small caches: the managed server shares a machine with the profiler's users.
    format!(
        r#"<?xml version="1.0"?>
<!-- written by bimodal-server on every start; edits are overwritten -->
<yandex>
  <logger><level>warning</level><log>{d}/log/clickhouse-server.log</log><errorlog>{d}/log/clickhouse-server.err.log</errorlog><size>50M</size><count>3</count></logger>
  <http_port>{http_port}</http_port>
  <tcp_port>{tcp_port}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{d}/data/</path>
  <tmp_path>{d}/tmp/</tmp_path>
  <user_files_path>{d}/user_files/</user_files_path>
  <format_schema_path>{d}/format_schemas/</format_schema_path>
  <mark_cache_size>268435456</mark_cache_size>
  <uncompressed_cache_size>268435456</uncompressed_cache_size>
  <max_concurrent_queries>100</max_concurrent_queries>
  <!-- longer than the client's idle-connection timeout, so a pooled connection is never closed
       by the server just as a request is sent on it -->
  <keep_alive_timeout>60</keep_alive_timeout>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mlock_executable>false</mlock_executable>
  <!-- ZSTD rather than LZ4 for parts of 1 MB and more: about half the bytes per stored sample;
       the small parts that every insert writes, and merges soon replace, stay LZ4 (ZSTD on every
       part cost 15% of ClickHouse's CPU under ingest) -->
  <compression><case><min_part_size>1000000</min_part_size><min_part_size_ratio>0.01</min_part_size_ratio><method>zstd</method></case></compression>
  <users>
    <default>
      <password></password>
      <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </default>
  </users>
  <profiles><default><max_memory_usage>4000000000</max_memory_usage></default></profiles>
  <quotas><default></default></quotas>
{extra}
</yandex>
"#
    )
}

impl ManagedClickHouse {
    /// Starts clickhouse-server with its files under `dir` and waits until it answers.
    /// If it exits later, it is restarted on the same ports and data.
    pub async fn start(dir: &Path) -> Result<ManagedClickHouse, ManagedError> {
        let binary = find_binary()?;
        let prepare = |path: &Path| {
            let path = path.to_owned();
            move |source| ManagedError::Prepare { path, source }
        };
        // The child runs in `dir`: every path handed to it must be absolute.
        std::fs::create_dir_all(dir).map_err(prepare(dir))?;
        let dir = &std::fs::canonicalize(dir).map_err(prepare(dir))?;
        tracing::info!(binary = %binary.display(), data = %dir.display(), "starting a managed clickhouse-server");
        for sub in ["data", "tmp", "user_files", "format_schemas", "log"] {
            let p = dir.join(sub);
            std::fs::create_dir_all(&p).map_err(prepare(&p))?;
        }
        let (http_port, tcp_port) = (free_port().map_err(prepare(dir))?, free_port().map_err(prepare(dir))?);
        let config = dir.join("config.xml");
        std::fs::write(&config, config_xml(dir, http_port, tcp_port, "")).map_err(prepare(&config))?;
        let url = format!("http://127.0.0.1:{http_port}");
        let log = dir.join("log/clickhouse-server.err.log");

        let mut child = spawn(&binary, &config, dir)?;
        wait_ready(&mut child, &url, &log, Duration::from_secs(60)).await?;
        tracing::info!(%url, data = %dir.display(), "managed clickhouse-server is up");

        let (stop, stop_rx) = watch::channel(false);
        let supervisor = tokio::spawn(supervise(child, binary, config, dir.to_owned(), stop_rx));
        Ok(ManagedClickHouse {
            url,
            stop,
            supervisor: Some(supervisor),
        })
    }

    /// Stops the server and waits for it to exit.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(s) = self.supervisor.take() {
            let _ = s.await;
        }
    }
}

impl Drop for ManagedClickHouse {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn spawn(binary: &Path, config: &Path, dir: &Path) -> Result<Child, ManagedError> {
    let mut cmd = Command::new(binary);
    if binary.file_name().is_some_and(|n| n == "clickhouse") {
        cmd.arg("server");
    }
    let stdout = std::fs::File::create(dir.join("log/stdout.log")).map_err(|source| ManagedError::Prepare {
        path: dir.join("log/stdout.log"),
        source,
    })?;
    cmd.arg(format!("--config-file={}", config.display()))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(stdout.try_clone().map_err(|source| ManagedError::Prepare {
            path: dir.join("log/stdout.log"),
            source,
        })?)
        .stderr(stdout)
        .kill_on_drop(true);
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no memory of the parent;
    // it makes the kernel stop ClickHouse if this process dies without cleaning up (kill -9).
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    cmd.spawn().map_err(|source| ManagedError::Spawn {
        binary: binary.to_owned(),
        source,
    })
}

async fn wait_ready(child: &mut Child, url: &str, log: &Path, limit: Duration) -> Result<(), ManagedError> {
    let start = Instant::now();
    let addr = url.trim_start_matches("http://").to_owned();
    while start.elapsed() < limit {
        if ping(&addr).await {
            return Ok(());
        }
        // A server that cannot start (bad config, port taken) exits at once: say why.
        if let Ok(Some(status)) = child.try_wait() {
            let stdout = log.with_file_name("stdout.log");
            let mut output = std::fs::read_to_string(&stdout).unwrap_or_default();
            output.push_str(&std::fs::read_to_string(log).unwrap_or_default());
            let tail: Vec<&str> = output.lines().rev().take(5).collect();
            return Err(ManagedError::Exited {
                status: status.to_string(),
                output: tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(ManagedError::NotReady {
        url: url.to_owned(),
        waited: limit,
        log: log.to_owned(),
    })
}

/// ClickHouse answers `GET /ping` with `Ok.`; a raw request avoids an HTTP client dependency.
async fn ping(addr: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(Ok(mut s)) = tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr)).await else {
        return false;
    };
    let req = format!("GET /ping HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(1), s.read_to_end(&mut buf)).await;
    matches!(read, Ok(Ok(_))) && String::from_utf8_lossy(&buf).contains("Ok.")
}

async fn supervise(mut child: Child, binary: PathBuf, config: PathBuf, dir: PathBuf, mut stop: watch::Receiver<bool>) {
    let mut backoff = Duration::from_millis(500);
    loop {
        tokio::select! {
            status = child.wait() => {
                tracing::error!(?status, retry_in = ?backoff, "managed clickhouse-server exited; restarting it");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.changed() => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
                match spawn(&binary, &config, &dir) {
                    Ok(c) => child = c,
                    Err(e) => tracing::error!(error = %e, "failed to restart clickhouse-server"),
                }
            }
            _ = stop.changed() => {
                terminate(&mut child).await;
                return;
            }
        }
    }
}

/// SIGTERM, then SIGKILL if it has not exited after 10 s.
async fn terminate(child: &mut Child) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) on our own child's pid, which has not been reaped yet (id() is Some).
        unsafe {
            libc::kill(pid as i32, libc::SIGTERM);
        }
    }
    if tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}
