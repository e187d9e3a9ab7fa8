//! The HTTP API (`/api/v1`, `/healthz`) and the web UI, as one axum router.

mod error;
mod flamegraph;
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
}

/// The router, kept apart from `main` so tests can drive it without a socket.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/api/v1/events", get(events))
        .route("/api/v1/nodes", get(nodes))
        .route("/api/v1/flamegraph", get(flamegraph::flamegraph))
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
    let nodes: Vec<_> = state
        .store
        .nodes()
        .await?
        .into_iter()
        .map(|n| {
            serde_json::json!({
                "node": n.node,
                "labels": n.labels,
                "last_seen": flamegraph::rfc3339(n.last_seen),
            })
        })
        .collect();
    Ok(Json(serde_json::json!({ "nodes": nodes })))
}
