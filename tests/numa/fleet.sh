#!/usr/bin/env bash
# The NUMA fleet: eight real 2-node NUMA guests (qemu TCG, tools/numa-vm, two at a time) run the same fixture
# (numa_scan --bss) under `bimodal-agent run --output-dir`, one node name each. In four of them
# the fixture's .bss is held (bound) on the NUMA node its threads do not run on; in the others
# it is first touched on the node they run on. Their batches are imported into a server on this machine (managed ClickHouse) and
# `bimodal compare`, told nothing about the groups, must put exactly those four in the slow
# band, name the remote .bss as the placement that goes with it, and name scan_bss_table as the
# function whose remote accesses differ (tests/numa/fleet_check.py).
# usage: tests/numa/fleet.sh [AGENT_BINARY]   (default: builds target/release/bimodal-agent)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=target/numa-fleet
rm -rf "$out" && mkdir -p "$out/bin"

agent=${1:-}
if [ -z "$agent" ]; then
	cargo build --release -p bimodal-agent --quiet
	agent=target/release/bimodal-agent
fi
# The server and the CLI of the agent's build.
bin=$(dirname "$agent")
[ -x "$bin/bimodal-server" ] && [ -x "$bin/bimodal" ] || cargo build --profile "$(basename "$bin" | sed 's/^debug$/dev/')" -p bimodal-server --bins --quiet
cp "$agent" "$out/bin/bimodal-agent"
strip --strip-debug "$out/bin/bimodal-agent"
gcc -O1 -g -fno-omit-frame-pointer -pthread -Wall -o "$out/bin/numa_scan" testdata/fixtures/numa_scan.c

# Which guests hold their .bss remote: not the first ones, nor every other one.
remote=" 1 2 5 7 "
# Guests booted at once: each runs its fixture's threads on one of its two vCPUs, so two of them
# keep a 2-core host busy where one left a core idle.
jobs=${FLEET_JOBS:-2}
start=$(date +%s)
guest() { # K PLACEMENT
	# A guest takes about 20 s (a cold first boot and a loaded host: a few times that).
	tools/numa-vm/run.sh -q --retry-on-lockup --nodes 2 --cpus-per-node 1 --mem-per-node 768M --timeout 300 \
		--copy "$out/bin/bimodal-agent:/opt/bimodal/bimodal-agent" \
		--copy "$out/bin/numa_scan:/opt/bimodal/numa_scan" \
		--copy tests/numa/fleet-guest.sh:/opt/bimodal/fleet-guest.sh \
		--env "NODE_NAME=numa-$1" --env "PLACEMENT=$2" \
		--out-dir "$out/numa-$1" -- sh /opt/bimodal/fleet-guest.sh >"$out/numa-$1.log" 2>&1
}
pids=()
for k in 0 1 2 3 4 5 6 7; do
	case "$remote" in *" $k "*) placement=remote ;; *) placement=local ;; esac
	echo "numa-$k $placement" >>"$out/fleet.txt"
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
	guest "$k" "$placement" &
	pids[k]=$!
done
failed=0
for k in 0 1 2 3 4 5 6 7; do
	if ! wait "${pids[k]}"; then
		echo "numa fleet: guest numa-$k failed:" >&2
		tail -40 "$out/numa-$k.log" >&2
		failed=1
	fi
	# A guest kernel lockup retried (tools/numa-vm/run.sh --retry-on-lockup): its report, for the record.
	sed -n '/numa-vm: LOCKUP/,/numa-vm: ----/p' "$out/numa-$k.log" >&2
done
[ "$failed" = 0 ] || exit 1
end=$(($(date +%s) + 1))

listen=127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin/bimodal-server" --listen "$listen" --data-dir "$out/server" 2>"$out/server.log" &
server=$!
trap 'kill -INT $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
	curl -sf "http://$listen/healthz" >/dev/null 2>&1 && break
	kill -0 $server 2>/dev/null || { cat "$out/server.log" >&2; exit 1; }
	sleep 0.2
done
"$out/bin/bimodal-agent" import --server-url "http://$listen" "$out"/numa-*/batches 2>"$out/import.log"
"$bin/bimodal" compare --server-url "http://$listen" --from "$start" --to "$end" --json >"$out/compare.json"
"$bin/bimodal" compare --server-url "http://$listen" --from "$start" --to "$end" >"$out/compare.txt"
# Each node's newest placement as the server holds it: what the check shows when a node's
# finding is missing.
for k in 0 1 2 3 4 5 6 7; do
	curl -sf "http://$listen/api/v1/placement?node=numa-$k&from=$start&to=$end" >"$out/numa-$k/placement.json" || true
done
python3 tests/numa/fleet_check.py "$out"
