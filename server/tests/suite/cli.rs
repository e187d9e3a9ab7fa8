//! The server binary as `make demo` and operators start it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Starts bimodal-server in `dir` with `args`; returns its stderr lines up to the one containing
/// `until` (or all of them if it exits first) and whether it was still running then.
fn start(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)], until: &str) -> (Vec<String>, bool) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bimodal-server"))
        .current_dir(dir)
        .args(args)
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut lines = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        let done = line.contains(until);
        lines.push(line);
        if done || Instant::now() > deadline {
            break;
        }
    }
    let running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    (lines, running)
}

/// A relative --data-dir (what `make demo` passes) works: the managed ClickHouse gets absolute
/// paths although it runs in its own directory.
#[test]
fn relative_data_dir_starts_the_managed_clickhouse() {
    let dir = tempfile::tempdir().unwrap();
    let (lines, running) = start(
        dir.path(),
        &["--listen", "127.0.0.1:0", "--data-dir", "rel"],
        &[],
        "listening on",
    );
    assert!(running, "{lines:#?}");
    assert!(lines.iter().any(|l| l.contains("listening on")), "{lines:#?}");
}

/// A ClickHouse binary that exits at once is reported with its exit status, not waited for.
#[test]
fn clickhouse_that_cannot_start_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let (lines, running) = start(
        dir.path(),
        &["--listen", "127.0.0.1:0", "--data-dir", "d"],
        &[("BIMODAL_CLICKHOUSE_SERVER", "/bin/false")],
        "error:",
    );
    assert!(!running || lines.iter().any(|l| l.contains("error:")), "{lines:#?}");
    let error = lines
        .iter()
        .find(|l| l.contains("bimodal-server: error:"))
        .expect("an error line");
    assert!(error.contains("exited while starting"), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "it waited for a server that had exited"
    );
}
