//! What the fleet looks like: `GET /api/v1/nodes?selector=&from=&to=&limit=&after=` (nodes with
//! labels and facts, a page at a time), `GET /api/v1/totals?event=&selector=&source=&from=&to=` (per node and source),
//! `GET /api/v1/functions?event=&source=&selector=&from=&to=&limit=` (the largest functions,
//! each with its values per node),
//! `GET /api/v1/labels?selector=&from=&to=` (label names and values, for completion),
//! `GET /api/v1/sources` (what each source measures, in which unit).

use std::collections::{BTreeMap, HashMap};

use axum::extract::{RawQuery, State};
use axum::Json;
use bimodal_proto::v1::EventKind;

use super::params::Params;
use super::{AppError, AppState};
use crate::clock::{now_secs as now, rfc3339};
use crate::storage::Scope;

/// Nodes listed when no range is given: those seen in the last day.
const DEFAULT_NODES_RANGE_SECS: u32 = 24 * 3600;

/// The range of a node listing: the one given, or the last day.
fn nodes_range(p: &Params) -> Result<(u32, u32), AppError> {
    let now = now();
    match (p.one("from"), p.one("to")) {
        (None, None) => Ok((now.saturating_sub(DEFAULT_NODES_RANGE_SECS), now.saturating_add(1))),
        _ => Ok(p.time_range(now)?),
    }
}

/// Nodes listed per answer by default and at most: a page of a fleet's nodes with their facts
/// is a few MiB (about 2 KB a node); `after` reads the next page.
const NODES_PER_PAGE: u32 = 5000;

pub(super) async fn nodes(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<serde_json::Value>, AppError> {
    let p = Params::parse(raw.as_deref(), &["selector", "from", "to", "limit", "after"])?;
    let selector = p.selector()?;
    let range = nodes_range(&p)?;
    let limit = p.bounded("limit", NODES_PER_PAGE, NODES_PER_PAGE)?;
    let after = p.one("after").unwrap_or_default();
    // One node more than the page: whether there is a next page.
    let (mut page, total) = state.store.node_page(&selector, range, after, limit + 1).await?;
    let more = page.len() > limit as usize;
    page.truncate(limit as usize);
    let next = more.then(|| page.last().map(|n| n.node.clone())).flatten();
    let nodes: Vec<_> = page
        .into_iter()
        .map(|n| {
            serde_json::json!({
                "node": n.node,
                "labels": n.labels,
                "first_seen": rfc3339(n.first_seen),
                "last_seen": rfc3339(n.last_seen),
                "agent_version": n.agent_version,
                "facts": n.facts.as_ref().map(facts_json),
            })
        })
        .collect();
    Ok(Json(serde_json::json!({
        "selector": selector.to_string(),
        "total": total,
        "next": next,
        "nodes": nodes,
    })))
}

/// Values listed per label at most: completion needs the start of a list, not all of it.
const LABEL_VALUES_LIMIT: usize = 200;

/// `GET /api/v1/labels?selector=&from=&to=`: every label a selector can match, for completion.
/// Node labels (with `node`) come with how many selected nodes have each value; process labels
/// with the values of processes seen in the range's days, over the whole fleet.
pub(super) async fn labels(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<serde_json::Value>, AppError> {
    let p = Params::parse(raw.as_deref(), &["selector", "from", "to"])?;
    let selector = p.selector()?;
    let (from, to) = nodes_range(&p)?;
    let (node_values, process_values) = tokio::try_join!(
        state
            .store
            .node_label_values(&selector, (from, to), LABEL_VALUES_LIMIT as u32 + 1),
        state.store.process_label_values(from, LABEL_VALUES_LIMIT as u32 + 1),
    )?;
    let mut labels: Vec<serde_json::Value> = node_values
        .into_iter()
        .map(|(name, values)| {
            let truncated = values.len() > LABEL_VALUES_LIMIT;
            let values: Vec<_> = values
                .into_iter()
                .take(LABEL_VALUES_LIMIT)
                .map(|(value, nodes)| serde_json::json!({"value": value, "nodes": nodes}))
                .collect();
            serde_json::json!({"name": name, "scope": "node", "values": values, "truncated": truncated})
        })
        .collect();
    for (name, values) in crate::selector::PROCESS_LABELS.iter().zip(process_values) {
        let truncated = values.len() > LABEL_VALUES_LIMIT;
        let values: Vec<_> = values
            .iter()
            .take(LABEL_VALUES_LIMIT)
            .map(|value| serde_json::json!({ "value": value }))
            .collect();
        labels.push(serde_json::json!({"name": name, "scope": "process", "values": values, "truncated": truncated}));
    }
    Ok(Json(
        serde_json::json!({ "selector": selector.to_string(), "labels": labels }),
    ))
}

fn scope(p: &Params, source_required: bool) -> Result<Scope, AppError> {
    let event = p.event()?;
    let (from, to) = p.time_range(now())?;
    let source = p.one("source").filter(|s| !s.is_empty()).map(str::to_owned);
    if source_required && source.is_none() {
        return Err(AppError::BadRequest(
            "`source` is required: values of different sources are never added (see /api/v1/sources)".into(),
        ));
    }
    Ok(Scope {
        event: event.name(),
        source,
        selector: p.selector()?,
        from,
        to,
    })
}

pub(super) async fn totals(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<serde_json::Value>, AppError> {
    let p = Params::parse(raw.as_deref(), &["event", "selector", "source", "from", "to"])?;
    let scope = scope(&p, false)?;
    let units: HashMap<String, String> = state
        .store
        .sources()
        .await?
        .into_iter()
        .filter(|s| s.event == scope.event)
        .map(|s| (s.source, s.unit))
        .collect();
    let mut by_source: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for t in state.store.node_totals(&scope).await? {
        by_source.entry(t.source).or_default().push(serde_json::json!({
            "node": t.node, "samples": t.samples, "value": t.value,
        }));
    }
    let sources: Vec<_> = by_source
        .into_iter()
        .map(|(source, nodes)| {
            serde_json::json!({
                "source": source,
                "unit": units.get(&source).cloned().unwrap_or_default(),
                "nodes": nodes,
            })
        })
        .collect();
    Ok(Json(serde_json::json!({
        "event": scope.event,
        "selector": scope.selector.to_string(),
        "from": rfc3339(scope.from),
        "to": rfc3339(scope.to),
        "sources": sources,
    })))
}

/// Functions listed per node at most by default and when asked.
const DEFAULT_FUNCTIONS: u32 = 1000;
const MAX_FUNCTIONS: u32 = 100_000;
/// Values per answer at most, counted as (function, node) pairs, each four numbers: the
/// functions listed are cut to fit (at least one), and the answer says so. 1,000 functions over
/// 100,000 nodes were 800 MB of JSON and a 17 GB server; this bound keeps an answer near 10 MB.
const MAX_FUNCTION_CELLS: u64 = 500_000;

pub(super) async fn functions(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<serde_json::Value>, AppError> {
    let p = Params::parse(raw.as_deref(), &["event", "selector", "source", "from", "to", "limit"])?;
    let mut scope = scope(&p, true)?;
    // Whole buckets, as compare reads them: a partial 10-minute bucket at an edge would be read
    // from the per-minute table, where every function of every node is a row per minute (over
    // 100 nodes' unaligned hour that read took 2.7 s, BENCHMARKS.md). The answer's `from` and
    // `to` are the range read.
    (scope.from, scope.to) = crate::storage::plan::whole_buckets(scope.from, scope.to);
    let asked = p.bounded("limit", DEFAULT_FUNCTIONS, MAX_FUNCTIONS)?;
    // The nodes the answer has a column for: those with the event in the range.
    let nodes = state
        .store
        .node_totals(&scope)
        .await?
        .into_iter()
        .map(|t| t.node)
        .collect::<std::collections::HashSet<_>>()
        .len() as u64;
    let limit = functions_allowed(asked, nodes);
    let found = state
        .store
        .node_functions(
            &scope,
            limit,
            crate::storage::queries::Measures::WithSamples,
            crate::storage::NodesRead::Every,
        )
        .await?;
    let functions: Vec<FunctionAnswer> = found
        .functions
        .iter()
        .map(|f| FunctionAnswer {
            function: &f.function.name,
            module: &f.function.module,
            total_value: f.total_value,
            self_samples: &f.self_samples,
            self_values: &f.self_values,
            total_samples: &f.total_samples,
            total_values: &f.total_values,
        })
        .collect();
    Ok(Json(serde_json::json!({
        "event": scope.event,
        "source": scope.source,
        "selector": scope.selector.to_string(),
        "from": rfc3339(scope.from),
        "to": rfc3339(scope.to),
        "nodes": found.nodes,
        "functions": functions,
        // The functions asked for, those the bound on (function, node) pairs per answer
        // allowed, and whether it cut them.
        "limit": {"asked": asked, "applied": limit, "max_pairs": MAX_FUNCTION_CELLS},
        "truncated": limit < asked,
    })))
}

/// The functions an answer over `nodes` nodes lists when `asked` for: as many as fit in
/// [`MAX_FUNCTION_CELLS`], at least one.
fn functions_allowed(asked: u32, nodes: u64) -> u32 {
    let fit = (MAX_FUNCTION_CELLS / nodes.max(1)).max(1);
    asked.min(u32::try_from(fit).unwrap_or(u32::MAX))
}

/// One function of `/api/v1/functions`: its values per node, aligned with the answer's `nodes`.
#[derive(serde::Serialize)]
struct FunctionAnswer<'a> {
    function: &'a str,
    module: &'a str,
    total_value: u64,
    self_samples: &'a [u64],
    self_values: &'a [u64],
    total_samples: &'a [u64],
    total_values: &'a [u64],
}

pub(super) async fn sources(State(state): State<AppState>) -> Result<Json<serde_json::Value>, AppError> {
    Ok(Json(serde_json::json!({ "sources": state.store.sources().await? })))
}

/// The node facts the UI and fleet comparisons need, as JSON.
fn facts_json(f: &bimodal_proto::v1::NodeFacts) -> serde_json::Value {
    let sources: serde_json::Map<String, serde_json::Value> = f
        .event_sources
        .iter()
        .map(|s| {
            let event = EventKind::try_from(s.event).unwrap_or_default().name().to_owned();
            let value = serde_json::json!({
                "source": s.source,
                "encoding": s.encoding,
                "attach": s.attach,
                "data_address": s.data_address,
                "rejected": s.rejected,
                "unwinding": s.unwinding,
                "unwinding_reduced": s.unwinding_reduced,
            });
            (event, value)
        })
        .collect();
    serde_json::json!({
        "kernel_release": f.kernel_release,
        "cpu": {"vendor": f.cpu_vendor, "model_name": f.cpu_model_name, "family": f.cpu_family, "model": f.cpu_model},
        "online_cpus": f.online_cpus.len(),
        "sockets": f.sockets,
        "cores": f.cores,
        "threads_per_core": f.threads_per_core,
        "numa_nodes": f.numa_nodes.iter().map(|n| serde_json::json!({
            "id": n.id, "cpus": n.cpus, "memory_bytes": n.memory_bytes, "distances": n.distances,
        })).collect::<Vec<_>>(),
        "l3_domains": f.l3_domains.iter().map(|d| d.cpus.clone()).collect::<Vec<_>>(),
        "nics": f.nics.iter().map(|n| serde_json::json!({"name": n.name, "numa_node": n.numa_node})).collect::<Vec<_>>(),
        "numa_balancing": f.numa_balancing,
        "transparent_hugepages": f.transparent_hugepages,
        "hardware_pmu": f.hardware_pmu,
        "event_sources": sources,
        // The weakest unwinding of the node's event kinds (also its `unwinding` label), and those
        // whose unwinding is less than its agent was asked for, with why.
        "unwinding": f.weakest_unwinding().map(|m| m.name()),
        "unwinding_reduced": f
            .event_sources
            .iter()
            .filter(|s| !s.unwinding_reduced.is_empty())
            .map(|s| (EventKind::try_from(s.event).unwrap_or_default().name().to_owned(), serde_json::json!(s.unwinding_reduced)))
            .collect::<serde_json::Map<String, serde_json::Value>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_are_cut_to_the_pairs_an_answer_holds() {
        assert_eq!(functions_allowed(1000, 100), 1000);
        assert_eq!(functions_allowed(1000, 1000), 500);
        assert_eq!(functions_allowed(1000, 100_000), 5);
        // Past the bound with one function: one is still listed.
        assert_eq!(functions_allowed(1000, 2_000_000), 1);
        assert_eq!(functions_allowed(7, 0), 7);
    }
}
