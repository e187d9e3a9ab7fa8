//! What the fleet looks like: `GET /api/v1/nodes?selector=&from=&to=` (nodes with labels and
//! facts), `GET /api/v1/totals?event=&selector=&source=&from=&to=` (per node and source),
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

pub(super) async fn nodes(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<serde_json::Value>, AppError> {
    let p = Params::parse(raw.as_deref(), &["selector", "from", "to"])?;
    let selector = p.selector()?;
    let (from, to) = nodes_range(&p)?;
    let nodes: Vec<_> = state
        .store
        .nodes(&selector, from, to)
        .await?
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
    Ok(Json(
        serde_json::json!({ "selector": selector.to_string(), "nodes": nodes }),
    ))
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
    let (nodes, process_values) = tokio::try_join!(
        state.store.nodes(&selector, from, to),
        state.store.process_label_values(from, LABEL_VALUES_LIMIT as u32 + 1),
    )?;
    let mut node_values: BTreeMap<&str, BTreeMap<&str, u32>> = BTreeMap::new();
    for n in &nodes {
        *node_values
            .entry("node")
            .or_default()
            .entry(n.node.as_str())
            .or_default() += 1;
        for (name, value) in &n.labels {
            *node_values.entry(name).or_default().entry(value).or_default() += 1;
        }
    }
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
    let limit = p.bounded("limit", DEFAULT_FUNCTIONS, MAX_FUNCTIONS)?;
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
    })))
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
