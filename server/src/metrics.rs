//! The server's own figures, served on `GET /metrics` for Prometheus: ingest (batches by
//! outcome, samples, rejections by reason), API latency per route, ClickHouse errors, rule
//! evaluations and alert deliveries, refused requests and connections, and the process's CPU and
//! memory. One registry per process: servers started in one process (tests) add up.

use std::sync::LazyLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// One label.
pub type Label = [(&'static str, String); 1];
/// Two labels.
pub type Labels2 = [(&'static str, String); 2];

pub fn label(name: &'static str, value: impl Into<String>) -> Label {
    [(name, value.into())]
}

type Latency = Family<Label, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 1 ms to about 65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Batches acknowledged, by `outcome` (stored, duplicate, retry, rejected).
    pub ingest_batches: Family<Label, Counter>,
    /// Samples of the batches stored.
    pub ingest_samples: Counter,
    /// Batches and streams refused, by `reason`: for good (invalid_batch, undecodable,
    /// invalid_hello) or until the client retries (rate, too_many_streams, slow: a batch or
    /// Hello that stopped arriving).
    pub ingest_rejected: Family<Label, Counter>,
    /// Debug-info checks and uploads refused, by `reason` (not_elf, build_id_mismatch, ...).
    pub debuginfo_rejected: Family<Label, Counter>,
    /// Agents' checks whose copy of a build id contradicted the executable stored for it.
    pub debuginfo_disputes: Counter,
    /// Agents with an open stream.
    pub agents_connected: Gauge,
    /// HTTP API requests by `route`, in seconds.
    pub http_request_seconds: Latency,
    /// ClickHouse statements that failed, by `operation`.
    pub clickhouse_errors: Family<Label, Counter>,
    /// Rule evaluations by `rule` and `result` (ok, failed).
    pub rule_evaluations: Family<Labels2, Counter>,
    /// Time to evaluate every rule once, in seconds.
    pub rule_evaluation_seconds: Histogram,
    /// Alerts by `state` (pending, firing) as of the last evaluation.
    pub alerts: Family<Label, Gauge>,
    /// Alert deliveries by `receiver` (alertmanager, webhook) and `result` (sent, failed).
    pub alert_notifications: Family<Labels2, Counter>,
    /// Requests refused for their token, by `reason` (missing, unknown, scope, node).
    pub auth_refused: Family<Label, Counter>,
    /// Connections closed before any request was served, by `reason`: tls_handshake (failed),
    /// tls_timeout (not done in 10 s), silent (no first bytes in 10 s), slow_headers (an
    /// HTTP/1.1 request head not complete in 10 s).
    pub connections_refused: Family<Label, Counter>,
    /// API requests refused before they ran, by `reason`: rate (the reader is beyond
    /// `--api-request-rate`), busy (waited 30 s for `--max-building-stacks`).
    pub api_refused: Family<Label, Counter>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::default();
    let m = Metrics {
        ingest_batches: Family::default(),
        ingest_samples: Counter::default(),
        ingest_rejected: Family::default(),
        debuginfo_rejected: Family::default(),
        debuginfo_disputes: Counter::default(),
        agents_connected: Gauge::default(),
        http_request_seconds: Family::new_with_constructor(latency_histogram),
        clickhouse_errors: Family::default(),
        rule_evaluations: Family::default(),
        rule_evaluation_seconds: latency_histogram(),
        alerts: Family::default(),
        alert_notifications: Family::default(),
        auth_refused: Family::default(),
        connections_refused: Family::default(),
        api_refused: Family::default(),
        registry: Registry::default(),
    };
    registry.register(
        "bimodal_ingest_batches",
        "Batches acknowledged to agents, by outcome",
        m.ingest_batches.clone(),
    );
    registry.register(
        "bimodal_ingest_samples",
        "Samples of the batches stored",
        m.ingest_samples.clone(),
    );
    registry.register(
        "bimodal_ingest_rejected_batches",
        "Batches and streams refused, by reason: for good invalid_batch, undecodable, invalid_hello; to be sent again rate, stream_rate, too_many_streams, slow, in_flight (before decoding), write_buffer, storage, claimed, stopping (after)",
        m.ingest_rejected.clone(),
    );
    registry.register(
        "bimodal_debuginfo_rejected_uploads",
        "Debug-info checks and uploads refused, by reason",
        m.debuginfo_rejected.clone(),
    );
    registry.register(
        "bimodal_debuginfo_disputes",
        "Agents' checks whose copy of a build id contradicted the executable stored for it (its names are withheld)",
        m.debuginfo_disputes.clone(),
    );
    registry.register(
        "bimodal_agents_connected",
        "Agents with an open ingest stream",
        m.agents_connected.clone(),
    );
    registry.register(
        "bimodal_http_request_duration_seconds",
        "HTTP API and UI requests by route",
        m.http_request_seconds.clone(),
    );
    registry.register(
        "bimodal_clickhouse_errors",
        "ClickHouse statements that failed, by operation",
        m.clickhouse_errors.clone(),
    );
    registry.register(
        "bimodal_rule_evaluations",
        "Alert rule evaluations by rule and result",
        m.rule_evaluations.clone(),
    );
    registry.register(
        "bimodal_rule_evaluation_duration_seconds",
        "Time to evaluate every alert rule once",
        m.rule_evaluation_seconds.clone(),
    );
    registry.register(
        "bimodal_alerts",
        "Alerts by state at the last evaluation",
        m.alerts.clone(),
    );
    registry.register(
        "bimodal_alert_notifications",
        "Alert deliveries by receiver and result",
        m.alert_notifications.clone(),
    );
    registry.register(
        "bimodal_auth_refused",
        "Requests refused for their token, by reason",
        m.auth_refused.clone(),
    );
    registry.register(
        "bimodal_connections_refused",
        "Connections closed before any request was served, by reason",
        m.connections_refused.clone(),
    );
    registry.register(
        "bimodal_api_refused_requests",
        "API requests refused before they ran, by reason",
        m.api_refused.clone(),
    );
    registry.register_collector(Box::new(bimodal_proto::self_metrics::ProcessCollector));
    Metrics { registry, ..m }
});

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

/// Every metric in the OpenMetrics text format.
pub fn text() -> String {
    bimodal_proto::self_metrics::encode(&METRICS.registry)
}
