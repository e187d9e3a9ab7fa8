//! Selectors as SQL conditions: a selector's node matchers on the nodes' newest labels (in
//! `nodes`), its process matchers through `processes`, and node lists as bound `IN` lists (up
//! to [`INLINE_NODES`]; longer ones as the selector that chose them).

use super::plan::Reach;
use super::sql::{Sql, Value};
use crate::selector::{MatchOp, Matcher, Selector};

/// The column holding a process label in `processes`.
pub(super) fn process_column(label: &str) -> &'static str {
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
pub(super) fn condition(expr: &str, m: &Matcher) -> Sql {
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
pub(super) const NEWEST_LABELS: &str = "(SELECT node, argMax(label_keys, version) AS k, \
     argMax(label_values, version) AS v FROM nodes GROUP BY node)";

/// The selector's node matchers as one condition on [`NEWEST_LABELS`]; `None` when it has none.
pub(super) fn node_condition(selector: &Selector) -> Option<Sql> {
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

/// Every node known, with whether the selector's node matchers match it.
pub(super) fn matching_nodes(selector: &Selector) -> Sql {
    let mut sql = Sql::new("SELECT node, toUInt8(");
    sql.append(node_condition(selector).unwrap_or_else(|| Sql::new("1")))
        .push(&format!(") AS matches FROM {NEWEST_LABELS} ORDER BY node"));
    sql
}

/// Lists of nodes longer than this are read as the selector that chose them (a subquery of
/// `nodes`) rather than bound name by name: a query's text then stays the same size at any fleet
/// size. 100,000 names inlined made ClickHouse refuse compare's reads ("AST is too big").
pub const INLINE_NODES: usize = 1000;

/// A node filter on a per-node table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Nodes<'a> {
    /// No filter.
    Any,
    In(&'a [String]),
    NotIn(&'a [String]),
    /// The nodes whose newest labels the selector's node matchers match (`negate`: those they
    /// do not), by a subquery of `nodes`.
    Matching {
        selector: &'a Selector,
        negate: bool,
    },
    /// The nodes of a table the query's session holds (a temporary table of `node`s, sent as
    /// rows: a list of any length).
    Table(&'a str),
}

impl<'a> Nodes<'a> {
    /// How a per-node table is filtered for `reach`, the nodes `selector` matches: a list of
    /// more than [`INLINE_NODES`] as the selector itself.
    pub(super) fn of(reach: &'a Reach, selector: &'a Selector) -> Nodes<'a> {
        match reach {
            Reach::Fleet | Reach::EveryNode => Nodes::Any,
            Reach::Matching(nodes) if nodes.len() > INLINE_NODES => Nodes::Matching {
                selector,
                negate: false,
            },
            Reach::Matching(nodes) => Nodes::In(nodes),
            // Every node but those left out: the ones the selector matches.
            Reach::FleetMinus(left_out) if left_out.len() > INLINE_NODES => Nodes::Matching {
                selector,
                negate: false,
            },
            Reach::FleetMinus(left_out) => Nodes::NotIn(left_out),
            Reach::Nothing => Nodes::In(&[]),
        }
    }

    /// The nodes `selector` does not match, as [`Reach::FleetMinus`] leaves them out: its list, or
    /// the selector's negation when the list is longer than [`INLINE_NODES`].
    pub(super) fn left_out(left_out: &'a [String], selector: &'a Selector) -> Nodes<'a> {
        match left_out.len() > INLINE_NODES {
            true => Nodes::Matching { selector, negate: true },
            false => Nodes::In(left_out),
        }
    }

    /// ` AND column [NOT] IN (open names close)`, the names bound ('' for none: an empty list
    /// is not SQL), or nothing for [`Nodes::Any`]. For [`Nodes::Matching`], ` AND column GLOBAL
    /// IN (SELECT key FROM newest labels WHERE …)`, `key` the node name as `column` holds it.
    pub(super) fn filter(self, column: &str, key: &str, open: &str, close: &str) -> Sql {
        let (op, names) = match self {
            Nodes::Any => return Sql::default(),
            Nodes::Table(table) => return Sql::new(&format!(" AND {column} GLOBAL IN (SELECT node FROM {table})")),
            Nodes::In(n) => ("IN", n),
            Nodes::NotIn(n) => ("NOT IN", n),
            Nodes::Matching { selector, negate } => {
                let Some(condition) = node_condition(selector) else {
                    // No node matchers: every node matches.
                    return match negate {
                        true => Sql::new(" AND 0"),
                        false => Sql::default(),
                    };
                };
                let mut sql = Sql::new(&format!(
                    " AND {column} GLOBAL IN (SELECT {key} FROM {NEWEST_LABELS} WHERE {}(",
                    if negate { "NOT " } else { "" }
                ));
                sql.append(condition).push("))");
                return sql;
            }
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
pub(super) fn selector_filter(selector: &Selector, nodes: Nodes) -> Sql {
    let mut sql = nodes.filter("node", "node", "", "");
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

#[cfg(test)]
mod tests {
    use clickhouse::Client;

    use super::*;

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

    /// A list of nodes longer than [`INLINE_NODES`] is read as the selector that chose it: the
    /// filter's text and bound values are the same size for 1,001 nodes as for 100,000; a short
    /// list stays bound name by name; the nodes a fleet-minus read subtracts are the selector's
    /// negation.
    #[test]
    fn long_node_lists_are_read_as_their_selector() {
        let s = Selector::parse(r#"{zone="b"}"#).unwrap();
        let many = |n: usize| -> Vec<String> { (0..n).map(|i| format!("node-{i}")).collect() };
        for n in [1_001, 100_000] {
            let names = many(n);
            let matching = Reach::Matching(names.clone());
            let sql = Nodes::of(&matching, &s).filter("node", "node", "", "");
            assert!(
                sql.text
                    .starts_with(" AND node GLOBAL IN (SELECT node FROM (SELECT node, argMax"),
                "{}",
                sql.text
            );
            assert!(
                sql.text.len() < 300 && sql.values.len() == 2,
                "{} {:?}",
                sql.text,
                sql.values
            );
            let minus = Reach::FleetMinus(names.clone());
            assert_eq!(
                Nodes::of(&minus, &s),
                Nodes::Matching {
                    selector: &s,
                    negate: false
                }
            );
            let subtracted = Nodes::left_out(&names, &s).filter("node_id", "cityHash64(node)", "", "");
            assert!(
                subtracted
                    .text
                    .starts_with(" AND node_id GLOBAL IN (SELECT cityHash64(node) FROM")
                    && subtracted.text.contains("WHERE NOT ("),
                "{}",
                subtracted.text
            );
        }
        let few = many(3);
        let short = Reach::Matching(few.clone());
        let sql = Nodes::of(&short, &s).filter("node", "node", "", "");
        assert_eq!((sql.text.as_str(), sql.values.len()), (" AND node IN (?,?,?)", 3));
        // A selector without node matchers matches every node: no filter, or none left.
        let all = Selector::all();
        let every = Nodes::Matching {
            selector: &all,
            negate: false,
        };
        assert_eq!(every.filter("node", "node", "", "").text, "");
        let none = Nodes::Matching {
            selector: &all,
            negate: true,
        };
        assert_eq!(none.filter("node", "node", "", "").text, " AND 0");
    }
}
