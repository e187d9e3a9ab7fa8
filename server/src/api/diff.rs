//! `GET /api/v1/diff?event=&source=&from=&to=&a=SELECTOR&b=SELECTOR` or
//! `…&selector=S&groups=bands[&metric=M]`, `&format=json|folded|pprof&side=a|b&mode=absolute|relative`:
//! the differential flame graph of two groups of nodes.
//!
//! Each node's samples are divided by the node's CPU-seconds in the range (its `cpu` event,
//! the source with the most nodes), or with `per=work` by its units of work (the agents'
//! `--work-uprobe`/`--work-metric` counter), and by the number of nodes of its group, so a value
//! is the **mean over the group's nodes of the events per CPU-second** (or per unit of work)
//! under a frame: a big node or a large group does not outweigh a small one, and a node with
//! nothing to divide by is left out (and listed), as is a node whose stacks of the event may
//! stop short beside the others' (its agent walks frame pointers: `nodes_short_chains`). With `groups=bands`, `a` is the band that is not slow and `b` the slow one (when the
//! band metric says which is slow; else `a` is the low band).
//!
//! `mode=relative` divides each group's values by its total: shares in the JSON tree, percent in
//! folded text, parts per million in pprof. `format=folded` writes `stack a b` lines (difffolded.pl's
//! output, flamegraph.pl's differential input); `format=pprof&side=a|b` one group's profile in
//! pprof, values in the event's unit per 1,000 CPU-seconds (pprof values are integers), for
//! `go tool pprof -diff_base=a.pb.gz b.pb.gz`.

use std::collections::HashMap;

use axum::extract::{RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bimodal_profile::Profile;
use bimodal_proto::v1::EventKind;

use super::params::Params;
use super::{AppError, AppState, Reader};
use crate::clock::{now_secs as now, rfc3339};
use crate::selector::Selector;
use crate::storage::{FlameGraph, Scope};

/// Fixed point of the weighted sums: values are kept in millionths of a unit per CPU-second (or
/// unit of work), rounded per (stack, process): fine enough that a stack sampled once on a node
/// of a large group over an hour is not rounded away (1e3 lost most of a page-fault profile).
const SCALE: f64 = 1e6;
/// pprof values are integers: a unit per this many CPU-seconds (or units of work).
const PPROF_PER: f64 = 1000.0;
const DEFAULT_MAX_STACKS: u32 = 20_000;
const MAX_STACKS: u32 = 200_000;

/// How one side's nodes are weighed: each node's samples by `SCALE / (its divisor × the nodes
/// weighed)`, so the side's graph is the mean over its nodes of their values per divisor (a
/// CPU-second, a unit of work) in millionths. Nodes with nothing to divide by, and nodes whose
/// stacks may stop short beside the others' (`short`), are left out, each list apart.
#[derive(Debug, PartialEq)]
struct Side {
    weights: Vec<(String, f64)>,
    left_out: Vec<String>,
    short_chains: Vec<String>,
}

impl Side {
    fn of(nodes: Vec<String>, divisors: &HashMap<String, f64>, short: &std::collections::HashSet<String>) -> Side {
        let (short_chains, nodes): (Vec<String>, Vec<String>) = nodes.into_iter().partition(|n| short.contains(n));
        let (with, left_out): (Vec<String>, Vec<String>) = nodes
            .into_iter()
            .partition(|n| divisors.get(n).is_some_and(|&s| s > 0.0));
        let count = with.len() as f64;
        let weights = with
            .into_iter()
            .map(|n| {
                let weight = SCALE / (divisors[&n] * count);
                (n, weight)
            })
            .collect();
        Side {
            weights,
            left_out,
            short_chains,
        }
    }
}

/// One side of the comparison.
struct Group {
    /// The selector or band it came from.
    label: String,
    nodes: Vec<String>,
    /// Nodes of the group with nothing to divide by in the range (no CPU samples, no units of
    /// work): not normalized, left out.
    left_out: Vec<String>,
    /// Nodes of the group whose stacks may stop short beside the other nodes' (frame pointers
    /// beside whole chains, [`crate::analysis::chains`]): left out.
    short_chains: Vec<String>,
    graph: FlameGraph,
}

pub(super) async fn diff(
    State(state): State<AppState>,
    Extension(reader): Extension<Reader>,
    RawQuery(raw): RawQuery,
) -> Result<Response, AppError> {
    let p = Params::parse(
        raw.as_deref(),
        &[
            "event",
            "source",
            "from",
            "to",
            "a",
            "b",
            "selector",
            "groups",
            "per",
            "metric",
            "format",
            "side",
            "mode",
            "max_stacks",
        ],
    )?;
    let event = p.event()?;
    let (from, to) = p.time_range(now())?;
    let max_stacks = p.bounded("max_stacks", DEFAULT_MAX_STACKS, MAX_STACKS)?;
    let relative = match p.one("mode").unwrap_or("absolute") {
        "absolute" => false,
        "relative" => true,
        other => {
            return Err(AppError::BadRequest(format!(
                "unknown mode `{other}`; expected absolute or relative"
            )))
        }
    };
    let parse = |key: &str| -> Result<Selector, AppError> {
        let text = p.required(key)?;
        Selector::parse(text).map_err(|e| AppError::BadRequest(format!("`{key}`: {e}")))
    };
    // The two groups' node lists, and what they were chosen by.
    let (sides, bands_metric) = match p.one("groups") {
        Some("bands") => {
            if p.one("a").is_some() || p.one("b").is_some() {
                return Err(AppError::BadRequest(
                    "give either groups=bands or the selectors a and b".into(),
                ));
            }
            let selector = p.selector()?;
            let bands = super::compare::bands_of(&state, &selector, p.one("metric"), from, to)
                .await?
                .map_err(|verdict| AppError::BadRequest(format!("no groups to compare: {verdict}")))?;
            let (a, b) = match bands.slow {
                Some("low") => (("high band (fast)", bands.high), ("low band (slow)", bands.low)),
                Some(_) => (("low band (fast)", bands.low), ("high band (slow)", bands.high)),
                None => (("low band", bands.low), ("high band", bands.high)),
            };
            (
                [(a.0.to_owned(), a.1, selector.clone()), (b.0.to_owned(), b.1, selector)],
                Some(bands.metric),
            )
        }
        Some(other) => {
            return Err(AppError::BadRequest(format!(
                "unknown groups `{other}`; expected bands"
            )))
        }
        None => {
            let mut sides = Vec::new();
            for key in ["a", "b"] {
                let selector = parse(key)?;
                let nodes = state.store.nodes(&selector, from, to).await?;
                sides.push((
                    selector.to_string(),
                    nodes.into_iter().map(|n| n.node).collect::<Vec<_>>(),
                    selector,
                ));
            }
            let b = sides.pop().expect("two sides");
            let a = sides.pop().expect("two sides");
            ([a, b], None)
        }
    };
    let source = match p.one("source").filter(|s| !s.is_empty()) {
        Some(s) => s.to_owned(),
        None => busiest_source(&state, event, from, to, &sides).await?,
    };
    // What each node's values are divided by: its CPU-seconds, or its units of work.
    let per_work = match p.one("per").unwrap_or("cpu_second") {
        "cpu_second" => false,
        "work" => true,
        other => {
            return Err(AppError::BadRequest(format!(
                "unknown per `{other}`; expected cpu_second or work"
            )))
        }
    };
    // Nodes of either side whose stacks may stop short beside the others'.
    let short: std::collections::HashSet<String> = {
        let mut facts: HashMap<String, Option<bimodal_proto::v1::NodeFacts>> = HashMap::new();
        for (_, _, selector) in &sides {
            for n in state.store.nodes(selector, from, to).await? {
                facts.insert(n.node, n.facts);
            }
        }
        let members: Vec<&String> = sides.iter().flat_map(|(_, nodes, _)| nodes).collect();
        crate::analysis::chains::short_chains(members.iter().map(|n| facts.get(*n).and_then(Option::as_ref)), event)
            .into_iter()
            .map(|i| members[i].clone())
            .collect()
    };
    // Both sides' stacks, held until the answer is built.
    let _building = state.building.hold(&reader, max_stacks.saturating_mul(2)).await?;
    let mut groups = Vec::new();
    for (label, nodes, selector) in sides {
        // Process labels in a side's selector pick its samples and its CPU-seconds; units of work
        // are counted per node.
        let divisors = if per_work {
            work_units(&state, from, to, &nodes).await?
        } else {
            cpu_seconds(&state, from, to, &selector, &nodes).await?
        };
        if nodes.is_empty() {
            return Err(AppError::BadRequest(format!(
                "the group `{label}` has no node in this range"
            )));
        }
        let scope = Scope {
            event: event.name(),
            source: Some(source.clone()),
            selector,
            from,
            to,
        };
        let side = Side::of(nodes, &divisors, &short);
        let mut graph = state
            .store
            .weighted_flame_graph(&scope, &side.weights, max_stacks)
            .await?;
        state.names.name_profile(&mut graph.profile).await?;
        groups.push(Group {
            label,
            nodes: side.weights.into_iter().map(|(n, _)| n).collect(),
            left_out: side.left_out,
            short_chains: side.short_chains,
            graph,
        });
    }
    if let Some(g) = groups.iter().find(|g| g.nodes.is_empty()) {
        if g.left_out.is_empty() && !g.short_chains.is_empty() {
            return Err(AppError::BadRequest(format!(
                "every node of the group `{}` walks `{}` stacks with frame pointers where other nodes unwind them whole: their stacks are not compared ({})",
                g.label,
                event.name(),
                g.short_chains.join(", ")
            )));
        }
        return Err(AppError::BadRequest(match per_work {
            true => format!(
                "no node of the group `{}` counted units of work in this range (bimodal-agent run --work-uprobe or --work-metric)",
                g.label
            ),
            false => format!("no node of the group `{}` has CPU samples in this range", g.label),
        }));
    }
    let per = if per_work { "unit of work" } else { "CPU-second" };
    let unit = format!("{} per {per}", groups[0].graph.profile.unit);
    let [a, b] = <[Group; 2]>::try_from(groups).map_err(|_| AppError::Internal("two groups expected".into()))?;
    // What each side's fixed-point values are divided by: to units per CPU-second, or to shares
    // of the side's total (percent in folded text).
    let total = |g: &Group| g.graph.profile.total().max(1) as f64;
    let (tree_a, tree_b) = if relative {
        (total(&a), total(&b))
    } else {
        (SCALE, SCALE)
    };
    let (folded_a, folded_b) = if relative {
        (total(&a) / 100.0, total(&b) / 100.0)
    } else {
        (SCALE, SCALE)
    };
    let format = p.one("format").unwrap_or("json");
    Ok(match format {
        "json" => Json(serde_json::json!({
            "event": event.name(),
            "source": source,
            "unit": unit,
            "normalization": format!("mean over each group's nodes of the node's value per {per}"),
            "mode": if relative { "relative" } else { "absolute" },
            "from": rfc3339(from),
            "to": rfc3339(to),
            "bands_metric": bands_metric,
            "a": side_json(&a),
            "b": side_json(&b),
            "root": bimodal_profile::diff::tree(&a.graph.profile, &b.graph.profile, tree_a, tree_b),
        }))
        .into_response(),
        "folded" => (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            bimodal_profile::diff::folded(&a.graph.profile, &b.graph.profile, folded_a, folded_b),
        )
            .into_response(),
        "pprof" => {
            let side = match p.one("side") {
                Some("a") => a,
                Some("b") => b,
                _ => return Err(AppError::BadRequest("format=pprof needs side=a or side=b".into())),
            };
            let mut profile = rescaled(&side, relative);
            profile.unit = if relative {
                "parts per million of the group".into()
            } else {
                format!("{} per 1000 {per}s", profile.unit)
            };
            (
                [
                    (header::CONTENT_TYPE, "application/octet-stream"),
                    (header::CONTENT_DISPOSITION, "attachment; filename=\"profile.pb.gz\""),
                ],
                profile.to_pprof(),
            )
                .into_response()
        }
        other => {
            return Err(AppError::BadRequest(format!(
                "unknown format `{other}`; expected json, folded or pprof"
            )))
        }
    })
}

/// A group's profile for pprof: in units per [`PPROF_PER`] CPU-seconds (or units of work), or in
/// parts per million of its total when `relative`.
fn rescaled(g: &Group, relative: bool) -> Profile {
    let mut profile = g.graph.profile.clone();
    let total = profile.total().max(1) as f64;
    for s in &mut profile.samples {
        s.value = match relative {
            true => (s.value as f64 / total * 1e6).round() as u64,
            false => (s.value as f64 / SCALE * PPROF_PER).round() as u64,
        };
    }
    profile
}

fn side_json(g: &Group) -> serde_json::Value {
    serde_json::json!({
        "label": g.label,
        "nodes": g.nodes,
        "nodes_left_out": g.left_out,
        "nodes_short_chains": g.short_chains,
        "total": g.graph.total_value as f64 / SCALE,
        "truncated_stacks": g.graph.truncated_stacks,
        "truncated_value": g.graph.truncated_value as f64 / SCALE,
    })
}

/// CPU-seconds of `nodes` over [from, to) under `selector` (its process labels pick the
/// processes): [`crate::window::node_cpu_seconds`], samples from the `cpu` source with the
/// most nodes (ties: the first by name).
async fn cpu_seconds(
    state: &AppState,
    from: u32,
    to: u32,
    selector: &Selector,
    nodes: &[String],
) -> Result<HashMap<String, f64>, AppError> {
    let wanted: std::collections::HashSet<&str> = nodes.iter().map(String::as_str).collect();
    let scope = Scope {
        event: EventKind::Cpu.name(),
        source: None,
        selector: selector.clone(),
        from,
        to,
    };
    let mut by_source: std::collections::BTreeMap<String, HashMap<String, f64>> = Default::default();
    for t in state.store.node_totals(&scope).await? {
        if wanted.contains(t.node.as_str()) {
            by_source.entry(t.source).or_default().insert(t.node, t.value as f64);
        }
    }
    let source = crate::window::cpu_source_of(by_source.iter().map(|(s, n)| (s.as_str(), n.len()))).map(str::to_owned);
    let sampled = source.and_then(|s| by_source.remove(&s)).unwrap_or_default();
    let exact: HashMap<String, f64> = state
        .store
        .node_counters(crate::storage::NodeSet::Named(nodes), from, to)
        .await?
        .into_iter()
        .filter(|(_, name, _)| name == bimodal_proto::PROCESS_CPU_COUNTER)
        .map(|(node, _, value)| (node, value as f64))
        .collect();
    let picks_processes = selector.process_matchers().next().is_some();
    Ok(nodes
        .iter()
        .filter_map(|n| {
            let seconds =
                crate::window::node_cpu_seconds(sampled.get(n).copied(), exact.get(n).copied(), picks_processes)?;
            Some((n.clone(), seconds))
        })
        .collect())
}

/// Units of work of `nodes` over [from, to) (the agents' `work` counter).
async fn work_units(state: &AppState, from: u32, to: u32, nodes: &[String]) -> Result<HashMap<String, f64>, AppError> {
    Ok(state
        .store
        .node_counters(crate::storage::NodeSet::Named(nodes), from, to)
        .await?
        .into_iter()
        .filter(|(_, name, _)| name == bimodal_proto::WORK_COUNTER)
        .map(|(node, _, value)| (node, value as f64))
        .collect())
}

/// The source of `event` with the most samples on the groups' nodes.
async fn busiest_source(
    state: &AppState,
    event: EventKind,
    from: u32,
    to: u32,
    sides: &[(String, Vec<String>, Selector); 2],
) -> Result<String, AppError> {
    let mut samples: HashMap<String, u64> = HashMap::new();
    for t in node_totals(state, event, from, to, sides).await? {
        *samples.entry(t.source).or_default() += t.samples;
    }
    samples
        .into_iter()
        .max_by_key(|(source, n)| (*n, std::cmp::Reverse(source.clone())))
        .map(|(source, _)| source)
        .ok_or_else(|| AppError::BadRequest(format!("no {} samples on these nodes in this range", event.name())))
}

async fn node_totals(
    state: &AppState,
    event: EventKind,
    from: u32,
    to: u32,
    sides: &[(String, Vec<String>, Selector); 2],
) -> Result<Vec<crate::storage::NodeTotal>, AppError> {
    let wanted: std::collections::HashSet<&str> = sides.iter().flat_map(|s| s.1.iter().map(String::as_str)).collect();
    let scope = Scope {
        event: event.name(),
        source: None,
        selector: Selector::all(),
        from,
        to,
    };
    Ok(state
        .store
        .node_totals(&scope)
        .await?
        .into_iter()
        .filter(|t| wanted.contains(t.node.as_str()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A side's graph is the mean over its nodes of their values per divisor: a node with twice
    /// the CPU-seconds weighs half as much per sample; nodes without CPU-seconds, and nodes with
    /// short chains, are listed apart and weigh nothing.
    #[test]
    fn a_side_is_the_mean_of_its_nodes_per_cpu_second() {
        let nodes: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        let divisors: HashMap<String, f64> =
            [("a".to_owned(), 10.0), ("b".to_owned(), 20.0), ("d".to_owned(), 5.0)].into();
        let short = ["d".to_owned()].into();
        let side = Side::of(nodes, &divisors, &short);
        assert_eq!(
            side,
            Side {
                weights: vec![("a".into(), SCALE / 20.0), ("b".into(), SCALE / 40.0)],
                left_out: vec!["c".into()],
                short_chains: vec!["d".into()],
            }
        );
    }
}
