//! Every read query of the server, built in one place with its values bound as parameters, so
//! that `bimodal-server sql` can print them for checking against other ClickHouse versions.
//!
//! Built from three parts of their own: the SQL with bound values ([`sql`](super::sql)), the
//! tables and pieces a range reads ([`plan`](super::plan): an hour of a fleet reads a tenth of
//! the rows from the 10-minute tables), and selectors as conditions on the `nodes` and
//! `processes` tables ([`select`](super::select)).

use std::collections::HashMap;

use clickhouse::Client;

use super::plan::{counter_pieces, pieces, sources_from, totals_by_hour, CounterTables, Reach, MINUTE};
use super::select::{condition, matching_nodes, node_condition, process_column, selector_filter, Nodes, INLINE_NODES};
use super::sql::{Sql, Value};
use super::StorageError;
use crate::selector::{LabelScope, Selector, PROCESS_LABELS};

/// Deletes the rows of `build_ids` from `table` (named as DDL names it, with its `ON CLUSTER`).
pub(super) fn delete_build_ids(table: &str, on_cluster: &str, build_ids: &[String]) -> Sql {
    let mut sql = Sql::new(&format!("ALTER TABLE {table} {on_cluster} DELETE WHERE build_id IN ("));
    sql.bind_strs(build_ids).push(")");
    sql
}

/// `time >= ? AND time < ?`: [from, to) on a table's `time`.
fn time_filter(from: u32, to: u32) -> Sql {
    let mut sql = Sql::new("time >= toDateTime(");
    sql.bind(Value::U32(from))
        .push(") AND time < toDateTime(")
        .bind(Value::U32(to))
        .push(")");
    sql
}

/// `event = ? [AND source = ?] AND time in [from, to)`, and the same range stated on the hour:
/// the sample tables are ordered by `toStartOfHour(time)` after event and source (and node),
/// and ClickHouse derives no condition on that key column from one on `time` (18.16, nor 26.9).
/// Without it a read of an hour took every hour of its day from those tables: 1.2 M rows
/// instead of 82 K for every node's page-fault totals of an hour, with a day of 1,000 nodes in
/// the partition (design 025).
fn range_filter(event: &str, source: Option<&str>, from: u32, to: u32) -> Sql {
    let mut sql = Sql::new("event = ");
    sql.bind(Value::Str(event.to_owned()));
    if let Some(s) = source {
        sql.push(" AND source = ").bind(Value::Str(s.to_owned()));
    }
    sql.push(" AND ")
        .append(time_filter(from, to))
        .push(" AND toStartOfHour(time) >= toStartOfHour(toDateTime(")
        .bind(Value::U32(from))
        .push(")) AND toStartOfHour(time) < toDateTime(")
        .bind(Value::U32(to))
        .push(")");
    sql
}

/// Which samples a read covers.
#[derive(Clone, Debug)]
pub struct Scope {
    pub event: &'static str,
    /// `None`: every source (grouped by source).
    pub source: Option<String>,
    pub selector: Selector,
    /// Unix seconds, [from, to).
    pub from: u32,
    pub to: u32,
}

/// `SELECT columns FROM table[_10m] WHERE … UNION ALL …` over the pieces of the range.
fn union(table: &str, columns: &str, scope: &Scope, nodes: Nodes, extra: &Sql) -> Sql {
    union_prewhere(table, &format!("{table}_10m"), columns, scope, "", nodes, extra)
}

/// The same, each piece with `PREWHERE prewhere` when it is not empty: a condition on a small
/// column that most rows fail, so that ClickHouse reads the other columns only where it holds.
fn union_prewhere(
    minute: &str,
    coarse: &str,
    columns: &str,
    scope: &Scope,
    prewhere: &str,
    nodes: Nodes,
    extra: &Sql,
) -> Sql {
    union_pieces(scope, |is_coarse, from, to| {
        let table = match is_coarse {
            true => coarse,
            false => minute,
        };
        piece(table, columns, scope, prewhere, nodes, extra, from, to)
    })
}

/// `… UNION ALL …` of `piece(is_coarse, from, to)` over the pieces of the range.
fn union_pieces(scope: &Scope, piece: impl Fn(bool, u32, u32) -> Sql) -> Sql {
    let mut sql = Sql::default();
    for (i, (suffix, from, to)) in pieces(scope.from, scope.to).into_iter().enumerate() {
        if i > 0 {
            sql.push(" UNION ALL ");
        }
        sql.append(piece(suffix == "_10m", from, to));
    }
    sql
}

/// `SELECT columns FROM table [PREWHERE prewhere] WHERE …` over [from, to) of `scope`.
#[allow(clippy::too_many_arguments)]
fn piece(
    table: &str,
    columns: &str,
    scope: &Scope,
    prewhere: &str,
    nodes: Nodes,
    extra: &Sql,
    from: u32,
    to: u32,
) -> Sql {
    let mut sql = Sql::new(&format!("SELECT {columns} FROM {table} "));
    if !prewhere.is_empty() {
        sql.push(&format!("PREWHERE {prewhere} "));
    }
    sql.push("WHERE ")
        .append(range_filter(scope.event, scope.source.as_deref(), from, to))
        .append(selector_filter(&scope.selector, nodes))
        .append(extra.clone());
    sql
}

/// The same conditions on `function_nodes_by_id_10m`, which keys a series (event and source)
/// and a node by their cityHash64: ` series = … AND time in [from, to)` and the node filter on
/// `node_id`, its names hashed by ClickHouse (a set of a few hundred numbers). Its key has no
/// hour, and there is no process to filter on.
fn by_id_filter(event: &str, source: &str, nodes: Nodes, from: u32, to: u32) -> Sql {
    let mut sql = Sql::new("series = cityHash64(");
    sql.bind(Value::Str(event.to_owned()))
        .push(", ")
        .bind(Value::Str(source.to_owned()))
        .push(") AND ")
        .append(time_filter(from, to));
    sql.append(nodes.filter("node_id", "cityHash64(node)", "SELECT cityHash64(arrayJoin([", "]))"));
    sql
}

/// Rows of `table` (a per-node table with a `fleet_` rollup) summed by `keys` over `reach`:
/// `SELECT keys, sum(v) AS name… FROM (…) GROUP BY keys`, where `sums` are (column, name).
/// [`Reach::FleetMinus`] adds the rollup's rows and subtracts those of the nodes not matching,
/// in signed arithmetic, keeping groups with samples left.
fn summed(table: &str, keys: &str, sums: &[(&str, &str)], scope: &Scope, reach: &Reach, extra: &Sql) -> Sql {
    let plain = |t: &str, nodes: Nodes| {
        let columns: Vec<String> = sums.iter().map(|(c, _)| c.to_string()).collect();
        union(t, &format!("{keys}, {}", columns.join(", ")), scope, nodes, extra)
    };
    let outer = |inner: Sql, signed: bool| {
        let columns: Vec<String> = sums
            .iter()
            .map(|(c, name)| match signed {
                true => format!("toUInt64(greatest(sum(s_{c}), 0)) AS {name}"),
                false => format!("sum({c}) AS {name}"),
            })
            .collect();
        let mut sql = Sql::new(&format!("SELECT {keys}, {} FROM (", columns.join(", ")));
        sql.append(inner).push(&format!(") GROUP BY {keys}"));
        if signed {
            sql.push(&format!(" HAVING sum(s_{}) > 0", sums[0].0));
        }
        sql
    };
    match reach {
        Reach::Fleet => outer(plain(&format!("fleet_{table}"), Nodes::Any), false),
        Reach::EveryNode | Reach::Matching(_) | Reach::Nothing => {
            outer(plain(table, Nodes::of(reach, &scope.selector)), false)
        }
        Reach::FleetMinus(left_out) => {
            let signed = |sign: &str| -> String {
                let columns: Vec<String> = sums
                    .iter()
                    .map(|(c, _)| format!("{sign}toInt64({c}) AS s_{c}"))
                    .collect();
                format!("{keys}, {}", columns.join(", "))
            };
            let mut inner = union(&format!("fleet_{table}"), &signed(""), scope, Nodes::Any, extra);
            inner.push(" UNION ALL ").append(union(
                table,
                &signed("-"),
                scope,
                Nodes::left_out(left_out, &scope.selector),
                extra,
            ));
            outer(inner, true)
        }
    }
}

/// Samples per (source, stack, process) of a flame graph.
fn flame_rows(scope: &Scope, reach: &Reach) -> Sql {
    summed(
        "samples",
        "source, stack_id, process_id",
        &[("count", "count"), ("value", "value")],
        scope,
        reach,
        &Sql::default(),
    )
}

/// Samples per (source, stack, process) of a flame graph, largest first, at most `limit`.
pub(super) fn flame(scope: &Scope, reach: &Reach, limit: u32) -> Sql {
    let mut sql = flame_rows(scope, reach);
    sql.push(" ORDER BY value DESC LIMIT ").bind(Value::U32(limit));
    sql
}

/// Per source, how many rows [`flame`] has without its limit, and their samples and value: what
/// an answer cut at its limit states it left out.
pub(super) fn flame_totals(scope: &Scope, reach: &Reach) -> Sql {
    per_source_totals(flame_rows(scope, reach))
}

/// Rows of (source, stack, process, count, value) summed per source, with how many there are.
fn per_source_totals(rows: Sql) -> Sql {
    let mut sql = Sql::new("SELECT source, count() AS stacks, sum(count) AS count, sum(value) AS value FROM (");
    sql.append(rows).push(") GROUP BY source");
    sql
}

/// Samples per (source, stack, process) of the listed nodes, each node's values multiplied by
/// its weight and summed (rounded to whole units), largest first, at most `limit`. Weights are
/// numbers the server computed, written as literals.
pub(super) fn weighted_flame(scope: &Scope, limit: u32) -> Sql {
    let mut sql = weighted_flame_rows(scope);
    sql.push(" ORDER BY value DESC LIMIT ").bind(Value::U32(limit));
    sql
}

/// [`flame_totals`] of [`weighted_flame`].
pub(super) fn weighted_flame_totals(scope: &Scope) -> Sql {
    per_source_totals(weighted_flame_rows(scope))
}

/// The session's temporary table of each node's weight ([`weighted_flame`]): rows sent with
/// the query's session, so that a group of any size is data, not text ClickHouse must parse.
pub(super) const NODE_WEIGHTS: &str = "node_weights";

/// [`NODE_WEIGHTS`], created in a session before its rows are sent.
pub(super) fn create_node_weights() -> Sql {
    Sql::new(&format!(
        "CREATE TEMPORARY TABLE {NODE_WEIGHTS} (node String, weight Float64) ENGINE = Memory"
    ))
}

/// Samples per (source, stack, process) of the nodes of [`NODE_WEIGHTS`], each node's values
/// multiplied by its weight.
fn weighted_flame_rows(scope: &Scope) -> Sql {
    let mut sql = Sql::new(
        "SELECT source, stack_id, process_id, sum(count) AS count, toUInt64(round(sum(value * weight))) AS value FROM (",
    );
    sql.append(union(
        "samples",
        "node, source, stack_id, process_id, count, value",
        scope,
        Nodes::Table(NODE_WEIGHTS),
        &Sql::default(),
    ))
    .push(&format!(
        ") AS rows ANY INNER JOIN {NODE_WEIGHTS} AS weights USING node GROUP BY source, stack_id, process_id HAVING value > 0"
    ));
    sql
}

/// Totals per node and source, from `node_totals_by_hour` when `by_hour` (see
/// [`totals_by_hour`]), else from `node_totals`. Process labels need the samples; node labels
/// the totals only.
pub(super) fn node_totals(scope: &Scope, reach: &Reach, by_hour: bool) -> Sql {
    let per_process = scope.selector.matchers.iter().any(|m| m.scope() == LabelScope::Process);
    let inner = if per_process {
        union(
            "samples",
            "node, source, count, value",
            scope,
            Nodes::of(reach, &scope.selector),
            &Sql::default(),
        )
    } else {
        let table = match by_hour {
            true => "node_totals_by_hour",
            false => "node_totals",
        };
        let mut sql = Sql::new(&format!("SELECT node, source, count, value FROM {table} WHERE "));
        let from = scope.from / MINUTE * MINUTE;
        sql.append(range_filter(scope.event, scope.source.as_deref(), from, scope.to))
            .append(selector_filter(&scope.selector, Nodes::of(reach, &scope.selector)));
        sql
    };
    let mut sql = Sql::new("SELECT node, source, sum(count) AS count, sum(value) AS value FROM (");
    sql.append(inner).push(") GROUP BY node, source ORDER BY node, source");
    sql
}

/// The `limit` functions with the largest total value over `reach` (one source).
pub(super) fn top_functions(scope: &Scope, reach: &Reach, limit: u32) -> Sql {
    let mut sql = Sql::new("SELECT function_id FROM (");
    sql.append(summed(
        "function_samples",
        "function_id",
        &[("total_count", "total_count"), ("total_value", "total")],
        scope,
        reach,
        &Sql::default(),
    ))
    .push(" ORDER BY total DESC, function_id LIMIT ")
    .bind(Value::U32(limit))
    .push(")");
    sql
}

/// Which functions a per-node read covers.
#[derive(Clone, Copy, Debug)]
pub enum TopFunctions<'a> {
    /// The `n` with the largest total value, ranked by a subquery (servers that use the primary
    /// key for `IN (SELECT …)`: 20.x and later).
    Ranked(u32),
    /// These, ranked before by [`top_functions`] and sent as a list: 18.16 reads every row for
    /// `IN (SELECT …)`, and a list lets it skip all but theirs (0.42 s instead of 0.74 s for
    /// an hour of 1,000 nodes, docs/design/012).
    Listed(&'a [u64]),
}

/// What a per-node function read returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measures {
    /// Self and total values and the samples behind them.
    WithSamples,
    /// Values only (samples returned as 0): a seventh less to read over a fleet.
    Values,
}

/// Self and total values per node of the `top` functions over `reach` (one source), of the
/// `sample`'s nodes only when given (a part of those `reach` covers; the ranking stays over all
/// of them): the ranking reads the rollups where it can, the values per node only the functions
/// ranked, from `function_nodes_by_id_10m` (function before node) when `by_function`.
pub(super) fn node_functions(
    scope: &Scope,
    reach: &Reach,
    sample: Option<&[String]>,
    top: TopFunctions,
    measures: Measures,
    by_function: bool,
) -> Sql {
    let top = match top {
        TopFunctions::Ranked(limit) => {
            let mut sql = Sql::new(" AND function_id GLOBAL IN (");
            sql.append(top_functions(scope, reach, limit)).push(")");
            sql
        }
        TopFunctions::Listed(ids) => {
            let list: Vec<String> = ids.iter().map(u64::to_string).collect();
            Sql::new(&format!(" AND function_id IN ({})", list.join(",")))
        }
    };
    let (outer, inner) = match measures {
        Measures::WithSamples => (
            "sum(self_count) AS self_count, sum(self_value) AS self_value, \
             sum(total_count) AS total_count, sum(total_value) AS total_value",
            "node, function_id, self_count, self_value, total_count, total_value",
        ),
        Measures::Values => (
            "toUInt64(0) AS self_count, sum(self_value) AS self_value, \
             toUInt64(0) AS total_count, sum(total_value) AS total_value",
            "node, function_id, self_value, total_value",
        ),
    };
    let mut sql = Sql::new(&format!("SELECT node, function_id, {outer} FROM ("));
    let nodes = match sample {
        Some(nodes) => Nodes::In(nodes),
        None => Nodes::of(reach, &scope.selector),
    };
    let rows = match (by_function, scope.source.as_deref()) {
        (true, Some(source)) => union_pieces(scope, |is_coarse, from, to| match is_coarse {
            true => {
                let mut sql = Sql::new(&format!("SELECT {inner} FROM function_nodes_by_id_10m WHERE "));
                sql.append(by_id_filter(scope.event, source, nodes, from, to))
                    .append(top.clone());
                sql
            }
            false => piece("function_samples", inner, scope, "", nodes, &top, from, to),
        }),
        _ => union("function_samples", inner, scope, nodes, &top),
    };
    sql.append(rows).push(") GROUP BY node, function_id");
    sql
}

/// The `limit` data objects (mapping kind, path, symbol) with the most of `scope`'s event
/// (one source) over the nodes selected, and their value on each node (of the `sample`'s nodes
/// only when given); with `lines`, the hottest cache lines of file-backed objects instead. The
/// whole 10-minute buckets of the range are read from `data_objects_10m` when `rolled_up` (a
/// value per node, object and file-backed line per 10 minutes), the rest from `data_samples`
/// (a row per minute, process, stack and line: two orders of magnitude more).
pub(super) fn node_data_objects(
    scope: &Scope,
    reach: &Reach,
    sample: Option<&[String]>,
    limit: u32,
    lines: bool,
    rolled_up: bool,
) -> Sql {
    let (line, key) = match lines {
        true => ("cache_line", "mapping_kind, mapping_path, symbol, cache_line"),
        false => ("toUInt64(0) AS cache_line", "mapping_kind, mapping_path, symbol"),
    };
    // Lines of file-backed data only: there a line is a file offset, the same on every node;
    // elsewhere it is a virtual address, which differs from process to process (and 0 in the
    // rollup, so that most of its rows have none: a PREWHERE on the line skips reading the
    // other columns of those, 130 ms of ClickHouse CPU to 20 over 1,000 nodes' hour).
    let (prewhere, extra) = match lines {
        true => ("cache_line != 0", Sql::new(" AND mapping_path != ''")),
        false => ("", Sql::default()),
    };
    let coarse = match rolled_up {
        true => "data_objects_10m",
        false => "data_samples",
    };
    let rows = |columns: &str, nodes: Nodes, extra: &Sql| {
        union_prewhere("data_samples", coarse, columns, scope, prewhere, nodes, extra)
    };
    let mut top = Sql::new(&format!(" AND ({key}) GLOBAL IN (SELECT {key} FROM ("));
    top.append(rows(
        &format!("{key}, value"),
        Nodes::of(reach, &scope.selector),
        &extra,
    ))
    .push(&format!(") GROUP BY {key} ORDER BY sum(value) DESC LIMIT "))
    .bind(Value::U32(limit))
    .push(")");
    let mut chosen = extra.clone();
    chosen.append(top);
    let mut sql = Sql::new(&format!(
        "SELECT node, mapping_kind, mapping_path, symbol, {line}, sum(value) AS value FROM ("
    ));
    sql.append(rows(
        "node, mapping_kind, mapping_path, symbol, cache_line, value",
        sample.map_or(Nodes::of(reach, &scope.selector), Nodes::In),
        &chosen,
    ))
    .push(&format!(") GROUP BY node, {key}"));
    sql
}

/// The newest row of every node selected, seen in [from, to).
pub(super) fn nodes(selector: &Selector, from: u32, to: u32) -> Sql {
    let mut sql = Sql::new(
        "SELECT node, min(first_seen) AS first_seen, max(last_seen) AS last_seen, \
         argMax(label_keys, version) AS label_keys, argMax(label_values, version) AS label_values, \
         argMax(agent_version, version) AS agent_version, argMax(facts, version) AS facts FROM nodes WHERE 1",
    );
    seen_in(&mut sql, selector, (from, to), ("first_seen", "last_seen"));
    sql.push(" ORDER BY node");
    sql
}

/// The rest of a read of `nodes` rows filtered by a condition: the selector's conditions on the
/// node's name, then one row per node that reported in [from, to), its first and last report
/// named `first` and `last`.
fn seen_in(sql: &mut Sql, selector: &Selector, (from, to): (u32, u32), (first, last): (&str, &str)) {
    for m in selector.node_matchers().filter(|m| m.name == "node") {
        sql.push(" AND ").append(condition("node", m));
    }
    sql.push(" GROUP BY node HAVING ")
        .push(last)
        .push(" >= toDateTime(")
        .bind(Value::U32(from))
        .push(") AND ")
        .push(first)
        .push(" < toDateTime(")
        .bind(Value::U32(to))
        .push(")");
}

/// `columns` (of `node`, its newest label keys `k` and values `v`) of the nodes that reported
/// in [from, to), have a name past `after` and match the selector's node labels (all of them in
/// SQL, on each node's newest labels).
fn seen_nodes(columns: &str, selector: &Selector, from: u32, to: u32, after: &str) -> Sql {
    let mut sql = Sql::new(&format!(
        "SELECT {columns} FROM (SELECT node, min(first_seen) AS f, max(last_seen) AS l, \
         argMax(label_keys, version) AS k, argMax(label_values, version) AS v FROM nodes WHERE node > "
    ));
    sql.bind(Value::Str(after.to_owned()));
    seen_in(&mut sql, selector, (from, to), ("f", "l"));
    sql.push(")");
    if let Some(labels) = node_condition(selector) {
        sql.push(" WHERE ").append(labels);
    }
    sql
}

/// One page of [`nodes`]: the first `limit` by name after `after`. Only the page's nodes have
/// their facts read.
pub(super) fn node_page(selector: &Selector, from: u32, to: u32, after: &str, limit: u32) -> Sql {
    let mut sql = Sql::new(
        "SELECT node, min(first_seen) AS first_seen, max(last_seen) AS last_seen, \
         argMax(label_keys, version) AS label_keys, argMax(label_values, version) AS label_values, \
         argMax(agent_version, version) AS agent_version, argMax(facts, version) AS facts FROM nodes \
         WHERE node IN (",
    );
    sql.append(seen_nodes("node", selector, from, to, after))
        .push(" ORDER BY node LIMIT ")
        .bind(Value::U32(limit))
        .push(") GROUP BY node ORDER BY node");
    sql
}

/// How many nodes [`nodes`] lists.
pub(super) fn node_count(selector: &Selector, from: u32, to: u32) -> Sql {
    let mut sql = Sql::new("SELECT count() AS n FROM (");
    sql.append(seen_nodes("node", selector, from, to, "")).push(")");
    sql
}

/// The first `limit` values by name of each label of the nodes [`nodes`] lists (`node` among
/// them: ingest stores it as a label), with how many nodes have each: a row per label and value.
pub(super) fn node_label_values(selector: &Selector, from: u32, to: u32, limit: u32) -> Sql {
    let mut sql = Sql::new("SELECT key AS name, value, count() AS nodes FROM (");
    sql.append(seen_nodes("k, v", selector, from, to, ""))
        .push(") ARRAY JOIN k AS key, v AS value GROUP BY key, value ORDER BY key, value LIMIT ")
        .bind(Value::U32(limit))
        .push(" BY key");
    sql
}

/// Up to `limit` distinct values of every process label, from processes seen since `from`'s day.
pub(super) fn process_label_values(from: u32, limit: u32) -> Sql {
    let columns: Vec<String> = PROCESS_LABELS
        .iter()
        .enumerate()
        // groupUniqArray takes no size before 19.x; not aliased by the column's name, which older
        // servers read as an aggregate inside itself.
        .map(|(i, l)| {
            format!(
                "arraySlice(groupUniqArray({}), 1, {limit}) AS values_{i}",
                process_column(l)
            )
        })
        .collect();
    let mut sql = Sql::new(&format!(
        "SELECT {} FROM processes WHERE last_seen >= toDate(toDateTime(",
        columns.join(", ")
    ));
    sql.bind(Value::U32(from)).push("))");
    sql
}

/// Rows of `table` by id (`stacks`, `frames`, `processes`, `functions`).
pub(super) fn by_ids(table: &str, id_column: &str, columns: &str, ids: &[u64]) -> Sql {
    let list: Vec<String> = ids.iter().map(u64::to_string).collect();
    Sql::new(&format!(
        "SELECT {columns} FROM {table} WHERE {id_column} IN ({}) LIMIT 1 BY {id_column}",
        list.join(",")
    ))
}

/// Every source of an event with its unit.
pub(super) fn sources() -> Sql {
    Sql::new(
        "SELECT event, source, argMax(unit, last_seen) AS unit, argMax(description, last_seen) AS description, \
         max(last_seen) AS seen FROM event_sources GROUP BY event, source ORDER BY event, source",
    )
}

/// Placement rows of a node in a time range, oldest first.
pub(super) fn placements(nodes: Nodes, from: u32, to: u32) -> Sql {
    let mut sql = Sql::new(
        "SELECT node, toUInt32(time) AS time, pid, comm, executable, thread_nodes, thread_counts, kind, \
         path, start, end, permissions, page_nodes, page_counts, page_size FROM placements WHERE time >= toDateTime(",
    );
    sql.bind(Value::U32(from))
        .push(") AND time < toDateTime(")
        .bind(Value::U32(to))
        .push(")")
        .append(selector_filter(&Selector::all(), nodes))
        .push(" ORDER BY node, pid, time, start");
    sql
}

/// Counter increases per interval of a node, from the per-interval table of `tables`; `names`
/// empty means all.
pub(super) fn counters(node: &str, names: &[String], from: u32, to: u32, tables: CounterTables) -> Sql {
    let mut sql = Sql::new(&format!(
        "SELECT toUInt32(time) AS time, name, sum(value) AS value FROM {} WHERE node = ",
        tables.per_interval()
    ));
    sql.bind(Value::Str(node.to_owned()))
        .push(" AND time >= toDateTime(")
        .bind(Value::U32(from))
        .push(") AND time < toDateTime(")
        .bind(Value::U32(to))
        .push(")");
    if !names.is_empty() {
        sql.push(" AND name IN (").bind_strs(names).push(")");
    }
    sql.push(" GROUP BY time, name ORDER BY name, time");
    sql
}

/// The (event, source) pairs each listed node's agent sampled with in [from, to) (every batch
/// names its sources): from `node_sources`, per 10 minutes and ordered by time, when
/// `rolled_up`, else from the ledger, a row per batch. The buckets are whole at both ends: a
/// range whose `to` is not on a 10-minute boundary also counts batches that started up to 10
/// minutes after it (compare's ranges of 30 minutes and more are on boundaries).
pub(super) fn node_sources(nodes: Nodes, from: u32, to: u32, rolled_up: bool) -> Sql {
    let mut sql = match rolled_up {
        true => Sql::new("SELECT DISTINCT node, event, source FROM node_sources WHERE time >= toDateTime("),
        false => Sql::new(
            "SELECT DISTINCT node, event, source FROM ledger ARRAY JOIN source_events AS event, source_names AS source \
             WHERE start_time >= toDateTime(",
        ),
    };
    let time = if rolled_up { "time" } else { "start_time" };
    sql.bind(Value::U32(sources_from(from, rolled_up)))
        .push(&format!(") AND {time} < toDateTime("))
        .bind(Value::U32(to))
        .push(")")
        .append(selector_filter(&Selector::all(), nodes));
    sql
}

/// Each node's counters summed over [from, to), for the nodes listed, from the tables
/// [`counter_pieces`] picks.
pub(super) fn node_counters(nodes: Nodes, from: u32, to: u32, tables: CounterTables) -> Sql {
    let mut sql = Sql::new("SELECT node, name, sum(value) AS value FROM (");
    for (i, (table, from, to)) in counter_pieces(from, to, tables).into_iter().enumerate() {
        if i > 0 {
            sql.push(" UNION ALL ");
        }
        sql.push(&format!(
            "SELECT node, name, value FROM {table} WHERE time >= toDateTime("
        ))
        .bind(Value::U32(from))
        .push(") AND time < toDateTime(")
        .bind(Value::U32(to))
        .push(")")
        .append(selector_filter(&Selector::all(), nodes));
    }
    sql.push(") GROUP BY node, name ORDER BY node, name");
    sql
}

/// How many rows of `table` (at most one) have `value` in `column`: whether there is one. Table
/// and column are the server's own names, never a client's.
pub(super) fn any_row(table: &str, column: &str, value: &str) -> Sql {
    let mut sql = Sql::new(&format!(
        "SELECT count() AS n FROM (SELECT 1 FROM {table} WHERE {column} = "
    ));
    sql.bind(Value::Str(value.to_owned())).push(" LIMIT 1)");
    sql
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct FirstSeen {
    node: String,
    first_seen: u32,
}

/// The stored `first_seen` of each of `nodes` that has one, asked [`INLINE_NODES`] names at a
/// time (a flush after an outage may bring 100,000 new names: a query ClickHouse refuses).
pub(super) async fn first_seen(client: &Client, nodes: &[&str]) -> Result<HashMap<String, u32>, StorageError> {
    let mut found = HashMap::new();
    for some in nodes.chunks(INLINE_NODES) {
        let mut sql = Sql::new("SELECT node, toUInt32(min(first_seen)) AS first_seen FROM nodes WHERE node IN (");
        sql.bind_strs(some);
        sql.push(") GROUP BY node");
        let rows = sql
            .query(client)
            .fetch_all::<FirstSeen>()
            .await
            .map_err(StorageError::query("read when nodes were first seen"))?;
        found.extend(rows.into_iter().map(|r| (r.node, r.first_seen)));
    }
    Ok(found)
}

/// `unhex('…'), …` of batch ids: they are ours (hex digits), so inlining them is safe, and an IN
/// list of literals uses the primary key.
fn id_list(ids: &[[u8; 16]]) -> String {
    let items: Vec<String> = ids
        .iter()
        .map(|id| format!("unhex('{}')", bimodal_profile::hex(id)))
        .collect();
    items.join(",")
}

/// The newest state of batches per server that wrote it, and whether it ever stored them.
pub(super) fn ledger_states(ids: &[[u8; 16]]) -> Sql {
    Sql::new(&format!(
        "SELECT batch_id, server, argMax(state, version) AS last_state, max(state = 2) AS stored, \
         max(version) AS newest FROM ledger WHERE batch_id IN ({}) GROUP BY batch_id, server",
        id_list(ids)
    ))
}

/// Which fact tables hold batches' rows.
pub(super) fn progress(ids: &[[u8; 16]]) -> Sql {
    Sql::new(&format!(
        "SELECT DISTINCT batch_id, part FROM batch_progress WHERE batch_id IN ({})",
        id_list(ids)
    ))
}

/// The files stored for build ids.
pub(super) fn debuginfo_files(build_ids: &[String]) -> Sql {
    let mut sql = Sql::new(
        "SELECT build_id, kind, any(sha256) AS sha256, max(functions) AS functions, any(file_name) AS file_name \
         FROM debuginfo WHERE build_id IN (",
    );
    sql.bind_strs(build_ids).push(") GROUP BY build_id, kind");
    sql
}

/// How many symbol rows `debuginfo_symbols` holds for a build id's file of `kind`.
pub(super) fn debuginfo_symbol_rows(build_id: &str, kind: u8) -> Sql {
    let mut sql = Sql::new("SELECT count() AS n FROM debuginfo_symbols WHERE build_id = ");
    sql.bind(Value::Str(build_id.to_owned()))
        .push(" AND kind = ")
        .bind(Value::U32(kind.into()));
    sql
}

/// Deletes the symbol rows of a build id's file of `kind` (a mutation).
pub(super) fn delete_debuginfo_symbols(table: &str, on_cluster: &str, build_id: &str, kind: u8) -> Sql {
    let mut sql = Sql::new(&format!("ALTER TABLE {table} {on_cluster} DELETE WHERE build_id = "));
    sql.bind(Value::Str(build_id.to_owned()))
        .push(" AND kind = ")
        .bind(Value::U32(kind.into()));
    sql
}

/// The load segments of a stored file.
pub(super) fn debuginfo_segments(build_id: &str, kind: u8) -> Sql {
    let mut sql = Sql::new(
        "SELECT any(segment_offsets) AS segment_offsets, any(segment_addresses) AS segment_addresses, \
         any(segment_sizes) AS segment_sizes FROM debuginfo WHERE build_id = ",
    );
    sql.bind(Value::Str(build_id.to_owned()))
        .push(" AND kind = ")
        .bind(Value::U32(kind.into()));
    sql
}

/// The functions of a stored file, by address.
pub(super) fn debuginfo_functions(build_id: &str, kind: u8) -> Sql {
    let mut sql =
        Sql::new("SELECT address, any(size) AS size, any(name) AS name FROM debuginfo_symbols WHERE build_id = ");
    sql.bind(Value::Str(build_id.to_owned()))
        .push(" AND kind = ")
        .bind(Value::U32(kind.into()))
        .push(" GROUP BY address ORDER BY address");
    sql
}

/// The naming digests of a build id's stored executable, and whether an operator kept it.
pub(super) fn debuginfo_digests(build_id: &str) -> Sql {
    let mut sql = Sql::new(
        "SELECT any(exported) AS exported, any(local) AS local, max(kept) AS kept FROM debuginfo_digests \
         WHERE kind = 1 AND build_id = ",
    );
    sql.bind(Value::Str(build_id.to_owned())).push(" GROUP BY build_id");
    sql
}

/// Of build ids, those with disputes.
pub(super) fn debuginfo_disputed(build_ids: &[String]) -> Sql {
    let mut sql = Sql::new("SELECT DISTINCT build_id FROM debuginfo_disputes WHERE build_id IN (");
    sql.bind_strs(build_ids).push(")");
    sql
}

/// Of build ids, those whose executable an operator kept.
pub(super) fn debuginfo_kept(build_ids: &[String]) -> Sql {
    let mut sql = Sql::new("SELECT build_id FROM debuginfo_digests WHERE kind = 1 AND build_id IN (");
    sql.bind_strs(build_ids)
        .push(") GROUP BY build_id HAVING max(kept) = 1");
    sql
}

/// Every build id with disputes: how many, when, by whom (10 of them), and the last reason.
pub(super) fn debuginfo_disputes() -> Sql {
    Sql::new(
        "SELECT build_id, count() AS reports, toUInt32(min(time)) AS first, toUInt32(max(time)) AS last, \
         arraySlice(groupUniqArray(reporter), 1, 10) AS reporters, argMax(reason, time) AS reason \
         FROM debuginfo_disputes GROUP BY build_id ORDER BY build_id",
    )
}

/// The reads of one scope as the API sends them: the flame graph (100,000 stacks), per-node
/// totals, per-node functions (the scope's source must be set for those to mean anything).
pub fn reads(client: &Client, scope: &Scope, reach: &Reach) -> Vec<String> {
    [
        flame(scope, reach, 100_000),
        node_totals(scope, reach, totals_by_hour(reach, scope.from, scope.to)),
        node_functions(
            scope,
            reach,
            None,
            TopFunctions::Ranked(1000),
            Measures::WithSamples,
            !matches!(reach, Reach::Matching(_)),
        ),
    ]
    .iter()
    .map(|q| q.query(client).sql_display().to_string())
    .collect()
}

/// Every query above with example parameters, as the SQL the server would send.
pub fn examples(client: &Client) -> Vec<String> {
    let selector = Selector::parse(
        r#"{zone="a",node=~"web-.*",cpu_model!="x",namespace="shop",container!~"side.*",node!="web-'9"}"#,
    )
    .expect("example selector parses");
    let scope = Scope {
        event: "page_fault",
        source: Some("page-faults".into()),
        selector: selector.clone(),
        from: 1_795_000_000,
        to: 1_795_003_600,
    };
    let short = Scope {
        source: None,
        selector: Selector::all(),
        to: 1_795_000_900,
        ..scope.clone()
    };
    let matching = Reach::Matching(vec!["web-1".into(), "web-'2".into()]);
    let minus = Reach::FleetMinus(vec!["db-1".into()]);
    let nodes_only = Scope {
        selector: Selector::parse(r#"{zone=~"a|b"}"#).expect("parses"),
        ..scope.clone()
    };
    [
        matching_nodes(&selector),
        node_page(&selector, scope.from, scope.to, "web-'1", 5001),
        node_count(&selector, scope.from, scope.to),
        node_label_values(&selector, scope.from, scope.to, 201),
        create_node_weights(),
        weighted_flame(&scope, 100_001),
        weighted_flame_totals(&scope),
        flame(&scope, &matching, 100_000),
        flame(&scope, &minus, 100_000),
        flame(&short, &Reach::Fleet, 100_000),
        flame(&short, &Reach::EveryNode, 100_000),
        flame_totals(&scope, &minus),
        node_totals(&scope, &matching, false),
        node_totals(&nodes_only, &minus, true),
        node_totals(&short, &Reach::Fleet, true),
        node_functions(
            &nodes_only,
            &matching,
            None,
            TopFunctions::Ranked(1000),
            Measures::WithSamples,
            false,
        ),
        node_functions(
            &nodes_only,
            &minus,
            None,
            TopFunctions::Ranked(1000),
            Measures::Values,
            true,
        ),
        node_functions(
            &short,
            &Reach::Fleet,
            None,
            TopFunctions::Listed(&[7, 9]),
            Measures::Values,
            true,
        ),
        node_functions(
            &nodes_only,
            &Reach::Fleet,
            Some(&["web-1".into(), "web-'2".into()]),
            TopFunctions::Ranked(200),
            Measures::Values,
            true,
        ),
        top_functions(&nodes_only, &minus, 200),
        node_data_objects(&nodes_only, &matching, None, 100, false, true),
        node_data_objects(&short, &Reach::Fleet, None, 100, true, true),
        node_data_objects(&scope, &minus, None, 100, false, false),
        node_data_objects(&nodes_only, &Reach::Fleet, Some(&["web-1".into()]), 100, true, true),
        nodes(&selector, 1_795_000_000, 1_795_003_600),
        any_row("nodes", "node", "web-1"),
        by_ids("stacks", "stack_id", "stack_id, frame_ids", &[1, 2]),
        by_ids(
            "frames",
            "frame_id",
            "frame_id, kind, module, build_id, file_offset, elf_address, address, function",
            &[3],
        ),
        sources(),
        ledger_states(&[[7; 16], [9; 16]]),
        progress(&[[7; 16]]),
        debuginfo_files(&["0a1b".into(), "ff00".into()]),
        any_row("frames", "build_id", "0a1b"),
        debuginfo_segments("0a1b", 2),
        debuginfo_functions("0a1b", 2),
        debuginfo_digests("0a1b"),
        debuginfo_disputed(&["0a1b".into(), "ff00".into()]),
        debuginfo_kept(&["0a1b".into()]),
        debuginfo_disputes(),
        placements(Nodes::In(&["web-1".into()]), 1_795_000_000, 1_795_000_900),
        placements(
            Nodes::Matching {
                selector: &selector,
                negate: false,
            },
            1_795_000_000,
            1_795_000_900,
        ),
        counters(
            "web-1",
            &["pgfault".into()],
            1_795_000_000,
            1_795_000_900,
            CounterTables::Reports,
        ),
        counters("web-1", &[], 1_795_000_000, 1_795_000_900, CounterTables::Intervals),
        node_counters(
            Nodes::In(&["web-1".into(), "web-2".into()]),
            1_795_000_030,
            1_795_003_630,
            CounterTables::Rollups,
        ),
        node_counters(
            Nodes::Matching {
                selector: &selector,
                negate: false,
            },
            1_795_000_030,
            1_795_003_630,
            CounterTables::Intervals,
        ),
        node_counters(
            Nodes::In(&["web-1".into()]),
            1_795_000_030,
            1_795_003_630,
            CounterTables::Reports,
        ),
        node_sources(
            Nodes::In(&["web-1".into(), "web-2".into()]),
            1_795_000_030,
            1_795_003_630,
            true,
        ),
        node_sources(
            Nodes::Matching {
                selector: &selector,
                negate: true,
            },
            1_795_000_030,
            1_795_003_630,
            false,
        ),
    ]
    .iter()
    .map(|q| q.query(client).sql_display().to_string())
    .chain(super::lease::examples(client))
    .chain(super::alerts::examples(client))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rollups minus the nodes not matching: signed sums, groups left with samples only.
    #[test]
    fn fleet_minus_subtracts_the_nodes_left_out() {
        let scope = Scope {
            event: "cpu",
            source: Some("cpu-clock".into()),
            selector: Selector::parse(r#"{zone!="b"}"#).unwrap(),
            from: 1_795_000_000,
            to: 1_795_000_600,
        };
        let sql = flame(&scope, &Reach::FleetMinus(vec!["b-1".into(), "b-2".into()]), 10).text;
        assert!(sql.contains("FROM fleet_samples WHERE"), "{sql}");
        assert!(sql.contains("-toInt64(value) AS s_value FROM samples WHERE"), "{sql}");
        assert!(sql.contains("AND node IN (?,?)"), "{sql}");
        assert!(sql.contains("HAVING sum(s_count) > 0"), "{sql}");
        let fleet = flame(&scope, &Reach::Fleet, 10).text;
        assert!(
            fleet.contains("FROM fleet_samples WHERE") && !fleet.contains("node"),
            "{fleet}"
        );
    }

    /// The sample tables are keyed on the hour after event and source (and node): ClickHouse
    /// skips the other hours of a day only when the range is also stated on that key column.
    #[test]
    fn ranges_are_also_stated_on_the_hour() {
        let rendered = range_filter("cpu", Some("cpu-clock"), 1_795_000_020, 1_795_003_630)
            .query(&Client::default())
            .sql_display()
            .to_string();
        assert!(
            rendered.contains(
                "time >= toDateTime(1795000020) AND time < toDateTime(1795003630) AND \
                 toStartOfHour(time) >= toStartOfHour(toDateTime(1795000020)) AND \
                 toStartOfHour(time) < toDateTime(1795003630)"
            ),
            "{rendered}"
        );
    }

    /// A sample's values are read from its nodes only, while what is read is ranked over every
    /// node, from the table ordered by function (by its node ids) or the one ordered by node as
    /// `plan::read_by_function` chose.
    #[test]
    fn a_sample_is_read_from_its_nodes_and_ranked_over_all() {
        let scope = Scope {
            event: "page_fault",
            source: Some("page-faults".into()),
            selector: Selector::all(),
            from: 1_795_000_200,
            to: 1_795_003_800,
        };
        let sample = ["web-1".to_owned(), "web-2".to_owned()];
        let client = Client::default();
        let text = |sql: Sql| sql.query(&client).sql_display().to_string();
        let functions = text(node_functions(
            &scope,
            &Reach::Fleet,
            Some(&sample),
            TopFunctions::Ranked(200),
            Measures::Values,
            true,
        ));
        let (values, ranking) = functions.split_once("GLOBAL IN (").unwrap();
        assert!(
            values.contains(
                "FROM function_nodes_by_id_10m WHERE series = cityHash64('page_fault', 'page-faults') \
                 AND time >= toDateTime(1795000200) AND time < toDateTime(1795003800) \
                 AND node_id IN (SELECT cityHash64(arrayJoin(['web-1','web-2'])))"
            ),
            "{functions}"
        );
        assert!(
            !ranking.contains("node IN") && !ranking.contains("node_id"),
            "{functions}"
        );
        let by_node = text(node_functions(
            &scope,
            &Reach::Fleet,
            Some(&sample),
            TopFunctions::Ranked(200),
            Measures::Values,
            false,
        ));
        let (values, _) = by_node.split_once("GLOBAL IN (").unwrap();
        assert!(values.contains("FROM function_samples_10m WHERE"), "{by_node}");
        assert!(values.contains("node IN ('web-1','web-2')"), "{by_node}");
        let objects = text(node_data_objects(&scope, &Reach::Fleet, Some(&sample), 100, true, true));
        let (values, ranking) = objects.split_once("GLOBAL IN (").unwrap();
        assert!(values.contains("node IN ('web-1','web-2')"), "{objects}");
        assert!(!ranking.contains("node IN"), "{objects}");
        assert!(
            objects.contains("FROM data_objects_10m PREWHERE cache_line != 0 WHERE"),
            "{objects}"
        );
    }
}
