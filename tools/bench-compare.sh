#!/bin/bash
# Compare's latency and CPU on a kept store, servers side by side: each server in turn is started
# on the same store, asked once (warm-up) and then RUNS times for compare over [FROM, TO), and
# stopped; ROUNDS rounds alternate the servers. Prints each run's seconds and the CPU seconds of
# ClickHouse and of the server per compare.
#
# usage: tools/bench-compare.sh STORE FROM TO SERVER [SERVER...]
#   STORE: a --data-dir the storage bench kept (target/bench/storage/1000); FROM, TO: Unix seconds
#   (its results.json's "scope"). BIMODAL_COMPARE_QUERY adds to the query (e.g. &explained_nodes=all);
#   ROUNDS (3) and RUNS (6) from the environment.
set -euo pipefail
store=$1 from=$2 to=$3
shift 3
port=${BIMODAL_BENCH_PORT:-18080}
url="http://127.0.0.1:$port/api/v1/compare?from=$from&to=$to${BIMODAL_COMPARE_QUERY:-}"
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
pid=
# The server stops its managed ClickHouse when it is stopped.
stop() { if [ -n "$pid" ]; then kill "$pid" 2> /dev/null || true; wait "$pid" 2> /dev/null || true; pid=; fi; }
trap stop EXIT
start() {
  "$1" --listen "127.0.0.1:$port" --data-dir "$store" > "$store/bench-compare.log" 2>&1 &
  pid=$!
  for _ in $(seq 120); do curl -sf "127.0.0.1:$port/healthz" > /dev/null && break; sleep 1; done
}
# Every server migrates the store once first; then each build is made to read its own rollup
# of per-node function values (tools/lib/ab-store.sh), with the last server's ClickHouse.
# shellcheck source=tools/lib/ab-store.sh
. "$(dirname "$0")/lib/ab-store.sh"
q() {
  local http
  http=$(sed -n 's|.*<http_port>\([0-9]*\)</http_port>.*|\1|p' "$store/clickhouse/config.xml")
  curl -sS --max-time 1800 "http://127.0.0.1:$http/?database=bimodal" --data-binary "$1"
}
for server in "$@"; do
  start "$server"
  [ "$server" != "${*: -1}" ] || ab_rollups q
  stop
done
for round in $(seq "${ROUNDS:-3}"); do
  for server in "$@"; do
    stop
    start "$server"
    clickhouse=$(pgrep -f "clickhouse-server.*$(realpath "$store")" | head -1)
    curl -sf -o /dev/null "$url"
    ch0=$(cpu "$clickhouse") s0=$(cpu "$pid") times=""
    for _ in $(seq "${RUNS:-6}"); do
      times="$times $(curl -sf -o /dev/null -w '%{time_total}' "$url")"
    done
    ch1=$(cpu "$clickhouse") s1=$(cpu "$pid")
    awk -v r="$round" -v s="$server" -v t="$times" -v ch=$((ch1 - ch0)) -v sv=$((s1 - s0)) -v hz="$hz" -v n="${RUNS:-6}" \
      'BEGIN { printf "round %s %s: %s s; CPU per compare: ClickHouse %.2f s, server %.2f s\n", r, s, t, ch / hz / n, sv / hz / n }'
  done
done
