# Sourced by the bench scripts that run servers of different builds on one kept store.
#
#   ab_rollups QUERY_FUNCTION
#       makes each build read its own per-node function rollup: the newest server's migration
#       (016) stops `function_nodes_10m`, records it as holding no range (so an older server
#       reads `function_samples_10m`, ordered by node) and starts `function_nodes_by_id_10m`
#       empty at a store that has samples. For a side-by-side run on a kept store, the new
#       table is filled from the old one when it is empty, and both are recorded as holding
#       every range. QUERY_FUNCTION runs one SQL statement on the store's database and prints
#       its answer; run this after every server has migrated the store, before timing.

ab_rollups() {
	local q=$1
	[ "$($q "EXISTS TABLE function_nodes_by_id_10m")" = 1 ] || return 0
	[ "$($q "SELECT count() > 0 FROM function_nodes_10m")" = 1 ] || return 0
	if [ "$($q "SELECT count() FROM function_nodes_by_id_10m")" = 0 ]; then
		echo "filling function_nodes_by_id_10m from function_nodes_10m" >&2
		$q "INSERT INTO function_nodes_by_id_10m (series, function_id, time, node_id, node, self_count, self_value, total_count, total_value) SELECT cityHash64(event, source), function_id, time, cityHash64(node), node, self_count, self_value, total_count, total_value FROM function_nodes_10m"
		$q "OPTIMIZE TABLE function_nodes_by_id_10m FINAL"
	fi
	if [ "$($q "SELECT count() FROM rollups WHERE name IN ('function_nodes', 'function_nodes_by_id') AND complete_from != toDateTime(0)")" != 0 ]; then
		$q "ALTER TABLE rollups DELETE WHERE name IN ('function_nodes', 'function_nodes_by_id')"
		while [ "$($q "SELECT count() FROM rollups WHERE name IN ('function_nodes', 'function_nodes_by_id')")" != 0 ]; do sleep 0.5; done
		$q "INSERT INTO rollups (name, complete_from) VALUES ('function_nodes', toDateTime(0)), ('function_nodes_by_id', toDateTime(0))"
	fi
}
