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

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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

/// Who is asking, as the API's admission keyed them (`token:NAME`, or `address:IP` without
/// tokens): put on each admitted request for the handlers that share something between readers.
#[derive(Debug, Clone)]
pub struct Reader(pub Arc<str>);

/// A bound on the stacks of flame graphs (and diffs) built at once: each costs memory for its
/// rows, its tree and its answer while it is built (about 600 bytes a stack, measured with
/// one-frame stacks), so readers asking at once for the largest graphs could take the server's
/// memory without it. A request holds as many stacks as it may return; one that finds the budget
/// spent waits its turn for up to [`StackBudget::WAIT`], then is answered 503 with Retry-After.
///
/// Turns are shared between readers: a reader's requests first wait among themselves until the
/// reader holds less than [`StackBudget::share`] (half the budget), and only then join the queue
/// for the budget. A reader sending the largest requests in a loop so has at most one waiting
/// there, and another reader (the UI) waits for at most one build of each, not for all of theirs.
#[derive(Debug)]
pub struct StackBudget {
    stacks: Arc<Semaphore>,
    total: u32,
    /// The share of each reader that asked lately.
    readers: std::sync::Mutex<crate::rate::Kept<Arc<Semaphore>>>,
}

/// Stacks held for one request, within its reader's share and the budget; released on drop.
#[derive(Debug)]
pub struct Building {
    _stacks: OwnedSemaphorePermit,
    _share: OwnedSemaphorePermit,
}

/// Readers remembered before those holding nothing are forgotten.
const READERS_KEPT: usize = 1024;

impl StackBudget {
    /// How long a request waits for its stacks.
    pub const WAIT: std::time::Duration = std::time::Duration::from_secs(30);
    /// The default budget: one graph of the largest size, or ten of the default size, at once.
    pub const DEFAULT_STACKS: u32 = 1_000_000;

    pub fn new(total: u32) -> StackBudget {
        let total = total.max(1);
        StackBudget {
            stacks: Arc::new(Semaphore::new(total as usize)),
            total,
            readers: std::sync::Mutex::new(crate::rate::Kept::new(READERS_KEPT)),
        }
    }

    /// The stacks one reader may have in its requests under way at once (a request larger than
    /// that still runs, alone among the reader's).
    pub fn share(&self) -> u32 {
        self.total.div_ceil(2)
    }

    fn reader(&self, reader: &Reader) -> Arc<Semaphore> {
        let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        // Only this map holds the semaphore of a reader with nothing under way.
        readers
            .get(
                &reader.0,
                |s| Arc::strong_count(s) > 1,
                || Arc::new(Semaphore::new(self.share() as usize)),
            )
            .clone()
    }

    /// Holds `stacks` of the budget (all of it, for a request asking more than there is) for
    /// `reader` until the answer is dropped.
    pub async fn hold(&self, reader: &Reader, stacks: u32) -> Result<Building, AppError> {
        let wanted = stacks.clamp(1, self.total);
        let share = self.reader(reader);
        // Whether the request got past its reader's own requests (to say why it waited).
        let mut own_turn = false;
        let held = tokio::time::timeout(Self::WAIT, async {
            let share = share.acquire_many_owned(wanted.min(self.share())).await?;
            own_turn = true;
            let stacks = self.stacks.clone().acquire_many_owned(wanted).await?;
            Ok::<_, tokio::sync::AcquireError>(Building {
                _stacks: stacks,
                _share: share,
            })
        })
        .await;
        match held {
            Ok(Ok(building)) => Ok(building),
            Ok(Err(_)) => Err(AppError::Internal("the stack budget is closed".into())),
            Err(_) => {
                crate::metrics::metrics()
                    .api_refused
                    .get_or_create(&crate::metrics::label("reason", "busy"))
                    .inc();
                let why = if own_turn {
                    format!(
                        "the server builds flame graphs of {} stacks at once and is waiting for them; retry later",
                        self.total
                    )
                } else {
                    format!(
                        "your own requests hold half of the {} stacks built at once (`{}`) and are waiting for them; retry later",
                        self.total, reader.0
                    )
                };
                Err(AppError::Busy(why, 5))
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
    let reader: Arc<str> = match state.auth.allow(header, crate::auth::Scope::Read, None) {
        Ok(Some(token)) => format!("token:{token}").into(),
        Ok(None) => request.extensions().get::<crate::serve::Peer>().map_or_else(
            || "address:unknown".into(),
            |p| crate::rate::address_key(p.addr.ip()).into(),
        ),
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
    let mut request = request;
    request.extensions_mut().insert(Reader(reader));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader asking for the largest graphs in a loop holds one turn in the budget's queue at
    /// a time: another reader is served after its build under way, not after all it asked.
    #[tokio::test]
    async fn a_reader_asking_in_a_loop_does_not_keep_the_others_waiting() {
        let budget = Arc::new(StackBudget::new(100));
        let (greedy, ui) = (Reader("token:greedy".into()), Reader("token:ui".into()));
        let first = budget.hold(&greedy, 100).await.unwrap();
        let (order, got) = tokio::sync::mpsc::unbounded_channel();
        let mut waiting = Vec::new();
        for i in 0..4 {
            let (budget, greedy, order) = (budget.clone(), greedy.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                let held = budget.hold(&greedy, 100).await.unwrap();
                order.send(format!("greedy {i}")).unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                drop(held);
            }));
            tokio::task::yield_now().await;
        }
        let asked = {
            let (budget, ui, order) = (budget.clone(), ui.clone(), order.clone());
            tokio::spawn(async move {
                let _held = budget.hold(&ui, 10).await.unwrap();
                order.send("ui".to_owned()).unwrap();
            })
        };
        tokio::task::yield_now().await;
        drop(first);
        asked.await.unwrap();
        for w in waiting {
            w.await.unwrap();
        }
        drop(order);
        let mut got = got;
        let mut seen = Vec::new();
        while let Some(who) = got.recv().await {
            seen.push(who);
        }
        assert_eq!(seen.first().map(String::as_str), Some("ui"), "order: {seen:?}");
        assert_eq!(seen.len(), 5);
    }
}
