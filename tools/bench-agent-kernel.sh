#!/usr/bin/env bash
# What the agent costs on a kernel, two builds side by side in one run: its CPU, the BPF
# programs' time per sample, its peak RSS, and how many of the fixtures' chains are whole.
#
#   tools/bench-agent-kernel.sh [--suite SUITE] [--rounds N] AGENT_A [AGENT_B]
#
# One CPU-bound process per CPU (testdata/fixtures/workload.c: `spin` built with frame pointers,
# `memset` built -O2 -fomit-frame-pointer, alternately) is profiled system-wide by
# `bimodal-agent record --event cpu` (99 Hz per CPU, BENCH_SECONDS each, default 20), with
# `--unwind auto` and `--unwind frame-pointer`, each build in turn, for N rounds (default 2), the
# builds' order swapped every round. A build that cannot load its programs on the kernel is
# reported as such (the agent before design 030 on a kernel whose verifier refuses it).
#
# Without --suite it runs on this machine; with it, in a qemu guest booted with that Debian
# suite's cloud kernel (tools/numa-vm, 1 node, 2 vCPUs under TCG: every figure is several times
# the host's, compare the builds, not the machines). The collecting part is POSIX sh (the guest
# has busybox); the table is made here by python3. It prints a Markdown table and writes it to
# $BENCH_OUT/agent-kernel-SUITE.md (SUITE: host for this machine).
#
# Columns: agent CPU (user + sys over the run, start-up included, % of one core), BPF time per
# sample (kernel.bpf_stats_enabled: run_time_ns / run_cnt of sample_cpu, which counts the
# unwinder programs it hands samples to by tail calls), peak RSS, samples, and whole chains: the
# share of the fixtures' samples whose chain reaches `_start` through main.
set -euo pipefail
cd "$(dirname "$0")/.."

suite="" rounds=2
while [ $# -gt 0 ]; do
	case "$1" in
	--suite) suite=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	-h | --help) sed -n '2,24p' "$0"; exit 0 ;;
	*) break ;;
	esac
done
[ $# -ge 1 ] || { sed -n '4p' "$0" >&2; exit 2; }
seconds=${BENCH_SECONDS:-20}
out=${BENCH_OUT:-target/bench}
work=$out/agent-kernel-${suite:-host}
rm -rf "$work" && mkdir -p "$work/bin"
say() { echo "bench-agent-kernel: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "needs root (BPF)"; exit 1; }

names=()
for agent in "$@"; do
	[ -x "$agent" ] || { say "$agent is not an executable"; exit 1; }
	cp "$agent" "$work/bin/agent-${#names[@]}"
	strip --strip-debug "$work/bin/agent-${#names[@]}"
	names+=("$agent")
done
cc -O1 -g -fno-omit-frame-pointer -o "$work/bin/workload-fp" testdata/fixtures/workload.c
cc -O2 -g -fomit-frame-pointer -o "$work/bin/workload-nofp" testdata/fixtures/workload.c
cp /usr/sbin/bpftool /usr/bin/time "$work/bin/"

# The collecting part: runs in the guest (busybox sh) or here.
cat >"$work/bin/collect.sh" <<'EOF'
#!/bin/sh
B=$1 O=$2 SECONDS_EACH=$3 ROUNDS=$4 AGENTS=$5
mkdir -p "$O"
uname -r >"$O/kernel"
echo 1 >/proc/sys/kernel/bpf_stats_enabled
cpus=$(grep -c ^processor /proc/cpuinfo)
pids=""
i=0
while [ $i -lt "$cpus" ]; do
	if [ $((i % 2)) = 0 ]; then
		"$B/workload-fp" spin 100000 >/dev/null &
	else
		"$B/workload-nofp" memset 100000 >/dev/null &
	fi
	pids="$pids $!"
	i=$((i + 1))
done
sleep 2
r=1
while [ $r -le "$ROUNDS" ]; do
	order=$(seq 0 $((AGENTS - 1)))
	[ $((r % 2)) = 0 ] && order=$(seq $((AGENTS - 1)) -1 0)
	for a in $order; do
		for mode in auto frame-pointer; do
			run="$O/r$r-a$a-$mode"
			"$B/time" -f '%e %U %S %M' -o "$run.time" \
				"$B/agent-$a" record --event cpu --unwind $mode --duration "${SECONDS_EACH}s" -o "$run.folded" 2>"$run.err" &
			rec=$!
			sleep $((SECONDS_EACH - 1))
			"$B/bpftool" prog show --json >"$run.progs.json" 2>/dev/null
			wait $rec
			echo $? >"$run.rc"
		done
	done
	r=$((r + 1))
done
kill $pids 2>/dev/null
echo 0 >/proc/sys/kernel/bpf_stats_enabled
EOF
chmod +x "$work/bin/collect.sh"

if [ -n "$suite" ]; then
	say "collecting in a $suite guest (${#names[@]} builds, $rounds rounds of ${seconds}s per build and mode)"
	tools/numa-vm/run.sh -q --suite "$suite" --nodes 1 --cpus-per-node 2 --mem-per-node 2G \
		--timeout $((seconds * 4 * rounds * ${#names[@]} + 600)) --copy "$work/bin:/opt/bench" \
		--out-dir "$work/runs" -- sh /opt/bench/collect.sh /opt/bench /out "$seconds" "$rounds" "${#names[@]}" \
		>"$work/guest.log" 2>&1 || { tail -30 "$work/guest.log" >&2; exit 1; }
else
	say "collecting on this machine (${#names[@]} builds, $rounds rounds of ${seconds}s per build and mode)"
	sh "$work/bin/collect.sh" "$work/bin" "$work/runs" "$seconds" "$rounds" "${#names[@]}"
fi

python3 - "$work/runs" "$seconds" "${names[@]}" <<'PY' | tee "$out/agent-kernel-${suite:-host}.md"
import json, re, sys
from pathlib import Path
from statistics import median

runs, seconds, names = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
kernel = (runs / "kernel").read_text().strip()
print(f"Agent cost, `record --event cpu` system-wide at 99 Hz, {seconds} s per run, kernel {kernel}; "
      "medians over the rounds (min–max)\n")
print("| build | --unwind | agent CPU (% of one core) | BPF time per sample | peak RSS | samples | whole chains |")
print("| --- | --- | --- | --- | --- | --- | --- |")

def spread(values, fmt):
    if not values:
        return "–"
    m = median(values)
    return fmt(m) if len(values) == 1 else f"{fmt(m)} ({fmt(min(values))}–{fmt(max(values))})"

for a, name in enumerate(names):
    for mode in ["auto", "frame-pointer"]:
        cpu, bpf, rss, samples, whole, refused = [], [], [], [], [], None
        for rc in sorted(runs.glob(f"r*-a{a}-{mode}.rc")):
            base = str(rc)[: -len(".rc")]
            err = Path(base + ".err").read_text(errors="replace")
            if rc.read_text().strip() != "0":
                refused = err.strip().splitlines()[-1] if err.strip() else "exited"
                continue
            wall, user, sys_, maxrss = Path(base + ".time").read_text().split()[:4]
            cpu.append((float(user) + float(sys_)) / seconds * 100)
            rss.append(int(maxrss) / 1024)
            m = re.search(r"\((\d+) samples of", err)
            samples.append(int(m.group(1)) if m else 0)
            progs = [p for p in json.loads(Path(base + ".progs.json").read_text() or "[]")
                     if p.get("name") == "sample_cpu" and p.get("run_cnt")]
            n = sum(p["run_cnt"] for p in progs)
            if n:
                bpf.append(sum(p["run_time_ns"] for p in progs) / n)
            total = hit = 0
            for line in Path(base + ".folded").read_text().splitlines():
                stack, _, count = line.rpartition(" ")
                if not stack.startswith("workload-"):
                    continue
                total += int(count)
                if ";_start;" in f";{stack};" and ";main;" in f";{stack};":
                    hit += int(count)
            if total:
                whole.append(hit / total * 100)
        if refused and not cpu:
            print(f"| {name} | {mode} | cannot load here: {refused[:160]} | | | | |")
            continue
        print(f"| {name} | {mode} | {spread(cpu, lambda v: f'{v:.2f}%')} | {spread(bpf, lambda v: f'{v:,.0f} ns')} | "
              f"{spread(rss, lambda v: f'{v:.0f} MiB')} | {spread(samples, lambda v: f'{v:,.0f}')} | "
              f"{spread(whole, lambda v: f'{v:.0f}%')} |")
PY
