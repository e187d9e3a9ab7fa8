//! The ingest protocol's promises: a resent batch is stored once, a malformed batch is refused
//! with a reason while the stream goes on, and a stream must start with a hello.

use std::time::Duration;

use bimodal_proto::v1::{self, ack::Status};

use super::common::{refusals, selector, TestServer};
use super::wire::{self, exchange, req};

fn hello() -> v1::IngestRequest {
    wire::hello("ingest-node")
}

fn batch(id: u8, resend: bool) -> v1::Batch {
    wire::batch([id; 16], resend, "ingest_test_leaf", 3)
}

/// A batch resent after a lost ack is acknowledged as a duplicate and its samples are counted
/// once; a malformed batch is rejected with a reason and the stream keeps going.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resent_batches_are_stored_once_and_malformed_ones_refused() {
    let server = TestServer::start().await;
    let mut bad = batch(2, false);
    bad.samples[0].stack_index = 5;
    let acks = exchange(
        &server,
        vec![hello(), req(batch(1, false)), req(bad), req(batch(3, false))],
    )
    .await
    .unwrap();
    let statuses: Vec<_> = acks.iter().map(|a| Status::try_from(a.status).unwrap()).collect();
    assert_eq!(statuses, [Status::Stored, Status::Rejected, Status::Stored]);
    assert!(acks[1].error.contains("stack 5"), "{}", acks[1].error);

    // The agent did not see the ack of batch 1 and sends it again on a new stream.
    let acks = exchange(&server, vec![hello(), req(batch(1, true))]).await.unwrap();
    assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Duplicate);

    let (status, folded) = server
        .get(&format!(
            "/api/v1/flamegraph?event=page_fault&{}&format=folded",
            selector(r#"{node="ingest-node"}"#)
        ))
        .await;
    assert_eq!(status, 200);
    assert_eq!(folded, "ingest;ingest_test_leaf 600\n", "batches 1 and 3 once each");
    server.stop().await;
}

/// One batch sent on two streams of one server at the same moment (an agent that reconnected
/// while its first stream still waited for the ack) is stored once: one stream is told stored,
/// the other duplicate, and the batch's samples count once. Ten batches, each raced, the
/// copies sent from the same moment to 135 ms apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_raced_on_two_streams_is_stored_once() {
    let server = TestServer::start().await;
    let agent = bimodal_proto::client::ServerAddress::new(server.url(), None);
    // A stream on a connection of its own, its Hello taken: the batch's sender and the acks.
    let open = || {
        let agent = agent.clone();
        async move { wire::open_stream(&agent, vec![wire::hello("race-node")]).await }
    };
    let ack_of = |message: Option<v1::IngestResponse>| match message.and_then(|m| m.message) {
        Some(v1::ingest_response::Message::Ack(a)) => a,
        other => panic!("no ack: {other:?}"),
    };
    const TRIALS: u8 = 10;
    for trial in 1..=TRIALS {
        let ((tx_a, mut acks_a), (tx_b, mut acks_b)) = tokio::join!(open(), open());
        let raced = wire::batch([100 + trial; 16], false, &format!("raced_{trial}"), 3);
        // The first trial at the same moment, then up to 135 ms apart: the two copies meet in
        // one write buffer, or the second comes while the first is being written (flushes are
        // 100 ms apart here).
        let apart = Duration::from_millis(u64::from(trial - 1) * 15);
        let (sent_a, sent_b) = tokio::join!(tx_a.send(req(raced.clone())), async {
            tokio::time::sleep(apart).await;
            tx_b.send(req(raced)).await
        });
        sent_a.unwrap();
        sent_b.unwrap();
        let (a, b) = tokio::time::timeout(Duration::from_secs(30), async {
            tokio::join!(acks_a.message(), acks_b.message())
        })
        .await
        .expect("both streams are answered");
        let acks = [ack_of(a.unwrap()), ack_of(b.unwrap())];
        let mut statuses: Vec<Status> = acks.iter().map(|a| Status::try_from(a.status).unwrap()).collect();
        statuses.sort_by_key(|s| *s as i32);
        assert_eq!(statuses, [Status::Stored, Status::Duplicate], "trial {trial}: {acks:?}");
    }

    let (status, folded) = server
        .get(&format!(
            "/api/v1/flamegraph?event=page_fault&{}&format=folded",
            selector(r#"{node="race-node"}"#)
        ))
        .await;
    assert_eq!(status, 200, "{folded}");
    let mut lines: Vec<&str> = folded.lines().collect();
    lines.sort_unstable();
    let mut expected: Vec<String> = (1..=TRIALS).map(|t| format!("ingest;raced_{t} 300")).collect();
    expected.sort_unstable();
    assert_eq!(lines, expected, "each raced batch once");
    server.stop().await;
}

/// A placement showing a process's .bss on node 1 while its threads ran on node 0 (the ScyllaDB
/// case; no NUMA hardware needed to store and judge it) is reported as remote memory, and a
/// local heap is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_bss_placement_is_a_finding() {
    let server = TestServer::start().await;
    let mapping = |kind: &str, node: u32, pages: u64| v1::MappingPlacement {
        kind: kind.into(),
        path: "/usr/bin/scylla".into(),
        start: 0x1000,
        end: 0x1000 + pages * 4096,
        permissions: "rw-p".into(),
        pages_per_node: [(node, pages)].into(),
        page_size: 4096,
    };
    let mut b = batch(20, false);
    b.placements = vec![v1::Placement {
        pid: 42,
        comm: "scylla".into(),
        executable: "/usr/bin/scylla".into(),
        threads_per_node: [(0, 8)].into(),
        mappings: vec![mapping("bss", 1, 16384), mapping("heap", 0, 4096)],
    }];
    exchange(&server, vec![hello(), req(b)]).await.unwrap();
    let (status, body) = server.get("/api/v1/placement?node=ingest-node").await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let findings = json["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{body}");
    assert_eq!(findings[0]["kind"], "bss");
    assert_eq!(findings[0]["node"], 1);
    assert_eq!(findings[0]["thread_nodes"], serde_json::json!([0]));
    server.stop().await;
}

/// A stream that does not start with a hello is refused as an invalid argument, and counted.
/// (The count is the test process's: it must have risen, by this stream or another test's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_must_start_with_hello() {
    let server = TestServer::start().await;
    let before = refusals(&server, "bimodal_ingest_rejected_batches_total", "invalid_hello").await;
    let err = exchange(&server, vec![req(batch(9, false)), req(batch(10, false))])
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let after = refusals(&server, "bimodal_ingest_rejected_batches_total", "invalid_hello").await;
    assert!(
        after > before,
        "a stream without a Hello is not counted: {before} -> {after}"
    );
    server.stop().await;
}

/// A server serves `--max-streams` agent streams at once: one more is told RESOURCE_EXHAUSTED
/// with the bound (the agent retries later), and a stream that ends frees its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_beyond_the_bound_are_told_to_retry() {
    let server = TestServer::start_changed(|c| bimodal_server::Config { max_streams: 2, ..c }).await;
    let agent = bimodal_proto::client::ServerAddress::new(server.url(), None);
    // Opens a stream that stays open (its sender kept), with its first ack read.
    let open = |node: &'static str, id: u8| {
        let agent = agent.clone();
        async move {
            let mut client = agent.ingest().await.unwrap();
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            tx.send(wire::hello(node)).await.unwrap();
            tx.send(req(wire::batch([id; 16], false, "hot", 1))).await.unwrap();
            let acks = client.stream(tokio_stream::wrappers::ReceiverStream::new(rx)).await;
            match acks {
                Ok(r) => {
                    let mut acks = r.into_inner();
                    let first = acks.message().await;
                    (Ok(first.map(|m| m.is_some())), Some((tx, acks)))
                }
                Err(status) => (Err(status), None),
            }
        }
    };
    let (a, held_a) = open("node-a", 1).await;
    let (b, held_b) = open("node-b", 2).await;
    assert!(matches!(a, Ok(Ok(true))) && matches!(b, Ok(Ok(true))), "{a:?} {b:?}");
    let (c, _) = open("node-c", 3).await;
    let status = c.expect_err("a third stream is refused");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("2 agent streams at most"), "{status:?}");
    // One stream ends: its place is free again.
    drop(held_a);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (d, _held_d) = open("node-d", 4).await;
        if matches!(d, Ok(Ok(true))) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the freed place never came back: {d:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    drop(held_b);
    server.stop().await;
}

/// One client address holds its share of the agent streams (`--max-streams-per-address`) and
/// no more (issue 49: one address could fill `--max-streams` with streams that send a Hello and
/// wait, locking every agent out): beyond its share a stream from it is told RESOURCE_EXHAUSTED
/// with the bound and counted, while an agent from another address is still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_its_share_of_the_agent_streams() {
    let server = TestServer::start_changed(|c| bimodal_server::Config {
        max_streams: 6,
        max_streams_per_address: 2,
        ..c
    })
    .await;
    // Streams from 127.0.0.2 (loopback too, another address) over one connection.
    let addr = server.addr;
    let connector = tower::service_fn(move |_: tonic::transport::Uri| async move {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(std::net::SocketAddr::new([127, 0, 0, 2].into(), 0))?;
        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(socket.connect(addr).await?))
    });
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .unwrap()
        .connect_with_connector(connector)
        .await
        .unwrap();
    let open = |node: String| {
        let mut client = v1::ingest_client::IngestClient::new(channel.clone());
        async move {
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            tx.send(wire::hello(&node)).await.unwrap();
            client
                .stream(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await
                .map(|acks| (tx, acks))
        }
    };
    let refused = || {
        refusals(
            &server,
            "bimodal_ingest_rejected_batches_total",
            "too_many_streams_from_address",
        )
    };
    let before = refused().await;
    let mut held = Vec::new();
    for i in 0..2 {
        held.push(open(format!("held-{i}")).await.expect("within the address's share"));
    }
    let status = open("held-2".into())
        .await
        .expect_err("a third stream from the address");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status
            .message()
            .contains("2 agent streams at most from one client address (127.0.0.2)"),
        "{status:?}"
    );
    assert!(refused().await > before, "the refusal is not counted");
    // An agent from 127.0.0.1 streams its batch.
    let acks = exchange(
        &server,
        vec![wire::hello("elsewhere"), req(wire::batch([51; 16], false, "hot", 1))],
    )
    .await
    .unwrap();
    assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Stored, "{acks:?}");
    drop(held);
    server.stop().await;
}

/// Each node sends at most its rate of batches (`--node-batch-rate`, `--node-batch-burst`):
/// beyond its burst a node's batches are answered "retry" with the wait until its next one is
/// due, counted by reason; another node is not held back, and the node's next batch after the
/// wait is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_beyond_its_batch_rate_is_told_when_to_come_back() {
    let server = TestServer::start_changed(|c| bimodal_server::Config {
        node_batches: bimodal_server::rate::Rate {
            per_second: 0.5,
            burst: 3,
        },
        ..c
    })
    .await;
    let mut flood = vec![wire::hello("flood-node")];
    flood.extend((1..=8u8).map(|i| req(wire::batch([i; 16], false, "hot", 1))));
    let acks = exchange(&server, flood).await.unwrap();
    let statuses: Vec<Status> = acks.iter().map(|a| Status::try_from(a.status).unwrap()).collect();
    assert_eq!(statuses[..3], [Status::Stored; 3], "{acks:?}");
    assert_eq!(statuses[3..], [Status::Retry; 5], "{acks:?}");
    for a in &acks[3..] {
        assert!(a.error.contains("more than 0.5 batches a second"), "{a:?}");
        assert!((100..=2_000).contains(&a.retry_after_millis), "{a:?}");
    }
    let calm = exchange(
        &server,
        vec![wire::hello("calm-node"), req(wire::batch([50; 16], false, "hot", 1))],
    )
    .await
    .unwrap();
    assert_eq!(calm[0].status, Status::Stored as i32, "{calm:?}");
    tokio::time::sleep(Duration::from_millis(u64::from(acks[7].retry_after_millis))).await;
    let later = exchange(
        &server,
        vec![wire::hello("flood-node"), req(wire::batch([4; 16], true, "hot", 1))],
    )
    .await
    .unwrap();
    assert_eq!(later[0].status, Status::Stored as i32, "{later:?}");
    let (_, metrics) = server.get("/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("bimodal_ingest_rejected_batches_total{reason=\"rate\"} 5")),
        "{metrics}"
    );
    server.stop().await;
}

/// A node opens at most `--node-stream-burst` streams at once and then `--node-stream-rate` a
/// second: a client opening streams in a loop under one name is told RESOURCE_EXHAUSTED with
/// the wait, counted; another node is not held back. (At a tenth of a stream a second, so that
/// a slow machine does not refill the bucket while the test runs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_opening_streams_in_a_loop_is_told_to_retry() {
    let server = TestServer::start_changed(|c| bimodal_server::Config {
        node_streams: bimodal_server::rate::Rate {
            per_second: 0.1,
            burst: 5,
        },
        ..c
    })
    .await;
    let before = refusals(&server, "bimodal_ingest_rejected_batches_total", "stream_rate").await;
    let mut opened = 0;
    let status = loop {
        match exchange(&server, vec![wire::hello("looping-node")]).await {
            Ok(_) => opened += 1,
            Err(status) => break status,
        }
        assert!(opened <= 10, "{opened} streams were let in");
    };
    assert!(opened >= 5, "refused after {opened} streams: {status:?}");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status
            .message()
            .contains("node `looping-node` opens more than 0.1 streams a second"),
        "{status:?}"
    );
    let after = refusals(&server, "bimodal_ingest_rejected_batches_total", "stream_rate").await;
    assert!(after > before, "the refusal is not counted");
    let other = exchange(
        &server,
        vec![wire::hello("calm-node"), req(wire::batch([9; 16], false, "hot", 1))],
    )
    .await
    .unwrap();
    assert_eq!(other[0].status, Status::Stored as i32, "{other:?}");
    server.stop().await;
}

/// Debug-info checks and uploads from one address are rate-limited (`--debuginfo-call-rate`,
/// `--debuginfo-call-burst`): a client checking in a loop is told RESOURCE_EXHAUSTED with the
/// wait once past the burst, counted. (At a tenth of a call a second, as above.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_checking_build_ids_in_a_loop_is_told_to_retry() {
    let server = TestServer::start_changed(|c| bimodal_server::Config {
        debuginfo_calls: bimodal_server::rate::Rate {
            per_second: 0.1,
            burst: 20,
        },
        ..c
    })
    .await;
    let mut client = bimodal_proto::client::ServerAddress::new(server.url(), None)
        .debuginfo()
        .await
        .unwrap();
    let mut checked = 0u32;
    let status = loop {
        let check = v1::DebuginfoCheck {
            build_id: checked.to_le_bytes().repeat(5),
            ..Default::default()
        };
        match client.check(check).await {
            Ok(_) => checked += 1,
            Err(status) => break status,
        }
        assert!(checked <= 25, "{checked} checks were let in");
    };
    assert!(checked >= 20, "refused after {checked} checks: {status:?}");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("debug-info checks and uploads a second")
            && status.message().contains("from address:127.0.0.1"),
        "{status:?}"
    );
    assert!(refusals(&server, "bimodal_debuginfo_rejected_uploads_total", "rate").await >= 1.0);
    server.stop().await;
}

/// Debug-info uploads are bounded before they are received: a file whose first bytes are not
/// ELF's is refused at once (not after its stated gigabyte), and with `MAX_UPLOADS_AT_ONCE`
/// uploads being received the next is told to retry later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_are_refused_before_they_are_received() {
    use bimodal_server::debuginfo::service::MAX_UPLOADS_AT_ONCE;
    use tokio_stream::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let config = super::common::test_config("127.0.0.1:0".parse().unwrap(), dir.path());
    // An upload holds its place while it writes to a file of its own here.
    let incoming = config.data_dir.join("incoming");
    let server = TestServer::with_config(config, Some(dir)).await;
    let agent = bimodal_proto::client::ServerAddress::new(server.url(), None);
    let first = |data: &[u8]| v1::DebuginfoChunk {
        build_id: vec![7; 20],
        kind: v1::DebuginfoKind::Executable as i32,
        file_name: "big".into(),
        size: 1 << 30,
        data: data.to_vec(),
    };
    // An upload that sends its first chunk and then nothing: it stays open until dropped.
    let open = |data: &'static [u8]| {
        let agent = agent.clone();
        let chunks = tokio_stream::iter([first(data)]).chain(tokio_stream::pending());
        tokio::spawn(async move { agent.debuginfo().await.unwrap().upload(chunks).await })
    };
    let refused = tokio::time::timeout(Duration::from_secs(30), open(b"MZ\x90\x00 not ELF"))
        .await
        .expect("refused before the stated size arrives")
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("ELF"), "{refused:?}");
    const REFUSED: &str = "bimodal_debuginfo_rejected_uploads_total";
    assert!(
        refusals(&server, REFUSED, "not_elf").await >= 1.0,
        "the refusal is counted"
    );
    // The file name is stored and logged: a line break in it is refused before the file is.
    let named = v1::DebuginfoChunk {
        file_name: "libc.so.6\nINFO forged log line".into(),
        ..first(b"\x7fELF")
    };
    let refused = agent
        .debuginfo()
        .await
        .unwrap()
        .upload(tokio_stream::iter([named]))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("file name"), "{refused:?}");
    assert!(
        refusals(&server, REFUSED, "bad_file_name").await >= 1.0,
        "the refusal is counted"
    );

    let receiving_now = || {
        std::fs::read_dir(&incoming)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with(".incoming-")
            })
            .count()
    };
    // One at a time, each until the server holds it, so that the fifth comes after all four
    // hold their places.
    let mut receiving = Vec::new();
    for held in 1..=MAX_UPLOADS_AT_ONCE {
        receiving.push(open(b"\x7fELF\x02\x01\x01"));
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while receiving_now() < held {
            assert!(std::time::Instant::now() < deadline, "upload {held} was never taken in");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let busy = tokio::time::timeout(Duration::from_secs(30), open(b"\x7fELF\x02\x01\x01"))
        .await
        .expect("a fifth upload is answered at once")
        .unwrap()
        .unwrap_err();
    assert_eq!(busy.code(), tonic::Code::ResourceExhausted, "{busy:?}");
    assert!(
        refusals(&server, REFUSED, "too_many_uploads").await >= 1.0,
        "the refusal is counted"
    );
    for r in receiving {
        r.abort();
    }
    server.stop().await;
}

/// An upload that stops arriving loses its place: it is cut off with DEADLINE_EXCEEDED once
/// its stated size has had its time (10 s + 1 s per MiB), and counted as `slow`. (A client held
/// one of `MAX_UPLOADS_AT_ONCE` places for as long as it liked.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_that_stops_arriving_loses_its_place() {
    use tokio_stream::StreamExt;
    let server = TestServer::start().await;
    let agent = bimodal_proto::client::ServerAddress::new(server.url(), None);
    let head = v1::DebuginfoChunk {
        build_id: vec![9; 20],
        kind: v1::DebuginfoKind::Executable as i32,
        file_name: "stalled".into(),
        size: 4096,
        data: b"\x7fELF\x02\x01\x01".to_vec(),
    };
    let started = std::time::Instant::now();
    let chunks = tokio_stream::iter([head]).chain(tokio_stream::pending());
    let cut = tokio::time::timeout(Duration::from_secs(60), agent.debuginfo().await.unwrap().upload(chunks))
        .await
        .expect("the stalled upload is cut off")
        .unwrap_err();
    assert_eq!(cut.code(), tonic::Code::DeadlineExceeded, "{cut:?}");
    assert!(started.elapsed() >= Duration::from_secs(10), "{:?}", started.elapsed());
    assert!(
        refusals(&server, "bimodal_debuginfo_rejected_uploads_total", "slow").await >= 1.0,
        "the refusal is counted"
    );
    server.stop().await;
}

/// A batch keeps its share of the in-flight bound (`--max-in-flight-bytes`) until its rows have
/// room in the write buffer: with the buffer full, a batch decoded and waiting for it still
/// counts, so the next batch that does not fit beside it is told to retry by admission, before
/// it is decoded. (When the share went as soon as rows were built, rows waiting for the buffer
/// were outside every bound: 100 agents catching up held 800 MB of them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_waiting_for_the_write_buffer_hold_their_share_of_the_bound() {
    let server = TestServer::start_changed(|c| bimodal_server::Config {
        max_in_flight_bytes: 1 << 20,
        writer: bimodal_server::storage::writer::WriterConfig {
            // One batch fills the buffer, and stays until the flush 10 s later.
            max_buffered_rows: 1,
            flush_rows: 1_000_000,
            flush_interval: Duration::from_secs(10),
            wait_for_room: Duration::from_secs(15),
            ..c.writer.clone()
        },
        ..c
    })
    .await;
    let agent = bimodal_proto::client::ServerAddress::new(server.url(), None);
    // A batch of about 660 KiB encoded: more than half of the bound.
    let large = |id: u8| {
        let mut b = wire::batch([id; 16], false, "large", 1);
        b.samples = vec![b.samples[0].clone(); 34_000];
        b
    };
    assert!(
        prost::Message::encoded_len(&large(0)) > 600 << 10,
        "{}",
        prost::Message::encoded_len(&large(0))
    );
    // Sends `batch` as `node` on a stream of its own, kept open; the acks.
    let send = |node: &'static str, batch: v1::Batch| {
        let agent = agent.clone();
        async move { wire::open_stream(&agent, vec![wire::hello(node), req(batch)]).await }
    };
    // The first batch takes the write buffer's room; the second, large, is admitted, decoded
    // and waits for that room.
    let _first = send("node-a", wire::batch([1; 16], false, "small", 1)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _second = send("node-b", large(2)).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // The third does not fit beside the second: admission answers, within its 5 s wait.
    let (_tx, mut acks) = send("node-c", large(3)).await;
    let ack = tokio::time::timeout(Duration::from_secs(9), acks.message())
        .await
        .expect("the third batch is answered before the buffer frees")
        .unwrap()
        .unwrap();
    let Some(v1::ingest_response::Message::Ack(ack)) = ack.message else {
        panic!("{ack:?}")
    };
    assert_eq!(ack.status, Status::Retry as i32, "{ack:?}");
    assert!(ack.error.contains("holds as many batches as it may"), "{ack:?}");
    server.stop().await;
}

/// An admitted batch holds its share of the in-flight bound only while it arrives in time: a
/// client that sends a batch's first bytes and stops is cut off (DEADLINE_EXCEEDED, 10 s for a
/// batch under a MiB) and its share goes to the next batch, which is stored. (The server admits
/// a batch from its first bytes so that a refused one is never held; without the deadline, one
/// such client would hold its share for good.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_stops_arriving_loses_its_share() {
    let server = TestServer::start_changed(|c| bimodal_server::Config {
        max_in_flight_bytes: 1 << 20,
        ..c
    })
    .await;
    // About 660 KiB encoded: two do not fit in the bound.
    let large = |id: u8| {
        let mut b = wire::batch([id; 16], false, "large", 1);
        b.samples = vec![b.samples[0].clone(); 34_000];
        b
    };
    // The staller: a Hello, then the first 4 KiB of a large batch, then nothing.
    let (response, mut send) = raw_stream(&server).await;
    send.send_data(
        grpc_frame(&prost::Message::encode_to_vec(&wire::hello("staller"))),
        false,
    )
    .unwrap();
    let stalled = grpc_frame(&prost::Message::encode_to_vec(&req(large(1))));
    send.send_data(stalled.slice(..4096), false).unwrap();
    let started = std::time::Instant::now();
    let status = tokio::time::timeout(Duration::from_secs(30), grpc_status(response))
        .await
        .expect("the stalled stream is cut off");
    let waited = started.elapsed();
    assert_eq!(status, "4", "DEADLINE_EXCEEDED");
    assert!(waited >= Duration::from_secs(9), "cut off after {waited:?}");
    // Its share is free again: a batch that would not have fit beside it is stored.
    let acks = exchange(&server, vec![wire::hello("after"), req(large(2))])
        .await
        .unwrap();
    assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Stored, "{acks:?}");
    drop(send);
    server.stop().await;
}

/// A stream holds one of the server's `--max-streams` places from its request headers, so its
/// Hello must arrive in time: a client that opens a stream and sends part of a Hello is cut off
/// (DEADLINE_EXCEEDED, 11 s: a message of a Hello's largest size) and its place goes to the
/// next agent. (Its HTTP/2 stack answers the server's pings: without the deadline it held the
/// place until it chose to leave.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_that_stops_arriving_loses_its_place() {
    let server = TestServer::start_changed(|c| bimodal_server::Config { max_streams: 1, ..c }).await;
    let hello = grpc_frame(&prost::Message::encode_to_vec(&wire::hello("staller")));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let waited = loop {
        assert!(std::time::Instant::now() < deadline, "the staller never held the place");
        let (response, mut send) = raw_stream(&server).await;
        send.send_data(hello.slice(..hello.len() / 2), false).unwrap();
        let started = std::time::Instant::now();
        let staller = tokio::spawn(async move {
            let status = grpc_status(response).await;
            drop(send);
            (status, started.elapsed())
        });
        // While the staller holds the place, another agent is told to retry.
        match exchange(&server, vec![wire::hello("other"), req(batch(1, false))]).await {
            Err(status) if status.code() == tonic::Code::ResourceExhausted => {}
            // The other stream took the place first: the staller is given up, opened again.
            Ok(_) => {
                staller.abort();
                continue;
            }
            Err(status) => panic!("{status:?}"),
        }
        let (status, waited) = tokio::time::timeout(Duration::from_secs(30), staller)
            .await
            .expect("the staller is cut off")
            .unwrap();
        match status.as_str() {
            "4" => break waited,
            // Refused itself (RESOURCE_EXHAUSTED): a stream of the previous round still held
            // the place when it came, and the other agent was refused by that one.
            "8" => continue,
            other => panic!("the staller ended with status {other}"),
        }
    };
    assert!(waited >= Duration::from_secs(10), "cut off after {waited:?}");
    let acks = exchange(&server, vec![wire::hello("after"), req(batch(2, false))])
        .await
        .unwrap();
    assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Stored, "{acks:?}");
    server.stop().await;
}

/// A stream that sends a Hello and then no batch is closed once `--stream-idle-timeout` passes
/// (DEADLINE_EXCEEDED), and its place goes to the next agent (issue 49: on 8f9f740 none of 50
/// such streams was closed in 60 s, and they could fill `--max-streams` for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_sends_no_batch_is_closed() {
    let server = TestServer::start_changed(|c| bimodal_server::Config {
        max_streams: 1,
        stream_idle: Duration::from_secs(2),
        ..c
    })
    .await;
    let (response, mut send) = raw_stream(&server).await;
    send.send_data(grpc_frame(&prost::Message::encode_to_vec(&wire::hello("idler"))), false)
        .unwrap();
    let started = std::time::Instant::now();
    let status = tokio::time::timeout(Duration::from_secs(30), grpc_status(response))
        .await
        .expect("the idle stream is closed");
    assert_eq!(status, "4", "DEADLINE_EXCEEDED");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "closed after {:?}",
        started.elapsed()
    );
    let acks = exchange(&server, vec![wire::hello("after"), req(batch(3, false))])
        .await
        .unwrap();
    assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Stored, "{acks:?}");
    drop(send);
    server.stop().await;
}

/// An agent's batch ids are its own: the same id from another node is that node's batch, stored
/// (on 8f9f740 it was answered DUPLICATE and lost, so a client writing as one node could make
/// another's batches vanish). Counts whose sum passes u64 are refused as such, once and for good
/// (REJECTED), not retried (issue 49).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_ids_are_per_node_and_overflowing_counts_are_refused() {
    let server = TestServer::start().await;
    let acks = exchange(&server, vec![wire::hello("first-node"), req(batch(7, false))])
        .await
        .unwrap();
    assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Stored, "{acks:?}");
    let acks = exchange(&server, vec![wire::hello("second-node"), req(batch(7, false))])
        .await
        .unwrap();
    assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Stored, "{acks:?}");
    // Still one node's resend is a duplicate.
    let acks = exchange(&server, vec![wire::hello("second-node"), req(batch(7, true))])
        .await
        .unwrap();
    assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Duplicate, "{acks:?}");
    let mut huge = batch(8, false);
    huge.samples[0].count = 1 << 63;
    huge.samples.push(huge.samples[0].clone());
    let acks = exchange(&server, vec![wire::hello("first-node"), req(huge)])
        .await
        .unwrap();
    assert_eq!(Status::try_from(acks[0].status).unwrap(), Status::Rejected, "{acks:?}");
    assert!(acks[0].error.contains("sample counts"), "{}", acks[0].error);
    server.stop().await;
}

/// A Hello whose node name is not UTF-8 is refused as that (INVALID_ARGUMENT, "cannot be
/// decoded … UTF-8"), not as "the first message of a stream must be a Hello" (issue 49: what
/// 8f9f740 said).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_that_is_not_utf8_is_refused_as_such() {
    let server = TestServer::start().await;
    let mut hello = prost::Message::encode_to_vec(&wire::hello("XXXXXXXX"));
    let at = hello
        .windows(8)
        .position(|w| w == b"XXXXXXXX")
        .expect("the name is in the Hello");
    hello[at..at + 4].copy_from_slice(&[0xff, 0xfe, 0xc3, 0x28]);
    let (response, mut send) = raw_stream(&server).await;
    send.send_data(grpc_frame(&hello), false).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(30), grpc_ending(response))
        .await
        .expect("answered");
    let status = tonic::Status::from_header_map(&ended).expect("a gRPC status");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    let message = status.message();
    assert!(
        message.contains("cannot be decoded") && message.contains("UTF-8"),
        "{message}"
    );
    drop(send);
    server.stop().await;
}

/// `message` in gRPC's framing: uncompressed, its length, itself.
fn grpc_frame(message: &[u8]) -> bytes::Bytes {
    let mut frame = vec![0];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(message);
    bytes::Bytes::from(frame)
}

/// An ingest stream opened by a bare HTTP/2 client, which sends what the test gives it, however
/// little: the response to come and the request body's sender.
async fn raw_stream(server: &TestServer) -> (h2::client::ResponseFuture, h2::SendStream<bytes::Bytes>) {
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request = http::Request::post(format!("http://{}/bimodal.v1.Ingest/Stream", server.addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    client.send_request(request, false).unwrap()
}

/// The gRPC status a stream ends with, once no ack came.
async fn grpc_status(response: h2::client::ResponseFuture) -> String {
    grpc_ending(response).await["grpc-status"].to_str().unwrap().to_owned()
}

/// What a stream ends with, once no ack came: its trailers, or its headers when it ended before
/// any message was answered.
async fn grpc_ending(response: h2::client::ResponseFuture) -> http::HeaderMap {
    let response = response.await.unwrap();
    if response.headers().contains_key("grpc-status") {
        return response.headers().clone();
    }
    let mut body = response.into_body();
    let data = body.data().await;
    assert!(data.is_none(), "no ack is due: {data:?}");
    body.trailers().await.unwrap().expect("the stream ends with a status")
}
