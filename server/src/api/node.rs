//! What one node's memory system looks like over time:
//! `GET /api/v1/placement?node=&from=&to=` (newest placement per process, and the memory held
//! on nodes its threads do not run on) and `GET /api/v1/counters?node=&name=…&from=&to=`.

use std::collections::BTreeMap;

use axum::extract::{RawQuery, State};
use axum::Json;

use super::params::Params;
use super::{AppError, AppState};
use crate::clock::{now_secs as now, rfc3339};

pub(super) async fn placement(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<serde_json::Value>, AppError> {
    let p = Params::parse(raw.as_deref(), &["node", "from", "to"])?;
    let node = p.required("node")?;
    let (from, to) = p.time_range(now())?;
    let processes = state.store.placements(node, from, to).await?;
    let findings: Vec<_> = processes.iter().flat_map(|p| p.remote_memory()).collect();
    Ok(Json(serde_json::json!({
        "node": node,
        "from": rfc3339(from),
        "to": rfc3339(to),
        "processes": processes,
        "findings": findings,
    })))
}

pub(super) async fn counters(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<serde_json::Value>, AppError> {
    let p = Params::parse(raw.as_deref(), &["node", "name", "from", "to"])?;
    let node = p.required("node")?;
    let (from, to) = p.time_range(now())?;
    let mut series: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for (time, name, value) in state.store.counters(node, &p.all("name"), from, to).await? {
        series
            .entry(name)
            .or_default()
            .push(serde_json::json!({"time": rfc3339(time), "value": value}));
    }
    Ok(Json(serde_json::json!({
        "node": node,
        "from": rfc3339(from),
        "to": rfc3339(to),
        "counters": series,
    })))
}
