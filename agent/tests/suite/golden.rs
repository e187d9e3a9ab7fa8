//! `bimodal-agent record` of fixtures built in the ways production code is built, compared with
//! the expected stacks under testdata/expected (see testdata/fixtures/golden.rs for the format
//! and how to regenerate them).

use std::collections::BTreeMap;
use std::path::Path;

use super::record::record_folded;
use crate::fixture::{self, spawn};
use crate::golden::{assert_matches_expected, functions_of, normalized_shares};

/// Records cpu samples of `pid` for `seconds` with `extra` flags; returns the folded profile.
fn record_cpu(pid: u32, seconds: u32, extra: &[&str]) -> BTreeMap<String, u64> {
    let dir = tempfile::tempdir().unwrap();
    record_folded("cpu", pid, seconds, dir.path(), extra)
}

/// Records `binary MODE 30` the default way and checks it against testdata/expected/EXPECTED;
/// then with frame pointers alone, which must lose the full chain `lost` in most samples (or the
/// fixture tests nothing frame pointers could not do).
fn assert_tables_keep_what_frame_pointers_lose(binary: &Path, mode: &str, expected: &str, lost: &str) {
    let functions = functions_of(&[binary]);
    let running = spawn(binary, &[mode, "30"]);
    let folded = record_cpu(running.pid(), 3, &[]);
    assert_matches_expected(expected, &folded, &functions);

    let folded = record_cpu(running.pid(), 2, &["--unwind", "frame-pointer"]);
    let shares = normalized_shares(&folded, &functions);
    let kept = shares.get(lost).copied().unwrap_or(0.0);
    assert!(
        kept < 50.0,
        "frame pointers alone found `{lost}` in {kept:.0}% of samples: the fixture no longer tests unwinding tables: {shares:?}"
    );
}

/// Frame-pointer build: every sample is in spin_hot_loop under spin_loop and main.
#[test]
fn golden_frame_pointer_build() {
    let running = fixture::start("spin", 30);
    let folded = record_cpu(running.pid(), 3, &[]);
    assert_matches_expected("workload-spin", &folded, &functions_of(&[fixture::workload()]));
}

/// Built -O2 -fomit-frame-pointer, the memset called from clear_buffer is unwound from
/// .eh_frame with its caller kept; frame-pointer unwinding of the same process loses it.
#[test]
fn golden_build_without_frame_pointers_keeps_the_caller_of_memset() {
    let binary = fixture::workload_without_frame_pointers();
    assert_tables_keep_what_frame_pointers_lose(
        binary,
        "memset",
        "workload-nofp-memset",
        "main;memset_loop;clear_buffer;*",
    );
}

/// A frame-pointer build calling libc's memset (Debian builds libc without frame pointers):
/// unwound in the kernel from libc's table, memset keeps its caller; frame pointers alone lose
/// it. The stacks are those of the build without frame pointers.
#[test]
fn golden_frame_pointer_build_keeps_the_caller_of_a_library_leaf_without_them() {
    let binary = fixture::workload();
    assert_tables_keep_what_frame_pointers_lose(
        binary,
        "memset",
        "workload-nofp-memset",
        "main;memset_loop;clear_buffer;*",
    );
}

/// Built -O2 -fno-omit-frame-pointer, GCC sets up no frame in a leaf that touches no stack:
/// frame pointers lose the leaf's caller (leaf_loop), the tables keep it.
#[test]
fn golden_optimized_frame_pointer_build_keeps_the_caller_of_a_leaf_without_a_frame() {
    let binary = fixture::compile_as("workload", "workload-o2-fp", &["-O2", "-g", "-fno-omit-frame-pointer"]);
    assert_tables_keep_what_frame_pointers_lose(&binary, "leaf", "workload-leaf", "main;leaf_loop;leaf_hot_loop");
}

/// A library without frame pointers loaded seconds after the process was first sampled (its
/// mappings and tables long written): its code is met outside every mapping with a table, the
/// process is read again, and its chains keep their callers.
#[test]
fn a_library_loaded_late_is_unwound_from_its_table() {
    let build = fixture::with_late_library();
    let library = build.library.to_str().unwrap();
    let running = spawn(&build.binary, &[library, "2", "30"]);
    let folded = record_cpu(running.pid(), 6, &[]);
    let shares = normalized_shares(&folded, &functions_of(&[&build.binary, &build.library]));
    let in_library: f64 = shares
        .iter()
        .filter(|(stack, _)| stack.contains("library_hot_loop"))
        .map(|(_, share)| share)
        .sum();
    let complete = shares
        .get("main;call_loaded;library_work;library_hot_loop")
        .copied()
        .unwrap_or(0.0);
    assert!(in_library > 30.0, "the library ran: {shares:?}");
    assert!(
        complete >= in_library * 0.9,
        "{complete:.0}% of samples with the full chain, of {in_library:.0}% in the library: {shares:?}"
    );
}

/// `--unwind eh-frame` unwinds even a frame-pointer build from stack copies, to the same stacks.
#[test]
fn golden_eh_frame_unwinding_of_a_frame_pointer_build() {
    let running = fixture::start("spin", 30);
    let folded = record_cpu(running.pid(), 3, &["--unwind", "eh-frame"]);
    assert_matches_expected("workload-spin", &folded, &functions_of(&[fixture::workload()]));
}

/// Frames in a shared library are named from the library and keep the executable's callers.
#[test]
fn golden_shared_library() {
    let build = fixture::with_shared_library();
    let running = spawn(&build.binary, &["30"]);
    let folded = record_cpu(running.pid(), 3, &[]);
    assert_matches_expected("shlib", &folded, &functions_of(&[&build.binary, &build.library]));
}

/// JIT code named only in /tmp/perf-PID.map (as JVMs and Node publish it) gets its name, is
/// marked as JIT (`_[j]`), and keeps its callers through the frame pointer it maintains.
#[test]
#[cfg(target_arch = "x86_64")]
fn golden_jit_frames_are_named_from_the_perf_map() {
    let jit = fixture::compile("jit");
    let running = spawn(&jit, &["30"]);
    // The fixture writes its perf map before it starts spinning.
    let map = format!("/tmp/perf-{}.map", running.pid());
    while !Path::new(&map).exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let folded = record_cpu(running.pid(), 2, &[]);
    let mut functions = functions_of(&[&jit]);
    functions.insert("jit_hot_loop_[j]".into());
    assert_matches_expected("jit", &folded, &functions);
}
