//! Bad input to the agent's command line is a clear error, never a panic.

use std::process::Command;

fn agent(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bimodal-agent"))
        .args(args)
        .output()
        .unwrap()
}

/// An unknown event kind is a usage error (exit 2) naming the valid kinds.
#[test]
fn unknown_event_is_a_usage_error() {
    let out = agent(&["record", "--event", "cycles", "-o", "/dev/null"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("page_fault") && err.contains("remote_access"), "{err}");
}

/// A malformed label is refused before anything starts.
#[test]
fn malformed_label_is_a_usage_error() {
    let out = agent(&["run", "--label", "no-equals-sign"]);
    assert_eq!(out.status.code(), Some(2));
}

/// An event this machine cannot sample (no hardware PMU here; in this agent version
/// remote_access has no source yet) fails with a message, not a panic; where the hardware
/// can count cache misses, recording them succeeds.
#[test]
fn unavailable_events_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    for event in ["cache_miss", "remote_access"] {
        let path = dir.path().join(event);
        let out = agent(&[
            "record",
            "--event",
            event,
            "--duration",
            "1s",
            "-o",
            path.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{event}: {err}");
        if out.status.success() {
            assert!(path.exists(), "{event}: success without output");
        } else {
            assert_eq!(out.status.code(), Some(1), "{event}: {err}");
            assert!(err.contains("bimodal-agent: error:"), "{event}: {err}");
        }
    }
}

/// A Kubernetes API configuration that cannot work stops `run` at startup, before any sampling
/// or connecting, with what is wrong: outside a pod `--kubernetes` names the missing service
/// variable; an unreadable CA file is named; a CA file with no certificate is refused.
#[test]
fn bad_kubernetes_config_is_a_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("ca.crt");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    let missing = dir.path().join("missing.crt");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_bimodal-agent"))
            .args(["run", "--node-name", "node-1", "--server-url", "http://127.0.0.1:1"])
            .args(args)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .output()
            .unwrap()
    };
    let https = "https://127.0.0.1:6443";
    for (args, named) in [
        (vec!["--kubernetes"], "KUBERNETES_SERVICE_HOST"),
        (
            vec![
                "--kubernetes-api-url",
                https,
                "--kubernetes-ca-file",
                missing.to_str().unwrap(),
            ],
            missing.to_str().unwrap(),
        ),
        (
            vec![
                "--kubernetes-api-url",
                https,
                "--kubernetes-ca-file",
                not_pem.to_str().unwrap(),
            ],
            "no certificate",
        ),
    ] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("bimodal-agent: error:") && err.contains(named),
            "{args:?}: {err}"
        );
        assert!(
            !err.contains("stream to server failed"),
            "{args:?} got as far as shipping: {err}"
        );
    }
}

/// `run` without `--event` samples every kind this machine offers, as `probe` resolves them:
/// its batches carry a source for each kind `probe` found one for, and for no other.
#[test]
fn run_samples_every_kind_the_machine_offers_by_default() {
    use std::collections::BTreeSet;
    use std::time::{Duration, Instant};

    let probe = agent(&["probe", "--json"]);
    assert!(probe.status.success(), "{}", String::from_utf8_lossy(&probe.stderr));
    let report: serde_json::Value = serde_json::from_slice(&probe.stdout).unwrap();
    let offered: BTreeSet<String> = report["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| !e["chosen"].is_null())
        .map(|e| e["event"].as_str().unwrap().to_owned())
        .collect();
    assert!(offered.contains("cpu"), "{report}");

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("node");
    let workload = crate::fixture::start("fault", 60);
    let mut run = Command::new(env!("CARGO_BIN_EXE_bimodal-agent"))
        .args(["run", "--node-name", "every-kind", "--interval", "1s", "--pid"])
        .arg(workload.pid().to_string())
        .arg("--output-dir")
        .arg(&out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let batches = || {
        std::fs::read_dir(&out).map_or(Vec::new(), |d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("batch-"))
                .collect()
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while batches().len() < 2 {
        assert!(run.try_wait().unwrap().is_none(), "run exited early");
        assert!(Instant::now() < deadline, "no batches written to {}", out.display());
        std::thread::sleep(Duration::from_millis(200));
    }
    // SAFETY: a plain signal to a child process of this test.
    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    let done = run.wait_with_output().unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));

    let mut sampled = BTreeSet::new();
    for path in batches() {
        let batch: bimodal_proto::v1::Batch = prost::Message::decode(&std::fs::read(&path).unwrap()[..]).unwrap();
        for source in batch.sources {
            sampled.insert(
                bimodal_proto::v1::EventKind::try_from(source.event)
                    .unwrap()
                    .name()
                    .to_owned(),
            );
        }
    }
    assert_eq!(sampled, offered, "kinds sampled by default against kinds probe offers");
}

/// The summary line of a `run --duration` that succeeded, and its batches, samples and lost:
/// `bimodal-agent: ran Ns: B batches (S samples of KINDS, L lost), D batches dropped` (none
/// dropped: a run that writes files or reaches its server drops nothing).
fn run_summary(done: &std::process::Output) -> (String, [u64; 3]) {
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains(": ran "))
        .unwrap_or_else(|| panic!("no summary: {stderr}"));
    let (_, counts) = line.split_once("s: ").expect("ran Ns: ...");
    let numbers: Vec<u64> = counts
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    let [batches, samples, lost, dropped] = numbers[..] else {
        panic!("four counts in {line}");
    };
    assert_eq!(dropped, 0, "{line}");
    (line.to_owned(), [batches, samples, lost])
}

/// `run --duration` stops by itself, sends what is left, and says what it sampled: as many
/// batches and samples as it wrote.
#[test]
fn run_with_a_duration_stops_and_says_what_it_sampled() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("node");
    let workload = crate::fixture::start("spin", 60);
    let started = std::time::Instant::now();
    let done = Command::new(env!("CARGO_BIN_EXE_bimodal-agent"))
        .args(["run", "--event", "cpu", "--duration", "3s", "--interval", "1s", "--pid"])
        .arg(workload.pid().to_string())
        .arg("--output-dir")
        .arg(&out)
        .output()
        .unwrap();
    let (line, [batches, samples, _]) = run_summary(&done);
    assert!(started.elapsed().as_secs() < 30, "ran {:?}", started.elapsed());
    let mut written = (0u64, 0u64);
    for entry in std::fs::read_dir(&out).unwrap() {
        let path = entry.unwrap().path();
        if !path.file_name().unwrap().to_str().unwrap().starts_with("batch-") {
            continue;
        }
        let batch: bimodal_proto::v1::Batch = prost::Message::decode(&std::fs::read(&path).unwrap()[..]).unwrap();
        written.0 += 1;
        written.1 += batch.samples.iter().map(|s| s.count).sum::<u64>();
    }
    assert!(samples > 0, "{line}");
    assert_eq!((batches, samples), written, "{line}");
}

/// A `run` interval of page faults holds more data samples than their ring does (about 20,000):
/// they are read as they come, not at the drain, so none is lost at the default 10 s interval.
/// The interval is made longer until it holds more than the ring (a loaded machine runs the
/// fixture slower): what is checked is an overflowing interval, not a speed.
#[test]
fn run_keeps_the_data_addresses_of_a_whole_interval_of_page_faults() {
    let workload = crate::fixture::start("fault", 300);
    let mut tried = Vec::new();
    for interval in [10, 20, 40, 80] {
        let dir = tempfile::tempdir().unwrap();
        let done = Command::new(env!("CARGO_BIN_EXE_bimodal-agent"))
            .args(["run", "--event", "page_fault", "--duration"])
            .arg(format!("{}s", interval + 1))
            .arg("--interval")
            .arg(format!("{interval}s"))
            .arg("--pid")
            .arg(workload.pid().to_string())
            .arg("--output-dir")
            .arg(dir.path().join("node"))
            .output()
            .unwrap();
        let (line, [_, samples, lost]) = run_summary(&done);
        assert!(lost * 100 <= samples, "{line}");
        if samples > 25_000 {
            return;
        }
        tried.push(line);
    }
    panic!("no interval held more samples than the ring: {tried:#?}");
}
