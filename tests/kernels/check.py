#!/usr/bin/env python3
"""Judges the kernel matrix's runs (tests/kernels/smoke.sh, one directory per kernel).

On every kernel:
  - the programs a run on it needs load (sampling cpu and page_fault from perf events, their
    unwinder, the raw tracepoints of exec, exit and page migration, the work uprobe), each with
    at least twice the verifier's room: instructions processed at most half of 1,000,000 and
    states per instruction at most half of 64;
  - `record` of cpu and of page_fault ended well, at least IN_KERNEL samples unwound in the
    kernel from tables (the unwinder programs ran), and the fixture's chains whole (from `_start` through main to the leaf it spins in)
    in at least 80% of the samples, also as a least-privilege DaemonSet runs the agent.
Prints the verifier's figures per program and kernel (BENCHMARKS.md's table) and exits 1 on the
first kernel that fails, saying what failed.

usage: check.py RUN_DIR...
"""
import json
import re
import sys
from pathlib import Path

INSNS_LIMIT = 1_000_000
STATES_LIMIT = 64
# programs every kernel of the matrix must take: tracing ones whose attach a kernel may refuse
# (fentry under lockdown, kprobes where they are not built) are judged where they loaded
REQUIRED = [
    "sample_cpu",
    "sample_page_fault",
    "unwind_perf_event",
    "page_migration",
    "unwind_raw_tp",
    "process_exec",
    "process_exit",
    "count_work",
]
# the fixture's chain in each recording, root first
CHAINS = {
    "cpu": "main;memset_loop;clear_buffer",
    "page_fault": "main;fault_loop;touch_fresh_pages",
    "cpu-least-privilege": "main;memset_loop;clear_buffer",
}
WHOLE = 0.8
# A count, not a share: until the agent has built a process's tables (seconds in a TCG guest,
# more for a build without full optimisation), its samples are unwound in user space from stack
# copies, with whole chains too; how many depends on the machine's speed against the event rate
# (79 of 334 page faults in a 6.1 guest, 2026-12-06), not on the kernel.
IN_KERNEL = 50


def folded(path):
    stacks = {}
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if stack:
            stacks[stack] = stacks.get(stack, 0) + int(n)
    return stacks


def judge(run):
    """Problems of one run, and its kernel and programs for the table."""
    problems = []
    kernel = (run / "kernel").read_text().strip() if (run / "kernel").exists() else run.name
    programs = []
    try:
        probe = json.loads((run / "probe.json").read_text())
        programs = probe.get("programs", [])
    except (OSError, ValueError) as e:
        problems.append(f"probe --verifier --json gave no report ({e}): {read(run / 'probe.err')}")
    by_name = {p["program"]: p for p in programs}
    for name in REQUIRED:
        p = by_name.get(name)
        if p is None:
            problems.append(f"{name}: not in the probe's report")
        elif p.get("refused"):
            problems.append(f"{name}: refused: {p['refused']}")
    for p in programs:
        f = p.get("figures")
        if p.get("refused") or not f:
            continue
        if f["insns_processed"] * 2 > INSNS_LIMIT or f["max_states_per_insn"] * 2 > STATES_LIMIT:
            problems.append(
                f"{p['program']}: less than 2x the verifier's room: {f['insns_processed']} insns, "
                f"{f['max_states_per_insn']} states per insn"
            )
    for name, chain in CHAINS.items():
        rc = read(run / f"{name}.rc").strip()
        err = read(run / f"{name}.err")
        if rc != "0":
            problems.append(f"record {name} exited {rc or '(not run)'}: {err.strip()[-600:]}")
            continue
        stacks = folded(run / f"{name}.folded")
        total = sum(stacks.values())
        if not total:
            problems.append(f"record {name}: no samples")
            continue
        whole = sum(n for s, n in stacks.items() if ";_start;" in f";{s};" and f";{chain}" in f";{s}")
        if whole < WHOLE * total:
            top = sorted(stacks.items(), key=lambda kv: -kv[1])[:4]
            problems.append(f"record {name}: {whole / total:.0%} of samples in whole chains `_start;…;{chain}`: {top}")
        m = re.search(r"(\d+) samples of .*?(\d+) unwound from \.eh_frame \((\d+) in the kernel\)", err)
        if not m:
            problems.append(f"record {name}: no summary: {err.strip()[-300:]}")
        elif int(m.group(3)) < IN_KERNEL:
            problems.append(
                f"record {name}: {m.group(3)} of {m.group(1)} samples unwound in the kernel "
                f"(the unwinder programs did not run?): {err.strip()[-300:]}"
            )
    return kernel, programs, problems


def read(path):
    try:
        return path.read_text()
    except OSError:
        return ""


def table(results):
    print("verifier, per program and kernel: instructions processed / most states per instruction "
          f"(limits {INSNS_LIMIT} / {STATES_LIMIT}); margin = the smaller ratio")
    names = []
    for _, programs, _ in results:
        for p in programs:
            if p["program"] not in names:
                names.append(p["program"])
    kernels = [k for k, _, _ in results]
    print(f"| program | {' | '.join(kernels)} |")
    print(f"|---|{'---|' * len(kernels)}")
    for name in names:
        cells = []
        for _, programs, _ in results:
            p = next((p for p in programs if p["program"] == name), None)
            if p is None:
                cells.append("")
            elif p.get("refused") and not (p.get("figures") or {}).get("insns_processed"):
                cells.append("refused")
            else:
                f = p["figures"]
                margin = min(INSNS_LIMIT / max(f["insns_processed"], 1), STATES_LIMIT / max(f["max_states_per_insn"], 1))
                refused = " refused" if p.get("refused") else ""
                cells.append(f"{f['insns_processed']:,} / {f['max_states_per_insn']} ({margin:.0f}x){refused}")
        print(f"| {name} | {' | '.join(cells)} |")


def main(runs):
    results = [judge(Path(r)) for r in runs]
    table(results)
    failed = False
    for kernel, _, problems in results:
        for p in problems:
            print(f"kernels: {kernel}: {p}", file=sys.stderr)
            failed = True
        if not problems:
            print(f"kernels: {kernel}: every program loads with 2x margin; cpu and page_fault chains whole")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
