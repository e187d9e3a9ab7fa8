//! Alert history in ClickHouse (`alerts`, migration 011): one row per change of an alert's
//! state. The latest row of an alert (by `sequence`) is its state; the evaluating server restores
//! the active ones when it takes over, and the API lists them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{StorageError, Store};
use crate::clock::now_millis;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Pending,
    Firing,
    Resolved,
    /// Pending, then its condition stopped before `for:` was over.
    Inactive,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Firing => "firing",
            State::Resolved => "resolved",
            State::Inactive => "inactive",
        }
    }

    pub fn from_name(name: &str) -> Option<State> {
        [State::Pending, State::Firing, State::Resolved, State::Inactive]
            .into_iter()
            .find(|s| s.name() == name)
    }
}

/// One alert: a rule's condition holding for one set of labels (a node and source, or a band).
#[derive(Clone, Debug, PartialEq)]
pub struct Alert {
    pub rule: String,
    /// A hash of the labels: the alert's identity, as in Alertmanager.
    pub fingerprint: u64,
    pub state: State,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The figure judged at the last evaluation while active.
    pub value: f64,
    /// Unix seconds: when the condition started holding (the alert's start).
    pub active_since: u32,
    /// When it started firing; 0 before.
    pub fired_at: u32,
    /// When it resolved (or went inactive); 0 while active.
    pub resolved_at: u32,
    /// The nodes it is about, as a selector (a node, or the rule's selector for bands).
    pub selector: String,
    /// The window judged last: what the compare view of the alert shows.
    pub from: u32,
    pub to: u32,
    /// The function that differs most on the alert's nodes, once it fires (empty if none).
    pub top_function: String,
    /// For bands: the node-wide shifts they differ by, in words ("remote_access ×5.0 on every
    /// stack"), once it fires; empty if none.
    pub node_wide: String,
}

impl Alert {
    pub fn is_active(&self) -> bool {
        matches!(self.state, State::Pending | State::Firing)
    }
}

#[derive(clickhouse::Row, serde::Serialize)]
struct WriteRow<'a> {
    rule: &'a str,
    fingerprint: u64,
    state: &'a str,
    label_keys: Vec<&'a str>,
    label_values: Vec<&'a str>,
    annotation_keys: Vec<&'a str>,
    annotation_values: Vec<&'a str>,
    value: f64,
    active_since: u32,
    fired_at: u32,
    resolved_at: u32,
    selector: &'a str,
    window_from: u32,
    window_to: u32,
    top_function: &'a str,
    node_wide: &'a str,
    written: u32,
    sequence: u64,
}

/// The latest row of one alert (columns named apart from the table's: ClickHouse refuses an
/// alias that shadows a column inside an aggregate).
#[derive(clickhouse::Row, serde::Deserialize)]
struct ReadRow {
    fingerprint: u64,
    first_since: u32,
    last_rule: String,
    last_state: String,
    last_label_keys: Vec<String>,
    last_label_values: Vec<String>,
    last_annotation_keys: Vec<String>,
    last_annotation_values: Vec<String>,
    last_value: f64,
    last_fired_at: u32,
    last_resolved_at: u32,
    last_selector: String,
    last_window_from: u32,
    last_window_to: u32,
    last_top_function: String,
    last_node_wide: String,
    #[allow(dead_code)] // read so that the columns line up; the rows come ordered by it
    last_sequence: u64,
}

/// Per (fingerprint, start): the latest row's columns.
const LATEST: &str = "SELECT fingerprint, toUInt32(active_since) AS first_since, \
     argMax(rule, sequence) AS last_rule, argMax(state, sequence) AS last_state, \
     argMax(label_keys, sequence) AS last_label_keys, argMax(label_values, sequence) AS last_label_values, \
     argMax(annotation_keys, sequence) AS last_annotation_keys, \
     argMax(annotation_values, sequence) AS last_annotation_values, argMax(value, sequence) AS last_value, \
     toUInt32(argMax(fired_at, sequence)) AS last_fired_at, toUInt32(argMax(resolved_at, sequence)) AS last_resolved_at, \
     argMax(selector, sequence) AS last_selector, toUInt32(argMax(window_from, sequence)) AS last_window_from, \
     toUInt32(argMax(window_to, sequence)) AS last_window_to, argMax(top_function, sequence) AS last_top_function, \
     argMax(node_wide, sequence) AS last_node_wide, max(sequence) AS last_sequence \
     FROM alerts";

/// Row order across servers and restarts: milliseconds of the wall clock, then a counter.
fn next_sequence() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = now_millis() * 1000;
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let next = now.max(last + 1);
        match LAST.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

impl ReadRow {
    fn into_alert(self) -> Option<Alert> {
        Some(Alert {
            rule: self.last_rule,
            fingerprint: self.fingerprint,
            state: State::from_name(&self.last_state)?,
            labels: self.last_label_keys.into_iter().zip(self.last_label_values).collect(),
            annotations: self
                .last_annotation_keys
                .into_iter()
                .zip(self.last_annotation_values)
                .collect::<BTreeMap<_, _>>(),
            value: self.last_value,
            active_since: self.first_since,
            fired_at: self.last_fired_at,
            resolved_at: self.last_resolved_at,
            selector: self.last_selector,
            from: self.last_window_from,
            to: self.last_window_to,
            top_function: self.last_top_function,
            node_wide: self.last_node_wide,
        })
    }
}

/// Restores alerts ended since `?` (and those active).
fn restore_sql() -> String {
    format!(
        "{LATEST} GROUP BY fingerprint, active_since \
         HAVING last_state IN ('pending', 'firing') OR last_resolved_at >= ? \
         ORDER BY last_sequence"
    )
}

/// Alerts active in [?, ?) (bound as to, from), at most `?`.
fn between_sql() -> String {
    format!(
        "{LATEST} WHERE active_since < toDateTime(?) GROUP BY fingerprint, active_since \
         HAVING last_state != 'inactive' AND (last_resolved_at = 0 OR last_resolved_at >= ?) \
         ORDER BY first_since DESC, fingerprint LIMIT ?"
    )
}

/// The reads with example values (for `bimodal-server sql`, checked in chdb).
pub(super) fn examples(client: &clickhouse::Client) -> Vec<String> {
    [
        client.query(&restore_sql()).bind(1_795_000_000u32),
        client
            .query(&between_sql())
            .bind(1_795_003_600u32)
            .bind(1_795_000_000u32)
            .bind(500u32),
    ]
    .iter()
    .map(|q| q.sql_display().to_string())
    .collect()
}

impl Store {
    /// Stores the new states of `alerts`, in one insert.
    pub async fn store_alerts(&self, alerts: &[Alert]) -> Result<(), StorageError> {
        if alerts.is_empty() {
            return Ok(());
        }
        let err = StorageError::insert("alerts");
        let client = self.writer_client();
        let mut insert = client.insert::<WriteRow<'_>>("alerts").await.map_err(err)?;
        let written = crate::clock::now_secs();
        for a in alerts {
            let row = WriteRow {
                rule: &a.rule,
                fingerprint: a.fingerprint,
                state: a.state.name(),
                label_keys: a.labels.keys().map(String::as_str).collect(),
                label_values: a.labels.values().map(String::as_str).collect(),
                annotation_keys: a.annotations.keys().map(String::as_str).collect(),
                annotation_values: a.annotations.values().map(String::as_str).collect(),
                value: a.value,
                active_since: a.active_since,
                fired_at: a.fired_at,
                resolved_at: a.resolved_at,
                selector: &a.selector,
                window_from: a.from,
                window_to: a.to,
                top_function: &a.top_function,
                node_wide: &a.node_wide,
                written,
                sequence: next_sequence(),
            };
            insert.write(&row).await.map_err(err)?;
        }
        insert.end().await.map_err(err)
    }

    /// Alerts pending or firing as last stored, and those that ended since `ended_since` (still
    /// sent to Alertmanager as resolved for a while): what an evaluating server continues from.
    pub async fn restore_alerts(&self, ended_since: u32) -> Result<Vec<Alert>, StorageError> {
        let rows = self
            .client
            .query(&restore_sql())
            .bind(ended_since)
            .fetch_all::<ReadRow>()
            .await
            .map_err(StorageError::query("read active alerts"))?;
        Ok(rows.into_iter().filter_map(ReadRow::into_alert).collect())
    }

    /// Alerts active at some time in [from, to) (pending alerts that never fired left out once
    /// they ended), newest first, at most `limit`.
    pub async fn alerts_between(&self, from: u32, to: u32, limit: u32) -> Result<Vec<Alert>, StorageError> {
        let rows = self
            .client
            .query(&between_sql())
            .bind(to)
            .bind(from)
            .bind(limit)
            .fetch_all::<ReadRow>()
            .await
            .map_err(StorageError::query("list alerts"))?;
        Ok(rows.into_iter().filter_map(ReadRow::into_alert).collect())
    }
}
