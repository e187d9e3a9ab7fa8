//! Programs the kernel refuses (`--test-refuse`, a switch for tests only: the programs are built
//! so that the verifier rejects them, a real refusal): what depends on them stops, the rest
//! samples, and the agent says why in `probe`, its facts and `/metrics`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bimodal_proto::v1;

fn agent() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bimodal-agent"))
}

/// `run` with `args` for `seconds`, writing to `out`, its metrics served on a port of its own;
/// returns the `/metrics` text scraped once the first batch is written, and the run's stderr.
fn run_and_scrape(args: &[&str], out: &Path) -> (String, String) {
    let mut run = agent()
        .args([
            "-v",
            "run",
            "--interval",
            "1s",
            "--metrics-listen",
            "127.0.0.1:0",
            "--output-dir",
        ])
        .arg(out)
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The bound address is in the log; the rest of the log is kept for the assertions.
    let mut stderr = BufReader::new(run.stderr.take().unwrap());
    let mut log = String::new();
    let address = loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "run ended: {log}");
        log.push_str(&line);
        if line.contains("serving the agent's metrics") {
            let at = line.find("bound").expect("the bound address in the line");
            let address: String = line[at..]
                .chars()
                .skip_while(|c| !c.is_ascii_digit())
                .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
                .collect();
            break address;
        }
    };
    let reader = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest);
        rest
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while batches(out).next().is_none() {
        assert!(run.try_wait().unwrap().is_none(), "run exited early: {log}");
        assert!(Instant::now() < deadline, "no batch written");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut stream = TcpStream::connect(&address).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut metrics = String::new();
    stream.read_to_string(&mut metrics).unwrap();
    // SAFETY: a plain signal to a child process of this test.
    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    let status = run.wait().unwrap();
    log.push_str(&reader.join().unwrap());
    assert!(status.success(), "{log}");
    (metrics, log)
}

fn batches(out: &Path) -> impl Iterator<Item = v1::Batch> {
    let mut paths: Vec<_> = std::fs::read_dir(out)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    paths.retain(|p| p.file_name().unwrap().to_str().unwrap().starts_with("batch-"));
    paths.sort();
    paths
        .into_iter()
        .map(|p| prost::Message::decode(&std::fs::read(p).unwrap()[..]).unwrap())
}

fn facts(out: &Path) -> v1::NodeFacts {
    let hello: v1::Hello =
        prost::Message::decode(&std::fs::read(out.join(bimodal_proto::stream::HELLO_FILE)).unwrap()[..]).unwrap();
    hello.facts.unwrap()
}

/// The lines of a metrics text that name `metric`.
fn lines_of<'a>(metrics: &'a str, metric: &str) -> Vec<&'a str> {
    metrics.lines().filter(|l| l.starts_with(metric)).collect()
}

/// The unwinder refused: a fixture built without frame pointers is still sampled, its chains
/// walked with frame pointers (its callers lost, which tables would keep), and `probe`, the
/// facts the server gets and `/metrics` say that the unwinding is reduced and why.
#[test]
fn a_refused_unwinder_leaves_frame_pointer_chains_and_says_why() {
    let binary = crate::fixture::workload_without_frame_pointers();
    let running = crate::fixture::spawn(binary, &["memset", "60"]);
    let pid = running.pid().to_string();

    let probe = agent().args(["probe", "--test-refuse", "unwinder"]).output().unwrap();
    let text = String::from_utf8_lossy(&probe.stdout);
    assert!(
        probe.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&probe.stderr)
    );
    // The event's block, not the machine's `cpu:` line above it.
    let cpu = text
        .split("\n\n")
        .find(|b| b.starts_with("cpu:") && b.contains("stacks:"))
        .unwrap_or_else(|| panic!("no cpu event in {text}"));
    assert!(
        cpu.contains("frame pointers only") && cpu.contains("REDUCED") && cpu.contains("unwind_perf_event"),
        "{cpu}"
    );

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("node");
    let (metrics, log) = run_and_scrape(&["--event", "cpu", "--test-refuse", "unwinder", "--pid", &pid], &out);
    assert!(
        log.contains("unwind_perf_event"),
        "the refusal is not in the log: {log}"
    );

    let f = facts(&out);
    let source = f
        .event_sources
        .iter()
        .find(|s| s.event == v1::EventKind::Cpu as i32)
        .unwrap();
    assert_eq!(source.unwinding, "frame_pointers");
    assert!(
        source.unwinding_reduced.contains("unwind_perf_event") && source.unwinding_reduced.contains("refused"),
        "{source:?}"
    );

    // Samples arrive, and most of them lost memset's callers: frame pointers, not tables.
    let (mut samples, mut whole) = (0u64, 0u64);
    for b in batches(&out) {
        for s in &b.samples {
            let stack = &b.stacks[s.stack_index as usize];
            samples += s.count;
            if stack
                .frame_indices
                .iter()
                .any(|&i| b.frames[i as usize].function == "memset_loop")
            {
                whole += s.count;
            }
        }
    }
    assert!(samples > 0, "no samples");
    assert!(
        (whole as f64) < 0.5 * samples as f64,
        "{whole} of {samples} samples kept memset_loop: not frame-pointer chains"
    );

    let loaded = lines_of(&metrics, "bimodal_agent_bpf_program_loaded{");
    assert!(
        loaded.contains(&"bimodal_agent_bpf_program_loaded{program=\"unwind_perf_event\"} 0")
            && loaded.contains(&"bimodal_agent_bpf_program_loaded{program=\"sample_cpu\"} 1"),
        "{loaded:?}"
    );
    let unwinding = lines_of(&metrics, "bimodal_agent_unwinding{");
    assert!(
        unwinding.iter().any(|l| l.contains("event=\"cpu\"")
            && l.contains("method=\"frame_pointers\"")
            && l.contains("unwind_perf_event")),
        "{unwinding:?}"
    );
}

/// The program sampling cpu refused: cpu is not sampled, page_fault is (whether asked for by
/// name or as every kind the node offers), and the facts and `/metrics` say why cpu is missing.
#[test]
fn a_refused_event_kind_leaves_the_others_sampling() {
    let running = crate::fixture::start("mixed", 60);
    let pid = running.pid().to_string();

    let probe = agent().args(["probe", "--test-refuse", "cpu"]).output().unwrap();
    let text = String::from_utf8_lossy(&probe.stdout);
    assert!(
        text.contains("cpu: UNAVAILABLE") && text.contains("sample_cpu"),
        "{text}"
    );

    let dir = tempfile::tempdir().unwrap();
    let named = dir.path().join("named");
    let (metrics, log) = run_and_scrape(
        &[
            "--event",
            "cpu",
            "--event",
            "page_fault",
            "--test-refuse",
            "cpu",
            "--pid",
            &pid,
        ],
        &named,
    );
    assert!(log.contains("left out") && log.contains("sample_cpu"), "{log}");
    let every = dir.path().join("every");
    run_and_scrape(&["--test-refuse", "cpu", "--pid", &pid], &every);
    for out in [&named, &every] {
        let kinds: std::collections::BTreeSet<i32> = batches(out).flat_map(|b| b.sources).map(|s| s.event).collect();
        assert!(
            kinds.contains(&(v1::EventKind::PageFault as i32)) && !kinds.contains(&(v1::EventKind::Cpu as i32)),
            "kinds sampled: {kinds:?}"
        );
    }
    let f = facts(&named);
    let cpu = f
        .event_sources
        .iter()
        .find(|s| s.event == v1::EventKind::Cpu as i32)
        .unwrap();
    assert!(cpu.source.is_empty(), "{cpu:?}");
    assert!(cpu.rejected.iter().any(|r| r.contains("sample_cpu")), "{cpu:?}");
    let refused = lines_of(&metrics, "bimodal_agent_event_refused{");
    assert!(
        refused
            .iter()
            .any(|l| l.contains("event=\"cpu\"") && l.contains("sample_cpu")),
        "{refused:?}"
    );
}
