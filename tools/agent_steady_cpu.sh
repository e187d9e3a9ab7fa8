#!/usr/bin/env bash
# The agent's CPU in steady state: `bimodal-agent run` (every kind this machine offers, batches
# written to a directory) beside the page-fault workload, its CPU ticks (/proc/PID/stat) counted
# between the 25th and 85th second, so that start-up (loading BPF, reading /proc/kallsyms,
# first naming of frames) is outside the window. Several binaries are alternated, ROUNDS times
# (default 2), for an A/B on one machine:
#
#   tools/agent_steady_cpu.sh OLD_AGENT NEW_AGENT
#
# Needs root (BPF). Prints one line per run: binary, ticks, % of one core, workload faults.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 AGENT [AGENT...]" >&2; exit 2; }
rounds=${ROUNDS:-2}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cc -O1 -g -fno-omit-frame-pointer -o "$dir/workload" "$(dirname "$0")/../testdata/fixtures/workload.c"
tick=$(getconf CLK_TCK)
for _ in $(seq "$rounds"); do
	for agent in "$@"; do
		rm -rf "$dir/run"
		"$dir/workload" fault 92 >"$dir/workload.out" 2>&1 &
		workload=$!
		"$agent" run --duration 92s --node-name bench --output-dir "$dir/run" >"$dir/agent.out" 2>&1 &
		pid=$!
		ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
		sleep 25
		before=$(ticks)
		sleep 60
		after=$(ticks)
		wait "$pid" "$workload"
		used=$((after - before))
		echo "$agent: $used ticks in 60 s = $(echo "scale=3; 100 * $used / $tick / 60" | bc)% of one core; $(tail -1 "$dir/workload.out")"
	done
done
