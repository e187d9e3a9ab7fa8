#!/usr/bin/env bash
# `make demo`: the bimodal server (with its managed ClickHouse), an agent for this machine and
# two small demo workloads. Prints the UI URL; Ctrl-C stops everything this script started.
set -euo pipefail
cd "$(dirname "$0")/.."

listen=${BIMODAL_LISTEN:-127.0.0.1:7070}
data=${BIMODAL_DATA_DIR:-.demo}
node=${BIMODAL_NODE_NAME:-$(cat /proc/sys/kernel/hostname)}
mkdir -p "$data"
pids=()
cleanup() {
	trap - INT TERM EXIT
	echo
	echo "demo: stopping"
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

if [ "$(id -u)" -ne 0 ]; then
	echo "demo: the agent needs root (CAP_BPF and CAP_PERFMON): run as root" >&2
	exit 1
fi

target/release/bimodal-server --listen "$listen" --data-dir "$data" 2>"$data/server.log" &
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

target/release/bimodal-agent run --server-url "http://$listen" --node-name "$node" --label demo=true \
	--event cpu --event page_fault --interval 5s 2>"$data/agent.log" &
pids+=($!)

# Demo workloads with known stacks: a page-faulting loop and a CPU-bound loop, restarted forever.
cc -O1 -g -fno-omit-frame-pointer -o "$data/workload" testdata/fixtures/workload.c
(while true; do "$data/workload" fault 20 >/dev/null; done) &
pids+=($!)
(while true; do "$data/workload" spin 20 >/dev/null; done) &
pids+=($!)

cat <<MSG

  bimodal is running.
    UI:       http://$listen/?node=$node&event=page_fault
    API:      http://$listen/api/v1/nodes
    logs:     $data/server.log, $data/agent.log
  The first samples arrive within 5 seconds. Press Ctrl-C to stop.

MSG
wait
