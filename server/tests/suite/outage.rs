//! Nothing is lost while the server is down: the agent spools its batches and delivers them,
//! once each, when the server comes up.

use bimodal_proto::client::ServerAddress;
use std::time::{Duration, Instant};

use bimodal_agent::sample::events::EventKind;
use bimodal_agent::ship;

use super::common::{agent_options, selector, TestServer};
use crate::fixture;

/// An agent started before its server keeps its batches and ships them after the server starts;
/// the samples of the outage reach the flame graph.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_taken_while_the_server_is_down_arrive_later() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let workload = fixture::start("fault", 60);
    let (stop_agent, agent_stopped) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(ship::run(
        agent_options(
            format!("http://{addr}"),
            "outage-node",
            workload.pid(),
            vec![EventKind::PageFault],
        ),
        agent_stopped,
    ));
    // Several intervals pass with nowhere to send them.
    let outage_start = std::time::SystemTime::now();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let server = TestServer::start_on(addr).await;

    // The batches of the outage carry intervals that started before the server did.
    let from = outage_start.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let to = from + 4;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = server
            .get(&format!(
                "/api/v1/flamegraph?event=page_fault&{}&format=folded&from={from}&to={to}",
                selector(r#"{node="outage-node"}"#)
            ))
            .await;
        assert_eq!(status, 200, "{body}");
        if body.contains("touch_fresh_pages") {
            break;
        }
        assert!(Instant::now() < deadline, "samples of the outage never arrived: {body}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let _ = stop_agent.send(true);
    agent.await.unwrap().expect("the agent stops cleanly once all is acked");
    server.stop().await;
}

/// A node that cannot reach any server writes its batches to a directory (`run --output-dir`);
/// `import` sends them later: the workload's stacks reach the flame graph, a second import (by
/// `bimodal import`) stores nothing twice, an import into an unreachable server fails with its reason, and a
/// directory the agent did not write is a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_written_offline_are_imported_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("offline-node");
    let workload = fixture::start("fault", 60);
    let written_from = super::common::unix_now();
    let (stop_agent, agent_stopped) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(ship::run(
        ship::RunOptions {
            output_dir: Some(out.clone()),
            ..agent_options(
                // Nothing listens there: the agent must not try.
                "http://127.0.0.1:1".into(),
                "offline-node",
                workload.pid(),
                vec![EventKind::PageFault],
            )
        },
        agent_stopped,
    ));
    // Wait for the files, not for a fixed time.
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(&out).map_or(0, |d| d.count()) < 4 {
        assert!(Instant::now() < deadline, "no batches written to {}", out.display());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = stop_agent.send(true);
    agent.await.unwrap().expect("an agent writing files stops cleanly");
    drop(workload);
    let written_to = super::common::unix_now() + 1;
    // Imported strictly later than the batches were taken (the node is listed by their times).
    while super::common::unix_now() <= written_to {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The server is down: the import says so.
    let err = bimodal_proto::stream::import(&out, &ServerAddress::new("http://127.0.0.1:1", None))
        .await
        .unwrap_err();
    assert!(format!("{err:#}").contains("unreachable"), "{err:#}");
    let err = bimodal_proto::stream::import(dir.path(), &ServerAddress::new("http://127.0.0.1:1", None))
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("is not a directory `run --output-dir` wrote"),
        "{err:#}"
    );

    let server = TestServer::start().await;
    let sent = bimodal_proto::stream::import(&out, &ServerAddress::new(server.url(), None))
        .await
        .unwrap();
    assert!(sent >= 3, "{sent} batches");
    let path = format!(
        "/api/v1/flamegraph?event=page_fault&{}&format=folded",
        selector(r#"{node="offline-node"}"#)
    );
    let (status, first) = server.get(&path).await;
    assert_eq!(status, 200);
    assert!(first.contains("fault_loop;touch_fresh_pages"), "{first}");
    // The node reported when its batches say, not when they were imported; and for as long
    // as they cover (the server counts each batch's milliseconds).
    let range = format!("from={written_from}&to={written_to}");
    let (_, nodes) = server.get(&format!("/api/v1/nodes?{range}")).await;
    assert!(nodes.contains("\"offline-node\""), "{nodes}");
    let (_, counters) = server
        .get(&format!("/api/v1/counters?node=offline-node&name=reported_ms&{range}"))
        .await;
    let counters: serde_json::Value = serde_json::from_str(&counters).unwrap();
    let reported: u64 = counters["counters"]["reported_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["value"].as_u64().unwrap())
        .sum();
    let span_ms = 1000 * (written_to - written_from);
    assert!(
        reported >= 1000 * (sent as u64 - 1) && reported <= span_ms,
        "{reported} ms reported by {sent} batches written over {span_ms} ms"
    );
    // Again, with the `bimodal` CLI (the same stream, from the fleet's tool).
    let cli = tokio::process::Command::new(env!("CARGO_BIN_EXE_bimodal"))
        .args(["--server-url", &server.url(), "import"])
        .arg(&out)
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&cli.stderr);
    assert!(cli.status.success(), "{said}");
    assert!(said.contains(&format!("{sent} batches acknowledged")), "{said}");
    let (_, second) = server.get(&path).await;
    assert_eq!(first, second, "the second import stored nothing");
    server.stop().await;
}

/// A batch the server refuses for good (here: a sample pointing at a stack the batch does not
/// have) is dropped by the agent's shipper with a count, once, and removed from its spool on
/// disk; the batches after it are stored as if it had not been there. Without the drop it would
/// be sent first on every reconnect and hold back every later batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_refused_for_good_is_dropped_and_the_later_ones_arrive() {
    use super::wire;
    let server = TestServer::start().await;
    let spool_dir = tempfile::tempdir().unwrap();
    let spool = bimodal_proto::spool::SpoolOptions {
        dir: Some(spool_dir.path().to_owned()),
        max_bytes: 64 << 20,
    };
    let hello = match wire::hello("refused-node").message {
        Some(bimodal_proto::v1::ingest_request::Message::Hello(h)) => h,
        _ => unreachable!(),
    };
    let mut refused = wire::batch([2; 16], false, "refused_leaf", 7);
    refused.samples[0].stack_index = 5;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    for b in [
        wire::batch([1; 16], false, "before_leaf", 3),
        refused,
        wire::batch([3; 16], false, "after_leaf", 4),
    ] {
        tx.send(b).await.unwrap();
    }
    drop(tx);
    let (_stop, stopped) = tokio::sync::watch::channel(true);
    let dropped = tokio::time::timeout(
        Duration::from_secs(60),
        bimodal_proto::stream::ship(ServerAddress::new(server.url(), None), &spool, hello, rx, stopped),
    )
    .await
    .expect("every batch is settled")
    .expect("the shipper ends cleanly");
    assert_eq!(dropped, 1, "the refused batch, once");

    let (status, body) = server
        .get(&format!(
            "/api/v1/flamegraph?event=page_fault&{}&format=folded",
            selector(r#"{node="refused-node"}"#)
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("before_leaf 300") && body.contains("after_leaf 400"),
        "{body}"
    );
    assert!(!body.contains("refused_leaf"), "{body}");
    let left: Vec<_> = walk(spool_dir.path());
    assert!(left.is_empty(), "nothing left in the spool: {left:?}");
    server.stop().await;
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
