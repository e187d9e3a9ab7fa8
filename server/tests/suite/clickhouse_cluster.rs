//! A real ClickHouse cluster on loopback for the server's `--clickhouse-cluster` mode: one
//! ZooKeeper and one clickhouse-server per shard, each with its own generated config, ports and
//! data in a temporary directory. What 18.16 accepts and does on a cluster (and why the server
//! writes as it does there) is in docs/design/007-fleet-storage.md; `storage::cluster` runs the
//! server against it.
//!
//! Needs the `zookeeper` package (tools/setup.sh installs it) and clickhouse-server.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bimodal_server::storage::managed::listening_ports;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Binaries that run a ClickHouse server, in the order tried (as the managed ClickHouse does).
const CLICKHOUSE_SERVERS: &[&str] = &[
    "/usr/sbin/clickhouse-server",
    "/usr/bin/clickhouse-server",
    "/usr/bin/clickhouse",
];
/// The ZooKeeper server of the Debian package `zookeeper` (via libzookeeper-java); its manifest's
/// Class-Path names every jar it needs.
const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
/// A logging backend for ZooKeeper (libslf4j-java, a dependency of the above); without it
/// ZooKeeper logs nothing at all, not even why it could not start.
const SLF4J_SIMPLE_JAR: &str = "/usr/share/java/slf4j-simple.jar";
/// How long one process may take to answer: generous, since a first start with an empty page
/// cache (the JVM, ClickHouse's 80 MB library) on two cores shared with a build can be slow.
const START_LIMIT: Duration = Duration::from_secs(60);
/// Attempts at starting when a port found free is taken by another process before ours binds it.
const PORT_ATTEMPTS: usize = 3;

/// A real ClickHouse cluster on loopback: one ZooKeeper and `shards` clickhouse-server processes,
/// one replica per shard, in a temporary directory; everything is killed on drop.
///
/// Each server's config has `<macros>` `{shard}` (1, 2, ...) and `{replica}`, the cluster `name`
/// in `<remote_servers>` (one replica per shard, `internal_replication` true, as Replicated
/// tables need) and distributed DDL at `/clickhouse/task_queue/ddl`.
#[derive(Debug)]
pub struct ClickHouseCluster {
    /// The cluster's name in `remote_servers`, for `ON CLUSTER` and `Distributed(...)`.
    pub name: String,
    /// HTTP URL per shard, e.g. `http://127.0.0.1:PORT`.
    pub urls: Vec<String>,
    servers: Vec<Server>,
    zookeeper: Option<Child>,
    // Last: removed after the processes using it are gone (fields drop after `Drop::drop`).
    dir: tempfile::TempDir,
}

/// One shard's clickhouse-server.
#[derive(Debug)]
struct Server {
    dir: PathBuf,
    config: PathBuf,
    http_addr: String,
    child: Option<Child>,
}

/// Why one attempt at starting failed.
enum StartError {
    /// Another process bound one of the ports between our probe and the server's bind: retried.
    PortTaken(String),
    /// Anything else: reported as is.
    Failed(String),
}

impl ClickHouseCluster {
    /// Starts ZooKeeper and `shards` ClickHouse servers and waits until every server answers
    /// `SELECT 1` and reaches ZooKeeper. Panics, with the failing process's log, if that cannot be.
    pub async fn start(shards: usize) -> ClickHouseCluster {
        assert!(shards > 0, "a cluster has at least one shard");
        let began = Instant::now();
        let mut taken = Vec::new();
        for _ in 0..PORT_ATTEMPTS {
            match Self::try_start(shards).await {
                Ok(cluster) => {
                    eprintln!(
                        "clickhouse_cluster: {shards} shards up in {:.2?} ({})",
                        began.elapsed(),
                        cluster.urls.join(", ")
                    );
                    return cluster;
                }
                Err(StartError::PortTaken(why)) => taken.push(why),
                Err(StartError::Failed(why)) => panic!("the ClickHouse cluster did not start: {why}"),
            }
        }
        panic!(
            "the ClickHouse cluster did not start: before each of {PORT_ATTEMPTS} attempts another process \
             took a port found free:\n{}",
            taken.join("\n")
        )
    }

    async fn try_start(shards: usize) -> Result<ClickHouseCluster, StartError> {
        let binary = clickhouse_binary()?;
        if !Path::new(ZOOKEEPER_JAR).exists() {
            return Err(StartError::Failed(format!(
                "ZooKeeper is not installed ({ZOOKEEPER_JAR} is missing): run tools/setup.sh \
                 (apt-get install zookeeper)"
            )));
        }
        let dir = tempfile::Builder::new()
            .prefix("bimodal-ch-cluster-")
            .tempdir()
            .map_err(|e| StartError::Failed(format!("cannot create a temporary directory: {e}")))?;
        // ZooKeeper's client port, then per shard: HTTP, native TCP, interserver HTTP.
        let ports = free_ports(1 + 3 * shards)?;
        let zk_port = ports[0];
        let shard_ports: Vec<[u16; 3]> = (0..shards)
            .map(|i| [ports[1 + 3 * i], ports[2 + 3 * i], ports[3 + 3 * i]])
            .collect();
        // From here on, dropping `cluster` (on any error) kills what has been started.
        let mut cluster = ClickHouseCluster {
            name: "bimodal_test".into(),
            urls: Vec::new(),
            servers: Vec::new(),
            zookeeper: None,
            dir,
        };
        let root = cluster.dir.path().to_owned();

        let zk_dir = root.join("zookeeper");
        let (child, zk_log) = start_zookeeper(&zk_dir, zk_port)?;
        cluster.zookeeper = Some(child);
        wait_zookeeper(cluster.zookeeper.as_mut().expect("just set"), zk_port, &zk_log).await?;

        let tcp_ports: Vec<u16> = shard_ports.iter().map(|p| p[1]).collect();
        // All servers start at once (their start-ups overlap), then each is waited for.
        for (i, [http, tcp, interserver]) in shard_ports.iter().copied().enumerate() {
            let dir = root.join(format!("shard{}", i + 1));
            for sub in ["data", "tmp", "user_files", "format_schemas", "log"] {
                std::fs::create_dir_all(dir.join(sub))
                    .map_err(|e| StartError::Failed(format!("cannot create {}: {e}", dir.join(sub).display())))?;
            }
            let config = dir.join("config.xml");
            let xml = clickhouse_config(
                &dir,
                &cluster.name,
                i + 1,
                [http, tcp, interserver],
                zk_port,
                &tcp_ports,
            );
            std::fs::write(&config, xml)
                .map_err(|e| StartError::Failed(format!("cannot write {}: {e}", config.display())))?;
            let mut server = Server {
                dir,
                config,
                http_addr: format!("127.0.0.1:{http}"),
                child: None,
            };
            server.child = Some(spawn_clickhouse(&binary, &server)?);
            cluster.urls.push(format!("http://{}", server.http_addr));
            cluster.servers.push(server);
        }
        for server in &mut cluster.servers {
            wait_clickhouse(server).await?;
        }
        Ok(cluster)
    }

    /// A client of shard `shard`'s server (0-based). Validation is off: 18.16 has no
    /// RowBinaryWithNamesAndTypes.
    pub fn client(&self, shard: usize) -> clickhouse::Client {
        clickhouse::Client::default()
            .with_url(&self.urls[shard])
            .with_validation(false)
    }
}

impl Drop for ClickHouseCluster {
    fn drop(&mut self) {
        // SIGKILL: nothing in the temporary directory needs a clean shutdown, and a graceful
        // ClickHouse shutdown can take seconds. Servers first, so none logs ZooKeeper errors.
        for server in &mut self.servers {
            if let Some(mut child) = server.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if let Some(mut zk) = self.zookeeper.take() {
            let _ = zk.kill();
            let _ = zk.wait();
        }
    }
}

fn clickhouse_binary() -> Result<PathBuf, StartError> {
    if let Some(p) = std::env::var_os("BIMODAL_CLICKHOUSE_SERVER") {
        return Ok(p.into());
    }
    CLICKHOUSE_SERVERS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .ok_or_else(|| {
            StartError::Failed(format!(
                "no clickhouse-server binary (looked for {}): run tools/setup.sh",
                CLICKHOUSE_SERVERS.join(", ")
            ))
        })
}

/// `n` distinct free loopback ports. All are held until all are found, so none repeats; another
/// process may still take one before our servers bind it (then `start` tries again).
fn free_ports(n: usize) -> Result<Vec<u16>, StartError> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StartError::Failed(format!("cannot bind a loopback port: {e}")))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StartError::Failed(format!("cannot read a bound port: {e}")))
}

/// Makes `cmd`'s child die with us: if the test process is killed (or aborts) before `Drop` runs,
/// the kernel kills the servers instead of leaving them running.
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no memory of the parent.
    // The signal is sent when the spawning thread exits: the test's thread (or a runtime worker),
    // which outlives the cluster.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// Starts a standalone ZooKeeper on `port`, its files in `dir`; returns it and its log's path.
fn start_zookeeper(dir: &Path, port: u16) -> Result<(Child, PathBuf), StartError> {
    let failed = |what: &str, e: std::io::Error| StartError::Failed(format!("{what}: {e}"));
    std::fs::create_dir_all(dir.join("data")).map_err(|e| failed("cannot create ZooKeeper's directory", e))?;
    let cfg = dir.join("zoo.cfg");
    // 4lw `srvr` is how readiness is polled (3.5+ allows only `srvr` by default, said explicitly
    // here); the admin server would take port 8080.
    let zoo_cfg = format!(
        "tickTime=1000\n\
         dataDir={data}\n\
         clientPort={port}\n\
         clientPortAddress=127.0.0.1\n\
         maxClientCnxns=0\n\
         admin.enableServer=false\n\
         4lw.commands.whitelist=srvr,ruok\n",
        data = dir.join("data").display()
    );
    std::fs::write(&cfg, zoo_cfg).map_err(|e| failed("cannot write zoo.cfg", e))?;
    let log = dir.join("zookeeper.log");
    let out = std::fs::File::create(&log).map_err(|e| failed("cannot create zookeeper.log", e))?;
    let err = out.try_clone().map_err(|e| failed("cannot open zookeeper.log", e))?;
    let mut classpath = ZOOKEEPER_JAR.to_owned();
    if Path::new(SLF4J_SIMPLE_JAR).exists() {
        classpath.push(':');
        classpath.push_str(SLF4J_SIMPLE_JAR);
    }
    let mut cmd = Command::new("java");
    cmd.args([
        // A small, quick-starting JVM: the test's data is kilobytes.
        "-Xms32m",
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        // No fsync per transaction: the data dies with the test.
        "-Dzookeeper.forceSync=no",
        "-Dzookeeper.preAllocSize=4096",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        &classpath,
        "org.apache.zookeeper.server.ZooKeeperServerMain",
    ])
    .arg(&cfg)
    .current_dir(dir)
    .stdin(Stdio::null())
    .stdout(out)
    .stderr(err);
    die_with_parent(&mut cmd);
    let child = cmd.spawn().map_err(|e| {
        StartError::Failed(format!(
            "cannot run `java` for ZooKeeper ({e}): install the zookeeper package (tools/setup.sh)"
        ))
    })?;
    Ok((child, log))
}

/// Waits until ZooKeeper serves: `srvr` answers with its mode only once it does.
async fn wait_zookeeper(child: &mut Child, port: u16, log: &Path) -> Result<(), StartError> {
    let started = Instant::now();
    let addr = format!("127.0.0.1:{port}");
    loop {
        if let Some(reply) = exchange(&addr, b"srvr").await {
            if reply.contains("Mode: standalone") {
                return Ok(());
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            let output = std::fs::read_to_string(log).unwrap_or_default();
            let why = format!(
                "ZooKeeper exited while starting ({status}); {}:\n{}",
                log.display(),
                tail(&output, 30)
            );
            return Err(if output.contains("Address already in use") {
                StartError::PortTaken(why)
            } else {
                StartError::Failed(why)
            });
        }
        if started.elapsed() > START_LIMIT {
            let output = std::fs::read_to_string(log).unwrap_or_default();
            return Err(StartError::Failed(format!(
                "ZooKeeper did not answer `srvr` on {addr} within {START_LIMIT:?}; {}:\n{}",
                log.display(),
                tail(&output, 30)
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The config of shard `shard` (1-based): the managed ClickHouse's (storage/managed.rs) plus
/// what a cluster needs.
fn clickhouse_config(
    dir: &Path,
    cluster: &str,
    shard: usize,
    ports: [u16; 3],
    zk_port: u16,
    all_tcp: &[u16],
) -> String {
    let [http, tcp, interserver] = ports;
    let shards: String = all_tcp
        .iter()
        .map(|port| {
            format!(
                "\n      <shard><internal_replication>true</internal_replication>\
                 <replica><host>127.0.0.1</host><port>{port}</port></replica></shard>"
            )
        })
        .collect();
    let extra = format!(
        r#"  <!-- replicas fetch parts from each other here; the host must be an address they can reach -->
  <interserver_http_port>{interserver}</interserver_http_port>
  <interserver_http_host>127.0.0.1</interserver_http_host>
  <zookeeper>
    <node><host>127.0.0.1</host><port>{zk_port}</port></node>
    <session_timeout_ms>10000</session_timeout_ms>
  </zookeeper>
  <macros><shard>{shard}</shard><replica>r{shard}</replica><cluster>{cluster}</cluster></macros>
  <remote_servers>
    <{cluster}>{shards}
    </{cluster}>
  </remote_servers>
  <distributed_ddl><path>/clickhouse/task_queue/ddl</path></distributed_ddl>"#
    );
    bimodal_server::storage::managed::config_xml(dir, http, tcp, &extra)
}

fn spawn_clickhouse(binary: &Path, server: &Server) -> Result<Child, StartError> {
    let failed = |e: std::io::Error| {
        StartError::Failed(format!(
            "cannot start {} for {}: {e}",
            binary.display(),
            server.dir.display()
        ))
    };
    let stdout_path = server.dir.join("log/stdout.log");
    let out = std::fs::File::create(&stdout_path).map_err(failed)?;
    let err = out.try_clone().map_err(failed)?;
    let mut cmd = Command::new(binary);
    if binary.file_name().is_some_and(|n| n == "clickhouse") {
        cmd.arg("server");
    }
    cmd.arg(format!("--config-file={}", server.config.display()))
        .current_dir(&server.dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    die_with_parent(&mut cmd);
    cmd.spawn().map_err(failed)
}

/// Waits until `server` answers `SELECT 1` over HTTP and then reads ZooKeeper (its session is
/// set up in the background: DDL and Replicated tables need it).
async fn wait_clickhouse(server: &mut Server) -> Result<(), StartError> {
    let started = Instant::now();
    let select_1 = "/?query=SELECT%201";
    let zookeeper = "/?query=SELECT%20count()%20FROM%20system.zookeeper%20WHERE%20path%20%3D%20'%2F'";
    let mut answered = false;
    let mut last = String::new();
    loop {
        let probe = if answered { zookeeper } else { select_1 };
        // An answer counts only from our child: another server may have taken the port first.
        let ours = server.child.as_ref().is_some_and(|c| {
            let port = server.http_addr.rsplit(':').next().and_then(|p| p.parse().ok());
            port.is_some_and(|p| listening_ports(c.id()).contains(&p))
        });
        match http_get(&server.http_addr, probe).await {
            Some((200, body)) if !answered && ours && body.trim() == "1" => answered = true,
            Some((200, body)) if answered && body.trim().parse::<u64>().is_ok() => return Ok(()),
            Some((status, body)) => last = format!("HTTP {status}: {}", body.trim()),
            None => {}
        }
        let child = server.child.as_mut().expect("a started server has a child");
        if let Ok(Some(status)) = child.try_wait() {
            let log = server_log(&server.dir);
            let why = format!(
                "clickhouse-server ({}) exited while starting ({status}); its logs:\n{log}",
                server.config.display()
            );
            return Err(if log.contains("Address already in use") {
                StartError::PortTaken(why)
            } else {
                StartError::Failed(why)
            });
        }
        if started.elapsed() > START_LIMIT {
            let stage = if answered { "reach ZooKeeper" } else { "answer SELECT 1" };
            return Err(StartError::Failed(format!(
                "clickhouse-server on {} ({}) did not {stage} within {START_LIMIT:?} (last reply: {last}); \
                 its logs:\n{}",
                server.http_addr,
                server.config.display(),
                server_log(&server.dir)
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The ends of a server's error log and of its stdout/stderr.
fn server_log(dir: &Path) -> String {
    ["log/clickhouse-server.err.log", "log/stdout.log"]
        .iter()
        .map(|name| {
            let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            format!("--- {}:\n{}", dir.join(name).display(), tail(&text, 30))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Sends `request` on a new connection and reads until the peer closes it (as ZooKeeper's
/// four-letter words and HTTP/1.0 do); `None` on any failure or after 2 s.
async fn exchange(addr: &str, request: &[u8]) -> Option<String> {
    let io = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream.write_all(request).await.ok()?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await.ok()?;
        Some(String::from_utf8_lossy(&reply).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(2), io).await.ok().flatten()
}

/// GET `target` over HTTP/1.0; the status and the body.
async fn http_get(addr: &str, target: &str) -> Option<(u16, String)> {
    let reply = exchange(
        addr,
        format!("GET {target} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes(),
    )
    .await?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}
