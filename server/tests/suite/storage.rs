//! Storage built for a fleet, against real ClickHouse servers: several servers on one
//! ClickHouse store each batch once and answer alike, a full write buffer answers "retry" and
//! loses nothing, a half-written batch is completed without duplicates, old partitions expire
//! where ClickHouse has no TTL, and a database of schema v1 is carried over.

use std::path::Path;
use std::time::{Duration, Instant};

use bimodal_proto::v1::{self, ack::Status};
use bimodal_server::selector::Selector;
use bimodal_server::storage::managed::ManagedClickHouse;
use bimodal_server::storage::writer::WriterConfig;
use bimodal_server::storage::{Dialect, NodeSet, Store, StoreConfig};
use bimodal_server::Config;

use super::clickhouse_cluster::ClickHouseCluster;
use super::common::{log_if_asked, refusals, selector, test_config, TestServer};
use super::wire::{self, exchange, exchange_with, req};
use crate::fixture;

/// A ClickHouse for several servers, in its own temporary directory.
pub(super) struct SharedClickHouse {
    clickhouse: Option<ManagedClickHouse>,
    dir: tempfile::TempDir,
}

impl SharedClickHouse {
    pub(super) async fn start() -> SharedClickHouse {
        log_if_asked();
        let dir = tempfile::tempdir().unwrap();
        let clickhouse = ManagedClickHouse::start(&dir.path().join("clickhouse"))
            .await
            .expect("managed ClickHouse starts");
        SharedClickHouse {
            clickhouse: Some(clickhouse),
            dir,
        }
    }

    pub(super) fn url(&self) -> String {
        self.clickhouse.as_ref().unwrap().url.clone()
    }

    /// Settings of a server using this ClickHouse, with its own data directory.
    pub(super) fn server_config(&self, name: &str) -> Config {
        let data = self.dir.path().join(name);
        Config {
            clickhouse_url: Some(self.url()),
            clickhouse_database: "bimodal".into(),
            ..test_config("127.0.0.1:0".parse().unwrap(), &data)
        }
    }

    async fn store(&self) -> Store {
        Store::open(&StoreConfig {
            url: self.url(),
            database: "bimodal".into(),
            user: None,
            password: None,
            retention_days: 30,
            cluster: None,
            cache_entries: 1024,
        })
        .await
        .expect("store opens")
    }

    /// Runs one statement in the `bimodal` database.
    async fn execute(&self, sql: &str) {
        clickhouse::Client::default()
            .with_url(self.url())
            .with_database("bimodal")
            .query(sql)
            .execute()
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn count(&self, sql: &str) -> u64 {
        self.try_count(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    async fn try_count(&self, sql: &str) -> Result<u64, clickhouse::error::Error> {
        #[derive(clickhouse::Row, serde::Deserialize)]
        struct N {
            n: u64,
        }
        Ok(clickhouse::Client::default()
            .with_url(self.url())
            .with_database("bimodal")
            .with_validation(false)
            .query(sql)
            .fetch_one::<N>()
            .await?
            .n)
    }

    /// The pid of the clickhouse-server this test started.
    pub(super) fn pid(&self) -> i32 {
        let pid = self.clickhouse.as_ref().and_then(ManagedClickHouse::pid);
        pid.expect("the test's clickhouse-server runs") as i32
    }

    pub(super) async fn stop(mut self) {
        if let Some(c) = self.clickhouse.take() {
            c.shutdown().await;
        }
    }
}

/// The folded flame graph of every `cluster-*` node.
async fn fleet_flame(server: &TestServer) -> String {
    let path = format!(
        "/api/v1/flamegraph?event=page_fault&{}&format=folded",
        selector(r#"{node=~"cluster-.*"}"#)
    );
    let (status, body) = server.get(&path).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The names of the nodes a server lists.
async fn node_names(s: &TestServer) -> Vec<String> {
    let (status, body) = s.get("/api/v1/nodes").await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let mut names: Vec<String> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// The sum of a folded profile's values.
fn folded_total(folded: &str) -> u64 {
    folded
        .lines()
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum()
}

async fn flame(server: &TestServer, node: &str) -> String {
    let (status, body) = server
        .get(&format!(
            "/api/v1/flamegraph?event=page_fault&{}&format=folded",
            selector(&format!(r#"{{node="{node}"}}"#))
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Two servers starting together on one ClickHouse apply the schema once; the same batch sent
/// to both at once is stored once (the other answers duplicate, or retry and then duplicate);
/// both answer the same flame graphs and node lists; symbols uploaded to one name frames on the
/// other; and a second, different file for a stored build id is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_clickhouse_store_each_batch_once_and_answer_alike() {
    let ch = SharedClickHouse::start().await;
    let (a, b) = tokio::join!(
        TestServer::with_config(ch.server_config("a"), None),
        TestServer::with_config(ch.server_config("b"), None)
    );
    assert_eq!(
        ch.count("SELECT count() AS n FROM schema_migrations WHERE version = 7")
            .await,
        1,
        "the schema is applied by one server"
    );

    // The same batches to both servers at once, five times over.
    for round in 0..5u8 {
        let id = [round + 1; 16];
        let batch = wire::batch(id, false, "shared_leaf", 2);
        let (to_a, to_b) = tokio::join!(
            exchange(&a, vec![wire::hello("shared-node"), req(batch.clone())]),
            exchange(&b, vec![wire::hello("shared-node"), req(batch.clone())])
        );
        let mut statuses = [to_a.unwrap()[0].clone(), to_b.unwrap()[0].clone()];
        // A server told to retry (the other holds the batch) gets a duplicate when it resends.
        for (ack, server) in statuses.iter_mut().zip([&a, &b]) {
            let deadline = Instant::now() + Duration::from_secs(60);
            while Status::try_from(ack.status).unwrap() == Status::Retry {
                assert!(Instant::now() < deadline, "still told to retry: {ack:?}");
                tokio::time::sleep(Duration::from_millis(u64::from(ack.retry_after_millis))).await;
                let mut resent = batch.clone();
                resent.resend = true;
                *ack = exchange(server, vec![wire::hello("shared-node"), req(resent)])
                    .await
                    .unwrap()[0]
                    .clone();
            }
        }
        let mut got: Vec<Status> = statuses.iter().map(|a| Status::try_from(a.status).unwrap()).collect();
        got.sort_by_key(|s| *s as i32);
        assert_eq!(got, [Status::Stored, Status::Duplicate], "round {round}: {statuses:?}");
    }
    let from_a = flame(&a, "shared-node").await;
    assert_eq!(folded_total(&from_a), 5 * 200, "each batch once: {from_a}");
    assert_eq!(flame(&b, "shared-node").await, from_a);

    // Another node through b only; both list both nodes alike.
    let acks = exchange(
        &b,
        vec![wire::hello("b-only"), req(wire::batch([77; 16], false, "b_leaf", 1))],
    )
    .await
    .unwrap();
    assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Stored);
    assert_eq!(node_names(&a).await, ["b-only", "shared-node"]);
    assert_eq!(node_names(&a).await, node_names(&b).await);

    // A frame sent by build id and address only, and a debug file for its image uploaded after
    // it to a, name it on b. (A debug file for an image nobody sent frames of, with no
    // executable stored, is refused: nobody names frames before they exist.)
    let build = fixture::stripped_workload();
    let early = upload_file(&a, &build.debug_file);
    assert!(!early.status.success(), "a debug file for an unknown image is stored");
    let stderr = String::from_utf8_lossy(&early.stderr);
    assert!(stderr.contains("is not known here"), "{stderr}");
    let build_id = elf_build_id(&build.binary);
    let address = symbol_address(&build.unstripped, "touch_fresh_pages");
    let mut by_address = wire::batch([88; 16], false, "", 4);
    by_address.frames[0] = v1::Frame {
        kind: v1::FrameKind::User as i32,
        module: build.binary.to_string_lossy().into_owned(),
        build_id,
        elf_address: address + 4,
        file_offset: address + 4,
        ..Default::default()
    };
    let acks = exchange(&a, vec![wire::hello("named-node"), req(by_address)])
        .await
        .unwrap();
    assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Stored);
    let upload = upload_file(&a, &build.debug_file);
    assert!(upload.status.success(), "{}", String::from_utf8_lossy(&upload.stderr));
    let named = flame(&b, "named-node").await;
    assert!(
        named.contains(";touch_fresh_pages 400"),
        "named from a's upload: {named}"
    );

    // Three nodes now. Every node reads the fleet rollups, two of three the rollups minus the
    // third, one of three its own rows: the three ways agree with each node's own graph.
    let each: u64 = [
        flame(&a, "shared-node").await,
        flame(&a, "b-only").await,
        flame(&a, "named-node").await,
    ]
    .iter()
    .map(|f| folded_total(f))
    .sum();
    let read = |selector_text: &'static str| {
        let a = &a;
        async move {
            let (status, body) = a
                .get(&format!(
                    "/api/v1/flamegraph?event=page_fault&{}",
                    selector(selector_text)
                ))
                .await;
            assert_eq!(status, 200, "{body}");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            (v["reach"].as_str().unwrap().to_owned(), v["total"].as_u64().unwrap())
        }
    };
    assert_eq!(read("{}").await, ("fleet".to_owned(), each));
    let (reach, most) = read(r#"{node!="b-only"}"#).await;
    assert_eq!(reach, "fleet-minus");
    assert_eq!(most, each - folded_total(&flame(&a, "b-only").await));
    let (reach, one) = read(r#"{node="b-only"}"#).await;
    assert_eq!(reach, "matching");
    assert_eq!(one, folded_total(&flame(&a, "b-only").await));
    assert_eq!(read(r#"{node="nowhere"}"#).await, ("nothing".to_owned(), 0));

    // A different file claiming a stored build id and kind is refused; the same file again is not.
    let again = upload_file(&b, &build.debug_file);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    let dir = tempfile::tempdir().unwrap();
    let twins: Vec<_> = ["one", "two"]
        .iter()
        .map(|name| {
            let src = dir.path().join(format!("{name}.c"));
            std::fs::write(
                &src,
                format!("int {name}(void) {{ return 1; }}\nint main(void) {{ return {name}(); }}\n"),
            )
            .unwrap();
            let out = dir.path().join(name);
            let cc = std::process::Command::new("cc")
                .args(["-g", "-o"])
                .arg(&out)
                .arg(&src)
                .arg("-Wl,--build-id=0x0123456789abcdef0123456789abcdef01234567")
                .status()
                .unwrap();
            assert!(cc.success());
            out
        })
        .collect();
    assert!(upload_file(&a, &twins[0]).status.success());
    let refused = upload_file(&b, &twins[1]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("never replaced"), "{stderr}");

    a.stop().await;
    b.stop().await;
    ch.stop().await;
}

/// A shared library with exports, built with `build_id`: (stripped library, its debug file,
/// the debug file with the export `lib_work` renamed, the debug file with the local function
/// `lib_hidden` renamed).
fn library_with_debug_files(dir: &Path, build_id: &str) -> [std::path::PathBuf; 4] {
    let run = |cmd: &mut std::process::Command| {
        let out = cmd.output().expect("cc and binutils");
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let source = dir.join("work.c");
    std::fs::write(
        &source,
        "static __attribute__((noipa)) int lib_hidden(int x) { return x * 7; }\n\
         __attribute__((noipa)) int lib_work(int x) { return lib_hidden(x) + 1; }\n",
    )
    .unwrap();
    let library = dir.join(format!("libwork-{build_id}.so"));
    run(std::process::Command::new("cc")
        .args(["-O1", "-g", "-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .arg(format!("-Wl,--build-id=0x{build_id}")));
    let path = |name: &str| dir.join(format!("{build_id}-{name}"));
    let [stripped, debug, renamed_export, renamed_local] =
        ["stripped.so", "real.debug", "export.debug", "local.debug"].map(path);
    run(std::process::Command::new("strip")
        .arg("--strip-all")
        .arg("-o")
        .arg(&stripped)
        .arg(&library));
    run(std::process::Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&library)
        .arg(&debug));
    for (from, to, out) in [
        ("lib_work", "evil_work", &renamed_export),
        ("lib_hidden", "other_name", &renamed_local),
    ] {
        run(std::process::Command::new("objcopy")
            .arg(format!("--redefine-sym={from}={to}"))
            .arg(&debug)
            .arg(out));
    }
    [stripped, debug, renamed_export, renamed_local]
}

/// A debug file takes over naming from its build id's executable, so it must agree with it: one
/// that renames an export is refused. Two different debug files for one build id uploaded to two
/// servers at once: one is stored whole, the other refused, never a mix of the two, in every
/// round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debug_file_must_agree_with_its_executable_and_racing_uploads_store_one_file() {
    let ch = SharedClickHouse::start().await;
    let (a, b) = tokio::join!(
        TestServer::with_config(ch.server_config("a"), None),
        TestServer::with_config(ch.server_config("b"), None)
    );
    let dir = tempfile::tempdir().unwrap();
    for round in 0..3 {
        let build_id = format!("{round:02}{}", "5a".repeat(19));
        let [stripped, debug, renamed_export, renamed_local] = library_with_debug_files(dir.path(), &build_id);
        let stored = upload_file(&a, &stripped);
        assert!(stored.status.success(), "{}", String::from_utf8_lossy(&stored.stderr));

        let forged = upload_file(&b, &renamed_export);
        assert!(!forged.status.success(), "a debug file renaming an export is stored");
        let stderr = String::from_utf8_lossy(&forged.stderr);
        assert!(
            stderr.contains("contradicts") && stderr.contains("`lib_work`") && stderr.contains("`evil_work`"),
            "{stderr}"
        );

        // Both agree with the library; they differ in a name the library does not carry.
        let (to_a, to_b) = std::thread::scope(|s| {
            let to_a = s.spawn(|| upload_file(&a, &debug));
            let to_b = s.spawn(|| upload_file(&b, &renamed_local));
            (to_a.join().unwrap(), to_b.join().unwrap())
        });
        let won = [&to_a, &to_b].iter().filter(|o| o.status.success()).count();
        assert_eq!(
            won,
            1,
            "round {round}: {} / {}",
            String::from_utf8_lossy(&to_a.stderr),
            String::from_utf8_lossy(&to_b.stderr)
        );
        let lost = if to_a.status.success() { &to_b } else { &to_a };
        let stderr = String::from_utf8_lossy(&lost.stderr);
        assert!(stderr.contains("never replaced"), "{stderr}");

        let count = |sql: String| {
            let ch = &ch;
            async move { ch.count(&sql).await }
        };
        let files = count(format!(
            "SELECT count() AS n FROM debuginfo WHERE build_id = '{build_id}' AND kind = 2"
        ))
        .await;
        assert_eq!(files, 1, "round {round}");
        let names = |name: &'static str| {
            count(format!(
                "SELECT count() AS n FROM debuginfo_symbols WHERE build_id = '{build_id}' AND kind = 2 AND name = '{name}'"
            ))
        };
        let (hidden, other) = (names("lib_hidden").await, names("other_name").await);
        let expected = if to_a.status.success() { (1, 0) } else { (0, 1) };
        assert_eq!(
            (hidden, other),
            expected,
            "round {round}: the stored symbols are the winner's only"
        );
    }
    let (_, metrics) = b.get("/metrics").await;
    assert!(
        metrics.contains(r#"bimodal_debuginfo_rejected_uploads_total{reason="disagrees_with_executable"}"#),
        "{metrics}"
    );
    a.stop().await;
    b.stop().await;
    ch.stop().await;
}

fn upload_file(server: &TestServer, file: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_bimodal-server"))
        .args(["debuginfo", "upload"])
        .arg(file)
        .args(["--server-url", &server.url()])
        .output()
        .expect("run bimodal-server debuginfo upload")
}

fn elf_build_id(path: &Path) -> Vec<u8> {
    bimodal_proto::inspect_debuginfo(&std::fs::read(path).unwrap())
        .unwrap()
        .build_id
        .expect("a build id")
}

/// A function's ELF address, from `nm`.
fn symbol_address(binary: &Path, name: &str) -> u64 {
    let out = std::process::Command::new("nm")
        .arg(binary)
        .output()
        .expect("nm (binutils)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let mut parts = l.split_whitespace();
            let addr = parts.next()?;
            let _kind = parts.next()?;
            (parts.next()? == name).then(|| u64::from_str_radix(addr, 16).ok())?
        })
        .unwrap_or_else(|| panic!("{name} in {}", binary.display()))
}

/// With ClickHouse frozen (SIGSTOP) and a write buffer of a few rows, batches are answered
/// "retry" with a delay instead of piling up, and `/healthz` says unhealthy instead of hanging;
/// once ClickHouse runs again, resent batches are all stored, each once, and the server is
/// healthy again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_write_buffer_answers_retry_and_nothing_acknowledged_is_lost() {
    let ch = SharedClickHouse::start().await;
    let server = TestServer::with_config(
        Config {
            writer: WriterConfig {
                flush_interval: Duration::from_millis(100),
                max_buffered_rows: 12,
                wait_for_room: Duration::from_millis(300),
                retry_for: Duration::from_secs(2),
                attempt_timeout: Duration::from_secs(1),
                ..WriterConfig::default()
            },
            ..ch.server_config("s")
        },
        None,
    )
    .await;
    let refused = |cause| refusals(&server, "bimodal_ingest_rejected_batches_total", cause);
    let before = refused("write_buffer").await + refused("storage").await;
    let pid = ch.pid();
    freeze(pid).await;
    let asked = Instant::now();
    let (status, body) = server.get("/healthz").await;
    assert_eq!(status, 503, "{body}");
    assert!(
        asked.elapsed() < bimodal_server::storage::PING_TIMEOUT + Duration::from_secs(3),
        "the health check waited {:?}",
        asked.elapsed()
    );
    let batches: Vec<v1::Batch> = (0..12u8)
        .map(|i| wire::batch([100 + i; 16], false, "buffered_leaf", 1))
        .collect();
    let mut messages = vec![wire::hello("pressure-node")];
    messages.extend(batches.iter().cloned().map(req));
    let started = Instant::now();
    let acks = exchange(&server, messages).await.unwrap();
    // SAFETY: kill(2) with SIGCONT on the ClickHouse child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0, "SIGCONT {pid}");
    assert_eq!(acks.len(), batches.len());
    for ack in &acks {
        assert_eq!(Status::try_from(ack.status).unwrap(), Status::Retry, "{ack:?}");
        assert!(ack.retry_after_millis >= 1000, "{ack:?}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "answered while ClickHouse is frozen"
    );
    // Counted by why: no room among the rows buffered, or a flush that failed (other tests
    // count alongside).
    let counted = refused("write_buffer").await + refused("storage").await - before;
    assert!(counted >= 12.0, "{counted} refusals counted");

    // The agent resends after the delay: every batch stored once.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut pending = batches;
    while !pending.is_empty() {
        assert!(Instant::now() < deadline, "{} batches never stored", pending.len());
        let mut messages = vec![wire::hello("pressure-node")];
        messages.extend(pending.iter().cloned().map(|mut b| {
            b.resend = true;
            req(b)
        }));
        let acks = exchange(&server, messages).await.unwrap();
        let done: Vec<Vec<u8>> = acks
            .iter()
            .filter(|a| matches!(Status::try_from(a.status), Ok(Status::Stored | Status::Duplicate)))
            .map(|a| a.batch_id.clone())
            .collect();
        pending.retain(|b| !done.contains(&b.batch_id));
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    assert_eq!(folded_total(&flame(&server, "pressure-node").await), 12 * 100);
    assert_eq!(server.get("/healthz").await.0, 200);
    server.stop().await;
    ch.stop().await;
}

/// Stops process `pid` (SIGSTOP) and waits until every one of its threads has stopped. The
/// kernel wakes one thread to take a stop signal, and it stops the others only once it runs: on
/// a busy machine the rest of the process goes on serving for a while (CI saw ClickHouse answer
/// a query after kill(2) had returned).
pub(super) async fn freeze(pid: i32) {
    // SAFETY: kill(2) with SIGSTOP on a child process the test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0, "SIGSTOP {pid}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !process_stopped(pid) {
        assert!(Instant::now() < deadline, "{pid} did not stop");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether every thread of `pid` is stopped (state `T` in `/proc/PID/task/*/stat`).
fn process_stopped(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(Result::ok).all(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|stat| Some(stat.rsplit_once(") ")?.1.starts_with('T')))
            .unwrap_or(true)
    })
}

/// A batch whose samples reached ClickHouse but whose counters and ledger entry did not (a
/// server killed mid-flush) is completed when resent: the counters are written, the samples
/// are not written again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_written_batch_is_completed_without_duplicates() {
    let ch = SharedClickHouse::start().await;
    let server = TestServer::with_config(ch.server_config("s"), None).await;
    let id = [42u8; 16];
    let mut batch = wire::batch(id, false, "half_leaf", 5);
    batch.counters = vec![v1::Counter {
        name: "pgfault".into(),
        value: 1234,
    }];
    let acks = exchange(&server, vec![wire::hello("half-node"), req(batch.clone())])
        .await
        .unwrap();
    assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Stored);

    // Undo what a crash after the samples' INSERT would not have done (the batch is stored
    // under its id within its node).
    let hex = bimodal_profile::hex(&bimodal_server::ingest::rows::stored_id("half-node", &id));
    for sql in [
        format!("ALTER TABLE ledger DELETE WHERE batch_id = unhex('{hex}')"),
        format!("ALTER TABLE batch_progress DELETE WHERE batch_id = unhex('{hex}') AND part = 'counters'"),
        "ALTER TABLE counters DELETE WHERE node = 'half-node'".to_owned(),
        "ALTER TABLE counter_reports DELETE WHERE node = 'half-node'".to_owned(),
    ] {
        ch.execute(&sql).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while ch
        .count("SELECT count() AS n FROM system.mutations WHERE is_done = 0")
        .await
        > 0
    {
        assert!(Instant::now() < deadline, "mutations never finished");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        ch.count("SELECT count() AS n FROM counters WHERE node = 'half-node'")
            .await,
        0
    );

    batch.resend = true;
    let acks = exchange(&server, vec![wire::hello("half-node"), req(batch)])
        .await
        .unwrap();
    assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Stored);
    assert_eq!(folded_total(&flame(&server, "half-node").await), 500, "samples once");
    assert_eq!(
        ch.count("SELECT sum(value) AS n FROM counter_reports WHERE node = 'half-node' AND name = 'pgfault'")
            .await,
        1234,
        "counters written now, once"
    );
    server.stop().await;
    ch.stop().await;
}

/// A node counter that counted zero reads as zero, before and after ClickHouse merges its parts
/// (issue 48): a SummingMergeTree table deletes a row whose summed columns are all zero, and
/// `counters` sums `value` alone, so a zero became "not measured". ClickHouse 18.16, here, keeps
/// such a row; modern ones drop it as they insert and merge, which tests/modern_sql.py shows in
/// chdb for the older tables and the new ones alike. Read per interval (`/api/v1/counters`'s
/// read) and summed per node over seconds and over whole 10-minute buckets (compare's reads of
/// the two rollups).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_that_counted_zero_stays_a_zero_after_merges() {
    let ch = SharedClickHouse::start().await;
    let server = TestServer::with_config(ch.server_config("s"), None).await;
    let from = (wire::now_nanos() / 1_000_000_000) as u32 - 60;
    // Two batches a node over the same interval, each in an insert of its own (the writer
    // flushes every 100 ms here): two parts to merge, rows of one key to sum. (ClickHouse 18.16
    // leaves a partition of one part as it is, and keeps a row of zeros nothing was summed into.)
    let interval = wire::batch([0; 16], false, "leaf", 1);
    for i in 0..2u8 {
        for (n, (node, value)) in [("zero-node", 0u64), ("some-node", 7)].into_iter().enumerate() {
            let mut batch = wire::batch([10 * n as u8 + i + 1; 16], false, "leaf", 1);
            batch.start_unix_nanos = interval.start_unix_nanos;
            batch.end_unix_nanos = interval.end_unix_nanos;
            batch.counters = vec![v1::Counter {
                name: "pgmajfault".into(),
                value,
            }];
            let acks = exchange(&server, vec![wire::hello(node), req(batch)]).await.unwrap();
            assert!(acks.iter().all(|a| a.status == Status::Stored as i32), "{acks:?}");
        }
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    server.stop().await;
    for table in [
        "counters",
        "counters_1m",
        "counters_10m",
        "counter_reports",
        "counter_reports_1m",
        "counter_reports_10m",
    ] {
        ch.execute(&format!("OPTIMIZE TABLE {table} FINAL")).await;
    }
    let store = ch.store().await;
    let to = from + 120;
    let zero = ("zero-node".to_owned(), "pgmajfault".to_owned(), 0);
    let some = ("some-node".to_owned(), "pgmajfault".to_owned(), 14);
    let nodes = ["some-node".to_owned(), "zero-node".to_owned()];
    let faults = |rows: Vec<(String, String, u64)>| -> Vec<(String, String, u64)> {
        rows.into_iter().filter(|r| r.1 == "pgmajfault").collect()
    };
    // Seconds: whole minutes from the per-minute rollup.
    assert_eq!(
        faults(store.node_counters(NodeSet::Named(&nodes), from, to).await.unwrap()),
        [some.clone(), zero.clone()]
    );
    // Whole 10-minute buckets from the 10-minute rollup; the nodes as a selector matches them,
    // read as a subquery of `nodes` (what a window of any size reads).
    let (hour_from, hour_to) = (from / 600 * 600 - 1800, to.div_ceil(600) * 600);
    let both = Selector::parse(r#"{node=~"(some|zero)-node"}"#).unwrap();
    assert_eq!(
        faults(
            store
                .node_counters(NodeSet::Selected(&both), hour_from, hour_to)
                .await
                .unwrap()
        ),
        [some, zero]
    );
    let neither = Selector::parse(r#"{node="another-node"}"#).unwrap();
    assert_eq!(
        faults(
            store
                .node_counters(NodeSet::Selected(&neither), hour_from, hour_to)
                .await
                .unwrap()
        ),
        []
    );
    // Per interval.
    let intervals = store
        .counters("zero-node", &["pgmajfault".to_owned()], from, to)
        .await
        .unwrap();
    assert!(
        !intervals.is_empty() && intervals.iter().all(|(_, name, v)| name == "pgmajfault" && *v == 0),
        "{intervals:?}"
    );
    ch.stop().await;
}

/// A flame graph cut at `max_stacks` states exactly what it left out: how many stacks, their
/// samples and value, and the total with them (issue 49: over a million stacks the default
/// answer said the kept stacks' total and "1 stack" left out, where 900,000 were).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_flame_graph_states_exactly_what_it_left_out() {
    let server = TestServer::start().await;
    let mut batch = super::hostile::wide_batch([61; 16], "cut_", 50);
    // Stack i has i + 1 faults: the 20 kept are the largest, 31..=50.
    for (i, s) in batch.samples.iter_mut().enumerate() {
        s.count = i as u64 + 1;
        s.value = 100 * s.count;
    }
    let acks = wire::exchange_with(server.url(), vec![wire::hello("cut-node"), wire::req(batch)])
        .await
        .unwrap();
    assert_eq!(acks[0].status, v1::ack::Status::Stored as i32, "{acks:?}");
    let path = format!(
        "/api/v1/flamegraph?event=page_fault&{}&max_stacks=20&from={}&to={}",
        selector(r#"{node="cut-node"}"#),
        super::common::unix_now() - 600,
        super::common::unix_now() + 60
    );
    let (status, body) = server.get(&path).await;
    assert_eq!(status, 200, "{body}");
    let graph: serde_json::Value = serde_json::from_str(&body).unwrap();
    let all: u64 = (1..=50).sum();
    let left_out: u64 = (1..=30).sum();
    assert_eq!(graph["total"], all * 100, "{body}");
    assert_eq!(graph["truncated_stacks"], 30, "{body}");
    assert_eq!(graph["truncated_samples"], left_out, "{body}");
    assert_eq!(graph["truncated_value"], left_out * 100, "{body}");
    assert_eq!(graph["root"]["value"], (all - left_out) * 100, "{body}");
    assert_eq!(graph["sources"][0]["samples"], all, "{body}");
    server.stop().await;
}

/// A message the server cannot decode (invalid UTF-8, or longer than the server reads) ends
/// the stream with INVALID_ARGUMENT and the trailer naming its position among the stream's
/// batches, so the agent can drop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_batch_is_named_by_its_position() {
    let server = TestServer::start().await;
    let good = wire::batch([5; 16], false, "fine", 1);
    let mut bad = prost::Message::encode_to_vec(&req(wire::batch([6; 16], false, "XXXXbroken", 1)));
    // Turn the function name's bytes into invalid UTF-8.
    let at = bad.windows(4).position(|w| w == b"XXXX").unwrap();
    bad[at..at + 4].copy_from_slice(&[0xff, 0xfe, 0xff, 0xfe]);
    let messages = vec![
        prost::Message::encode_to_vec(&wire::hello("decode-node")),
        prost::Message::encode_to_vec(&req(good)),
        bad,
    ];
    let too_long = vec![0u8; bimodal_server::MAX_MESSAGE_BYTES + 1];
    let messages_too_long = vec![messages[0].clone(), messages[1].clone(), too_long];
    for (messages, why) in [(messages, "not utf-8"), (messages_too_long, "more than")] {
        let status = raw::stream(&server.url(), messages).await;
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().to_lowercase().contains(why), "{status:?}");
        assert_eq!(
            status
                .metadata()
                .get("bimodal-batch-index")
                .and_then(|v| v.to_str().ok()),
            Some("1"),
            "{status:?}"
        );
    }
    server.stop().await;
}

/// A gRPC client that sends already-encoded messages, to send what a real client never would.
mod raw {
    use bimodal_proto::v1;
    use bytes::{Buf, BufMut};
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

    #[derive(Default)]
    struct RawCodec;
    struct RawEncoder;
    struct AckDecoder;

    impl Encoder for RawEncoder {
        type Item = Vec<u8>;
        type Error = tonic::Status;
        fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
            dst.put_slice(&item);
            Ok(())
        }
    }

    impl Decoder for AckDecoder {
        type Item = v1::IngestResponse;
        type Error = tonic::Status;
        fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<v1::IngestResponse>, tonic::Status> {
            let bytes = src.copy_to_bytes(src.remaining());
            prost::Message::decode(bytes)
                .map(Some)
                .map_err(|e| tonic::Status::internal(e.to_string()))
        }
    }

    impl Codec for RawCodec {
        type Encode = Vec<u8>;
        type Decode = v1::IngestResponse;
        type Encoder = RawEncoder;
        type Decoder = AckDecoder;
        fn encoder(&mut self) -> RawEncoder {
            RawEncoder
        }
        fn decoder(&mut self) -> AckDecoder {
            AckDecoder
        }
    }

    /// Streams `messages` to Ingest/Stream and returns the status the stream ends with.
    pub async fn stream(url: &str, messages: Vec<Vec<u8>>) -> tonic::Status {
        let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.unwrap();
        let path = tonic::codegen::http::uri::PathAndQuery::from_static("/bimodal.v1.Ingest/Stream");
        let request = tonic::Request::new(tokio_stream::iter(messages));
        let mut acks = match grpc.streaming(request, path, RawCodec).await {
            Ok(r) => r.into_inner(),
            Err(status) => return status,
        };
        loop {
            match acks.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => return tonic::Status::ok("the stream ended without an error"),
                Err(status) => return status,
            }
        }
    }
}

/// Where ClickHouse has no TTL (18.16), partitions past retention are dropped by the server;
/// younger ones stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_partitions_are_dropped_where_there_is_no_ttl() {
    let ch = SharedClickHouse::start().await;
    let store = ch.store().await;
    if store.dialect.modern {
        return; // TTL clauses expire rows there.
    }
    for days_ago in [40, 45, 2] {
        ch.execute(&format!(
            "INSERT INTO samples SELECT now() - {days_ago} * 86400, 'old-node', 'cpu', 'cpu-clock', 1, 2, 3, 4"
        ))
        .await;
        ch.execute(&format!(
            "INSERT INTO stacks SELECT {days_ago}, [1, 2], today() - {days_ago}"
        ))
        .await;
    }
    let dropped = store.expire_partitions().await.unwrap();
    assert!(dropped >= 3, "dropped {dropped}");
    assert_eq!(
        ch.count("SELECT count() AS n FROM samples").await,
        1,
        "the young row stays"
    );
    assert_eq!(ch.count("SELECT count() AS n FROM stacks").await, 1);
    assert_eq!(store.expire_partitions().await.unwrap(), 0, "nothing left to drop");
    ch.stop().await;
}

/// The debug-info store keeps a build id's symbols while a kept frame is of that build id, and
/// deletes them with its digests and disputes (on every ClickHouse version) once none is and the
/// upload is older than the grace; a recent upload whose frames have not arrived yet stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_info_no_kept_frame_refers_to_is_deleted() {
    use bimodal_server::debuginfo::symtab::{Function, SymbolTable};
    let ch = SharedClickHouse::start().await;
    let store = ch.store().await;
    let (used, unused) = ("aa".repeat(20), "bb".repeat(20));
    let table = SymbolTable::from_parts(
        vec![
            Function {
                address: 0x1000,
                size: 16,
                name: "first".into(),
            },
            Function {
                address: 0x1010,
                size: 16,
                name: "second".into(),
            },
        ],
        Vec::new(),
    );
    let digests = bimodal_proto::NamingDigests {
        exported: [3; 32],
        local: None,
    };
    for (build_id, seed) in [(&used, 1u8), (&unused, 2)] {
        store
            .store_debuginfo(build_id, 2, [seed; 32], 4096, "x.debug", &table, &digests)
            .await
            .unwrap();
        store
            .record_dispute(build_id, "127.0.0.1 (agent)", "a test")
            .await
            .unwrap();
    }
    ch.execute(&format!(
        "INSERT INTO frames VALUES (1, 1, '/usr/bin/x', '{used}', 4096, 4096, 4096, '', today())"
    ))
    .await;
    let rows = |table: &'static str, build_id: String| {
        let ch = &ch;
        async move {
            ch.count(&format!(
                "SELECT count() AS n FROM {table} WHERE build_id = '{build_id}'"
            ))
            .await
        }
    };
    // Within the grace nothing goes, whatever refers to it.
    let grace = bimodal_server::storage::retention::DEBUGINFO_GRACE;
    assert_eq!(store.expire_debuginfo(grace).await.unwrap(), 0);
    assert_eq!(store.expire_debuginfo(Duration::ZERO).await.unwrap(), 1);
    // A mutation: ClickHouse deletes the rows shortly after.
    let deadline = Instant::now() + Duration::from_secs(60);
    for table in bimodal_server::storage::debuginfo::DEBUGINFO_TABLES {
        while rows(table, unused.clone()).await > 0 {
            assert!(
                Instant::now() < deadline,
                "the unused build id's rows of {table} are still there"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert_eq!(rows("debuginfo", used.clone()).await, 1);
    assert_eq!(rows("debuginfo_symbols", used.clone()).await, 2);
    assert_eq!(rows("debuginfo_digests", used.clone()).await, 1);
    assert_eq!(rows("debuginfo_disputes", used.clone()).await, 1);
    assert_eq!(
        store.expire_debuginfo(Duration::ZERO).await.unwrap(),
        0,
        "nothing left to delete"
    );
    ch.stop().await;
}

/// A ClickHouse holding schema v1 (tables of migrations 1–5 with rows) is carried over: the
/// server sets v1 aside, creates v2, copies the rows in, drops the v1 tables, and the API
/// shows the old samples.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_v1_rows_are_carried_over() {
    let ch = SharedClickHouse::start().await;
    clickhouse::Client::default()
        .with_url(ch.url())
        .query("CREATE DATABASE bimodal")
        .execute()
        .await
        .unwrap();
    let legacy = Dialect::for_version("18.16.1", 30);
    ch.execute("CREATE TABLE schema_migrations (version UInt32, name String, applied DateTime) ENGINE = MergeTree ORDER BY version").await;
    for (version, sql) in [
        (1, include_str!("../../migrations/001_init.sql")),
        (
            2,
            include_str!("../../migrations/002_node_facts_counters_placement.sql"),
        ),
        (3, include_str!("../../migrations/003_process_identity.sql")),
        (4, include_str!("../../migrations/004_elf_addresses.sql")),
        (5, include_str!("../../migrations/005_kubernetes_names.sql")),
    ] {
        for statement in legacy.render(sql) {
            ch.execute(&statement).await;
        }
        ch.execute(&format!(
            "INSERT INTO schema_migrations VALUES ({version}, 'v1', now())"
        ))
        .await;
    }
    let batch = "unhex('11111111111111111111111111111111')";
    for sql in [
        "INSERT INTO stacks VALUES (12345, [1, 1], ['v1_leaf', 'v1_main'], ['/bin/v1', '/bin/v1'], ['', ''], [4096, 8192], [0, 0], [0, 0])".to_owned(),
        format!(
            "INSERT INTO samples (time, node, event, pid, tid, comm, stack_id, count, value, batch_id, executable) \
             VALUES (now() - 60, 'v1-node', 'page_fault', 7, 7, 'v1comm', 12345, 3, 300, {batch}, '/bin/v1')"
        ),
        format!(
            "INSERT INTO batches VALUES (now(), 'v1-node', {batch}, now() - 60, now() - 50, ['zone'], ['old'], '0.1', \
             '6.1', 3, ['page_fault'], ['software page-faults, 1 in 100'], [100], [0])"
        ),
        format!("INSERT INTO counters VALUES (now() - 60, 'v1-node', 'pgfault', 99, {batch})"),
    ] {
        ch.execute(&sql).await;
    }

    let server = TestServer::with_config(ch.server_config("s"), None).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let folded = flame(&server, "v1-node").await;
        if folded.contains("v1comm;v1_main;v1_leaf 300") {
            break;
        }
        assert!(Instant::now() < deadline, "v1 samples never appeared: {folded:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // ClickHouse 18.16 fails a read of system.tables that meets a table as it is dropped
        // ("Table bimodal.v1_samples doesn't exist": a clean-clone CI run of 32a7470): such a
        // read is asked again.
        let left = ch
            .try_count("SELECT count() AS n FROM system.tables WHERE database = 'bimodal' AND name LIKE 'v1_%'")
            .await;
        match left {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.to_string().contains("doesn't exist") => {}
            Err(e) => panic!("reading which v1 tables are left: {e}"),
        }
        assert!(Instant::now() < deadline, "v1 tables were not dropped");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, counters) = server.get("/api/v1/counters?node=v1-node&name=pgfault&from=0").await;
    assert_eq!(status, 200, "{counters}");
    assert!(counters.contains("\"value\":99"), "{counters}");
    // A resend of the v1 batch is a duplicate: the ledger came along.
    let mut resent = wire::batch([0x11; 16], true, "v1_leaf", 3);
    resent.start_unix_nanos = wire::now_nanos() - 60_000_000_000;
    let acks = exchange_with(server.url(), vec![wire::hello("v1-node"), req(resent)])
        .await
        .unwrap();
    assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Duplicate);
    server.stop().await;
    ch.stop().await;
}

/// With `--clickhouse-cluster`, a server creates Replicated tables on every shard of a real
/// two-shard cluster with Distributed tables over them; a fleet's batches land on both shards and
/// are all counted, even two batches whose rows aggregate alike (Replicated tables would drop the
/// second as a duplicate block); a resend is a duplicate; a second server connected to the other
/// shard answers the same, a diff (its node weights a session's temporary table) and a compare
/// with its explanation included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_shard_cluster_holds_the_fleet() {
    log_if_asked();
    let cluster = ClickHouseCluster::start(2).await;
    let dir = tempfile::tempdir().unwrap();
    let config = |shard: usize| Config {
        clickhouse_url: Some(cluster.urls[shard].clone()),
        clickhouse_cluster: Some(cluster.name.clone()),
        clickhouse_database: "bimodal".into(),
        ..test_config("127.0.0.1:0".parse().unwrap(), &dir.path().join(format!("s{shard}")))
    };
    let (a, b) = tokio::join!(
        TestServer::with_config(config(0), None),
        TestServer::with_config(config(1), None)
    );
    let nodes = 8u8;
    // CPU time on every node, for what divides by it (diff, compare): the last three nodes have
    // a fifth of the others'.
    let cpu_ns = |n: u8| u64::from(n) * 10_000_000 + if n >= nodes - 3 { 200_000_000 } else { 1_000_000_000 };
    for n in 0..nodes {
        let node = format!("cluster-{n}");
        // Two batches of one node in one minute with equal rows: both count.
        let first = wire::batch(
            [n, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
            false,
            "cluster_leaf",
            3,
        );
        let second = wire::batch(
            [n, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2],
            false,
            "cluster_leaf",
            3,
        );
        let mut second = second;
        second.samples.push(v1::Sample {
            event: v1::EventKind::Cpu as i32,
            stack_index: 0,
            pid: 1,
            tid: 1,
            comm: "ingest".into(),
            count: 100,
            value: cpu_ns(n),
        });
        second.sources.push(v1::EventSource {
            event: v1::EventKind::Cpu as i32,
            description: "cpu-clock".into(),
            name: "cpu-clock".into(),
            unit: "nanoseconds".into(),
            period: 10_000_000,
            dropped: 0,
        });
        let server = if n % 2 == 0 { &a } else { &b };
        let acks = exchange(server, vec![wire::hello(&node), req(first.clone()), req(second)])
            .await
            .unwrap();
        let statuses: Vec<Status> = acks.iter().map(|a| Status::try_from(a.status).unwrap()).collect();
        assert_eq!(statuses, [Status::Stored, Status::Stored], "{node}: {acks:?}");
        if n == 0 {
            let mut resent = first;
            resent.resend = true;
            let acks = exchange(&b, vec![wire::hello(&node), req(resent)]).await.unwrap();
            assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Duplicate);
        }
    }
    let from_a = fleet_flame(&a).await;
    assert_eq!(folded_total(&from_a), u64::from(nodes) * 2 * 300, "{from_a}");
    assert_eq!(fleet_flame(&b).await, from_a, "both servers answer alike");
    // The fleet rollups over two shards: every node from them (once the row saying since when
    // they are complete has reached the shards), six of eight as the rollups minus two.
    let read = |selector_text: &'static str| {
        let a = &a;
        async move {
            let (status, body) = a
                .get(&format!(
                    "/api/v1/flamegraph?event=page_fault&{}",
                    selector(selector_text)
                ))
                .await;
            assert_eq!(status, 200, "{body}");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            (v["reach"].as_str().unwrap().to_owned(), v["total"].as_u64().unwrap())
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (reach, total) = read("{}").await;
        assert_eq!(total, u64::from(nodes) * 2 * 300);
        if reach == "fleet" {
            break;
        }
        assert!(Instant::now() < deadline, "the fleet rollups are never used: {reach}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        read(r#"{node=~"cluster-[0-5]"}"#).await,
        ("fleet-minus".to_owned(), 6 * 2 * 300)
    );
    assert_eq!(read(r#"{node="cluster-1"}"#).await, ("matching".to_owned(), 2 * 300));
    // A diff's per-node weights go to ClickHouse as a session's temporary table, which each
    // shard's part of the read must see (GLOBAL IN), and a compare reads every per-node table
    // through the Distributed ones; both from either server.
    // The slow three, with more faults (a band rests on at least 10 samples a node; three
    // against five can be ranked, two against six cannot).
    for n in nodes - 3..nodes {
        let more = wire::batch(
            [n, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3],
            false,
            "cluster_leaf",
            20,
        );
        let acks = exchange(&a, vec![wire::hello(&format!("cluster-{n}")), req(more)])
            .await
            .unwrap();
        assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Stored);
    }
    let faults = |n: u8| if n >= nodes - 3 { 2_600.0 } else { 600.0 };
    let per_cpu_second = |group: std::ops::Range<u8>| {
        let n = group.len() as f64;
        group.map(|n| faults(n) / (cpu_ns(n) as f64 / 1e9)).sum::<f64>() / n
    };
    let since = super::common::unix_now() - 3600;
    let enc = |s: &str| -> String { form_urlencoded::byte_serialize(s.as_bytes()).collect() };
    for server in [&a, &b] {
        let (status, body) = server
            .get(&format!(
                "/api/v1/diff?event=page_fault&from={since}&a={}&b={}",
                enc(r#"{node=~"cluster-[0-4]"}"#),
                enc(r#"{node=~"cluster-[5-7]"}"#)
            ))
            .await;
        assert_eq!(status, 200, "{body}");
        let diff: serde_json::Value = serde_json::from_str(&body).unwrap();
        // The mean over each group's nodes of their faults per CPU-second (on the slow three,
        // about 20 times the others').
        for (side, group) in [("a", 0..5), ("b", 5..8)] {
            let total = diff[side]["total"].as_f64().unwrap();
            let expected = per_cpu_second(group);
            assert!(
                (total / expected - 1.0).abs() < 1e-3,
                "{side}: {total} against {expected}: {body}"
            );
        }
        let (status, body) = server
            .get(&format!("/api/v1/compare?from={since}&metric=page_fault"))
            .await;
        assert_eq!(status, 200, "{body}");
        let compare: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            compare["bands"]["high"],
            serde_json::json!(["cluster-5", "cluster-6", "cluster-7"]),
            "{compare:#}"
        );
        // The explanation's per-node function reads, through the Distributed tables.
        let leaf = compare["explanation"]["code"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["function"] == "cluster_leaf")
            .cloned()
            .unwrap_or_else(|| panic!("cluster_leaf is not listed: {compare:#}"));
        assert_eq!(leaf["high"].as_array().unwrap().len(), 3, "{leaf:#}");
    }
    for shard in 0..2 {
        #[derive(clickhouse::Row, serde::Deserialize)]
        struct N {
            n: u64,
        }
        let rows = cluster
            .client(shard)
            .query("SELECT count() AS n FROM bimodal.samples_local")
            .fetch_one::<N>()
            .await
            .unwrap()
            .n;
        assert!(rows > 0, "shard {shard} holds no samples: nodes are not spread");
    }
    a.stop().await;
    b.stop().await;
}

/// A lease whose holder is dropped unreleased (an upload whose client went away, a timeout) is
/// released in the background rather than left to expire after its period (60 s for a build id,
/// during which every upload of it would wait), and so is the claim of an `acquire` cancelled
/// while it settles. Checked by the release rows written, which expiry does not write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_dropped_unreleased_is_released_not_left_to_expire() {
    let ch = SharedClickHouse::start().await;
    let store = ch.store().await;
    let releases = |name: &'static str| {
        let ch = &ch;
        async move {
            ch.count(&format!(
                "SELECT count() AS n FROM leases WHERE name = '{name}' AND released = 1"
            ))
            .await
        }
    };
    let within = |what: &'static str, name: &'static str, n: u64| {
        let releases = &releases;
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while releases(name).await < n {
                assert!(std::time::Instant::now() < deadline, "{what}: no release written");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };

    let held = store.debuginfo_lease("aa").await.unwrap();
    drop(held);
    within("a dropped lease", "debuginfo:aa", 1).await;
    // The next upload of that build id takes it at once, not after 60 s.
    tokio::time::timeout(Duration::from_secs(30), store.debuginfo_lease("aa"))
        .await
        .expect("the dropped lease still blocks its build id")
        .unwrap()
        .release()
        .await;

    // An acquire cancelled once its claim is in ClickHouse.
    let claims = || ch.count("SELECT count() AS n FROM leases WHERE name = 'debuginfo:bb' AND released = 0");
    // Boxed, so that dropping it drops the future (a pinned local lives to the end of the scope).
    let mut acquire = Box::pin(store.debuginfo_lease("bb"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        tokio::select! {
            _ = &mut acquire => panic!("the lease was taken before its claim was seen"),
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        if claims().await > 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no claim was inserted");
    }
    drop(acquire);
    within("a cancelled acquire", "debuginfo:bb", 1).await;

    // Claims are kept a day past their expiry, then deleted (a mutation, done shortly after).
    // The release rows expire when they are written; the claims 60 s after theirs.
    let released = || ch.count("SELECT count() AS n FROM leases WHERE name LIKE 'debuginfo:%' AND released = 1");
    let claimed = || ch.count("SELECT count() AS n FROM leases WHERE name LIKE 'debuginfo:%' AND released = 0");
    let kept = bimodal_server::storage::lease::KEPT_AFTER_EXPIRY;
    store.expire_leases(kept).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(released().await, 3, "claims that expired within the day are deleted");
    store.expire_leases(Duration::ZERO).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while released().await > 0 {
        assert!(std::time::Instant::now() < deadline, "expired claims are still there");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(claimed().await > 0, "claims within their period are deleted");
}

/// A store interrupted between its symbol rows and its file row (a crash) leaves symbols no file
/// lists. The next upload for that build id and kind deletes them before storing its own, so the
/// two never mix (symbols are keyed by address, not by content).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symbols_of_an_interrupted_store_do_not_mix_with_the_next_upload() {
    let ch = SharedClickHouse::start().await;
    let server = TestServer::with_config(ch.server_config("a"), None).await;
    let dir = tempfile::tempdir().unwrap();
    let build_id = "7e".repeat(20);
    let [stripped, ..] = library_with_debug_files(dir.path(), &build_id);
    // What a crash after the symbols and before the file row leaves (kind 1: executable).
    ch.execute(&format!(
        "INSERT INTO debuginfo_symbols (build_id, kind, address, size, name) VALUES \
         ('{build_id}', 1, 16, 8, 'orphan_name'), ('{build_id}', 1, 4096, 8, 'orphan_other')"
    ))
    .await;
    let stored = upload_file(&server, &stripped);
    assert!(stored.status.success(), "{}", String::from_utf8_lossy(&stored.stderr));
    let count = |filter: &str| {
        let sql = format!(
            "SELECT count() AS n FROM debuginfo_symbols WHERE build_id = '{build_id}' AND kind = 1 AND {filter}"
        );
        let ch = &ch;
        async move { ch.count(&sql).await }
    };
    assert_eq!(count("name LIKE 'orphan%'").await, 0, "the orphans are still there");
    assert!(
        count("name = 'lib_work'").await >= 1,
        "the upload's symbols are not stored"
    );
    server.stop().await;
    ch.stop().await;
}

/// The node listing is read and answered a page at a time, whatever the fleet's size: the
/// pages hold every matching node once, in name order, each says how many match in all, and a
/// label matcher is applied before the page is cut (a page is never short of matches).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_listed_a_page_at_a_time() {
    let server = TestServer::start().await;
    for i in 0..7u8 {
        let node = format!("page-{i}");
        let mut hello = wire::hello(&node);
        if let Some(v1::ingest_request::Message::Hello(h)) = hello.message.as_mut() {
            h.labels
                .insert("zone".into(), if i % 2 == 0 { "a" } else { "b" }.into());
        }
        let acks = wire::exchange_with(
            server.url(),
            vec![hello, req(wire::batch([i + 90; 16], false, "leaf", 1))],
        )
        .await
        .unwrap();
        assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Stored, "{acks:?}");
    }
    let page = |selector: &str, after: &str| {
        let path = format!(
            "/api/v1/nodes?{}&limit=2&after={after}",
            super::common::selector(selector)
        );
        let server = &server;
        async move {
            let (status, body) = server.get(&path).await;
            assert_eq!(status, 200, "{body}");
            serde_json::from_str::<serde_json::Value>(&body).unwrap()
        }
    };
    // Zone a: page-0, 2, 4, 6, two a page.
    let (mut listed, mut after) = (Vec::new(), String::new());
    loop {
        let p = page(r#"{zone="a"}"#, &after).await;
        assert_eq!(p["total"], 4, "{p}");
        listed.extend(
            p["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n["node"].as_str().unwrap().to_owned()),
        );
        match p["next"].as_str() {
            Some(next) => after = next.to_owned(),
            None => break,
        }
    }
    assert_eq!(listed, ["page-0", "page-2", "page-4", "page-6"]);
    // A page bigger than the server's is refused, not cut silently.
    let (status, body) = server.get("/api/v1/nodes?limit=5001").await;
    assert_eq!(status, 400, "{body}");
    server.stop().await;
}

/// Any write token may upload a build id's first executable, so a hostile one could upload a
/// forged image of a library every node runs stripped (libc), with a `.symtab` naming its
/// functions as it likes, and every server would name their frames so (issue 49). Each agent's
/// check carries its own copy's naming digests. Here a stripped copy contradicts the forgery at
/// server b: the build id is disputed, and the frame's name is withheld when read at either
/// server. An operator lists the dispute and drops the forgery; the honest copy is then stored
/// and names the frame. A copy that differs from a kept executable no longer disputes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_executable_is_disputed_by_the_copies_nodes_run() {
    let ch = SharedClickHouse::start().await;
    let (a, b) = tokio::join!(
        TestServer::with_config(ch.server_config("a"), None),
        TestServer::with_config(ch.server_config("b"), None)
    );
    let dir = tempfile::tempdir().unwrap();
    let build_id = "d1".repeat(20);
    let [stripped, ..] = library_with_debug_files(dir.path(), &build_id);
    let library = dir.path().join(format!("libwork-{build_id}.so"));
    // The forgery: the library with its export renamed in `.symtab` (its `.dynsym` and layout
    // are the library's, as a forger who has the real one would keep them).
    let forged = dir.path().join("forged.so");
    let renamed = std::process::Command::new("objcopy")
        .arg("--redefine-sym=lib_work=EVIL_RENAMED_work")
        .arg(&library)
        .arg(&forged)
        .status()
        .expect("objcopy");
    assert!(renamed.success());
    let stored = upload_file(&a, &forged);
    assert!(stored.status.success(), "{}", String::from_utf8_lossy(&stored.stderr));

    // A page fault in lib_work, sent by (build id, ELF address) for the server to name.
    let raw_id = bimodal_proto::unhex(&build_id).unwrap();
    let address = symbol_address(&library, "lib_work");
    let mut batch = wire::batch([0xd1; 16], false, "", 5);
    batch.frames[0] = v1::Frame {
        kind: v1::FrameKind::User as i32,
        module: "/usr/lib/libwork.so".into(),
        build_id: raw_id.clone(),
        elf_address: address,
        file_offset: address,
        ..Default::default()
    };
    let acks = exchange_with(b.url(), vec![wire::hello("forged-node"), req(batch)])
        .await
        .unwrap();
    assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Stored, "{acks:?}");
    async fn flame(server: &TestServer) -> String {
        let path = format!(
            "/api/v1/flamegraph?event=page_fault&{}&format=folded",
            selector(r#"{node="forged-node"}"#)
        );
        let (status, body) = server.get(&path).await;
        assert_eq!(status, 200, "{body}");
        body
    }
    assert!(
        flame(&b).await.contains("EVIL_RENAMED_work"),
        "the forgery names the frame until disputed"
    );

    // A node running the stripped library checks the build id at server b.
    let digests = |path: &Path| bimodal_proto::naming_digests(&std::fs::read(path).unwrap()).unwrap();
    let check = |server: &TestServer, copy: bimodal_proto::NamingDigests| {
        let (url, build_id) = (server.url(), raw_id.clone());
        async move {
            v1::debuginfo_client::DebuginfoClient::connect(url)
                .await
                .unwrap()
                .check(v1::DebuginfoCheck {
                    build_id,
                    exported_digest: copy.exported.to_vec(),
                    local_digest: copy.local.map(|d| d.to_vec()).unwrap_or_default(),
                })
                .await
                .unwrap()
                .into_inner()
        }
    };
    assert_eq!(
        digests(&stripped).exported,
        digests(&forged).exported,
        "the forgery keeps the layout"
    );
    assert!(check(&b, digests(&stripped)).await.disputed);
    // The same node checking again adds no report.
    assert!(check(&b, digests(&stripped)).await.disputed);
    assert!(
        check(&a, digests(&forged)).await.disputed,
        "the forger's own copy does not settle it"
    );
    for server in [&a, &b] {
        let body = flame(server).await;
        assert!(!body.contains("EVIL_RENAMED_work"), "a disputed name is given: {body}");
    }
    let (_, metrics) = b.get("/metrics").await;
    assert!(
        metrics.lines().any(|l| l == "bimodal_debuginfo_disputes_total 1"),
        "the dispute is counted: {metrics}"
    );

    // The operator lists the dispute and drops the forgery.
    let cli = |args: &[&str], server: &TestServer| {
        std::process::Command::new(env!("CARGO_BIN_EXE_bimodal-server"))
            .arg("debuginfo")
            .args(args)
            .args(["--server-url", &server.url()])
            .output()
            .expect("run bimodal-server debuginfo")
    };
    let listed = cli(&["disputes"], &a);
    let said = String::from_utf8_lossy(&listed.stderr);
    assert!(listed.status.success(), "{said}");
    assert!(
        said.contains(&build_id)
            && said.contains("forged.so")
            && said.contains("1 report(s)")
            && said.contains("127.0.0.1")
            && said.contains("stripped"),
        "{said}"
    );
    let dropped = cli(&["resolve", &build_id, "--drop"], &a);
    assert!(dropped.status.success(), "{}", String::from_utf8_lossy(&dropped.stderr));
    let listed = cli(&["disputes"], &b);
    assert!(String::from_utf8_lossy(&listed.stderr).contains("no build id is disputed"));

    // The next node uploads its copy, which names the frame at both servers.
    let status = check(&b, digests(&stripped)).await;
    assert!(status.wanted && !status.disputed, "{status:?}");
    let stored = upload_file(&b, &stripped);
    assert!(stored.status.success(), "{}", String::from_utf8_lossy(&stored.stderr));
    assert!(
        !check(&a, digests(&library)).await.disputed,
        "an unstripped original agrees with its stripped copy"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    for server in [&a, &b] {
        loop {
            let body = flame(server).await;
            if body.contains("lib_work") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the honest copy never named the frame: {body}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    // A copy whose exports differ disputes it; once kept, no copy does.
    let other = bimodal_proto::NamingDigests {
        exported: [9; 32],
        local: None,
    };
    assert!(check(&a, other).await.disputed);
    let kept = cli(&["resolve", &build_id, "--keep"], &b);
    assert!(kept.status.success(), "{}", String::from_utf8_lossy(&kept.stderr));
    assert!(!check(&a, other).await.disputed);
    a.stop().await;
    b.stop().await;
    ch.stop().await;
}
