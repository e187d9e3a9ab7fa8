//! The evaluation loop: one server at a time (the `alerts` lease in ClickHouse) judges every
//! rule each `evaluation_interval`, stores each alert's changes and sends them. A server that
//! takes the lease (at start, or when the holder stopped renewing it) continues from the stored
//! states, so restarts and fail-overs neither lose a pending alert's time nor fire it anew.
//! Should two servers briefly both evaluate (a holder cut off from ClickHouse longer than the
//! lease), Alertmanager deduplicates their alerts: the same labels are the same alert.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::judge::{self, Found};
use super::notify::{Notifier, RESEND_RESOLVED};
use super::rules::{Condition, Rule, RuleFile};
use super::state::{Alert, State, Tracker};
use crate::analysis::bands::NullCache;
use crate::analysis::compare::{self, Direction};
use crate::analysis::NodeValues;
use crate::clock::now_secs;
use crate::metrics::{label, metrics};
use crate::selector::{MatchOp, Matcher, Selector};
use crate::storage::lease::Lease;
use crate::storage::queries::Measures;
use crate::storage::{NodesRead, Scope, StorageError, Store};
use crate::window::{self, Window};

/// Functions read to find an alert's top function.
const FUNCTIONS_READ: u32 = 50;

/// What the server was told about alerting.
#[derive(Clone, Debug)]
pub struct AlertConfig {
    pub rules: RuleFile,
    /// Alertmanager base URLs (`http://host:9093`).
    pub alertmanagers: Vec<String>,
    /// Webhook receivers, sent Alertmanager's webhook payload.
    pub webhooks: Vec<String>,
    /// The server's URL as users open it: alert links start with it.
    pub external_url: String,
}

/// The evaluation running in the background.
#[derive(Debug)]
pub struct Evaluation {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Evaluation {
    /// Stops evaluating and gives the lease up, so another server takes over at once.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Starts evaluating in the background.
pub fn spawn(store: Arc<Store>, null: Arc<Mutex<NullCache>>, config: AlertConfig) -> Evaluation {
    let (stop, mut stopped) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let interval = config.rules.evaluation_interval;
        // A holder that stops renewing loses the lease after three intervals (at least 10 s: a
        // busy server or ClickHouse may delay a renewal by seconds).
        let period = (interval * 3).max(Duration::from_secs(10));
        let mut notifier = Notifier::new(
            config.alertmanagers.clone(),
            config.webhooks.clone(),
            &config.external_url,
        );
        loop {
            let lease = tokio::select! {
                _ = &mut stopped => return,
                lease = Lease::acquire(store.client().clone(), "alerts", period) => lease,
            };
            let lease = match lease {
                Ok(lease) => lease,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot take the alert evaluation lease; trying again");
                    tokio::time::sleep(interval).await;
                    continue;
                }
            };
            tracing::info!(
                rules = config.rules.rules.len(),
                "this server evaluates the alert rules"
            );
            tokio::select! {
                _ = &mut stopped => {
                    lease.release().await;
                    return;
                }
                led = lead(&store, &null, &config, &mut notifier, &lease) => {
                    if let Err(e) = led {
                        tracing::warn!(error = %e, "alert evaluation stopped; taking the lease again");
                    }
                }
            }
            lease.release().await;
            tokio::time::sleep(interval).await;
        }
    });
    Evaluation { stop, task }
}

/// Evaluates while this server holds the lease.
async fn lead(
    store: &Store,
    null: &Arc<Mutex<NullCache>>,
    config: &AlertConfig,
    notifier: &mut Notifier,
    lease: &Lease,
) -> Result<(), StorageError> {
    let interval = config.rules.evaluation_interval;
    let resend = RESEND_RESOLVED.as_secs() as u32;
    let mut tracker = Tracker::restore(store.restore_alerts(now_secs().saturating_sub(resend)).await?);
    let names: HashSet<&str> = config.rules.rules.iter().map(|r| r.name.as_str()).collect();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if !lease.still_held().await? {
            tracing::warn!("another server took the alert evaluation lease");
            return Ok(());
        }
        let now = now_secs();
        let started = std::time::Instant::now();
        let mut changed = tracker.retire(&names, now);
        let mut windows = Windows::default();
        let m = metrics();
        for rule in &config.rules.rules {
            let result = evaluate(store, null, rule, &mut tracker, &mut windows, now).await;
            let outcome = if result.is_ok() { "ok" } else { "failed" };
            m.rule_evaluations
                .get_or_create(&[("rule", rule.name.clone()), ("result", outcome.into())])
                .inc();
            match result {
                Ok(c) => changed.extend(c),
                // A rule that cannot be read keeps its alerts as they were.
                Err(e) => tracing::warn!(rule = %rule.name, error = %e, "evaluating an alert rule failed"),
            }
        }
        m.rule_evaluation_seconds.observe(started.elapsed().as_secs_f64());
        for state in [State::Pending, State::Firing] {
            let n = tracker.alerts().filter(|a| a.state == state).count();
            m.alerts.get_or_create(&label("state", state.name())).set(n as i64);
        }
        for c in &changed {
            tracing::info!(
                rule = %c.rule, state = c.state.name(), labels = ?c.labels, value = c.value,
                "alert changed"
            );
        }
        store.store_alerts(&changed).await?;
        let all: Vec<Alert> = tracker.alerts().cloned().collect();
        if let Err(e) = notifier.send(&all, &changed, now, interval).await {
            tracing::warn!(error = %e, "sending alerts failed; they are sent again at the next evaluation");
        }
        tracker.forget_ended(now.saturating_sub(resend));
    }
}

/// Windows read in one evaluation, shared by rules over the same nodes and time.
#[derive(Default)]
struct Windows {
    read: HashMap<(String, u32, u32), Arc<Window>>,
}

impl Windows {
    async fn get(
        &mut self,
        store: &Store,
        selector: &Selector,
        from: u32,
        to: u32,
    ) -> Result<Arc<Window>, StorageError> {
        let key = (selector.to_string(), from, to);
        if let Some(w) = self.read.get(&key) {
            return Ok(w.clone());
        }
        // Windows judged end at the evaluation's time: read as of their end.
        let w = Arc::new(Window::read(store, selector, from, to, to).await?);
        self.read.insert(key, w.clone());
        Ok(w)
    }
}

/// One rule at `now`: the alerts whose state changed.
async fn evaluate(
    store: &Store,
    null: &Arc<Mutex<NullCache>>,
    rule: &Rule,
    tracker: &mut Tracker,
    windows: &mut Windows,
    now: u32,
) -> Result<Vec<Alert>, String> {
    let err = |e: StorageError| e.to_string();
    // Samples are stored per minute: the window is read in whole minutes, the current one
    // included, so it holds the last `window` and up to a minute more.
    let (from, to) = crate::storage::plan::whole_buckets(now.saturating_sub(rule.window.as_secs() as u32), now);
    let current = windows.get(store, &rule.selector, from, to).await.map_err(err)?;
    // `above_baseline`'s window before, also the reference of its alerts' top function.
    let mut baseline_window: Option<Arc<Window>> = None;
    let found: Vec<Found> = match &rule.condition {
        Condition::BandsAppear { metric } => {
            let bands_in = |w: &Window| -> Window {
                let mut w = w.clone();
                // A metric absent from a window has no bands there.
                if w.keep_metric(metric.as_deref()).is_err() {
                    w.metrics.clear();
                }
                w
            };
            let mut now_w = bands_in(&current);
            let (metrics, choice) = window::find_bands(&mut now_w, null.clone()).await?;
            let before = windows
                .get(store, &rule.selector, from.saturating_sub(to - from), from)
                .await
                .map_err(err)?;
            let mut before_w = bands_in(&before);
            let (_, before_choice) = window::find_bands(&mut before_w, null.clone()).await?;
            judge::bands(
                rule,
                &metrics,
                &choice,
                &now_w,
                before_choice.chosen.is_some(),
                tracker.rule_active(&rule.name),
            )
            .into_iter()
            .collect()
        }
        Condition::AboveBaseline { baseline, .. } => {
            let before = windows
                .get(
                    store,
                    &rule.selector,
                    from.saturating_sub(baseline.as_secs() as u32),
                    from,
                )
                .await
                .map_err(err)?;
            let found = judge::nodes(rule, &current, Some(&before));
            baseline_window = Some(before);
            found
        }
        Condition::RateAbove { .. } | Condition::AbovePeers { .. } => judge::nodes(rule, &current, None),
    };
    let by_fingerprint: HashMap<u64, Found> = found
        .iter()
        .map(|f| (super::state::fingerprint(&f.labels), f.clone()))
        .collect();
    let rule_selector = rule.selector.clone();
    let mut changed = tracker.step(rule, found, now, (from, to), |f| match f.labels.get("node") {
        Some(node) => node_selector(&rule_selector, node).to_string(),
        None => rule_selector.to_string(),
    });
    // An alert that starts firing is given the function that differs most on its nodes.
    for alert in changed.iter_mut().filter(|a| a.state == State::Firing) {
        let Some(f) = by_fingerprint.get(&alert.fingerprint) else {
            continue;
        };
        let cause = match rule.condition {
            Condition::BandsAppear { .. } => bands_cause(store, rule, f, &current, (from, to)).await,
            _ => top_function(store, rule, f, &current, baseline_window.as_deref(), (from, to))
                .await
                .map(|function| Cause {
                    function,
                    node_wide: String::new(),
                }),
        };
        match cause {
            Ok(cause) => {
                if let Some(name) = cause.function {
                    alert.top_function = name;
                }
                alert.node_wide = cause.node_wide;
                if let Some(a) = tracker.get_mut(alert.fingerprint) {
                    a.top_function = alert.top_function.clone();
                    a.node_wide = alert.node_wide.clone();
                }
            }
            Err(e) => tracing::warn!(rule = %rule.name, error = %e, "finding an alert's cause failed"),
        }
    }
    Ok(changed)
}

/// The first of the `listed` code differences, in the order compare lists them by default (the
/// band event's functions confirmed held out before those that were not; here tested over every
/// node, where compare tests a sample of at most `explained_nodes` per band), that is not one
/// only following a node-wide shift of its event: every stack of it moved alike, and no
/// function is to blame.
fn first_cause(listed: Vec<compare::CodeDifference>) -> Option<String> {
    listed.into_iter().find(|d| !d.with_whole).map(|d| d.function)
}

/// The halves of the window and the band event's listed functions in them, for the held-out
/// tests of a split's first cause, when the bands were cut on one event's rate (its functions
/// made the values they were cut on); `None` when they were not, the window has no halves, or
/// no function of that event is listed.
async fn held_out(
    store: &Store,
    rule: &Rule,
    found: &Found,
    current: &Window,
    range: (u32, u32),
    code: &[compare::CodeDifference],
) -> Result<Option<(window::HeldOutHalves, [compare::FunctionTable; 2])>, StorageError> {
    let metric = found
        .labels
        .get("metric")
        .and_then(|name| current.metrics.iter().find(|m| &m.name == name));
    // The slow band is the high one (`judge::bands`), as the held-out cut takes it.
    let Some(metric) = metric.filter(|m| m.direction == Direction::HigherIsSlower) else {
        return Ok(None);
    };
    let Ok(source) = window::band_source(current, metric) else {
        return Ok(None);
    };
    // Read as of the window's end, as the window was.
    let Some(halves) = window::Halves::read(store, &rule.selector, range, range.1, current, metric).await? else {
        return Ok(None);
    };
    let h = window::HeldOutHalves { halves, source };
    Ok(h.tables(store, &rule.selector, code, NodesRead::Every)
        .await?
        .map(|tables| (h, tables)))
}

/// `selector` narrowed to one node.
fn node_selector(selector: &Selector, node: &str) -> Selector {
    match Matcher::new("node", MatchOp::Equal, node) {
        Ok(m) => selector.clone().and(m),
        Err(_) => selector.clone(),
    }
}

/// What an alert that starts firing names as its cause.
#[derive(Debug, Default, PartialEq)]
struct Cause {
    /// The function that differs most on its nodes.
    function: Option<String>,
    /// For bands: the node-wide shifts they differ by, in words ([`node_wide_text`]).
    node_wide: String,
}

/// The cause of a split into bands: compare's first code difference between them that names a
/// cause ([`first_cause`]), and the node-wide shifts the bands differ by, which no function is to
/// blame for (every remote-access stack ×5: remote memory, THP off, a smaller cache).
async fn bands_cause(
    store: &Store,
    rule: &Rule,
    found: &Found,
    current: &Window,
    (from, to): (u32, u32),
) -> Result<Cause, String> {
    let err = |e: StorageError| e.to_string();
    let index: HashMap<&str, usize> = current
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.node.as_str(), i))
        .collect();
    let ids = |names: &[String]| names.iter().filter_map(|n| index.get(n.as_str()).copied()).collect();
    let groups = compare::Groups {
        high: ids(&found.nodes),
        low: ids(&found.others),
        slow: Some("high"),
    };
    let tables = std::sync::Arc::new(
        window::function_tables(store, &rule.selector, from, to, current, NodesRead::Every)
            .await
            .map_err(err)?,
    );
    let (listing, listed_in) = (groups.clone(), tables.clone());
    let code = tokio::task::spawn_blocking(move || compare::code_differences(&listed_in, &listing, compare::LISTED))
        .await
        .map_err(|e| e.to_string())?;
    // Whether the bands differ by a shift of the node: compare's flags of the listed functions,
    // which the held-out order below does not change.
    let node_wide = node_wide_text(&compare::node_wide(&tables, &groups, &code));
    // When the bands were cut on one event's rate, that event's functions made the very
    // values they were cut on: those that hold on the half of the window that did not cut
    // the bands go first, as compare lists them (docs/design/037). One not confirmed keeps
    // its place: with 3 nodes against 5, or a half without samples, the test cannot
    // confirm the true cause either.
    let code = match held_out(store, rule, found, current, (from, to), &code).await {
        // Hundreds of rank tests over every node: on a blocking thread, as the listing.
        Ok(Some((h, tables))) => tokio::task::spawn_blocking(move || {
            let mut code = code;
            let held = h.test(&mut code, &groups, &tables);
            (code, held)
        })
        .await
        .map(|(code, held)| {
            tracing::debug!(rule = %rule.name, tested = held.tested, confirmed = held.confirmed, "the band event's functions held out");
            code
        })
        .map_err(|e| e.to_string())?,
        Ok(None) => code,
        // The order before the held-out tests still names a cause.
        Err(e) => {
            tracing::warn!(rule = %rule.name, error = %e, "reading the window's halves for the held-out tests failed; the first cause is chosen without them");
            code
        }
    };
    Ok(Cause {
        function: first_cause(code),
        node_wide,
    })
}

/// Node-wide shifts in words, `; `-separated: "remote_access ×5.0 on every stack (node-wide: 3
/// listed functions follow it, none moved on its own)".
fn node_wide_text(shifts: &[compare::NodeWide]) -> String {
    shifts
        .iter()
        .map(|w| {
            format!(
                "{} ×{:.1} on every stack (node-wide: {} listed functions follow it, none moved on its own)",
                w.event, w.factor, w.functions
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The function that differs most on a node's alert, per CPU-second: its function with the
/// largest excess over the reference the rule held the node to (nothing for `rate_above`, the
/// node's own past for `above_baseline`, the median of its peers for `above_peers`; bands are
/// [`bands_cause`]'s). `before_window` is the window before that `above_baseline` judged against.
async fn top_function(
    store: &Store,
    rule: &Rule,
    found: &Found,
    current: &Window,
    before_window: Option<&Window>,
    (from, to): (u32, u32),
) -> Result<Option<String>, String> {
    let err = |e: StorageError| e.to_string();
    let (Some(node), Some(event)) = (found.labels.get("node"), rule.event) else {
        return Ok(None);
    };
    let source = found.labels.get("source").cloned();
    let scope = |selector: Selector, from: u32, to: u32| Scope {
        event: event.name(),
        source: source.clone(),
        selector,
        from,
        to,
    };
    // Per function: each node's self value per CPU-second (normalized once per read: per peer,
    // it was quadratic in the fleet), and this node's or the reference's taken from them.
    let per_second = |w: &Window, read: &crate::storage::NodeFunctions| -> Vec<(String, NodeValues)> {
        let normalize = w.normalizer(&read.nodes, &w.node_cpu_seconds, NodesRead::Every);
        read.functions
            .iter()
            .map(|f| (f.function.name.clone(), normalize(&f.self_values)))
            .collect()
    };
    let of_node = |values: &[(String, NodeValues)], i: Option<usize>| -> HashMap<String, f64> {
        let Some(i) = i else { return HashMap::new() };
        values
            .iter()
            .filter_map(|(name, per_node)| Some((name.clone(), per_node.get(i)?)))
            .collect()
    };
    let index_of = |w: &Window, node: &str| w.nodes.iter().position(|n| n.node == node);
    let reference: HashMap<String, f64>;
    let mine: HashMap<String, f64>;
    match &rule.condition {
        Condition::AbovePeers { .. } => {
            let read = store
                .node_functions(
                    &scope(rule.selector.clone(), from, to),
                    FUNCTIONS_READ,
                    Measures::Values,
                    NodesRead::Every,
                )
                .await
                .map_err(err)?;
            let values = per_second(current, &read);
            let at = index_of(current, node);
            mine = of_node(&values, at);
            // The peers the rule judged the node against: its hardware class.
            let class = at.map(|i| compare::hardware_class(&current.nodes[i].labels));
            let peers: Vec<usize> = (0..current.nodes.len())
                .filter(|&j| Some(j) != at && Some(compare::hardware_class(&current.nodes[j].labels)) == class)
                .collect();
            reference = values
                .iter()
                .filter(|(f, _)| mine.contains_key(f))
                .map(|(f, per_node)| {
                    let mut v: Vec<f64> = peers.iter().map(|&j| per_node.get(j).unwrap_or(0.0)).collect();
                    (f.clone(), judge::median(&mut v))
                })
                .collect();
        }
        Condition::AboveBaseline { baseline, .. } => {
            let one = node_selector(&rule.selector, node);
            let read = store
                .node_functions(
                    &scope(one.clone(), from, to),
                    FUNCTIONS_READ,
                    Measures::Values,
                    NodesRead::Every,
                )
                .await
                .map_err(err)?;
            mine = of_node(&per_second(current, &read), index_of(current, node));
            let before_from = from.saturating_sub(baseline.as_secs() as u32);
            let read = store
                .node_functions(
                    &scope(one, before_from, from),
                    FUNCTIONS_READ,
                    Measures::Values,
                    NodesRead::Every,
                )
                .await
                .map_err(err)?;
            // The node's CPU-seconds before: from the window the rule already read.
            reference = before_window.map_or_else(HashMap::new, |before| {
                of_node(&per_second(before, &read), index_of(before, node))
            });
        }
        _ => {
            let read = store
                .node_functions(
                    &scope(node_selector(&rule.selector, node), from, to),
                    FUNCTIONS_READ,
                    Measures::Values,
                    NodesRead::Every,
                )
                .await
                .map_err(err)?;
            mine = of_node(&per_second(current, &read), index_of(current, node));
            reference = HashMap::new();
        }
    }
    Ok(mine
        .into_iter()
        .map(|(f, v)| {
            let excess = v - reference.get(&f).copied().unwrap_or(0.0);
            (f, excess)
        })
        .filter(|(_, excess)| *excess > 0.0)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(f, _)| f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::compare::{CodeDifference, Difference, Measure};
    use crate::analysis::held_out::HeldOut;

    fn listed(function: &str, event: &str, with_whole: bool, confirmed: Option<bool>) -> CodeDifference {
        CodeDifference {
            function: function.into(),
            module: "app".into(),
            measure: Measure::SelfValue,
            with_whole,
            held_out: confirmed.map(|confirmed| HeldOut {
                p_value: if confirmed { 0.001 } else { 0.4 },
                q_value: if confirmed { 0.002 } else { 0.4 },
                confirmed,
            }),
            difference: Difference {
                event: event.into(),
                source: "src".into(),
                unit: "events per CPU-second".into(),
                low: vec![1.0],
                high: vec![4.0],
                low_median: 1.0,
                high_median: 4.0,
                weight: 0.5,
                effect: 1.0,
                p_value: 0.001,
                q_value: 0.002,
            },
        }
    }

    /// The first listed function names the cause, in compare's order (held out first); one
    /// that only follows a node-wide shift never does, and with nothing else listed there is
    /// none.
    #[test]
    fn the_first_cause_is_the_first_listed_that_is_not_node_wide() {
        let listed_in_order = vec![
            listed("follows_the_whole", "page_fault", true, Some(true)),
            listed("held", "page_fault", false, Some(true)),
            listed("not_confirmed", "page_fault", false, Some(false)),
            listed("other_event", "remote_access", false, None),
        ];
        assert_eq!(first_cause(listed_in_order.clone()).as_deref(), Some("held"));
        assert_eq!(
            first_cause(listed_in_order[2..].to_vec()).as_deref(),
            Some("not_confirmed")
        );
        assert_eq!(first_cause(listed_in_order[..1].to_vec()), None);
    }
}
