//! The whole data path: fixture process → BPF → agent → gRPC → server → ClickHouse → API → browser.

use std::time::{Duration, Instant};

use bimodal_agent::sample::events::EventKind;
use bimodal_agent::ship::{self, RunOptions};

use super::common::{agent_options, selector, TestServer};
use crate::fixture;

/// A real agent streams page-fault and cpu samples of a fixture to a real server; the API's
/// flame graph holds the fixture's faulting stack, the node is listed with its label, and
/// headless Chromium renders that frame (screenshot in target/artifacts/flamegraph.png). A
/// second agent, whose kernel is made to refuse the unwinder (`--test-refuse`, tests only),
/// samples cpu all the same: the server lists that node's stacks as walked by frame pointers,
/// less than asked for and why, in its facts, its `unwinding` label and its node page. The web
/// UI's mock server (web/test/mock-server.mjs) answers in the shape of this server, field by
/// field (web/test/api-shapes.mjs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_samples_reach_the_flame_graph_in_the_browser() {
    let server = TestServer::start().await;
    let workload = fixture::start("fault", 120);
    let (stop_agent, agent_stopped) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(ship::run(
        RunOptions {
            labels: [("zone".to_owned(), "test".to_owned())].into(),
            placement_every: 2,
            placement_processes: 3,
            ..agent_options(
                server.url(),
                "e2e-node",
                workload.pid(),
                vec![EventKind::PageFault, EventKind::Cpu],
            )
        },
        agent_stopped.clone(),
    ));
    let reduced = tokio::spawn(ship::run(
        RunOptions {
            test_refusals: "unwinder".parse().unwrap(),
            ..agent_options(server.url(), "e2e-reduced", workload.pid(), vec![EventKind::Cpu])
        },
        agent_stopped,
    ));

    // The chain is unwound to its root (_start), through libc's start-up code (named from
    // libc's debug file, which the agent uploads).
    let on_chain = |l: &str| {
        l.starts_with("workload;_start;") && l.contains(";__libc_start_call_main;main;fault_loop;touch_fresh_pages ")
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let folded = loop {
        let (status, body) = server
            .get(&format!(
                "/api/v1/flamegraph?event=page_fault&{}&format=folded",
                selector(r#"{node="e2e-node"}"#)
            ))
            .await;
        assert_eq!(status, 200, "{body}");
        if body.lines().any(on_chain) {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "the fixture's stack never reached the API; last answer:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let total: u64 = folded
        .lines()
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    let hit: u64 = folded
        .lines()
        .filter(|l| on_chain(l))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    assert!(
        hit * 10 >= total * 8,
        "only {hit} of {total} faults on the fixture's stack:\n{folded}"
    );

    // Both nodes listed, each with how its stacks are unwound.
    let deadline = Instant::now() + Duration::from_secs(30);
    let nodes = loop {
        let (status, nodes) = server.get("/api/v1/nodes").await;
        assert_eq!(status, 200);
        let nodes: serde_json::Value = serde_json::from_str(&nodes).unwrap();
        if nodes["nodes"].as_array().is_some_and(|n| n.len() == 2) {
            break nodes;
        }
        assert!(Instant::now() < deadline, "both nodes never listed: {nodes}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(nodes["nodes"][0]["node"], "e2e-node");
    assert_eq!(nodes["nodes"][0]["labels"]["zone"], "test");
    assert_eq!(nodes["nodes"][0]["labels"]["unwinding"], "kernel_tables");
    assert_eq!(nodes["nodes"][0]["facts"]["unwinding_reduced"], serde_json::json!({}));
    let refused = &nodes["nodes"][1];
    assert_eq!(refused["node"], "e2e-reduced");
    assert_eq!(refused["labels"]["unwinding"], "frame_pointers", "{refused}");
    assert_eq!(refused["facts"]["event_sources"]["cpu"]["unwinding"], "frame_pointers");
    let why = refused["facts"]["unwinding_reduced"]["cpu"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.contains("unwind_perf_event") && why.contains("refused"),
        "{refused}"
    );

    let (status, json) = server
        .get(&format!(
            "/api/v1/flamegraph?event=page_fault&{}",
            selector(r#"{node="e2e-node"}"#)
        ))
        .await;
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    // One source per flame graph, named with its unit.
    assert_eq!(json["source"], "page-faults");
    assert_eq!(json["unit"], "faults");
    assert_eq!(json["root"]["children"][0]["name"], "workload");
    assert_eq!(json["root"]["children"][0]["kind"], "process");

    // The node's facts came with the hello: its CPU, and the source each event kind uses.
    let facts = &nodes["nodes"][0]["facts"];
    assert!(facts["online_cpus"].as_u64().unwrap() >= 1, "{facts}");
    assert!(
        facts["event_sources"]["page_fault"]["source"]
            .as_str()
            .unwrap()
            .contains("page-faults"),
        "{facts}"
    );

    // Counters and placement arrive with the batches.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, counters) = server.get("/api/v1/counters?node=e2e-node&name=pgfault").await;
        assert_eq!(status, 200, "{counters}");
        let counters: serde_json::Value = serde_json::from_str(&counters).unwrap();
        let faults: u64 = counters["counters"]["pgfault"]
            .as_array()
            .map(|points| points.iter().map(|p| p["value"].as_u64().unwrap()).sum())
            .unwrap_or(0);
        let (status, placement) = server.get("/api/v1/placement?node=e2e-node").await;
        assert_eq!(status, 200, "{placement}");
        let placement: serde_json::Value = serde_json::from_str(&placement).unwrap();
        let workload_mapped = placement["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pid"] == workload.pid() && p["mappings"].as_array().is_some_and(|m| !m.is_empty()));
        // The fixture faults thousands of pages a second.
        if faults > 1000 && workload_mapped {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "counters or placement missing: pgfault {faults}; placement {placement}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // The pprof export decodes and names the fixture's function.
    let (status, pprof) = server
        .get_bytes(&format!(
            "/api/v1/flamegraph?event=page_fault&{}&format=pprof",
            selector(r#"{node="e2e-node"}"#)
        ))
        .await;
    assert_eq!(status, 200);
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&pprof[..]), &mut raw).unwrap();
    let profile = <bimodal_proto::pprof::Profile as prost::Message>::decode(&raw[..]).unwrap();
    let names: Vec<&str> = profile
        .function
        .iter()
        .map(|f| profile.string_table[f.name as usize].as_str())
        .collect();
    assert!(names.contains(&"touch_fresh_pages"), "{names:?}");
    assert_eq!(
        profile.string_table[profile.sample_type[1].r#type as usize],
        "page_fault"
    );

    browser_shows(&server, "touch_fresh_pages");
    // The node page: its topology and event sources from the facts, the pgfault counter over
    // time, and the workload's memory placement (the agent reads it every 2 intervals).
    let screenshot = super::common::artifacts().join("node.png");
    let pid = workload.pid().to_string();
    super::common::web_test(
        "test/node-browser.mjs",
        &[
            "--url",
            &format!("{}/", server.url()),
            "--node",
            "e2e-node",
            "--counter",
            "pgfault",
            "--pid",
            &pid,
            "--screenshot",
            screenshot.to_str().unwrap(),
        ],
    );

    let screenshot = super::common::artifacts().join("node-reduced.png");
    super::common::web_test(
        "test/node-browser.mjs",
        &[
            "--url",
            &format!("{}/", server.url()),
            "--node",
            "e2e-reduced",
            "--unwinding",
            "frame_pointers",
            "--reduced",
            "--screenshot",
            screenshot.to_str().unwrap(),
        ],
    );

    // The web UI is developed and tested on web/test/mock-server.mjs: its answers have the shape
    // of this server's, field by field.
    super::common::web_test(
        "test/api-shapes.mjs",
        &["--url", &format!("{}/", server.url()), "--node", "e2e-node"],
    );

    let _ = stop_agent.send(true);
    agent
        .await
        .unwrap()
        .expect("agent stops cleanly after its last batch is acked");
    reduced
        .await
        .unwrap()
        .expect("the agent without an unwinder stops cleanly too");
    server.stop().await;
}

/// Runs web/test/browser.mjs (Playwright driving Debian's Chromium) against the server.
fn browser_shows(server: &TestServer, frame: &str) {
    let screenshot = super::common::artifacts().join("flamegraph.png");
    super::common::web_test(
        "test/browser.mjs",
        &[
            "--url",
            &format!("{}/", server.url()),
            "--node",
            "e2e-node",
            "--event",
            "page_fault",
            "--expect",
            frame,
            // Its callers and callees (the sandwich view), opened by shift+click.
            "--sandwich",
            frame,
            "--caller",
            "fault_loop",
            "--screenshot",
            screenshot.to_str().unwrap(),
        ],
    );
}
