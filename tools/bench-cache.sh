#!/usr/bin/env bash
# `make bench` (fourth part): the agent's memory as the processes it names come and go. The agent
# (`run --output-dir`, batches every 5 s, named on the node) samples cpu system-wide while short
# processes follow each other (python3, 0.1 s of work each,
# every one a new process whose files the symbolizer opens anew), for BENCH_CACHE_SECONDS (15
# and 45 by default: memory that grows with the processes seen shows as a larger peak for the
# longer run). Reports the agent's peak RSS (GNU time) and the processes run, for this build
# and, side by side, for BIMODAL_AGENT_B when given (an older build, e.g. one whose caches had no
# bound). Prints a Markdown table, also written to $BENCH_OUT/cache.md.
# BENCH_CACHE_SERVER_URL=URL sends the batches to that server instead (frames named there, as
# `run` does by default); BENCH_CACHE_EVENTS="" samples every kind the machine has instead of cpu.
set -euo pipefail
cd "$(dirname "$0")/.."

agent_a=${BIMODAL_AGENT:-target/release/bimodal-agent}
agent_b=${BIMODAL_AGENT_B:-}
seconds=${BENCH_CACHE_SECONDS:-15 45}
server_url=${BENCH_CACHE_SERVER_URL:-}
events=${BENCH_CACHE_EVENTS-cpu}
out=${BENCH_OUT:-target/bench}
runs=$out/cache
mkdir -p "$runs"
say() { echo "bench-cache: $*" >&2; }
die() {
	say "error: $*"
	exit 1
}
[ "$(id -u)" = 0 ] || die "needs root (BPF)"
[ -x "$agent_a" ] || die "run make release first"
[ -x /usr/bin/time ] || die "GNU time is missing (apt-get install time)"
command -v python3 >/dev/null || die "python3 is missing"

# One measurement: the agent for $2 seconds while short processes run one after another.
measure() {
	local agent=$1 secs=$2 label=$3
	rm -rf "$runs/batches-$label-$secs"
	local to=(--output-dir "$runs/batches-$label-$secs")
	[ -n "$server_url" ] && to=(--server-url "$server_url")
	/usr/bin/time -f '%M' -o "$runs/time-$label-$secs" timeout -s TERM "$secs" "$agent" run \
		${events:+--event "$events"} --node-name "cache-$label" --interval 5s "${to[@]}" \
		2>"$runs/agent-$label-$secs.log" &
	local ag=$! n=0
	while kill -0 "$ag" 2>/dev/null; do
		python3 -c 'import time
t = time.monotonic() + 0.1
while time.monotonic() < t: sum(range(1000))'
		n=$((n + 1))
	done
	wait "$ag" || true
	grep -q "ERROR" "$runs/agent-$label-$secs.log" && die "the agent failed: $runs/agent-$label-$secs.log"
	echo "$(($(tail -n1 "$runs/time-$label-$secs") / 1024)) $n"
}

{
	named="on the node"
	[ -n "$server_url" ] && named="by the server ($server_url)"
	echo "events: ${events:-every kind the machine has}; frames named $named"
	echo
	echo "| build | recording | processes run | agent peak RSS |"
	echo "|---|---|---|---|"
	for secs in $seconds; do
		for pair in "A:$agent_a" ${agent_b:+"B:$agent_b"}; do
			label=${pair%%:*} agent=${pair#*:}
			read -r rss n < <(measure "$agent" "$secs" "$label")
			echo "| $label ($agent) | ${secs} s | $n | $rss MiB |"
		done
	done
} | tee "$out/cache.md"
