//! `GET /api/v1/alerts?from=&to=&limit=`: alerts pending, firing or resolved at some time in the
//! range, newest first, each with its state, labels, annotations, the nodes it is about (as a
//! selector) and the window it judged, for the web UI's alerts page and for scripts. A server
//! started without `--rules` answers 404.

use axum::extract::{RawQuery, State};
use axum::Json;
use serde_json::{json, Value};

use super::params::Params;
use super::{AppError, AppState};
use crate::clock::{now_secs as now, rfc3339};

const DEFAULT_LIMIT: u32 = 500;
const MAX_LIMIT: u32 = 10_000;

pub(super) async fn alerts(State(state): State<AppState>, RawQuery(raw): RawQuery) -> Result<Json<Value>, AppError> {
    if !state.alerting {
        return Err(AppError::NotFound(
            "this server evaluates no alert rules (start it with --rules FILE)".into(),
        ));
    }
    let p = Params::parse(raw.as_deref(), &["from", "to", "limit"])?;
    let (from, to) = p.time_range(now())?;
    let limit = p.bounded("limit", DEFAULT_LIMIT, MAX_LIMIT)?;
    let alerts: Vec<Value> = state
        .store
        .alerts_between(from, to, limit)
        .await?
        .into_iter()
        .map(|a| {
            json!({
                "rule": a.rule,
                "state": a.state,
                "fingerprint": format!("{:016x}", a.fingerprint),
                "labels": a.labels,
                "annotations": a.annotations,
                "starts_at": rfc3339(a.active_since),
                "fired_at": (a.fired_at > 0).then(|| rfc3339(a.fired_at)),
                "ends_at": (a.resolved_at > 0).then(|| rfc3339(a.resolved_at)),
                "value": a.value,
                "selector": a.selector,
                "from": rfc3339(a.from),
                "to": rfc3339(a.to),
                "top_function": (!a.top_function.is_empty()).then_some(a.top_function),
                "node_wide": (!a.node_wide.is_empty()).then_some(a.node_wide),
            })
        })
        .collect();
    Ok(Json(
        json!({ "from": rfc3339(from), "to": rfc3339(to), "alerts": alerts }),
    ))
}
