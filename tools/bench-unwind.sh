#!/usr/bin/env bash
# `make bench` (second part): what recovering call chains costs: frame pointers, tables in the
# kernel, stack copies unwound in the agent.
#
# One CPU-bound process per CPU (testdata/fixtures/workload.c `spin`, and the same source built
# -O2 -fomit-frame-pointer running `memset`) is profiled system-wide with
#
#   bimodal-agent record --event cpu --unwind frame-pointer   (stack ids from bpf_get_stackid)
#   bimodal-agent record --event cpu --unwind auto            (the default: unwound in the kernel
#                                                              from tables built from .eh_frame)
#   bimodal-agent record --event cpu --unwind eh-frame        (a stack copy per sample, unwound
#                                                              in the agent with framehop)
#
# at 99 Hz per CPU for BENCH_SECONDS (default 20). For each it reports
#   - the agent's CPU time (user+sys) as % of one core and per 1,000 samples;
#   - the BPF program's own time per sample (kernel.bpf_stats_enabled: run_time_ns / run_cnt),
#     which is spent in the sampled thread, not in the agent;
#   - the agent's peak RSS, samples, samples unwound from .eh_frame and cut short;
#   - bytes per sample of the batches as `run` would send them (names included).
# Prints a Markdown table and writes it to $BENCH_OUT/unwind.md.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-20}
agent=${BIMODAL_AGENT:-target/release/bimodal-agent}
out=${BENCH_OUT:-target/bench}
runs=$out/unwind
mkdir -p "$runs"
say() { echo "bench-unwind: $*" >&2; }
die() {
	say "error: $*"
	exit 1
}
[ "$(id -u)" = 0 ] || die "needs root (BPF)"
[ -x "$agent" ] || die "$agent is missing: run make release"
time_bin=/usr/bin/time
[ -x "$time_bin" ] || die "GNU time is missing (apt-get install time)"
command -v bpftool >/dev/null || die "bpftool is missing (apt-get install bpftool)"

cc -O1 -g -fno-omit-frame-pointer -o "$runs/workload-fp" testdata/fixtures/workload.c
cc -O2 -g -fomit-frame-pointer -o "$runs/workload-nofp" testdata/fixtures/workload.c

pids=()
previous_stats=$(sysctl -n kernel.bpf_stats_enabled)
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	sysctl -qw kernel.bpf_stats_enabled="$previous_stats" || true
}
trap cleanup EXIT
sysctl -qw kernel.bpf_stats_enabled=1

cpus=$(nproc)
# half the CPUs run a frame-pointer build, half one without: both kinds of code are sampled
for i in $(seq 1 "$cpus"); do
	if [ $((i % 2)) = 1 ]; then
		"$runs/workload-fp" spin $((seconds * 3 + ${BENCH_GROWTH_SECONDS:-30} * 3 + 60)) >/dev/null &
	else
		"$runs/workload-nofp" memset $((seconds * 3 + ${BENCH_GROWTH_SECONDS:-30} * 3 + 60)) >/dev/null &
	fi
	pids+=($!)
done

rows=()
for mode in frame-pointer auto eh-frame; do
	say "profiling with --unwind $mode for ${seconds}s"
	"$time_bin" -f '%e %U %S %M' -o "$runs/$mode.time" \
		"$agent" record --event cpu --unwind "$mode" --duration "${seconds}s" -o "$runs/$mode.folded" \
		2>"$runs/$mode.err" &
	recorder=$!
	# read the program's counters just before the recording ends
	sleep $((seconds - 1))
	bpftool prog show --json >"$runs/$mode.progs.json"
	wait "$recorder" || die "record --unwind $mode failed: $(tail -n 3 "$runs/$mode.err")"
	read -r wall user sys rss <"$runs/$mode.time"
	line=$(grep '^bimodal-agent: wrote' "$runs/$mode.err") || die "no summary line in $runs/$mode.err"
	samples=$(sed -n 's/.*(\([0-9]*\) samples of.*/\1/p' <<<"$line")
	lost=$(sed -n 's/.*, \([0-9]*\) lost;.*/\1/p' <<<"$line")
	unwound=$(sed -n 's/.*lost; \([0-9]*\) unwound.*/\1/p' <<<"$line")
	truncated=$(sed -n 's/.*, \([0-9]*\) of them cut short.*/\1/p' <<<"$line")
	bytes=$(sed -n 's/.*; \([0-9]*\) bytes of batches.*/\1/p' <<<"$line")
	bpf_ns=$(python3 -c '
import json, sys
progs = [p for p in json.load(open(sys.argv[1])) if p.get("name") == "sample_cpu" and p.get("run_cnt")]
runs = sum(p["run_cnt"] for p in progs)
print(round(sum(p["run_time_ns"] for p in progs) / runs) if runs else "n/a")
' "$runs/$mode.progs.json")
	rows+=("$(python3 -c '
import sys
mode, seconds, user, sys_, rss, samples, lost, unwound, truncated, nbytes, bpf_ns = sys.argv[1:]
cpu = float(user) + float(sys_)
samples = int(samples)
print(f"| {mode} | {cpu / float(seconds) * 100:.2f}% | {cpu * 1e6 / samples:.0f} ms | {bpf_ns} ns | "
      f"{int(rss) // 1024} MiB | {samples} | {lost} | {unwound} | {truncated} | {int(nbytes) / samples:.1f} |")
' "$mode" "$seconds" "$user" "$sys" "$rss" "$samples" "$lost" "$unwound" "$truncated" "$bytes" "$bpf_ns")")
done

{
	echo "Unwinding cost: bimodal-agent record --event cpu system-wide, 99 Hz x $cpus CPUs, ${seconds}s, $(uname -r)"
	echo
	echo "| --unwind | agent CPU (% of one core) | agent CPU per 1,000 samples | BPF time per sample | peak RSS | samples | lost | unwound from .eh_frame | cut short | wire bytes per sample |"
	echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
	printf '%s\n' "${rows[@]}"
} | tee "$out/unwind.md"

# How the agent's cost grows with the samples (the default mode): the same workload at three
# sampling rates, the agent's CPU read from its threads' schedstat (ns) between a third of the run
# and its last second, so start-up (compiling tables, reading every process) is left out. The
# slope is the cost per sample, the intercept what the agent costs with no samples at all; a
# 96-CPU node at 99 Hz takes 9,504 samples a second.
growth_seconds=${BENCH_GROWTH_SECONDS:-30}
agent_cpu_ns() { # PID: CPU time of all its threads, ns
	local total=0 t
	for t in /proc/"$1"/task/*/schedstat; do
		read -r ns _ <"$t" 2>/dev/null || continue
		total=$((total + ns))
	done
	echo "$total"
}
growth=()
for hz in 99 499 999; do
	say "steady-state cost at ${hz} Hz for ${growth_seconds}s"
	"$agent" record --event cpu --cpu-frequency "$hz" --duration "${growth_seconds}s" -o "$runs/growth-$hz.folded" \
		2>"$runs/growth-$hz.err" &
	recorder=$!
	from=$((growth_seconds / 3))
	to=$((growth_seconds - 1))
	sleep "$from"
	cpu0=$(agent_cpu_ns "$recorder")
	sleep $((to - from))
	cpu1=$(agent_cpu_ns "$recorder")
	wait "$recorder" || die "record at $hz Hz failed: $(tail -n 3 "$runs/growth-$hz.err")"
	line=$(grep '^bimodal-agent: wrote' "$runs/growth-$hz.err") || die "no summary line in $runs/growth-$hz.err"
	samples=$(sed -n 's/.*(\([0-9]*\) samples of.*/\1/p' <<<"$line")
	growth+=("$hz $((to - from)) $((cpu1 - cpu0)) $samples $growth_seconds")
done
python3 - "$cpus" "${growth[@]}" <<'PY' | tee "$out/unwind-growth.md"
import sys
cpus = int(sys.argv[1])
points = []
print(f"Steady-state agent CPU (--unwind auto), {cpus} CPUs, measured from a third of each run to its last second\n")
print("| rate | samples/s | agent CPU (% of one core) | agent CPU per 1,000 samples |")
print("| --- | --- | --- | --- |")
for arg in sys.argv[2:]:
    hz, span, ns, samples, seconds = map(int, arg.split())
    rate = samples / seconds
    cpu_per_s = ns / 1e9 / span
    points.append((rate, cpu_per_s))
    print(f"| {hz} Hz | {rate:.0f} | {cpu_per_s * 100:.2f}% | {cpu_per_s * 1e6 / rate:.1f} ms |")
n = len(points)
mx = sum(p[0] for p in points) / n
my = sum(p[1] for p in points) / n
slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
intercept = my - slope * mx
node = 96 * 99
print()
print(f"Fit: {intercept * 100:.2f}% of a core with no samples + {slope * 1e6:.2f} ms per 1,000 samples.")
print(f"Projection for 96 CPUs at 99 Hz ({node:,} samples/s): {(intercept + slope * node) * 100:.2f}% of one core.")
PY
