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

/// `bimodal rules check` prints every mistake of a rule file as FILE:LINE:COLUMN and fails; the
/// shipped rule file passes.
#[test]
fn rules_check_reports_every_mistake_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "rules:\n  - alert: A\n    event: remote_acess\n    condition: {rate_above: x}\n  - alert: A\n    condition: {bands_appear: }\n    for: forever\n",
    )
    .unwrap();
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/rules/default.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_bimodal"))
        .args(["rules", "check", shipped])
        .arg(&bad)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("default.yaml: 4 rules"), "{stdout}");
    let bad = bad.display().to_string();
    for expected in [
        format!("{bad}:3:12: unknown event `remote_acess`"),
        format!("{bad}:4:29: `rate_above` must be a number"),
        format!("{bad}:5:12: a second rule named `A`"),
        format!("{bad}:7:10: `for` `forever` is not a duration"),
    ] {
        assert!(stderr.contains(&expected), "missing {expected:?} in:\n{stderr}");
    }
    assert!(stderr.contains("1 of 2 rule files have mistakes"), "{stderr}");
}

/// A server killed with SIGKILL leaves its managed ClickHouse shutting down; a server started at
/// once on the same data directory waits for it instead of exiting on the directory's lock.
#[test]
fn a_server_restarted_right_after_a_kill_reuses_its_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--listen", "127.0.0.1:0", "--data-dir", "d"];
    let (lines, running) = start(dir.path(), &args, &[], "listening on");
    assert!(running, "{lines:#?}");
    // `start` killed it (SIGKILL) once it listened; start again right away.
    let (lines, running) = start(dir.path(), &args, &[], "listening on");
    assert!(running, "{lines:#?}");
    assert!(lines.iter().any(|l| l.contains("listening on")), "{lines:#?}");
}

/// `bimodal --ca-file` with an http:// URL is refused before anything is sent: the user meant
/// TLS, and the token would go in plain text (issue 49; on 8f9f740 the CLI sent it). Nothing
/// connects to the port the URL names.
#[test]
fn a_ca_file_with_an_http_url_is_refused_before_sending() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "not read: the URL is refused first").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bimodal"))
        .args([
            "--server-url",
            &url,
            "--token",
            "secret-token",
            "compare",
            "--json",
            "--ca-file",
        ])
        .arg(&ca)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("is not https://"), "{stderr}");
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the CLI connected to the plain-text port"
    );
}
