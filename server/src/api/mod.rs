//! The HTTP API (`/api/v1`, `/healthz`, `/metrics`) and the web UI, as one axum router.

mod alerts;
mod compare;
mod diff;
mod error;
mod flamegraph;
mod fleet;
mod node;
pub(crate) mod params;
mod web;

use std::sync::Arc;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use bimodal_proto::v1::EventKind;

pub use error::AppError;

use crate::debuginfo::Names;
use crate::storage::Store;

/// What every handler can reach.
#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Arc<Store>,
    /// Names frames of images with a build id from the shared symbol tables.
    pub names: Arc<Names>,
    /// One-band fleets drawn for band detection, kept per fleet size.
    pub bands_null: Arc<std::sync::Mutex<crate::analysis::bands::NullCache>>,
    /// Whether this server was given alert rules (without them `/api/v1/alerts` is 404).
    pub alerting: bool,
    /// Who may read: the API and `/metrics` need a token with the `read` scope when the server
    /// has tokens (`/healthz` and the UI's files do not).
    pub auth: crate::auth::Auth,
    /// How fast each reader may ask: keyed by token name, or by client address without tokens.
    pub requests: Arc<crate::rate::Buckets>,
    /// Stacks of flame graphs being built at once.
    pub building: Arc<StackBudget>,
}

/// A bound on the stacks of flame graphs (and diffs) built at once: each costs memory for its
/// rows, its tree and its answer while it is built (about 600 bytes a stack, measured with
/// one-frame stacks), so readers asking at once for the largest graphs could take the server's
/// memory without it. A request holds as many stacks as it may return; one that finds the budget
/// spent waits its turn for up to [`StackBudget::WAIT`], then is answered 503 with Retry-After.
#[derive(Debug)]
pub struct StackBudget {
    stacks: Arc<tokio::sync::Semaphore>,
    total: u32,
}

impl StackBudget {
    /// How long a request waits for its stacks.
    pub const WAIT: std::time::Duration = std::time::Duration::from_secs(30);
    /// The default budget: one graph of the largest size, or ten of the default size, at once.
    pub const DEFAULT_STACKS: u32 = 1_000_000;

    pub fn new(total: u32) -> StackBudget {
        let total = total.max(1);
        StackBudget {
            stacks: Arc::new(tokio::sync::Semaphore::new(total as usize)),
            total,
        }
    }

    /// Holds `stacks` of the budget (all of it, for a request asking more than there is) until
    /// the permit is dropped.
    pub async fn hold(&self, stacks: u32) -> Result<tokio::sync::OwnedSemaphorePermit, AppError> {
        let wanted = stacks.clamp(1, self.total);
        match tokio::time::timeout(Self::WAIT, self.stacks.clone().acquire_many_owned(wanted)).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(AppError::Internal("the stack budget is closed".into())),
            Err(_) => {
                crate::metrics::metrics()
                    .api_refused
                    .get_or_create(&crate::metrics::label("reason", "busy"))
                    .inc();
                Err(AppError::Busy(
                    format!(
                        "the server builds flame graphs of {} stacks at once and is waiting for them; retry later",
                        self.total
                    ),
                    5,
                ))
            }
        }
    }
}

/// The router, kept apart from `main` so tests can drive it without a socket.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/api/v1/events", get(events))
        .route("/api/v1/sources", get(fleet::sources))
        .route("/api/v1/nodes", get(fleet::nodes))
        .route("/api/v1/labels", get(fleet::labels))
        .route("/api/v1/totals", get(fleet::totals))
        .route("/api/v1/functions", get(fleet::functions))
        .route("/api/v1/alerts", get(alerts::alerts))
        .route("/api/v1/compare", get(compare::compare))
        .route("/api/v1/diff", get(diff::diff))
        .route("/api/v1/flamegraph", get(flamegraph::flamegraph))
        .route("/api/v1/placement", get(node::placement))
        .route("/api/v1/counters", get(node::counters))
        .route("/metrics", get(metrics))
        // Latency per route (after routing: the route's pattern, not the path, is the label).
        .route_layer(axum::middleware::from_fn(timed))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), admitted))
        .fallback(web::asset)
        .with_state(state)
}

async fn healthz(State(state): State<AppState>) -> Result<&'static str, AppError> {
    state.store.ping().await?;
    Ok("ok\n")
}

/// Admits API and metrics requests from readers: with tokens, one that may read (401 without a
/// known token, 403 for a token without the `read` scope); then within the reader's rate (429
/// with Retry-After beyond it). `/healthz` stays open for probes.
async fn admitted(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if request.uri().path() == "/healthz" {
        return next.run(request).await;
    }
    let header = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let reader = match state.auth.allow(header, crate::auth::Scope::Read, None) {
        Ok(Some(token)) => format!("token:{token}"),
        Ok(None) => request
            .extensions()
            .get::<crate::serve::Peer>()
            .map_or_else(|| "address:unknown".to_owned(), |p| format!("address:{}", p.addr.ip())),
        Err(refused) => {
            crate::auth::count_refusal(&refused);
            let status = match refused {
                crate::auth::Refused::Missing(_) | crate::auth::Refused::Unknown => {
                    axum::http::StatusCode::UNAUTHORIZED
                }
                _ => axum::http::StatusCode::FORBIDDEN,
            };
            return (
                status,
                [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
                Json(serde_json::json!({ "error": refused.to_string() })),
            )
                .into_response();
        }
    };
    if let Err(wait) = state.requests.take(&reader, std::time::Instant::now()) {
        crate::metrics::metrics()
            .api_refused
            .get_or_create(&crate::metrics::label("reason", "rate"))
            .inc();
        let rate = state.requests.rate();
        // Retry-After is in whole seconds: round up, so a client that waits it is let in.
        let seconds = wait.as_secs().saturating_add(u64::from(wait.subsec_nanos() > 0));
        return (
            axum::http::StatusCode::TOO_MANY_REQUESTS,
            [(axum::http::header::RETRY_AFTER, seconds.to_string())],
            Json(serde_json::json!({
                "error": format!(
                    "more than {} requests a second ({} at once) from {reader}; retry in {} ms",
                    rate.per_second,
                    rate.burst,
                    wait.as_millis()
                )
            })),
        )
            .into_response();
    }
    next.run(request).await
}

async fn timed(request: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("other", |p| p.as_str())
        .to_owned();
    let start = std::time::Instant::now();
    let response = next.run(request).await;
    crate::metrics::metrics()
        .http_request_seconds
        .get_or_create(&crate::metrics::label("route", route))
        .observe(start.elapsed().as_secs_f64());
    response
}

/// The server's own metrics, for Prometheus.
async fn metrics() -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            bimodal_proto::self_metrics::CONTENT_TYPE,
        )],
        crate::metrics::text(),
    )
}

async fn events() -> Json<serde_json::Value> {
    let events: Vec<_> = EventKind::ALL
        .iter()
        .map(|e| serde_json::json!({"name": e.name(), "unit": e.unit()}))
        .collect();
    Json(serde_json::json!({ "events": events }))
}
