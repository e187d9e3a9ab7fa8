#!/usr/bin/env bash
# Ingest alone, side by side: NODES simulated agents (bimodal-loadgen) backfill 60 s of history
# at once into a fresh server and managed ClickHouse, once per set of server flags given, in
# turn, ROUNDS times (default 1). Prints per run the samples stored per second of server CPU
# (issue 15's goal: 200,000 per core), the batches the agents were told to send again, by why,
# and the server's peak RSS:
#
#   tools/bench-ingest.sh 1000 "--wait-for-room 5s" "--wait-for-room 60s"
#
# Needs the release binaries (`cargo build --release -p bimodal-server --bins`); BIMODAL_SERVER and
# BIMODAL_LOADGEN name others (an A/B against an older build). The last run's server and loadgen
# logs are in target/bench/ingest.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 NODES SERVER_FLAGS [SERVER_FLAGS...]" >&2; exit 2; }
cd "$(dirname "$0")/.."
nodes=$1
shift
server=${BIMODAL_SERVER:-target/release/bimodal-server}
loadgen=${BIMODAL_LOADGEN:-target/release/bimodal-loadgen}
[ -x "$server" ] && [ -x "$loadgen" ] || { echo "build the release binaries first" >&2; exit 1; }
listen=127.0.0.1:7272
dir=target/bench/ingest
rounds=${ROUNDS:-1}

# shellcheck source=tools/lib/server.sh
. tools/lib/server.sh
# A run that fails leaves no server (and its ClickHouse) behind.
trap stop_server EXIT
ticks=$(getconf CLK_TCK)

run() {
	local flags=$1
	rm -rf "$dir" && mkdir -p "$dir"
	# shellcheck disable=SC2086 # the flags are words
	start_server "$server" "$listen" "$dir/server.log" --data-dir "$dir" \
		--node-batch-rate 1000000 --node-batch-burst 1000000 $flags || exit 1
	local pid=$server_pid
	local before after
	before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
	"$loadgen" --server-url "http://$listen" --nodes "$nodes" --backfill 60s --in-flight 4 \
		--connections "$((nodes < 200 ? nodes : 200))" 2>"$dir/loadgen.log" | tail -1 >"$dir/loadgen.json"
	after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
	local refused peak
	refused=$(curl -s "http://$listen/metrics" |
		sed -n 's/^bimodal_ingest_rejected_batches_total{reason="\([a-z_]*\)"} \([0-9]*\)$/\1 \2/p' | tr '\n' ' ')
	peak=$(awk '/VmHWM/ {print int($2 / 1024)}' "/proc/$pid/status")
	stop_server
	python3 - "$flags" "$((after - before))" "$ticks" "$refused" "$peak" "$dir/loadgen.json" <<'EOF'
import json, sys
flags, used, per_second, refused, peak, report = sys.argv[1:]
r = json.load(open(report))
cpu = int(used) / int(per_second)
print(f"{flags}: {r['samples_acked']:,} samples stored in {r['elapsed_seconds']:.0f} s, server CPU {cpu:.1f} s: "
      f"{r['samples_acked'] / cpu:,.0f} samples per core·s; sent again {r['batches_retried']:,} "
      f"({refused.strip() or 'none'}); ack p50 {r['ack_latency_p50_ms'] / 1000:.1f} s; server peak RSS {peak} MiB; "
      f"{r['wire_bytes_sent'] / 1e6:,.0f} MB sent, {r['wire_bytes_sent'] / r['batches_acked'] / 1e6:.2f} MB per batch stored")
EOF
}

for ((round = 0; round < rounds; round++)); do
	for flags in "$@"; do
		run "$flags"
	done
done
