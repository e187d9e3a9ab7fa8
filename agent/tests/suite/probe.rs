//! `bimodal-agent probe` on this machine: every event kind gets a source or a stated reason.

use std::path::Path;
use std::process::Command;

/// The JSON report names every event kind; cpu and page_fault always have a software source
/// (page_fault with data addresses); where the kernel exposes no hardware PMU the report says so
/// and cache_miss is unavailable with that reason instead of a faked source.
#[test]
fn probe_reports_every_event_kind_with_a_source_or_a_reason() {
    let out = Command::new(env!("CARGO_BIN_EXE_bimodal-agent"))
        .args(["probe", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let events = report["events"].as_array().unwrap();
    let names: Vec<&str> = events.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "cpu",
            "page_fault",
            "cache_miss",
            "remote_access",
            "numa_hint_fault",
            "page_migration"
        ]
    );
    let event = |name: &str| events.iter().find(|e| e["event"] == name).unwrap();
    for e in events {
        assert!(
            !e["chosen"].is_null() || !e["rejected"].as_array().unwrap().is_empty(),
            "{} has neither a source nor a reason: {e}",
            e["event"]
        );
    }
    assert_eq!(event("cpu")["chosen"]["encoding"], "cpu-clock");
    assert_eq!(event("page_fault")["chosen"]["data_address"], true);

    let has_pmu = std::fs::read_dir("/sys/bus/event_source/devices")
        .unwrap()
        .flatten()
        .any(|d| d.file_name() == "cpu" || d.path().join("cpus").exists());
    assert_eq!(report["hardware_pmu"].is_null(), !has_pmu, "{report}");
    if !has_pmu {
        let cache_miss = event("cache_miss");
        assert!(
            cache_miss["chosen"].is_null(),
            "a cache_miss source without a PMU: {cache_miss}"
        );
        let reasons = cache_miss["rejected"].to_string();
        assert!(reasons.contains("no hardware PMU"), "{reasons}");
    }
    // Where a source was rejected, the reason is more than an errno.
    if Path::new("/sys/kernel/btf/vmlinux").exists() {
        for r in events.iter().flat_map(|e| e["rejected"].as_array().unwrap()) {
            assert!(r["reason"].as_str().unwrap().len() > 10, "{r}");
        }
    }
}

/// The text report says plainly whether there is a hardware PMU.
#[test]
fn probe_text_states_the_pmu() {
    let out = Command::new(env!("CARGO_BIN_EXE_bimodal-agent"))
        .arg("probe")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.starts_with("hardware PMU: ")), "{text}");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("libbpf:"),
        "libbpf noise on stderr"
    );
}
