#!/usr/bin/env bash
# `make bench` (fourth part): the agent's memory as the processes it meets come and go. The agent
# (`run`, batches every 5 s) samples cpu system-wide while short processes follow each other
# (python3, 0.1 s of work each, every one a new process whose mappings the agent reads and whose
# files it may open anew), for BENCH_CACHE_SECONDS (15 and 45 by default: memory that grows with
# the processes seen shows as a larger peak for the longer run). Reports the agent's peak RSS
# and CPU time (GNU time) and the processes run, for this build and, side by side, for
# BIMODAL_AGENT_B when given (an older build), with frames named by the server (what `run` does by default; a fresh
# server is started, or BENCH_CACHE_SERVER_URL's is used) and on the node (`--output-dir`), as
# BENCH_CACHE_NAMING lists ("node server" by default). BENCH_CACHE_EVENTS="" samples every kind
# the machine has instead of cpu. Prints a Markdown table, also written to $BENCH_OUT/cache.md.
set -euo pipefail
cd "$(dirname "$0")/.."

agent_a=${BIMODAL_AGENT:-target/release/bimodal-agent}
agent_b=${BIMODAL_AGENT_B:-}
server=${BIMODAL_SERVER:-target/release/bimodal-server}
seconds=${BENCH_CACHE_SECONDS:-15 45}
naming=${BENCH_CACHE_NAMING:-node server}
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
# shellcheck source=tools/lib/server.sh
. tools/lib/server.sh
# A fresh server for each run named by it (unless BENCH_CACHE_SERVER_URL names one): each build
# uploads its images to a server that has none, and no server runs while frames are named on the
# node (the agent samples the whole machine and would name the server's ClickHouse too).
# Sets served_url.
serve() {
	[ -x "$server" ] || die "run make release first"
	rm -rf "$runs/server"
	local port
	port=$(free_port)
	start_server "$server" "127.0.0.1:$port" "$runs/server.log" --data-dir "$runs/server" || die "no server"
	served_url=http://127.0.0.1:$port
}

# One measurement: the agent for $2 seconds, frames named as $4 says, while short processes run
# one after another.
measure() {
	# Run as a process substitution: its own shell, whose server is stopped when it ends.
	trap stop_server EXIT
	local agent=$1 secs=$2 label=$3 named=$4
	local name=$label-$named-$secs
	rm -rf "$runs/batches-$name"
	local to=(--output-dir "$runs/batches-$name")
	if [ "$named" = server ]; then
		served_url=$server_url
		[ -n "$served_url" ] || serve
		to=(--server-url "$served_url")
	fi
	/usr/bin/time -f '%M %U %S' -o "$runs/time-$name" timeout -s TERM "$secs" "$agent" run \
		${events:+--event "$events"} --node-name "cache-$label" --interval 5s "${to[@]}" \
		2>"$runs/agent-$name.log" &
	local ag=$! n=0
	while kill -0 "$ag" 2>/dev/null; do
		python3 -c 'import time
t = time.monotonic() + 0.1
while time.monotonic() < t: sum(range(1000))'
		n=$((n + 1))
	done
	wait "$ag" || true
	stop_server
	grep -q "ERROR" "$runs/agent-$name.log" && die "the agent failed: $runs/agent-$name.log"
	local kib user sys
	read -r kib user sys < <(tail -n1 "$runs/time-$name")
	echo "$((kib / 1024)) $n $(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')"
}

{
	trap stop_server EXIT
	echo "events: ${events:-every kind the machine has}"
	echo
	echo "| build | frames named | recording | processes run | agent peak RSS | agent CPU (user + sys) |"
	echo "|---|---|---|---|---|---|"
	for named in $naming; do
		case $named in
		server | node) ;;
		*) die "BENCH_CACHE_NAMING: $named is neither server nor node" ;;
		esac
		for secs in $seconds; do
			for pair in "A:$agent_a" ${agent_b:+"B:$agent_b"}; do
				label=${pair%%:*} agent=${pair#*:}
				read -r rss n cpu < <(measure "$agent" "$secs" "$label" "$named")
				where="by the server"
				[ "$named" = node ] && where="on the node"
				echo "| $label ($agent) | $where | ${secs} s | $n | $rss MiB | $cpu s |"
			done
		done
	done
} | tee "$out/cache.md"
