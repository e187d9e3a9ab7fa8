//! A ClickHouse server the bimodal server starts, watches and stops itself, so that storage
//! needs no set-up: its own config, data directory and free loopback ports.

use std::collections::HashSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
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
    #[error("port {port} was taken by another process before clickhouse-server could bind it")]
    PortTaken { port: u16 },
}

/// How many times start-up chooses new ports when a chosen one was taken meanwhile.
const PORT_ATTEMPTS: u32 = 5;

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
    /// The running child's pid (0 between a crash and its restart).
    pid: Arc<AtomicU32>,
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
        let config = dir.join("config.xml");
        let log = dir.join("log/clickhouse-server.err.log");
        wait_for_previous(dir, &config).await;
        // A free port is only free until someone binds it: another process may take it between
        // the choice and ClickHouse's bind. The child then exits on the taken address, or (when
        // the other process is a ClickHouse too) another server answers on "our" URL; both are
        // told apart by the child's own listening sockets, and new ports are chosen.
        let mut attempt = 1;
        let (child, url) = loop {
            let (http_port, tcp_port) = (free_port().map_err(prepare(dir))?, free_port().map_err(prepare(dir))?);
            std::fs::write(&config, config_xml(dir, http_port, tcp_port, "")).map_err(prepare(&config))?;
            let url = format!("http://127.0.0.1:{http_port}");
            let mut child = spawn(&binary, &config, dir)?;
            match wait_ready(&mut child, &url, [http_port, tcp_port], &log, Duration::from_secs(60)).await {
                Ok(()) => break (child, url),
                Err(ManagedError::PortTaken { port }) if attempt < PORT_ATTEMPTS => {
                    tracing::warn!(
                        port,
                        attempt,
                        "a chosen port was taken before clickhouse-server bound it; choosing others"
                    );
                    terminate(&mut child).await;
                    attempt += 1;
                }
                Err(e) => {
                    terminate(&mut child).await;
                    return Err(e);
                }
            }
        };
        tracing::info!(%url, data = %dir.display(), "managed clickhouse-server is up");

        let pid = Arc::new(AtomicU32::new(child.id().unwrap_or(0)));
        let (stop, stop_rx) = watch::channel(false);
        let supervisor = tokio::spawn(supervise(child, binary, config, dir.to_owned(), pid.clone(), stop_rx));
        Ok(ManagedClickHouse {
            url,
            pid,
            stop,
            supervisor: Some(supervisor),
        })
    }

    /// The pid of the running clickhouse-server, if one runs (a restart changes it).
    pub fn pid(&self) -> Option<u32> {
        Some(self.pid.load(Ordering::Relaxed)).filter(|&p| p != 0)
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

/// Waits until the child answers on `url` and holds both of its ports: an answer alone may come
/// from another server that took the port first.
async fn wait_ready(
    child: &mut Child,
    url: &str,
    ports: [u16; 2],
    log: &Path,
    limit: Duration,
) -> Result<(), ManagedError> {
    let start = Instant::now();
    let addr = url.trim_start_matches("http://").to_owned();
    while start.elapsed() < limit {
        if ping(&addr).await {
            let held = child.id().map(listening_ports).unwrap_or_default();
            if ports.iter().all(|p| held.contains(p)) {
                return Ok(());
            }
        }
        // A server that cannot start (bad config, port taken) exits at once: say why.
        if let Ok(Some(status)) = child.try_wait() {
            let stdout = log.with_file_name("stdout.log");
            let mut output = std::fs::read_to_string(&stdout).unwrap_or_default();
            output.push_str(&std::fs::read_to_string(log).unwrap_or_default());
            if output.contains("Address already in use") {
                let port = ports
                    .into_iter()
                    .find(|p| output.contains(&format!(":{p}")))
                    .unwrap_or(ports[0]);
                return Err(ManagedError::PortTaken { port });
            }
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

/// How long a clickhouse-server still running on the data directory is given to exit.
const PREVIOUS_EXIT_WAIT: Duration = Duration::from_secs(30);

/// Waits for a clickhouse-server still running on `dir` to exit: the one a bimodal-server killed
/// with SIGKILL left shutting down (the kernel sent it SIGTERM, and a shutdown takes seconds). A
/// new one would find the data directory locked and exit. One still running after
/// [`PREVIOUS_EXIT_WAIT`] is killed: nothing but bimodal's managed server uses this directory.
async fn wait_for_previous(dir: &Path, config: &Path) {
    let Some(pid) = previous_pid(dir, config) else { return };
    tracing::info!(pid, data = %dir.display(), "waiting for the previous clickhouse-server on this directory to exit");
    let started = Instant::now();
    let mut killed = false;
    while previous_pid(dir, config) == Some(pid) {
        if !killed && started.elapsed() > PREVIOUS_EXIT_WAIT {
            tracing::warn!(pid, "the previous clickhouse-server did not exit; killing it");
            // SAFETY: kill(2) on a clickhouse-server running with this directory's config file.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed = true;
        }
        if started.elapsed() > PREVIOUS_EXIT_WAIT * 2 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The pid in the data directory's `status` file, when that process runs with this directory's
/// config file (the file stays after a clean exit, and pids are reused).
fn previous_pid(dir: &Path, config: &Path) -> Option<i32> {
    let status = std::fs::read_to_string(dir.join("data/status")).ok()?;
    let pid: i32 = status
        .lines()
        .find_map(|l| l.strip_prefix("PID:"))?
        .trim()
        .parse()
        .ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let needle = config.to_string_lossy();
    String::from_utf8_lossy(&cmdline)
        .contains(needle.as_ref())
        .then_some(pid)
}

/// The TCP ports process `pid` listens on, from its socket descriptors and the kernel's socket
/// tables (`/proc/net/tcp`, `/proc/net/tcp6`); empty when they cannot be read.
pub fn listening_ports(pid: u32) -> HashSet<u16> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    let inodes: HashSet<String> = fds
        .filter_map(|e| {
            let link = std::fs::read_link(e.ok()?.path()).ok()?;
            let inode = link.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?;
            Some(inode.to_owned())
        })
        .collect();
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let listening = fields.get(3) == Some(&"0A");
                    let ours = fields.get(9).is_some_and(|i| inodes.contains(*i));
                    let port = fields.get(1)?.rsplit(':').next()?;
                    (listening && ours).then(|| u16::from_str_radix(port, 16).ok())?
                })
                .collect::<Vec<_>>()
        })
        .collect()
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

/// The first wait before restarting ClickHouse, and the longest.
const FIRST_RESTART: Duration = Duration::from_millis(500);
const LONGEST_RESTART: Duration = Duration::from_secs(30);
/// A ClickHouse that ran this long was healthy: its next restart waits the first wait again.
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// How long to wait before restarting a ClickHouse that exited after running for `ran`, when
/// the previous restart waited `previous`: twice as long each time it fails again soon, up to
/// [`LONGEST_RESTART`]; [`FIRST_RESTART`] again once it had run for [`HEALTHY_RUN`].
fn restart_delay(previous: Option<Duration>, ran: Duration) -> Duration {
    match previous {
        Some(previous) if ran < HEALTHY_RUN => (previous * 2).min(LONGEST_RESTART),
        _ => FIRST_RESTART,
    }
}

async fn supervise(
    mut child: Child,
    binary: PathBuf,
    config: PathBuf,
    dir: PathBuf,
    pid: Arc<AtomicU32>,
    mut stop: watch::Receiver<bool>,
) {
    let mut delay = None;
    let mut started = std::time::Instant::now();
    loop {
        tokio::select! {
            status = child.wait() => {
                pid.store(0, Ordering::Relaxed);
                let wait = restart_delay(delay, started.elapsed());
                delay = Some(wait);
                tracing::error!(?status, retry_in = ?wait, "managed clickhouse-server exited; restarting it");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.changed() => return,
                }
                started = std::time::Instant::now();
                match spawn(&binary, &config, &dir) {
                    Ok(c) => {
                        pid.store(c.id().unwrap_or(0), Ordering::Relaxed);
                        child = c;
                    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Restarts wait longer while ClickHouse keeps exiting at once, and the first wait again
    /// after it ran healthily for a while (the delay used to stay at 30 s for good).
    #[test]
    fn restart_delays_grow_and_reset() {
        let soon = Duration::from_secs(1);
        let mut delays = vec![restart_delay(None, soon)];
        for _ in 0..8 {
            delays.push(restart_delay(delays.last().copied(), soon));
        }
        assert_eq!(delays[0], FIRST_RESTART);
        assert_eq!(delays[1], 2 * FIRST_RESTART);
        assert_eq!(*delays.last().unwrap(), LONGEST_RESTART);
        assert_eq!(restart_delay(Some(LONGEST_RESTART), HEALTHY_RUN), FIRST_RESTART);
    }

    #[test]
    fn a_process_listening_ports_are_its_own_listening_sockets_only() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // A connected socket's port is not a listening one.
        let client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let client_port = client.local_addr().unwrap().port();
        let held = listening_ports(std::process::id());
        assert!(held.contains(&port), "{port} not in {held:?}");
        assert!(!held.contains(&client_port), "{client_port} in {held:?}");
        drop(listener);
        assert!(!listening_ports(std::process::id()).contains(&port));
        // PID 1 (not this process) does not hold this process's ports.
        assert!(!listening_ports(1).contains(&port));
    }
}
