//! A fleet of real agents, each scoped to its own workload under its own node name, and the
//! compare view's answer: which nodes are slow, what differs in their labels, and where in the
//! code, found without being told the groups.

use std::time::{Duration, Instant};

use bimodal_agent::sample::events::EventKind;
use bimodal_agent::ship::{self, RunOptions};
use bimodal_proto::v1;
use bimodal_server::clock::rfc3339;
use serde_json::Value;

use super::common::{agent_options, TestServer};

/// The first node named `name` in a flame-graph tree, depth first.
fn find<'a>(node: &'a Value, name: &str) -> Option<&'a Value> {
    if node["name"] == name {
        return Some(node);
    }
    node["children"].as_array()?.iter().find_map(|c| find(c, name))
}

fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
use crate::fixture;

/// Eight nodes run one paced server (the `paced` fixture: the same binary, 1,000 requests a
/// second); on three of them the session path (`load_session`) page-faults on every request
/// instead of one in sixteen (about seven times the faults per CPU-second), and those three carry
/// `instance_type=big`. `/api/v1/compare`, told no groups, must split exactly those three into
/// the slow band, both by `page_fault per CPU-second` (above) and, with requests counted by a
/// uprobe on `handle_request` and CPU-seconds measured exactly per process, by units of work per
/// CPU-second (below), whichever of the two splits them more strongly; name `instance_type` as
/// the label that splits them, rank `load_session` first among the page-fault differences with
/// every slow node above every fast one, and find it higher in the CPU profile too; the
/// differential flame graph of the bands, in JSON, folded pairs and pprof, agrees. One fast
/// node's kernel is made to refuse the unwinder (`--test-refuse`, tests only): it samples with
/// frame-pointer chains, and its stacks are left out of what rests on chains (functions' totals,
/// the differential flame graph) while it keeps its place in the bands, which rest on counts. The
/// answers are kept in target/artifacts/compare.json and diff.json.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_agents_is_split_into_its_slow_band_and_explained() {
    let server = TestServer::start().await;
    let start = super::common::unix_now();
    let slow = ["node-c", "node-f", "node-h"];
    let short_chains = "node-b";
    let names = [
        "node-a", "node-b", "node-c", "node-d", "node-e", "node-f", "node-g", "node-h",
    ];
    let mut workloads = Vec::new();
    let mut agents = Vec::new();
    let (stop_agents, agents_stopped) = tokio::sync::watch::channel(false);
    for name in names {
        let is_slow = slow.contains(&name);
        let every = if is_slow { "1" } else { "16" };
        let workload = fixture::spawn(fixture::workload(), &["paced", "300", "1000", every]);
        let instance_type = if is_slow { "big" } else { "small" };
        agents.push(tokio::spawn(ship::run(
            RunOptions {
                labels: [("instance_type".to_owned(), instance_type.to_owned())].into(),
                // A paced server uses a few hundredths of a CPU: more CPU samples give its CPU
                // profile enough samples over the test's 20 s.
                rates: bimodal_agent::sample::events::Rates {
                    cpu_frequency_hz: 499,
                    ..Default::default()
                },
                // Each request is a unit of work.
                work_uprobe: Some(bimodal_agent::sample::bpf::WorkUprobe {
                    binary: fixture::workload().to_owned(),
                    symbol: "handle_request".into(),
                }),
                test_refusals: match name == short_chains {
                    true => "unwinder".parse().unwrap(),
                    false => Default::default(),
                },
                ..agent_options(
                    server.url(),
                    name,
                    workload.pid(),
                    vec![EventKind::PageFault, EventKind::Cpu],
                )
            },
            agents_stopped.clone(),
        )));
        workloads.push(workload);
    }

    // Wait for every node's samples of both events, then for 20 s of them.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut answer: Value;
    let mut since_all: Option<Instant> = None;
    loop {
        let (status, body) = server
            .get(&format!(
                "/api/v1/compare?from={start}&to={}",
                super::common::unix_now() + 1
            ))
            .await;
        assert_eq!(status, 200, "{body}");
        answer = serde_json::from_str(&body).unwrap();
        let measured = |metric: &str| {
            answer["metrics"]
                .as_array()
                .and_then(|ms| ms.iter().find(|m| m["name"] == metric))
                .map(|m| m["values"].as_array().unwrap().iter().filter(|v| !v.is_null()).count())
                .unwrap_or(0)
        };
        if since_all.is_none() && measured("cpu") == names.len() && measured("page_fault per CPU-second") == names.len()
        {
            since_all = Some(Instant::now());
        }
        if since_all.is_some_and(|t| t.elapsed() > Duration::from_secs(20)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the fleet's samples never all arrived; last answer:\n{answer:#}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // Kept as a test artifact: what the compare view renders for this fleet.
    let artifacts = super::common::artifacts();
    std::fs::write(artifacts.join("compare.json"), format!("{answer:#}")).unwrap();

    // Two metrics split the fleet, each exactly into the slow nodes and the fast ones: faults
    // per CPU-second (the slow nodes above) and units of work per CPU-second (the slow nodes
    // below, CPU-seconds measured exactly per process). The strongest split is the answer's.
    let metric = |name: &str| -> &Value {
        answer["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no metric {name}: {answer:#}"))
    };
    let values = |name: &str| -> Vec<f64> {
        metric(name)["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    // Every node serves 1,000 requests a second; the slow ones spend more CPU on each: fewer
    // units of work per CPU-second on every slow node than on any fast one.
    let work = values("work per CPU-second");
    let slow_max = [2, 5, 7].iter().map(|&i| work[i]).fold(0.0, f64::max);
    let fast_min = [0, 1, 3, 4, 6].iter().map(|&i| work[i]).fold(f64::MAX, f64::min);
    assert!(slow_max < fast_min, "work per CPU-second {work:?}");
    // A paced server at 1,000 requests a second uses a small share of one CPU.
    for v in values("cpu") {
        assert!(v > 0.005 && v < 0.6, "CPU-seconds per second {v}: {}", metric("cpu"));
    }
    for (name, slow_side) in [("page_fault per CPU-second", "high"), ("work per CPU-second", "low")] {
        let b = &metric(name)["bands"];
        assert_eq!(b["found"], true, "{name}: {b:#}");
        assert_eq!(b[slow_side], serde_json::json!(slow), "{name}: {b:#}");
    }
    let bands = &answer["bands"];
    assert!(
        ["page_fault per CPU-second", "work per CPU-second"].contains(&bands["metric"].as_str().unwrap()),
        "{answer:#}"
    );
    // The answer's bands, by speed: which side is slow, and +1 where the slow band is higher.
    let (slow_side, fast_side, sign) = match bands["slow"].as_str() {
        Some("high") => ("high", "low", 1.0),
        Some("low") => ("low", "high", -1.0),
        other => panic!("no slow band: {other:?} {answer:#}"),
    };
    let slow_nodes: Vec<&str> = bands[slow_side]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(slow_nodes, slow, "{answer:#}");
    assert_eq!(bands[fast_side].as_array().unwrap().len(), 5);
    let ratio = bands["high_median"].as_f64().unwrap() / bands["low_median"].as_f64().unwrap();
    assert!(ratio > 1.5, "{bands:#}");

    // Completion of selectors: every label with its values, the nodes' counted.
    let (status, body) = server.get(&format!("/api/v1/labels?from={start}")).await;
    assert_eq!(status, 200, "{body}");
    let completion: Value = serde_json::from_str(&body).unwrap();
    let label = |name: &str| {
        completion["labels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("no label {name}: {completion:#}"))
            .clone()
    };
    assert_eq!(
        label("node")["values"].as_array().unwrap().len(),
        names.len(),
        "{completion:#}"
    );
    // A node has its name once (ingest stores it among the labels; it was counted twice).
    assert_eq!(label("node")["values"][0]["nodes"], 1, "{completion:#}");
    assert_eq!(
        label("instance_type")["values"],
        serde_json::json!([{"value": "big", "nodes": 3}, {"value": "small", "nodes": 5}])
    );
    assert_eq!(label("comm")["scope"], "process");
    assert!(
        label("comm")["values"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!({"value": "workload"})),
        "{completion:#}"
    );
    let (status, body) = server.get("/api/v1/labels?selector=%7Bzone%3D%7D").await;
    assert_eq!(status, 400, "{body}");

    let labels = answer["explanation"]["labels"].as_array().unwrap();
    assert_eq!(labels[0]["label"], "instance_type", "{labels:#?}");
    assert_eq!(labels[0][format!("{slow_side}_with")], 3);
    assert_eq!(labels[0][format!("{fast_side}_with")], 0);

    // Per event, the largest difference first: the faulting function's own samples.
    let code = answer["explanation"]["code"].as_array().unwrap();
    let session = code
        .iter()
        .find(|d| d["event"] == "page_fault")
        .unwrap_or_else(|| panic!("no page-fault differences: {code:#?}"));
    assert_eq!(
        (&session["function"], &session["measure"]),
        (&"load_session".into(), &"self_value".into()),
        "{code:#?}"
    );
    assert_eq!(session["effect"], sign, "{session:#}");
    assert_eq!(session[slow_side].as_array().unwrap().len(), 3);
    assert_eq!(session[fast_side].as_array().unwrap().len(), 5);
    // The node walking frame pointers beside nodes unwinding from tables: its functions' totals
    // were not compared, on either event.
    let short = &answer["explanation"]["nodes"]["short_chains"];
    assert_eq!(short["page_fault"], serde_json::json!([short_chains]), "{short}");
    assert_eq!(short["cpu"], serde_json::json!([short_chains]), "{short}");
    for d in code.iter().filter(|d| d["measure"] == "total_value") {
        assert_eq!(d[fast_side].as_array().unwrap().len(), 4, "{d:#}");
    }
    // On the cpu event, the slow nodes spend a larger share under the session path.
    assert!(
        code.iter()
            .any(|d| d["event"] == "cpu" && d["function"] == "load_session" && d["effect"] == sign),
        "{code:#?}"
    );

    // Where the faults fell, more on every slow node: the session's mapping. The agent resolves
    // data addresses when it drains, reading the process's mappings then: load_session has
    // mostly unmapped its pages by then ("unknown"), but a drain that comes while a request
    // holds them (mmap hands back the same range each time) finds them anonymous memory, which
    // a slower machine does more often (the clean-clone CI run of 36d9364 ranked "anon" first).
    let data = answer["explanation"]["data"].as_array().unwrap();
    let first = data
        .iter()
        .find(|d| d["event"] == "page_fault")
        .unwrap_or_else(|| panic!("no data object differs: {data:#?}"));
    let session_memory = [
        ("unknown", "memory unmapped before the agent read the mappings"),
        ("anon", "anon"),
    ];
    assert!(
        session_memory
            .iter()
            .any(|(kind, object)| first["kind"] == *kind && first["object"] == *object),
        "{data:#?}"
    );
    assert_eq!(first["effect"], sign, "{first:#}");
    assert_eq!(first[slow_side].as_array().unwrap().len(), 3);

    // The differential flame graph of the bands: per node and CPU-second, the slow band (b)
    // faults several times as much under load_session as the fast one (a).
    let range = format!("from={start}&to={}", super::common::unix_now() + 1);
    let (status, body) = server
        .get(&format!("/api/v1/diff?event=page_fault&groups=bands&{range}"))
        .await;
    assert_eq!(status, 200, "{body}");
    let diff: Value = serde_json::from_str(&body).unwrap();
    std::fs::write(artifacts.join("diff.json"), format!("{diff:#}")).unwrap();
    assert_eq!(
        diff["unit"],
        "faults per CPU-second",
        "{}",
        &body[..body.len().min(2000)]
    );
    // Its own bands, a moment later: either metric's, the slow nodes as `b` either way.
    assert!(
        ["high band (slow)", "low band (slow)"].contains(&diff["b"]["label"].as_str().unwrap()),
        "{}",
        diff["b"]
    );
    assert_eq!(diff["b"]["nodes"], serde_json::json!(slow));
    assert_eq!(diff["a"]["nodes"].as_array().unwrap().len(), 4);
    assert_eq!(diff["a"]["nodes_short_chains"], serde_json::json!([short_chains]));
    let touch = find(&diff["root"], "load_session").expect("load_session in the diff");
    let (a, b) = (touch["a"].as_f64().unwrap(), touch["b"].as_f64().unwrap());
    assert!(b > 2.0 * a && a > 0.0, "a {a} b {b}");
    // Within a factor of the slow band's median of faults per CPU-second in the compare answer
    // (both per node per CPU-second).
    let high_median = metric("page_fault per CPU-second")["bands"]["high_median"]
        .as_f64()
        .unwrap();
    assert!(
        b > high_median / 3.0 && b < high_median * 3.0,
        "b {b}, band median {high_median}"
    );
    // Per unit of work (requests counted by the uprobe): still several times more on the slow
    // band, now per request.
    let (status, body) = server
        .get(&format!("/api/v1/diff?event=page_fault&groups=bands&per=work&{range}"))
        .await;
    assert_eq!(status, 200, "{body}");
    let per_work: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(per_work["unit"], "faults per unit of work");
    let session = find(&per_work["root"], "load_session").expect("load_session per unit of work");
    let (a, b) = (session["a"].as_f64().unwrap(), session["b"].as_f64().unwrap());
    // One request in sixteen faults 16 pages on the fast band, every request on the slow one.
    assert!(
        a > 0.3 && a < 3.0 && b > 8.0 && b < 32.0,
        "faults per request: a {a} b {b}"
    );
    // Relative mode: shares of each group's total.
    let (status, body) = server
        .get(&format!(
            "/api/v1/diff?event=page_fault&groups=bands&mode=relative&{range}"
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let relative: Value = serde_json::from_str(&body).unwrap();
    assert!((relative["root"]["a"].as_f64().unwrap() - 1.0).abs() < 1e-9);
    // Folded pairs, and one pprof profile per side.
    let (status, folded) = server
        .get(&format!(
            "/api/v1/diff?event=page_fault&groups=bands&format=folded&{range}"
        ))
        .await;
    assert_eq!(status, 200, "{folded}");
    let line = folded
        .lines()
        .find(|l| l.contains(";load_session"))
        .unwrap_or_else(|| panic!("no load_session stack:\n{folded}"));
    let numbers: Vec<f64> = line.rsplitn(3, ' ').take(2).map(|n| n.parse().unwrap()).collect();
    assert!(numbers[0] > numbers[1], "{line}");
    for side in ["a", "b"] {
        let (status, pprof) = server
            .get_bytes(&format!(
                "/api/v1/diff?event=page_fault&groups=bands&format=pprof&side={side}&{range}"
            ))
            .await;
        assert_eq!(status, 200);
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&pprof[..]), &mut raw).unwrap();
        let profile = <bimodal_proto::pprof::Profile as prost::Message>::decode(&raw[..]).unwrap();
        assert!(!profile.sample.is_empty());
        assert_eq!(
            profile.string_table[profile.sample_type[1].unit as usize],
            "faults per 1000 CPU-seconds"
        );
    }
    // Two selectors instead of the bands; a selector matching nothing is an empty side.
    let (status, body) = server
        .get(&format!(
            "/api/v1/diff?event=page_fault&a={}&b={}&{range}",
            urlencode(r#"{instance_type="small"}"#),
            urlencode(r#"{instance_type="big"}"#)
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let by_label: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(by_label["b"]["nodes"], diff["b"]["nodes"]);
    let (status, body) = server
        .get(&format!("/api/v1/diff?event=page_fault&a=%7B&b=%7B%7D&{range}"))
        .await;
    assert_eq!(status, 400, "{body}");

    // The same from the `bimodal` CLI: the verdict and the explanation as text, and the pprof
    // pair of the bands.
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_bimodal"))
            .args(["--server-url", &server.url()])
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let from = start.to_string();
    let (ok, text) = cli(&["compare", "--from", &from]);
    assert!(ok, "{text}");
    std::fs::write(artifacts.join("compare.txt"), &text).unwrap();
    // A later window than the answer's above, with more samples: either metric may split the
    // fleet most strongly by then.
    let slow_side = match (
        text.contains("two bands in page_fault per CPU-second"),
        text.contains("two bands in work per CPU-second"),
    ) {
        (true, false) => "high",
        (false, true) => "low",
        _ => panic!("neither metric's bands: {text}"),
    };
    assert!(text.contains(&format!("{slow_side} band (slow), median")), "{text}");
    assert!(
        text.contains(match slow_side {
            "high" => "instance_type=\"big\": 3 of 3 high-band nodes, 0 of 5 low-band nodes",
            _ => "instance_type=\"big\": 0 of 5 high-band nodes, 3 of 3 low-band nodes",
        }),
        "{text}"
    );
    assert!(text.contains("load_session (self)"), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let (ok, text) = cli(&[
        "diff",
        "--event",
        "page_fault",
        "--groups",
        "bands",
        "--from",
        &from,
        "--format",
        "pprof",
        "--output",
    ]
    .into_iter()
    .chain([dir.path().to_str().unwrap()])
    .collect::<Vec<_>>());
    assert!(ok, "{text}");
    assert!(
        dir.path().join("a.pb.gz").exists() && dir.path().join("b.pb.gz").exists(),
        "{text}"
    );
    // A wrong selector is the server's clear error, not a crash.
    let (ok, text) = cli(&["compare", "--selector", "{zone=}"]);
    assert!(!ok);
    assert!(text.contains("the server answered 400: `selector`"), "{text}");

    // The compare view in a browser: the same bands, load_session first, a click focuses the
    // differential flame graph on it, and the URL carries it (screenshot in target/artifacts).
    let screenshot = super::common::artifacts().join("compare.png");
    let mut args = vec!["--url".to_owned(), format!("{}/", server.url())];
    for node in slow {
        args.extend(["--slow".to_owned(), node.to_owned()]);
    }
    args.extend(
        ["--function", "load_session", "--event", "page_fault", "--screenshot"]
            .map(str::to_owned)
            .into_iter()
            .chain([screenshot.to_string_lossy().into_owned()]),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    super::common::web_test("test/compare-browser.mjs", &args);

    // The fleet view of the same fleet: every node listed, the same slow band, a selector written
    // with the completion list alone, Back, a fact's value narrowing the selector; and the alerts
    // view of a server without rules (screenshots fleet.png and fleet-alerts.png).
    let screenshot = super::common::artifacts().join("fleet.png");
    let mut args = vec!["--url".to_owned(), format!("{}/", server.url())];
    for node in names {
        args.extend(["--node".to_owned(), node.to_owned()]);
    }
    for node in slow {
        args.extend(["--slow".to_owned(), node.to_owned()]);
    }
    args.extend(["--reduced".to_owned(), short_chains.to_owned()]);
    args.extend(["--screenshot".to_owned(), screenshot.to_string_lossy().into_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    super::common::web_test("test/fleet-browser.mjs", &args);

    let _ = stop_agents.send(true);
    for agent in agents {
        agent.await.unwrap().expect("agent stops cleanly");
    }
    drop(workloads);
    server.stop().await;
}

/// One simulated NUMA machine's batch: a second of CPU, `remote` NUMA hinting faults on remote
/// pages under `scan_table` (the rest of the CPU in `parse_request`), and, when `bss_far`, the
/// database's .bss held on node 1 while its threads run on node 0.
fn numa_batch(id: u8, node: usize, remote: u64, bss_far: bool) -> v1::Batch {
    let batch_id = vec![
        id, node as u8, 0x5c, 0x11, 0xa, 0xb, 0xc, 0xd, 0xe, 0xf, 1, 2, 3, 4, 5, 6,
    ];
    numa_batch_ending(batch_id, super::wire::now_nanos(), remote, bss_far)
}

/// [`numa_batch`] with its own id, ending at `end` (Unix nanoseconds).
pub(super) fn numa_batch_ending(batch_id: Vec<u8>, end: i64, remote: u64, bss_far: bool) -> v1::Batch {
    let frame = |f: &str| v1::Frame {
        kind: v1::FrameKind::User as i32,
        function: f.into(),
        module: "/usr/bin/scylla".into(),
        ..Default::default()
    };
    let source = |event: v1::EventKind, name: &str, unit: &str| v1::EventSource {
        event: event as i32,
        description: name.into(),
        name: name.into(),
        unit: unit.into(),
        period: 1,
        dropped: 0,
    };
    let sample = |event: v1::EventKind, stack: u32, count: u64, value: u64| v1::Sample {
        event: event as i32,
        stack_index: stack,
        pid: 42,
        tid: 42,
        comm: "scylla".into(),
        count,
        value,
    };
    let mapping = |kind: &str, numa: u32, pages: u64| v1::MappingPlacement {
        kind: kind.into(),
        path: "/usr/bin/scylla".into(),
        start: 0x1000,
        end: 0x1000 + pages * 4096,
        permissions: "rw-p".into(),
        pages_per_node: [(numa, pages)].into(),
        page_size: 4096,
    };
    v1::Batch {
        batch_id,
        start_unix_nanos: end - 1_000_000_000,
        end_unix_nanos: end,
        frames: vec![frame("main"), frame("scan_table"), frame("parse_request")],
        stacks: vec![
            v1::Stack {
                frame_indices: vec![1, 0],
            },
            v1::Stack {
                frame_indices: vec![2, 0],
            },
        ],
        samples: vec![
            sample(v1::EventKind::Cpu, 0, 40, 400_000_000),
            sample(v1::EventKind::Cpu, 1, 60, 600_000_000),
            sample(v1::EventKind::RemoteAccess, 0, remote, remote),
        ],
        sources: vec![
            source(v1::EventKind::Cpu, "cpu-clock", "nanoseconds"),
            source(v1::EventKind::RemoteAccess, "task_numa_fault", "pages"),
        ],
        placements: vec![v1::Placement {
            pid: 42,
            comm: "scylla".into(),
            executable: "/usr/bin/scylla".into(),
            threads_per_node: [(0, 8)].into(),
            mappings: vec![
                mapping("bss", if bss_far { 1 } else { 0 }, 16_384),
                mapping("heap", 0, 4096),
            ],
        }],
        ..Default::default()
    }
}

/// `bimodal compare ARGS` against `server`: its output, stdout then stderr, once it succeeded.
fn compare_cli(server: &TestServer, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bimodal"))
        .args(["--server-url", &server.url(), "compare"])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    text
}

/// Sends one node's `batches` on its own stream, as its agent would, and checks that every one
/// is acknowledged.
async fn send_node(server: &TestServer, node: &str, batches: impl IntoIterator<Item = v1::Batch>) {
    let mut messages = vec![super::wire::hello(node)];
    messages.extend(batches.into_iter().map(super::wire::req));
    let sent = messages.len() - 1;
    let acks = super::wire::exchange(server, messages).await.unwrap();
    assert_eq!(acks.len(), sent, "{node}: {acks:?}");
}

/// The ScyllaDB case on a simulated fleet of NUMA machines (batches as agents send them, over
/// real gRPC into a real ClickHouse; no NUMA hardware here): on three of eight nodes the
/// database's .bss sits on the NUMA node its threads do not run on, and remote accesses (NUMA
/// hinting faults on remote pages) per CPU-second are five times the others'. Compare must find
/// those three as the slow band, name the remote .bss as the placement finding that goes with
/// it, and `scan_table` as the function whose remote accesses differ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_bss_on_the_slow_nodes_is_the_placement_that_splits_them() {
    let server = TestServer::start().await;
    let start = super::common::unix_now() - 5;
    let slow = [1usize, 4, 6];
    for node in 0..8 {
        let far = slow.contains(&node);
        let remote = if far { 5_000 } else { 1_000 } + 20 * node as u64;
        let batches = (0..3).map(|id| numa_batch(id, node, remote, far));
        send_node(&server, &format!("numa-{node}"), batches).await;
    }
    // A ninth node whose agent does not sample remote accesses: not measured, not zero.
    let mut cpu_only = numa_batch(9, 9, 0, false);
    cpu_only.samples.retain(|s| s.event == v1::EventKind::Cpu as i32);
    cpu_only.sources.retain(|s| s.event == v1::EventKind::Cpu as i32);
    cpu_only.placements.clear();
    let messages = vec![super::wire::hello("numa-cpu-only"), super::wire::req(cpu_only)];
    assert_eq!(super::wire::exchange(&server, messages).await.unwrap().len(), 1);
    let (status, body) = server
        .get(&format!(
            "/api/v1/compare?from={start}&to={}",
            super::common::unix_now() + 1
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let rates = answer["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "remote_access per CPU-second")
        .unwrap();
    let position = answer["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .position(|n| n == "numa-cpu-only")
        .unwrap();
    assert!(rates["values"][position].is_null(), "{rates}");
    // Two metrics split the same three nodes off: remote accesses per CPU-second (five times
    // the others') and the share of memory far from its threads (most of it there, none
    // elsewhere: thousands of pages judged on every node make that the strongest split).
    assert_eq!(rates["bands"]["found"], true, "{rates:#}");
    assert_eq!(
        rates["bands"]["high"],
        serde_json::json!(["numa-1", "numa-4", "numa-6"])
    );
    let bands = &answer["bands"];
    assert_eq!(bands["metric"], "remote_memory", "{answer:#}");
    assert_eq!(
        bands["high"],
        serde_json::json!(["numa-1", "numa-4", "numa-6"]),
        "{answer:#}"
    );
    assert_eq!(bands["slow"], "high");
    let remote = answer["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "remote_memory");
    assert!(remote.is_some(), "the placement metric is measured: {answer:#}");
    let placement = answer["explanation"]["placement"].as_array().unwrap();
    assert_eq!(
        placement[0]["finding"], "bss of scylla (/usr/bin/scylla) held on a NUMA node none of its threads ran on",
        "{placement:#?}"
    );
    assert_eq!(
        (&placement[0]["high_with"], &placement[0]["low_with"]),
        (&3.into(), &0.into())
    );
    let code = answer["explanation"]["code"].as_array().unwrap();
    let first = code
        .iter()
        .find(|d| d["event"] == "remote_access")
        .expect("a remote-access difference");
    assert_eq!(first["function"], "scan_table", "{code:#?}");
    assert_eq!(first["effect"], 1.0);

    // Bad input gets a clear answer, never a made-up band.
    let range = format!("from={start}&to={}", super::common::unix_now() + 1);
    let verdict = |body: &str| -> (Value, String) {
        let v: Value = serde_json::from_str(body).unwrap();
        let text = v["verdict"].as_str().unwrap_or_default().to_owned();
        (v, text)
    };
    let (status, body) = server
        .get(&format!(
            "/api/v1/compare?{range}&{}",
            super::common::selector(r#"{node="nope"}"#)
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let (v, text) = verdict(&body);
    assert!(v["bands"].is_null() && text.contains("no node matches"), "{body}");
    let (_, body) = server.get("/api/v1/compare?from=1000000000&to=1000000600").await;
    assert!(
        verdict(&body).1.contains("no node matches the selector in this range"),
        "{body}"
    );
    let (_, body) = server
        .get(&format!(
            "/api/v1/compare?{range}&{}",
            super::common::selector(r#"{node=~"numa-[0-2]"}"#)
        ))
        .await;
    let (v, text) = verdict(&body);
    assert!(v["bands"].is_null() && text.contains("at least 5 are needed"), "{body}");
    let (status, body) = server.get(&format!("/api/v1/compare?{range}&metric=bogus")).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("unknown metric `bogus`; this range has: cpu, remote_access per CPU-second"),
        "{body}"
    );
    // A metric chosen by hand is the only one tested: remote memory is zero on five nodes and
    // a share of thousands of pages on three, which is a band of its own.
    let (status, body) = server
        .get(&format!("/api/v1/compare?{range}&metric=remote_memory"))
        .await;
    assert_eq!(status, 200, "{body}");
    let (v, text) = verdict(&body);
    assert_eq!(v["metrics"].as_array().unwrap().len(), 1);
    assert!(text.starts_with("two bands in remote_memory"), "{body}");
    assert_eq!(v["bands"]["high"], serde_json::json!(["numa-1", "numa-4", "numa-6"]));
    // A diff of bands that are not there says so.
    let (status, body) = server
        .get(&format!("/api/v1/diff?event=cpu&groups=bands&metric=cpu&{range}"))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("no groups to compare: no bands"), "{body}");

    // Two groups given (`a` the three with the far .bss, `b` five of the others): no bands are
    // looked for; every metric is tested between them and the same explanation follows, with
    // `low` for a and `high` for b.
    let (a, b) = (r#"{node=~"numa-[146]"}"#, r#"{node=~"numa-[02357]"}"#);
    let given = |a: &str, b: &str| {
        let a: String = form_urlencoded::byte_serialize(a.as_bytes()).collect();
        let b: String = form_urlencoded::byte_serialize(b.as_bytes()).collect();
        format!("/api/v1/compare?{range}&a={a}&b={b}")
    };
    let (status, body) = server.get(&given(a, b)).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v["bands"].is_null(), "{v:#}");
    assert_eq!(
        v["groups"]["a"]["nodes"],
        serde_json::json!(["numa-1", "numa-4", "numa-6"])
    );
    assert_eq!(
        v["groups"]["b"]["nodes"],
        serde_json::json!(["numa-0", "numa-2", "numa-3", "numa-5", "numa-7"])
    );
    let metrics = v["metrics"].as_array().unwrap();
    let rate = metrics
        .iter()
        .find(|m| m["name"] == "remote_access per CPU-second")
        .expect("remote accesses compared");
    // Every node of a above every node of b: the smallest p two groups of 3 and 5 can have.
    assert_eq!(rate["effect"], -1.0, "{rate:#}");
    assert!(
        (rate["p_value"].as_f64().unwrap() - 2.0 / 56.0).abs() < 1e-9,
        "{rate:#}"
    );
    assert!(rate["low_median"].as_f64().unwrap() > 4.0 * rate["high_median"].as_f64().unwrap());
    assert!(
        metrics[0]["p_value"].as_f64() <= rate["p_value"].as_f64(),
        "the most consistent difference first: {metrics:#?}"
    );
    assert!(
        v["verdict"]
            .as_str()
            .unwrap()
            .contains("differs most between the groups"),
        "{v:#}"
    );
    let placement = &v["explanation"]["placement"][0];
    assert_eq!(
        (&placement["low_with"], &placement["high_with"]),
        (&3.into(), &0.into()),
        "{v:#}"
    );
    let code = v["explanation"]["code"].as_array().unwrap();
    let first = code
        .iter()
        .find(|d| d["event"] == "remote_access")
        .expect("a remote-access difference");
    assert_eq!(first["function"], "scan_table", "{code:#?}");
    assert_eq!(first["effect"], -1.0);
    // Groups that overlap, a selector beside them, groups over other processes, a group with no
    // node: each a clear 400.
    for (path, says) in [
        (
            given(a, r#"{node=~"numa-[1-3]"}"#),
            "node `numa-1` matches both `a` and `b`",
        ),
        (format!("{}&selector=%7B%7D", given(a, b)), "give either a selector"),
        (
            given(a, r#"{node=~"numa-[02357]",comm="x"}"#),
            "must select the same processes",
        ),
        (given(a, r#"{node="nope"}"#), "the group `b` has no node in this range"),
        (given(a, "{node=}"), "`b`: selector error"),
    ] {
        let (status, body) = server.get(&path).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body.contains(says), "{path}: {body}");
    }
    // The CLI's --a/--b: the groups and their differences as text.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bimodal"))
        .args(["--server-url", &server.url(), "compare", "--from", &start.to_string()])
        .args(["--a", a, "--b", b])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    for expected in [
        "group a, {node=~\"numa-[146]\"}: numa-1 numa-4 numa-6",
        "memory placement that splits the groups:",
        "scan_table (self)",
        "functions that differ, per node (medians a → b;",
        "remote_access per CPU-second (",
    ] {
        assert!(text.contains(expected), "no `{expected}` in:\n{text}");
    }
    server.stop().await;
}

/// A node that turns slow half-way through the window (simulated NUMA nodes as above, over two
/// whole minutes ten minutes ago: three nodes at five times the others' remote accesses
/// throughout, numa-7 at the others' rate in the first minute and the slow nodes' in the
/// second). Its average puts it in a band with nothing to say why; the answer must name it as
/// having changed band within the window, in the verdict too, and flag no node that kept its
/// rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_turns_slow_half_way_through_the_window_is_flagged() {
    let server = TestServer::start().await;
    let start = (super::common::unix_now() - 600) / 60 * 60;
    let slow = [1usize, 4, 6];
    for node in 0..8 {
        let batches = (0..12u8).map(|k| {
            let end = start as i64 + 5 + 10 * i64::from(k);
            let slow_now = slow.contains(&node) || (node == 7 && k >= 6);
            let remote = if slow_now { 5_000 } else { 1_000 } + 20 * node as u64;
            let id = vec![node as u8, k, 0x4a, 0x1f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
            numa_batch_ending(id, end * 1_000_000_000, remote, false)
        });
        send_node(&server, &format!("numa-{node}"), batches).await;
    }
    let (status, body) = server
        .get(&format!("/api/v1/compare?from={start}&to={}", start + 120))
        .await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let bands = &answer["bands"];
    assert_eq!(bands["metric"], "remote_access per CPU-second", "{answer:#}");
    let within = &bands["within_window"];
    assert_eq!(
        within["halves"],
        serde_json::json!([
            [rfc3339(start as u32), rfc3339(start as u32 + 60)],
            [rfc3339(start as u32 + 60), rfc3339(start as u32 + 120)]
        ]),
        "{within:#}"
    );
    let moved = within["moved"].as_array().unwrap();
    assert_eq!(moved.len(), 1, "only numa-7 changed: {within:#}");
    assert_eq!(moved[0]["node"], "numa-7");
    assert_eq!(
        (&moved[0]["first_band"], &moved[0]["second_band"]),
        (&"low".into(), &"high".into())
    );
    // 1,140 and 5,140 remote accesses per CPU-second, on 6,840 and 30,840 of them.
    assert_eq!(
        (&moved[0]["first"], &moved[0]["second"]),
        (&1140.0.into(), &5140.0.into()),
        "{within:#}"
    );
    assert!(moved[0]["p_value"].as_f64().unwrap() < 1e-12, "{within:#}");
    // The bands were cut on remote accesses: that event's functions are tested again on the
    // half that did not cut them, the others are not.
    let held = &answer["explanation"]["held_out"];
    assert_eq!(
        (&held["event"], &held["reason"]),
        (&"remote_access".into(), &Value::Null),
        "{held:#}"
    );
    let code = answer["explanation"]["code"].as_array().unwrap();
    let tested: Vec<&Value> = code.iter().filter(|d| !d["held_out"].is_null()).collect();
    assert!(!tested.is_empty(), "{answer:#}");
    assert_eq!(held["summary"]["tested"], tested.len(), "{held:#}");
    for d in &code[..] {
        let own_event = d["event"] == "remote_access";
        assert_eq!(own_event, !d["held_out"].is_null(), "{d:#}");
        if own_event {
            let (q, confirmed) = (d["held_out"]["q_value"].as_f64().unwrap(), &d["held_out"]["confirmed"]);
            assert_eq!(confirmed, &Value::Bool(q <= 0.05), "{d:#}");
        }
    }
    let verdict = answer["verdict"].as_str().unwrap();
    assert!(
        verdict.ends_with("; 1 node changed band half-way through the window: numa-7"),
        "{verdict}"
    );
    // The CLI says it in words.
    let text = compare_cli(
        &server,
        &["--from", &start.to_string(), "--to", &(start + 120).to_string()],
    );
    assert!(
        text.contains(
            "numa-7 changed band half-way through: low band in the first half (1,140), high band in the second (5,140)"
        ),
        "{text}"
    );
    assert!(
        text.contains("remote_access made the values the bands were cut on: its functions are tested again"),
        "{text}"
    );
    // One minute has no halves: said so, nobody flagged.
    let (status, body) = server
        .get(&format!("/api/v1/compare?from={start}&to={}", start + 60))
        .await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    if !answer["bands"].is_null() {
        let within = &answer["bands"]["within_window"];
        assert!(
            within["halves"].is_null() && within["moved"] == serde_json::json!([]),
            "{within:#}"
        );
        let held = &answer["explanation"]["held_out"];
        assert!(held["reason"].as_str().unwrap().contains("one bucket"), "{held:#}");
    }
    server.stop().await;
}

/// A fleet larger than the explanation reads whole (simulated NUMA nodes as above: on six of
/// twenty-four the .bss is far): with `explained_nodes=5` the bands are still found over every
/// node, but the code differences are read over five nodes of each band, the same five on every
/// request, named in the answer and aligned with each difference's values; `all` reads every
/// node; the placement finding counts every node either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_fleet_is_explained_from_the_same_sample_of_each_band() {
    let server = TestServer::start().await;
    let start = super::common::unix_now() - 5;
    let slow = [2usize, 5, 9, 14, 17, 21];
    for node in 0..24 {
        let far = slow.contains(&node);
        let remote = if far { 5_000 } else { 1_000 } + 20 * node as u64;
        let batches = (0..3).map(|id| numa_batch(id, node, remote, far));
        send_node(&server, &format!("numa-{node:02}"), batches).await;
    }
    let range = format!("from={start}&to={}", super::common::unix_now() + 1);
    let compare = |query: String| {
        let (server, path) = (&server, format!("/api/v1/compare?{range}&{query}"));
        async move {
            let (status, body) = server.get(&path).await;
            assert_eq!(status, 200, "{path}: {body}");
            serde_json::from_str::<Value>(&body).unwrap()
        }
    };
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_owned())
            .collect()
    };
    let slow_names: Vec<String> = slow.iter().map(|n| format!("numa-{n:02}")).collect();

    let answer = compare("explained_nodes=5".into()).await;
    assert_eq!(names(&answer["bands"]["high"]), slow_names, "{answer:#}");
    let read = &answer["explanation"]["nodes"];
    assert_eq!(read["per_group"], 5, "{read}");
    let (high, low) = (names(&read["high"]), names(&read["low"]));
    assert_eq!((high.len(), low.len()), (5, 5), "{read}");
    assert!(high.iter().all(|n| slow_names.contains(n)), "{read}");
    assert!(low.iter().all(|n| !slow_names.contains(n)), "{read}");
    let first = |answer: &Value| -> Value {
        answer["explanation"]["code"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["event"] == "remote_access")
            .cloned()
            .unwrap_or_else(|| panic!("no remote-access difference: {answer:#}"))
    };
    let scan = first(&answer);
    assert_eq!(scan["function"], "scan_table", "{scan:#}");
    assert_eq!(scan["effect"], 1.0);
    // Each value is one node's of those read, in their order: remote accesses per CPU-second
    // rise with the node's number (20 more per node), within each band.
    for (band, members) in [("high", &high), ("low", &low)] {
        let values: Vec<f64> = scan[band]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(values.len(), 5, "{scan:#}");
        assert!(
            values.windows(2).all(|w| w[0] < w[1]),
            "{band}: {values:?} for {members:?}"
        );
    }
    // The placement finding is every node's, not the sample's.
    let placement = &answer["explanation"]["placement"][0];
    assert_eq!(
        (&placement["high_with"], &placement["low_with"]),
        (&6.into(), &0.into()),
        "{placement:#}"
    );
    // The same nodes on the next request.
    let again = compare("explained_nodes=5".into()).await;
    assert_eq!(again["explanation"]["nodes"], *read);

    let whole = compare("explained_nodes=all".into()).await;
    let read = &whole["explanation"]["nodes"];
    assert!(read["per_group"].is_null(), "{read}");
    assert_eq!(names(&read["high"]), slow_names);
    assert_eq!(names(&read["low"]).len(), 18);
    let every = first(&whole);
    assert_eq!(
        (
            every["high"].as_array().unwrap().len(),
            every["low"].as_array().unwrap().len()
        ),
        (6, 18)
    );
    // Each sampled node's value is the one it has when every node is read.
    let value_of = |answer: &Value, difference: &Value| -> std::collections::HashMap<String, f64> {
        let read = &answer["explanation"]["nodes"];
        ["low", "high"]
            .into_iter()
            .flat_map(|band| {
                names(&read[band])
                    .into_iter()
                    .zip(difference[band].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()))
            })
            .collect()
    };
    let all_values = value_of(&whole, &every);
    for (node, value) in value_of(&answer, &scan) {
        assert_eq!(Some(&value), all_values.get(&node), "{node}");
    }
    // The default reads up to 100 of each: here every node.
    assert_eq!(compare(String::new()).await["explanation"]["nodes"]["per_group"], 100);

    // Two groups given are sampled the same way.
    let a: String = form_urlencoded::byte_serialize(br#"{node=~"numa-(02|05|09|14|17|21)"}"#).collect();
    let b: String = form_urlencoded::byte_serialize(br#"{node!~"numa-(02|05|09|14|17|21)"}"#).collect();
    let given = compare(format!("a={a}&b={b}&explained_nodes=3")).await;
    let read = &given["explanation"]["nodes"];
    assert_eq!(
        (names(&read["low"]).len(), names(&read["high"]).len()),
        (3, 3),
        "{given:#}"
    );
    assert!(names(&read["low"]).iter().all(|n| slow_names.contains(n)), "{read}");

    // Per-node functions over a long range read whole 10-minute buckets, as compare does, and
    // say so: the range asked for starts and ends mid-bucket.
    let (from, to) = (start - 40 * 60 + 7, super::common::unix_now() + 1);
    let (status, body) = server
        .get(&format!(
            "/api/v1/functions?event=remote_access&source=task_numa_fault&from={from}&to={to}"
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let functions: Value = serde_json::from_str(&body).unwrap();
    let read = |key: &str| -> u64 {
        let text = functions[key].as_str().unwrap();
        let t = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).unwrap();
        t.unix_timestamp() as u64
    };
    assert_eq!(
        (read("from"), read("to")),
        (from / 600 * 600, to.div_ceil(600) * 600),
        "{functions:#}"
    );
    assert_eq!(functions["nodes"].as_array().unwrap().len(), 24);
    assert_eq!(functions["functions"][0]["function"], "scan_table", "{functions:#}");

    // Over that long range compare reads the sample's function values from the 10-minute
    // rollup, which keys nodes by their hash: the same nodes, with the values read per minute.
    let (status, body) = server
        .get(&format!("/api/v1/compare?from={from}&to={to}&explained_nodes=5"))
        .await;
    assert_eq!(status, 200, "{body}");
    let long: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(long["explanation"]["nodes"], answer["explanation"]["nodes"], "{long:#}");
    let long_scan = first(&long);
    assert_eq!(long_scan["function"], "scan_table", "{long_scan:#}");
    assert_eq!(value_of(&long, &long_scan), value_of(&answer, &scan));

    // The CLI says which nodes the differences were read over.
    let text = compare_cli(&server, &["--from", &start.to_string(), "--explained-nodes", "5"]);
    assert!(
        text.contains(
            "functions and data objects are compared over 5 of the 18 low-band nodes and 5 of the 6 \
             high-band nodes (the same nodes every time)"
        ),
        "{text}"
    );

    for bad in ["explained_nodes=1", "explained_nodes=some"] {
        let (status, body) = server.get(&format!("/api/v1/compare?{range}&{bad}")).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(
            body.contains("`explained_nodes` must be `all` or a whole number of at least 2"),
            "{body}"
        );
    }
    server.stop().await;
}

/// Nodes whose PMU counts cycles, instructions and cache misses (node-wide counters, as the
/// agent sends them where `perf_event_open` counts them; no PMU here, so the batches are
/// simulated, over real gRPC into a real ClickHouse): three of eight take 2.4 cycles per
/// instruction and 18 misses per thousand instructions, the others about 1 and 4. Compare
/// measures `cpi` and `cache_miss per kilo-instruction` per node, finds the three as the high
/// band, and a node without those counters (a VM without a PMU) is not measured, not zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counted_cycles_and_cache_misses_give_cpi_and_misses_per_kilo_instruction() {
    let server = TestServer::start().await;
    let start = super::common::unix_now() - 5;
    let slow = [2usize, 5, 7];
    let cpi_of = |node: usize| -> (f64, f64) {
        if slow.contains(&node) {
            (2.4 + 0.01 * node as f64, 18.0 + 0.1 * node as f64)
        } else {
            (1.0 + 0.02 * node as f64, 4.0 + 0.1 * node as f64)
        }
    };
    for node in 0..9 {
        let batches = (0..3).map(|id| {
            let mut batch = numa_batch(id, node, 1_000, false);
            batch.placements.clear();
            if node < 8 {
                let (cpi, mpki) = cpi_of(node);
                let instructions = 1_000_000_000u64;
                batch.counters = vec![
                    v1::Counter {
                        name: "instructions".into(),
                        value: instructions,
                    },
                    v1::Counter {
                        name: "cycles".into(),
                        value: (cpi * instructions as f64) as u64,
                    },
                    v1::Counter {
                        name: "cache_miss".into(),
                        value: (mpki * instructions as f64 / 1000.0) as u64,
                    },
                ];
            }
            batch
        });
        send_node(&server, &format!("pmu-{node}"), batches).await;
    }
    // Seconds read per minute (counters_1m), and the hour around them in 10-minute buckets
    // (counters_10m).
    let end = super::common::unix_now() + 1;
    for (from, to) in [(start, end), (end - 3600, end)] {
        let (status, body) = server.get(&format!("/api/v1/compare?from={from}&to={to}")).await;
        assert_eq!(status, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        let nodes: Vec<&str> = answer["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        for (name, which) in [("cpi", 0), ("cache_miss per kilo-instruction", 1)] {
            let expected = |n: usize| if which == 0 { cpi_of(n).0 } else { cpi_of(n).1 };
            let metric = answer["metrics"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["name"] == name)
                .unwrap_or_else(|| panic!("no {name} over [{from}, {to}): {answer:#}"));
            assert_eq!(metric["kind"], "ratio", "{metric:#}");
            for (i, node) in nodes.iter().enumerate() {
                let n: usize = node.trim_start_matches("pmu-").parse().unwrap();
                let value = &metric["values"][i];
                if n == 8 {
                    assert!(value.is_null(), "{name} of a node without a PMU: {metric:#}");
                } else {
                    let v = value.as_f64().unwrap();
                    assert!((v - expected(n)).abs() < 1e-3 * expected(n), "{name} of {node}: {v}");
                }
            }
            assert_eq!(metric["bands"]["found"], true, "{metric:#}");
            assert_eq!(
                metric["bands"]["high"],
                serde_json::json!(["pmu-2", "pmu-5", "pmu-7"]),
                "{metric:#}"
            );
        }
    }
    // Asked for by name.
    let (status, body) = server
        .get(&format!(
            "/api/v1/compare?from={start}&to={}&metric=cpi",
            super::common::unix_now() + 1
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["bands"]["metric"], "cpi", "{answer:#}");
    assert_eq!(answer["bands"]["slow"], "high", "{answer:#}");
    server.stop().await;
}

/// False sharing on some nodes (simulated PMU batches with data addresses, over real gRPC into a
/// real ClickHouse): every node takes cache misses on line 0x1000 of `counters` (.bss of the
/// database); on three of eight, line 0x1040 of the same variable misses fifty times as often.
/// Compare's data explanation names that line, not only the variable: over a few seconds (read
/// from `data_samples`, a row per minute) and over the hour around them (whole 10-minute buckets,
/// read from the `data_objects_10m` rollup).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_cache_line_on_the_slow_nodes_is_named() {
    let server = TestServer::start().await;
    let start = super::common::unix_now() - 5;
    let slow = [1usize, 3, 6];
    for node in 0..8 {
        let batches = (0..3).map(|id| {
            let mut batch = numa_batch(id, node, 1_000, false);
            batch.placements.clear();
            let shared = if slow.contains(&node) { 5_000 } else { 100 } + 10 * node as u64;
            let data = |line: u64, count: u64| v1::DataSample {
                event: v1::EventKind::CacheMiss as i32,
                stack_index: 0,
                pid: 42,
                tid: 42,
                comm: "scylla".into(),
                count,
                value: count * 100,
                mapping_kind: "bss".into(),
                mapping_path: "/usr/bin/scylla".into(),
                symbol: "counters".into(),
                cache_line: line,
            };
            let own = 1_000 + 10 * node as u64;
            batch.samples.push(v1::Sample {
                event: v1::EventKind::CacheMiss as i32,
                stack_index: 0,
                pid: 42,
                tid: 42,
                comm: "scylla".into(),
                count: own + shared,
                value: (own + shared) * 100,
            });
            batch.sources.push(v1::EventSource {
                event: v1::EventKind::CacheMiss as i32,
                description: "last-level cache misses, 1 in 100".into(),
                name: "mem_load_retired.l3_miss".into(),
                unit: "misses".into(),
                period: 100,
                dropped: 0,
            });
            batch.data_samples = vec![data(0x1000, own), data(0x1040, shared)];
            batch
        });
        send_node(&server, &format!("line-{node}"), batches).await;
    }
    let end = super::common::unix_now() + 1;
    for (from, to) in [(start, end), (end - 3600, end)] {
        let (status, body) = server
            .get(&format!("/api/v1/compare?from={from}&to={to}&metric=cache_miss"))
            .await;
        assert_eq!(status, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            answer["bands"]["high"],
            serde_json::json!(["line-1", "line-3", "line-6"]),
            "{answer:#}"
        );
        let data = answer["explanation"]["data"].as_array().unwrap();
        let line = data
            .iter()
            .find(|d| d["object"] == "line 0x1040 of counters (bss of /usr/bin/scylla)")
            .unwrap_or_else(|| panic!("the hot line is not named over [{from}, {to}): {data:#?}"));
        assert_eq!(line["effect"], 1.0, "{line:#}");
        assert_eq!(line["event"], "cache_miss");
        // The line every node misses on alike does not differ.
        assert!(
            !data
                .iter()
                .any(|d| d["object"] == "line 0x1000 of counters (bss of /usr/bin/scylla)"),
            "{data:#?}"
        );
    }
    server.stop().await;
}
