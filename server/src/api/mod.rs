//! The HTTP API (`/api/v1`, `/healthz`) and the web UI, as one axum router.

mod error;
mod flamegraph;
mod node;
mod params;
mod web;

use std::sync::Arc;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use bimodal_proto::v1::EventKind;

pub use error::AppError;

use crate::storage::Store;

/// What every handler can reach.
#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Arc<Store>,
    /// Names frames that were stored without (uploads may have come since).
    pub symbolizer: Arc<crate::debuginfo::Symbolizer>,
}

/// The router, kept apart from `main` so tests can drive it without a socket.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/api/v1/events", get(events))
        .route("/api/v1/nodes", get(nodes))
        .route("/api/v1/flamegraph", get(flamegraph::flamegraph))
        .route("/api/v1/placement", get(node::placement))
        .route("/api/v1/counters", get(node::counters))
        .fallback(web::asset)
        .with_state(state)
}

async fn healthz(State(state): State<AppState>) -> Result<&'static str, AppError> {
    state.store.ping().await?;
    Ok("ok\n")
}

async fn events() -> Json<serde_json::Value> {
    let events: Vec<_> = EventKind::ALL
        .iter()
        .map(|e| serde_json::json!({"name": e.name(), "unit": e.unit()}))
        .collect();
    Json(serde_json::json!({ "events": events }))
}

async fn nodes(State(state): State<AppState>) -> Result<Json<serde_json::Value>, AppError> {
    let facts = state.store.node_facts().await?;
    let nodes: Vec<_> = state
        .store
        .nodes()
        .await?
        .into_iter()
        .map(|n| {
            let f = facts.get(&n.node);
            serde_json::json!({
                "node": n.node,
                "labels": n.labels,
                "last_seen": params::rfc3339(n.last_seen),
                "facts": f.map(facts_json),
            })
        })
        .collect();
    Ok(Json(serde_json::json!({ "nodes": nodes })))
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
    })
}
