#!/usr/bin/env bash
# Fleet-wide reads when the day's partition holds more than the hour read (design 025). The
# storage bench's kept 1,000-node store (`python3 tools/bench_storage.py --nodes 1000` leaves it
# in target/bench/storage/1000/clickhouse) holds about two hours of samples; a server that has
# run since midnight holds the whole day so far in the partition an hour is read from. This
# copies the bench window's hour into HOURS other hours of the same day (default 10, around the
# window's hour and leaving out the hours beside it: about half a day) in every table a
# fleet-wide compare and flame graph read, merges them, then times compare with the slow tenth,
# the fleet's flame graph and every node's totals on each server binary given, alternated
# ROUNDS times (default 2):
#
#   tools/bench-held-hours.sh OLD_SERVER NEW_SERVER
#
# The copies stay in the store (run the storage bench again for a fresh one). Prints one line
# per binary and read: the five timed runs after a first, in seconds, and the rows ClickHouse
# read for one compare, per table.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 SERVER [SERVER...]" >&2; exit 2; }
cd "$(dirname "$0")/.."
store=target/bench/storage/1000/clickhouse
results=target/bench/storage/results.json
[ -f "$store/config.xml" ] || { echo "no kept store: run python3 tools/bench_storage.py --nodes 1000" >&2; exit 1; }
port=$(sed -n 's|.*<http_port>\([0-9]*\)</http_port>.*|\1|p' "$store/config.xml")
ch="http://127.0.0.1:$port"
hours=${HOURS:-10}
rounds=${ROUNDS:-2}
listen=127.0.0.1:7171
# shellcheck source=tools/lib/server.sh
. tools/lib/server.sh
trap stop_server EXIT
log=target/bench/held-hours-server.log
q() { curl -sS --max-time 1800 "$ch/?database=bimodal" --data-binary "$1"; }

# Query logging, for the rows read.
grep -q "<log_queries>1</log_queries>" "$store/config.xml" ||
	sed -i 's|<profiles><default>|<profiles><default><log_queries>1</log_queries>|' "$store/config.xml"
if ! curl -s "$ch/ping" >/dev/null; then
	(cd "$store" && clickhouse-server --config-file=config.xml >/dev/null 2>&1 &)
	until curl -s "$ch/ping" >/dev/null; do sleep 0.5; done
fi
from=$(python3 -c "import json; r = json.load(open('$results')); print([x for x in r if x['nodes'] == 1000][0]['scope']['from'])")
to=$((from + 3600))

# Hours before and after the window's, within its day, leaving out the hours beside it (the
# storage bench's copies of the ingested minutes reach into them).
hour_of_day=$(((from % 86400) / 3600))
shifts=()
for ((h = 2; ${#shifts[@]} < hours && h < 24; h++)); do
	((hour_of_day - h >= 0 && ${#shifts[@]} < hours)) && shifts+=("-$h")
	((hour_of_day + h < 24 && ${#shifts[@]} < hours)) && shifts+=("$h")
done
# Every server migrates the store once first (a newer one may add tables the copies fill).
for server in "$@"; do
	start_server "$server" "$listen" "$log" --clickhouse-url "$ch"
	stop_server
done
# Each build reads its own rollup of per-node function values.
# shellcheck source=tools/lib/ab-store.sh
. tools/lib/ab-store.sh
ab_rollups q
by_hour=$(q "EXISTS TABLE node_totals_by_hour")
held=$(q "SELECT count() FROM node_totals WHERE abs(toInt64(toStartOfHour(time)) - $((from / 3600 * 3600))) >= 7200 AND toDate(time) = toDate(toDateTime($from))")
if [ "$held" -lt 1000 ]; then
	echo "copying the window's hour into ${#shifts[@]} other hours of its day" >&2
	for t in fleet_samples_10m fleet_function_samples_10m function_nodes_10m function_nodes_by_id_10m data_objects_10m node_totals; do
		cols=$(q "SELECT arrayStringConcat(groupArray(name), ', ') FROM system.columns WHERE database = 'bimodal' AND table = '$t' AND name != 'time'")
		for s in "${shifts[@]}"; do
			q "INSERT INTO $t (time, $cols) SELECT toDateTime(toUInt32(t) + ($s) * 3600), $cols FROM (SELECT time AS t, $cols FROM $t WHERE time >= toDateTime($from) AND time < toDateTime($to))"
		done
	done
	partition=$(q "SELECT toYYYYMMDD(toDateTime($from))")
	while [ "$(q "SELECT count() FROM system.merges")" != 0 ]; do sleep 5; done
	for t in fleet_samples_10m fleet_function_samples_10m function_nodes_10m function_nodes_by_id_10m data_objects_10m node_totals; do
		q "OPTIMIZE TABLE $t PARTITION $partition FINAL"
	done
fi
if [ "$by_hour" = 1 ]; then
	# The totals keyed by hour hold what node_totals holds (both views read the same INSERTs),
	# over the whole store.
	q "TRUNCATE TABLE node_totals_by_hour"
	q "INSERT INTO node_totals_by_hour SELECT * FROM node_totals"
	q "OPTIMIZE TABLE node_totals_by_hour FINAL"
	q "ALTER TABLE rollups DELETE WHERE name = 'node_totals'"
	while [ "$(q "SELECT count() FROM rollups WHERE name = 'node_totals'")" != 0 ]; do sleep 0.5; done
	q "INSERT INTO rollups (name, complete_from) VALUES ('node_totals', toDateTime(0))"
fi

selector=$(python3 -c 'import urllib.parse; print(urllib.parse.quote("{node=~\"loadgen-.*\"}"))')
compare="http://$listen/api/v1/compare?from=$from&to=$to&selector=$selector"
flamegraph="http://$listen/api/v1/flamegraph?from=$from&to=$to&selector=$selector&event=cpu&source=cpu-clock"
totals="http://$listen/api/v1/totals?from=$from&to=$to&event=page_fault"
for round in $(seq "$rounds"); do
	for server in "$@"; do
		start_server "$server" "$listen" "$log" --clickhouse-url "$ch"
		for read in compare flamegraph totals; do
			url=${!read}
			curl -s -o /dev/null "$url"
			times=()
			for _ in 1 2 3 4 5; do
				times+=("$({ /usr/bin/time -f %e curl -s -o /dev/null "$url"; } 2>&1)")
			done
			echo "round $round  $server  $read: ${times[*]}"
		done
		start=$(date +%s)
		sleep 1
		curl -s -o /dev/null "$compare"
		sleep 1
		curl -sS "$ch" --data-binary "SYSTEM FLUSH LOGS"
		echo "  rows read by one compare, per table:"
		curl -sS "$ch" --data-binary "SELECT extract(query, 'FROM ([a-z_0-9]+)') AS t, sum(read_rows) AS rows FROM system.query_log WHERE type = 2 AND event_time >= toDateTime($start) AND query NOT LIKE '%system.%' GROUP BY t ORDER BY rows DESC FORMAT TSV" | sed 's/^/    /'
		stop_server
	done
done
