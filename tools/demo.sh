#!/usr/bin/env bash
# `make demo`: the bimodal server (with its managed ClickHouse) and a simulated fleet on this
# machine: eight real agents, each sampling its own workload (--pid) under its own node name. The
# same program runs everywhere; on three nodes (labelled instance_type=big) it page-faults about
# ten times as often per CPU-second. Prints the UI URL, then, once a minute of samples is in,
# what `bimodal compare` finds without being told which nodes differ. Ctrl-C stops everything
# this script started.
set -euo pipefail
cd "$(dirname "$0")/.."

listen=${BIMODAL_LISTEN:-127.0.0.1:7070}
data=${BIMODAL_DATA_DIR:-.demo}
mkdir -p "$data"
pids=()
cleanup() {
	trap - INT TERM EXIT
	echo
	echo "demo: stopping"
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	# The server stops ClickHouse on its way out; whatever is still there after 15 s is killed.
	for _ in $(seq 1 75); do
		alive=0
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ "$alive" = 0 ] && break
		sleep 0.2
	done
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	# A server killed that way leaves its managed ClickHouse behind.
	pkill -f "clickhouse-server --config-file=$(realpath "$data")/" 2>/dev/null || true
	wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

if [ "$(id -u)" -ne 0 ]; then
	echo "demo: the agent needs root (CAP_BPF and CAP_PERFMON): run as root" >&2
	exit 1
fi

# Alerts too: the demo's rules (server/rules/demo.yaml) fire for the slow nodes within minutes.
target/release/bimodal-server --listen "$listen" --data-dir "$data" --rules server/rules/demo.yaml \
	2>"$data/server.log" &
pids+=($!)
ready=
for _ in $(seq 1 600); do
	if curl -sf "http://$listen/healthz" >/dev/null 2>&1; then
		ready=1
		break
	fi
	if ! kill -0 "${pids[0]}" 2>/dev/null; then
		break
	fi
	sleep 0.2
done
if [ -z "$ready" ]; then
	echo "demo: the server did not become healthy on $listen:" >&2
	cat "$data/server.log" >&2
	exit 1
fi

# One program everywhere: a paced server (1,000 requests a second) whose session path
# page-faults on one request in sixteen, and on every request on the slow nodes.
cc -O1 -g -fno-omit-frame-pointer -o "$data/workload" testdata/fixtures/workload.c
nodes=(demo-a demo-b demo-c demo-d demo-e demo-f demo-g demo-h)
for i in "${!nodes[@]}"; do
	name=${nodes[$i]}
	case $i in 2 | 5 | 7) every=1 type=big ;; *) every=16 type=small ;; esac
	"$data/workload" paced 86400 1000 "$every" >/dev/null &
	workload=$!
	pids+=("$workload")
	target/release/bimodal-agent run --server-url "http://$listen" --node-name "$name" \
		--label demo=true --label "instance_type=$type" --pid "$workload" \
		--event cpu --event page_fault --cpu-frequency 499 --interval 5s 2>"$data/agent-$name.log" &
	pids+=($!)
done
node=${nodes[0]}

# The answer, once a minute of samples is in.
(
	sleep 75
	echo
	echo "demo: bimodal compare --last 1m"
	target/release/bimodal compare --server-url "http://$listen" --last 1m --limit 6 || true
	echo
	echo "demo: still running; Ctrl-C to stop"
) &
pids+=($!)

cat <<MSG

  bimodal is running: a fleet of ${#nodes[@]} nodes on this machine.
    UI:       http://$listen/compare.html?selector=%7B%7D&range=5m   (the slow band, explained)
              http://$listen/fleet.html?selector=%7B%7D&range=5m     (every node, its band and metrics)
              http://$listen/?node=$node&event=page_fault   (one node's flame graph)
              http://$listen/alerts.html   (alerts on the slow nodes, from about two minutes on)
    compare:  target/release/bimodal compare --server-url http://$listen --last 5m
              http://$listen/api/v1/compare
    diff:     target/release/bimodal diff --server-url http://$listen --event page_fault --groups bands --last 5m
    logs:     $data/server.log, $data/agent-*.log
  The first samples arrive within 5 seconds; the comparison is printed here in about a
  minute. Press Ctrl-C to stop.

MSG
wait
