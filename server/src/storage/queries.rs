//! Every read query of the server, built in one place with its values bound as parameters, so
//! that `bimodal-server sql` can print them for checking against other ClickHouse versions.
//!
//! Time ranges read the per-minute tables, and the per-10-minute ones for whole 10-minute
//! buckets inside a range longer than [`COARSE_FROM_SECS`]: an hour of a fleet reads a tenth of
//! the rows. Selectors become conditions on the `nodes` and `processes` tables.

use std::collections::HashMap;

use clickhouse::query::Query;
use clickhouse::Client;

use super::NodesRead;
use super::StorageError;
use crate::selector::{LabelScope, MatchOp, Matcher, Selector, PROCESS_LABELS};

/// Ranges at least this long read whole 10-minute buckets from the coarse tables.
pub const COARSE_FROM_SECS: u32 = 30 * 60;
const MINUTE: u32 = 60;
const TEN_MINUTES: u32 = 600;
const HOUR: u32 = 3600;

/// A value bound to a `?`.
#[derive(Clone, Debug)]
pub(super) enum Value {
    Str(String),
    U32(u32),
}

/// SQL text with `?` placeholders and their values, in order.
#[derive(Clone, Debug, Default)]
pub(super) struct Sql {
    pub text: String,
    pub values: Vec<Value>,
}

impl Sql {
    fn new(text: &str) -> Sql {
        Sql {
            text: text.to_owned(),
            values: Vec::new(),
        }
    }

    fn push(&mut self, text: &str) -> &mut Sql {
        self.text.push_str(text);
        self
    }

    /// Appends `?` bound to `value`.
    fn bind(&mut self, value: Value) -> &mut Sql {
        self.text.push('?');
        self.values.push(value);
        self
    }

    /// Appends `?, ?, …`, one bound to each of `values` (the inside of an `IN (…)` list).
    fn bind_strs<S: AsRef<str>>(&mut self, values: impl IntoIterator<Item = S>) -> &mut Sql {
        for (i, v) in values.into_iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.bind(Value::Str(v.as_ref().to_owned()));
        }
        self
    }

    fn append(&mut self, other: Sql) -> &mut Sql {
        self.text.push_str(&other.text);
        self.values.extend(other.values);
        self
    }

    pub fn query(&self, client: &Client) -> Query {
        let mut q = client.query(&self.text).with_setting("max_query_size", "16777216");
        for v in &self.values {
            q = match v {
                Value::Str(s) => q.bind(s.as_str()),
                Value::U32(n) => q.bind(*n),
            };
        }
        q
    }
}

/// Deletes the rows of `build_ids` from `table` (named as DDL names it, with its `ON CLUSTER`).
pub(super) fn delete_build_ids(table: &str, on_cluster: &str, build_ids: &[String]) -> Sql {
    let mut sql = Sql::new(&format!("ALTER TABLE {table} {on_cluster} DELETE WHERE build_id IN ("));
    sql.bind_strs(build_ids).push(")");
    sql
}

/// The column holding a process label in `processes`.
fn process_column(label: &str) -> &'static str {
    match label {
        "comm" => "comm",
        "executable" => "executable",
        "container_id" => "container_id",
        "container" => "container_name",
        "pod" => "pod_name",
        "pod_uid" => "pod_uid",
        "namespace" => "pod_namespace",
        _ => "systemd_unit",
    }
}

/// `expr op ?` for one matcher.
fn condition(expr: &str, m: &Matcher) -> Sql {
    let mut sql = Sql::default();
    match m.op {
        MatchOp::Equal => sql.push(expr).push(" = ").bind(Value::Str(m.value.clone())),
        MatchOp::NotEqual => sql.push(expr).push(" != ").bind(Value::Str(m.value.clone())),
        MatchOp::Regex => sql
            .push("match(")
            .push(expr)
            .push(", ")
            .bind(Value::Str(m.anchored_regex()))
            .push(")"),
        MatchOp::NotRegex => sql
            .push("NOT match(")
            .push(expr)
            .push(", ")
            .bind(Value::Str(m.anchored_regex()))
            .push(")"),
    };
    sql
}

/// The nodes' newest labels: `node`, keys `k`, values `v`.
const NEWEST_LABELS: &str = "(SELECT node, argMax(label_keys, version) AS k, \
     argMax(label_values, version) AS v FROM nodes GROUP BY node)";

/// The selector's node matchers as one condition on [`NEWEST_LABELS`]; `None` when it has none.
fn node_condition(selector: &Selector) -> Option<Sql> {
    let mut sql = Sql::default();
    for (i, m) in selector.node_matchers().enumerate() {
        if i > 0 {
            sql.push(" AND ");
        }
        if m.name == "node" {
            sql.append(condition("node", m));
        } else {
            let mut expr = Sql::new("v[indexOf(k, ");
            expr.bind(Value::Str(m.name.clone())).push(")]");
            // The label's expression carries a bound value of its own: splice it in order.
            let cond = condition("\u{0}", m);
            let (before, after) = cond.text.split_once('\u{0}').expect("placeholder");
            sql.push(before).append(expr).push(after);
            sql.values.extend(cond.values);
        }
    }
    (!sql.text.is_empty()).then_some(sql)
}

/// Which nodes' samples a read sums, and from which tables. Node lists are sent as literal
/// lists: ClickHouse 18.16 uses the primary key for `node IN (…)` but not for `IN (SELECT …)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Every node, from the fleet rollups.
    Fleet,
    /// Every node, from the per-node tables (a range the rollups do not wholly hold).
    EveryNode,
    /// These nodes (those the selector matches), from the per-node tables.
    Matching(Vec<String>),
    /// The fleet rollups minus these nodes (those the selector does not match): cheaper than
    /// [`Reach::Matching`] when the selector matches most of the fleet.
    FleetMinus(Vec<String>),
    /// No node matches.
    Nothing,
}

impl Reach {
    /// The cheapest way to read the nodes a selector matches, given every known node with
    /// whether it matches (`None`: the selector has no node matchers) and whether the fleet
    /// rollups hold the whole range.
    pub fn choose(nodes: Option<Vec<(String, bool)>>, rollups_hold_range: bool) -> Reach {
        let Some(nodes) = nodes else {
            return match rollups_hold_range {
                true => Reach::Fleet,
                false => Reach::EveryNode,
            };
        };
        let (matching, rest): (Vec<_>, Vec<_>) = nodes.into_iter().partition(|(_, m)| *m);
        let names = |v: Vec<(String, bool)>| v.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        match (matching.len(), rest.len(), rollups_hold_range) {
            (0, _, _) => Reach::Nothing,
            (_, 0, true) => Reach::Fleet,
            (_, 0, false) => Reach::EveryNode,
            (m, r, true) if r < m => Reach::FleetMinus(names(rest)),
            _ => Reach::Matching(names(matching)),
        }
    }

    /// How answers name it.
    pub fn name(&self) -> &'static str {
        match self {
            Reach::Fleet => "fleet",
            Reach::EveryNode => "every-node",
            Reach::Matching(_) => "matching",
            Reach::FleetMinus(_) => "fleet-minus",
            Reach::Nothing => "nothing",
        }
    }

    /// How a per-node table is filtered for this reach.
    fn per_node(&self) -> Nodes<'_> {
        match self {
            Reach::Fleet | Reach::EveryNode => Nodes::Any,
            Reach::Matching(nodes) => Nodes::In(nodes),
            Reach::FleetMinus(left_out) => Nodes::NotIn(left_out),
            Reach::Nothing => Nodes::In(&[]),
        }
    }
}

/// Every node known, with whether the selector's node matchers match it.
pub(super) fn matching_nodes(selector: &Selector) -> Sql {
    let mut sql = Sql::new("SELECT node, toUInt8(");
    sql.append(node_condition(selector).unwrap_or_else(|| Sql::new("1")))
        .push(&format!(") AS matches FROM {NEWEST_LABELS} ORDER BY node"));
    sql
}

/// A node filter on a per-node table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Nodes<'a> {
    /// No filter.
    Any,
    In(&'a [String]),
    NotIn(&'a [String]),
}

impl Nodes<'_> {
    /// ` AND column [NOT] IN (open names close)`, the names bound ('' for none: an empty list
    /// is not SQL), or nothing for [`Nodes::Any`].
    fn filter(self, column: &str, open: &str, close: &str) -> Sql {
        let (op, names) = match self {
            Nodes::Any => return Sql::default(),
            Nodes::In(n) => ("IN", n),
            Nodes::NotIn(n) => ("NOT IN", n),
        };
        let mut sql = Sql::new(&format!(" AND {column} {op} ({open}"));
        if names.is_empty() {
            sql.push("''");
        }
        for (i, n) in names.iter().enumerate() {
            if i > 0 {
                sql.push(",");
            }
            sql.bind(Value::Str(n.clone()));
        }
        sql.push(&format!("{close})"));
        sql
    }
}

/// ` AND …` conditions on a fact table's `node` (as `nodes` says) and `process_id` columns.
/// Process matchers go through `processes`; `GLOBAL IN` evaluates the set once, also over a
/// cluster's Distributed tables.
fn selector_filter(selector: &Selector, nodes: Nodes) -> Sql {
    let mut sql = nodes.filter("node", "", "");
    let process: Vec<&Matcher> = selector.process_matchers().collect();
    if !process.is_empty() {
        sql.push(" AND process_id GLOBAL IN (SELECT process_id FROM processes WHERE 1");
        for m in process {
            sql.push(" AND ").append(condition(process_column(&m.name), m));
        }
        sql.push(")");
    }
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

/// The first second a read of a range starting at `from` covers: a minute bucket holds samples
/// taken in [time, time + 60), and reads take whole minutes. A rollup that is complete from some
/// time on may serve a range only if this is not before that time.
pub(super) fn first_read(from: u32) -> u32 {
    from / MINUTE * MINUTE
}

/// The pieces of [from, to) to read: (table suffix, from, to), per-minute buckets at the edges
/// and 10-minute buckets inside when the range is long.
pub(super) fn pieces(from: u32, to: u32) -> Vec<(&'static str, u32, u32)> {
    let from = first_read(from);
    let coarse_from = from.div_ceil(TEN_MINUTES) * TEN_MINUTES;
    let coarse_to = to / TEN_MINUTES * TEN_MINUTES;
    if to - from < COARSE_FROM_SECS || coarse_to <= coarse_from {
        return vec![("", from, to)];
    }
    let mut out = Vec::new();
    if from < coarse_from {
        out.push(("", from, coarse_from));
    }
    out.push(("_10m", coarse_from, coarse_to));
    if coarse_to < to {
        out.push(("", coarse_to, to));
    }
    out
}

/// [from, to) widened to the buckets its reads use: whole 10-minute buckets for a range of
/// [`COARSE_FROM_SECS`] or more, whole minutes below. A read over many nodes then never reads
/// the per-minute tables at its edges, where every function of every node is a row.
pub fn whole_buckets(from: u32, to: u32) -> (u32, u32) {
    let step = match to.saturating_sub(from) >= COARSE_FROM_SECS {
        true => TEN_MINUTES,
        false => MINUTE,
    };
    (from / step * step, to.div_ceil(step).saturating_mul(step))
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
    sql.append(nodes.filter("node_id", "SELECT cityHash64(arrayJoin([", "]))"));
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
        Reach::EveryNode | Reach::Matching(_) | Reach::Nothing => outer(plain(table, reach.per_node()), false),
        Reach::FleetMinus(left_out) => {
            let signed = |sign: &str| -> String {
                let columns: Vec<String> = sums
                    .iter()
                    .map(|(c, _)| format!("{sign}toInt64({c}) AS s_{c}"))
                    .collect();
                format!("{keys}, {}", columns.join(", "))
            };
            let mut inner = union(&format!("fleet_{table}"), &signed(""), scope, Nodes::Any, extra);
            inner
                .push(" UNION ALL ")
                .append(union(table, &signed("-"), scope, Nodes::In(left_out), extra));
            outer(inner, true)
        }
    }
}

/// Samples per (source, stack, process) of a flame graph, largest first, at most `limit`.
pub(super) fn flame(scope: &Scope, reach: &Reach, limit: u32) -> Sql {
    let mut sql = summed(
        "samples",
        "source, stack_id, process_id",
        &[("count", "count"), ("value", "value")],
        scope,
        reach,
        &Sql::default(),
    );
    sql.push(" ORDER BY value DESC LIMIT ").bind(Value::U32(limit));
    sql
}

/// Samples per (source, stack, process) of the listed nodes, each node's values multiplied by
/// its weight and summed (rounded to whole units), largest first, at most `limit`. Weights are
/// numbers the server computed, written as literals.
pub(super) fn weighted_flame(scope: &Scope, weights: &[(String, f64)], limit: u32) -> Sql {
    let nodes: Vec<String> = weights.iter().map(|w| w.0.clone()).collect();
    let mut sql = Sql::new(
        "SELECT source, stack_id, process_id, sum(count) AS count, toUInt64(round(sum(value * transform(node, [",
    );
    sql.bind_strs(weights.iter().map(|(node, _)| node));
    let factors: Vec<String> = weights.iter().map(|w| format!("{:e}", w.1)).collect();
    sql.push(&format!(
        "], [{}], toFloat64(0))))) AS value FROM (",
        factors.join(", ")
    ));
    sql.append(union(
        "samples",
        "node, source, stack_id, process_id, count, value",
        scope,
        Nodes::In(&nodes),
        &Sql::default(),
    ))
    .push(") GROUP BY source, stack_id, process_id HAVING value > 0 ORDER BY value DESC LIMIT ")
    .bind(Value::U32(limit));
    sql
}

/// Whether per-node totals over [from, to) are best read from `node_totals_by_hour` (keyed by
/// the hour, then the node) rather than `node_totals` (keyed by the node): every node's minutes
/// of an hour lie together in the first, a node's minutes of a day in the second. A few nodes
/// over many hours are read from the second, everything else from the first.
pub(super) fn totals_by_hour(reach: &Reach, from: u32, to: u32) -> bool {
    match reach {
        Reach::Matching(nodes) => {
            let hours = to.div_ceil(HOUR).saturating_sub(from / HOUR);
            nodes.len() as u64 >= u64::from(hours)
        }
        _ => true,
    }
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
            reach.per_node(),
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
            .append(selector_filter(&scope.selector, reach.per_node()));
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
        None => reach.per_node(),
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
    top.append(rows(&format!("{key}, value"), reach.per_node(), &extra))
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
        sample.map_or(reach.per_node(), Nodes::In),
        &chosen,
    ))
    .push(&format!(") GROUP BY node, {key}"));
    sql
}

/// How many times its rows of a fleet's largest functions (in `function_nodes_by_id_10m`,
/// ordered by function and time) a node's rows of every function (in `function_samples_10m`,
/// ordered by node) are, about: 21 K against 1.4 K per node and hour at 1,000 nodes and 200
/// functions (design 029). Rows of the first also cost less each (numbers, not names).
const NODE_ORDERED_RATIO: usize = 15;

/// Whether a per-node function read of `read` over `reach` reads `function_nodes_by_id_10m`
/// (every node's rows of the functions read) rather than `function_samples_10m` (every
/// function's rows of the nodes read), given that the first holds the range: a few nodes' rows
/// lie together in the second; a fleet's, or a sample of more than a fifteenth of it, cost
/// less in the first.
pub(super) fn read_by_function(reach: &Reach, read: NodesRead) -> bool {
    match (reach, read) {
        (Reach::Matching(_) | Reach::Nothing, _) => false,
        (_, NodesRead::Every) => true,
        (_, NodesRead::Sample { nodes, of }) => nodes.len() * NODE_ORDERED_RATIO >= of,
    }
}

/// The newest row of every node selected, seen in [from, to).
pub(super) fn nodes(selector: &Selector, from: u32, to: u32) -> Sql {
    let mut sql = Sql::new(
        "SELECT node, min(first_seen) AS first_seen, max(last_seen) AS last_seen, \
         argMax(label_keys, version) AS label_keys, argMax(label_values, version) AS label_values, \
         argMax(agent_version, version) AS agent_version, argMax(facts, version) AS facts FROM nodes WHERE 1",
    );
    for m in selector.node_matchers().filter(|m| m.name == "node") {
        sql.push(" AND ").append(condition("node", m));
    }
    sql.push(" GROUP BY node HAVING last_seen >= toDateTime(")
        .bind(Value::U32(from))
        .push(") AND first_seen < toDateTime(")
        .bind(Value::U32(to))
        .push(") ORDER BY node");
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
pub(super) fn placements(nodes: &[String], from: u32, to: u32) -> Sql {
    let mut sql = Sql::new(
        "SELECT node, toUInt32(time) AS time, pid, comm, executable, thread_nodes, thread_counts, kind, \
         path, start, end, permissions, page_nodes, page_counts, page_size FROM placements WHERE time >= toDateTime(",
    );
    sql.bind(Value::U32(from))
        .push(") AND time < toDateTime(")
        .bind(Value::U32(to))
        .push(")")
        .append(selector_filter(&Selector::all(), Nodes::In(nodes)))
        .push(" ORDER BY node, pid, time, start");
    sql
}

/// Counter increases per interval of a node; `names` empty means all.
pub(super) fn counters(node: &str, names: &[String], from: u32, to: u32) -> Sql {
    let mut sql = Sql::new("SELECT toUInt32(time) AS time, name, sum(value) AS value FROM counters WHERE node = ");
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

/// The first second the sources of a range starting at `from` are read from: batches that
/// started up to 10 minutes before it may cover it. `node_sources` holds whole 10-minute
/// buckets: its read takes the bucket before `from`'s, up to 10 minutes more than the ledger's.
pub(super) fn sources_from(from: u32, rolled_up: bool) -> u32 {
    match rolled_up {
        true => (from / TEN_MINUTES * TEN_MINUTES).saturating_sub(TEN_MINUTES),
        false => from.saturating_sub(TEN_MINUTES),
    }
}

/// The (event, source) pairs each listed node's agent sampled with in [from, to) (every batch
/// names its sources): from `node_sources`, per 10 minutes and ordered by time, when
/// `rolled_up`, else from the ledger, a row per batch. The buckets are whole at both ends: a
/// range whose `to` is not on a 10-minute boundary also counts batches that started up to 10
/// minutes after it (compare's ranges of 30 minutes and more are on boundaries).
pub(super) fn node_sources(nodes: &[String], from: u32, to: u32, rolled_up: bool) -> Sql {
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
        .append(selector_filter(&Selector::all(), Nodes::In(nodes)));
    sql
}

/// The tables and ranges a sum of counters over [from, to) reads: `counters_10m` for whole
/// 10-minute buckets and `counters_1m` for the minutes at the edges when `rolled_up` (whole
/// minutes, as the sample reads: from the minute `from` lies in to the end of the one `to` lies
/// in), else the per-interval `counters` over exactly [from, to).
pub(super) fn counter_pieces(from: u32, to: u32, rolled_up: bool) -> Vec<(&'static str, u32, u32)> {
    match rolled_up {
        true => pieces(from, to)
            .into_iter()
            .map(|(suffix, from, to)| match suffix {
                "" => ("counters_1m", from, to),
                _ => ("counters_10m", from, to),
            })
            .collect(),
        false => vec![("counters", from, to)],
    }
}

/// Each node's counters summed over [from, to), for the nodes listed, from the tables
/// [`counter_pieces`] picks.
pub(super) fn node_counters(nodes: &[String], from: u32, to: u32, rolled_up: bool) -> Sql {
    let mut sql = Sql::new("SELECT node, name, sum(value) AS value FROM (");
    for (i, (table, from, to)) in counter_pieces(from, to, rolled_up).into_iter().enumerate() {
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
        .append(selector_filter(&Selector::all(), Nodes::In(nodes)));
    }
    sql.push(") GROUP BY node, name ORDER BY node, name");
    sql
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct FirstSeen {
    node: String,
    first_seen: u32,
}

/// The stored `first_seen` of each of `nodes` that has one.
pub(super) async fn first_seen(client: &Client, nodes: &[&str]) -> Result<HashMap<String, u32>, StorageError> {
    let mut sql = Sql::new("SELECT node, toUInt32(min(first_seen)) AS first_seen FROM nodes WHERE node IN (");
    sql.bind_strs(nodes);
    sql.push(") GROUP BY node");
    Ok(sql
        .query(client)
        .fetch_all::<FirstSeen>()
        .await
        .map_err(StorageError::query("read when nodes were first seen"))?
        .into_iter()
        .map(|r| (r.node, r.first_seen))
        .collect())
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
        "SELECT build_id, kind, any(sha256) AS sha256, max(functions) AS functions FROM debuginfo WHERE build_id IN (",
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
        flame(&scope, &matching, 100_000),
        flame(&scope, &minus, 100_000),
        flame(&short, &Reach::Fleet, 100_000),
        flame(&short, &Reach::EveryNode, 100_000),
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
        debuginfo_segments("0a1b", 2),
        debuginfo_functions("0a1b", 2),
        placements(&["web-1".into()], 1_795_000_000, 1_795_000_900),
        counters("web-1", &["pgfault".into()], 1_795_000_000, 1_795_000_900),
        counters("web-1", &[], 1_795_000_000, 1_795_000_900),
        node_counters(&["web-1".into(), "web-2".into()], 1_795_000_030, 1_795_003_630, true),
        node_counters(&["web-1".into()], 1_795_000_030, 1_795_003_630, false),
        node_sources(&["web-1".into(), "web-2".into()], 1_795_000_030, 1_795_003_630, true),
        node_sources(&["web-1".into()], 1_795_000_030, 1_795_003_630, false),
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

    /// Every node reads the rollups; most of them the rollups minus the rest; a few of them, or
    /// a range the rollups do not hold, the per-node tables.
    #[test]
    fn reach_picks_the_smaller_read() {
        let fleet = |matching: usize| -> Option<Vec<(String, bool)>> {
            Some((0..10).map(|i| (format!("n{i}"), i < matching)).collect())
        };
        let names = |r: std::ops::Range<usize>| r.map(|i| format!("n{i}")).collect::<Vec<_>>();
        assert_eq!(Reach::choose(None, true), Reach::Fleet);
        assert_eq!(Reach::choose(None, false), Reach::EveryNode);
        assert_eq!(Reach::choose(fleet(0), true), Reach::Nothing);
        assert_eq!(Reach::choose(fleet(10), true), Reach::Fleet);
        assert_eq!(Reach::choose(fleet(10), false), Reach::EveryNode);
        assert_eq!(Reach::choose(fleet(9), true), Reach::FleetMinus(names(9..10)));
        assert_eq!(Reach::choose(fleet(9), false), Reach::Matching(names(0..9)));
        assert_eq!(Reach::choose(fleet(5), true), Reach::Matching(names(0..5)));
        assert_eq!(Reach::choose(fleet(1), true), Reach::Matching(names(0..1)));
    }

    /// An hour or more widens to whole 10-minute buckets and then reads no per-minute table;
    /// shorter ranges widen to whole minutes.
    #[test]
    fn whole_buckets_leave_no_minute_edges() {
        let (from, to) = whole_buckets(1_795_000_123, 1_795_003_723);
        assert_eq!((from, to), (1_794_999_600, 1_795_003_800));
        assert_eq!(pieces(from, to), vec![("_10m", from, to)]);
        assert_eq!(
            whole_buckets(1_794_999_600, 1_795_003_200),
            (1_794_999_600, 1_795_003_200)
        );
        assert_eq!(
            whole_buckets(1_795_000_059, 1_795_000_301),
            (1_795_000_020, 1_795_000_320)
        );
    }

    /// Counters: whole 10-minute buckets from `counters_10m`, the edges' whole minutes from
    /// `counters_1m`; before the rollups, exactly the range from the per-interval table.
    #[test]
    fn counters_are_read_in_the_pieces_of_the_sample_reads() {
        assert_eq!(
            counter_pieces(1_795_000_030, 1_795_003_630, true),
            vec![
                ("counters_1m", 1_795_000_020, 1_795_000_200),
                ("counters_10m", 1_795_000_200, 1_795_003_200),
                ("counters_1m", 1_795_003_200, 1_795_003_630),
            ]
        );
        assert_eq!(
            counter_pieces(1_795_000_030, 1_795_000_330, true),
            vec![("counters_1m", 1_795_000_020, 1_795_000_330)]
        );
        assert_eq!(
            counter_pieces(1_795_000_030, 1_795_003_630, false),
            vec![("counters", 1_795_000_030, 1_795_003_630)]
        );
    }

    /// Sources: from the 10-minute bucket before `from`'s (the ledger: 10 minutes before it).
    #[test]
    fn sources_are_read_from_ten_minutes_before_the_range() {
        assert_eq!(sources_from(1_795_000_030, true), 1_794_999_000);
        assert_eq!(sources_from(1_794_999_600, true), 1_794_999_000);
        assert_eq!(sources_from(1_795_000_030, false), 1_794_999_430);
        assert_eq!(sources_from(30, true), 0);
    }

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

    /// Short ranges read minutes only; long ones whole 10-minute buckets in the middle.
    #[test]
    fn ranges_split_into_minute_edges_and_coarse_middles() {
        assert_eq!(pieces(1_000_030, 1_000_900), [("", 1_000_020, 1_000_900)]);
        let p = pieces(1_795_000_030, 1_795_003_630);
        assert_eq!(
            p,
            [
                ("", 1_795_000_020, 1_795_000_200),
                ("_10m", 1_795_000_200, 1_795_003_200),
                ("", 1_795_003_200, 1_795_003_630)
            ]
        );
        let aligned = pieces(1_795_000_200, 1_795_003_800);
        assert_eq!(aligned, [("_10m", 1_795_000_200, 1_795_003_800)]);
    }

    /// A few nodes over many hours read the table keyed by node; the rest the one keyed by hour.
    #[test]
    fn totals_of_few_nodes_over_long_ranges_are_read_by_node() {
        let nodes = |n: usize| Reach::Matching((0..n).map(|i| format!("n{i}")).collect());
        let hour = 1_795_000_000 / HOUR * HOUR;
        assert!(totals_by_hour(&Reach::Fleet, hour, hour + 7 * 24 * HOUR));
        assert!(totals_by_hour(
            &Reach::FleetMinus(vec!["n1".into()]),
            hour,
            hour + 7 * 24 * HOUR
        ));
        assert!(totals_by_hour(&nodes(1), hour, hour + HOUR));
        assert!(!totals_by_hour(&nodes(1), hour + 1, hour + HOUR + 1), "spans two hours");
        assert!(totals_by_hour(&nodes(100), hour, hour + 24 * HOUR));
        assert!(!totals_by_hour(&nodes(10), hour, hour + 24 * HOUR));
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
    /// node; a sample is read from the table ordered by function (by its node ids) unless it is
    /// under a fifteenth of the fleet.
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

        let names: Vec<String> = (0..200).map(|i| format!("web-{i}")).collect();
        let sampled = |n: usize, of: usize| NodesRead::Sample { nodes: &names[..n], of };
        assert!(read_by_function(&Reach::Fleet, NodesRead::Every));
        assert!(read_by_function(&Reach::Fleet, sampled(200, 1_000)));
        assert!(read_by_function(&Reach::FleetMinus(vec![]), sampled(200, 3_000)));
        assert!(!read_by_function(&Reach::Fleet, sampled(200, 3_001)));
        assert!(!read_by_function(&Reach::EveryNode, sampled(200, 10_000)));
        assert!(!read_by_function(&Reach::Matching(vec![]), NodesRead::Every));
    }

    /// Node labels and names go through the newest labels in `nodes`, process labels through
    /// `processes`; every value is a bound parameter.
    #[test]
    fn selectors_become_bound_conditions() {
        let s = Selector::parse(r#"{node=~"web-.*", zone="a'b", namespace!="kube-system"}"#).unwrap();
        let sql = node_condition(&s).unwrap();
        let in_list = selector_filter(&s, Nodes::In(&["web-1".into()]));
        assert!(
            in_list.text.starts_with(" AND node IN (?) AND process_id GLOBAL IN ("),
            "{}",
            in_list.text
        );
        assert!(in_list.text.contains("pod_namespace != ?"), "{}", in_list.text);
        let any = selector_filter(&s, Nodes::Any);
        assert!(
            !any.text.contains("node IN") && any.text.contains("process_id GLOBAL IN"),
            "{}",
            any.text
        );
        assert_eq!(sql.text.matches('?').count(), sql.values.len());
        assert!(sql.text.contains("match(node, ?)"), "{}", sql.text);
        assert!(sql.text.contains("v[indexOf(k, ?)] = ?"), "{}", sql.text);
        assert!(!sql.text.contains("a'b"));
        let client = Client::default();
        let rendered = sql.query(&client).sql_display().to_string();
        assert!(rendered.contains(r"'a\'b'"), "{rendered}");
        assert!(rendered.contains("'^(?:web-.*)$'"), "{rendered}");
    }
}
