//! `GET /api/v1/compare?selector=&from=&to=&limit=&metric=`: the nodes matching the selector,
//! split into two bands by the metric that splits them best, or by `metric` when given (or "no
//! bands", with each metric's reason), the
//! nodes that changed band since the previous window of the same length, and what differs
//! between the bands: labels and facts, placement findings, and functions per event kind,
//! normalized per node.
//!
//! Per-node metrics, from what is stored:
//! - `cpu`: CPU-seconds per second the node reported in the window;
//! - per event and source other than `cpu`: the event's value per CPU-second (the `cpu` event's
//!   source with the most nodes is the CPU-seconds of every rate);
//! - node counters per second: remote NUMA hinting faults, `numa_miss`, pages migrated, major
//!   faults (node-wide, not per workload);
//! - `work per CPU-second`: calls of the function the agents count (`--work-uprobe`), per
//!   CPU-second;
//! - `remote_memory`: the share of the placed processes' data, bss, heap and anonymous pages
//!   held on NUMA nodes none of their threads ran on (when some node has any).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use axum::extract::{RawQuery, State};
use axum::Json;
use bimodal_proto::v1::EventKind;
use serde_json::{json, Value};

use super::params::{now, rfc3339, Params};
use super::{AppError, AppState};
use crate::analysis::bands::{BandConfig, Bands, Evidence, NullCache, Split};
use crate::analysis::compare::{
    self, BandChoice, DataTable, DataValues, Direction, FunctionTable, FunctionValues, Groups, Metric, MetricKind,
};
use crate::selector::Selector;
use crate::storage::queries::Measures;
use crate::storage::{NodeInfo, Scope, Store};

/// Functions read per event and source for the explanation (the largest over the fleet).
const FUNCTIONS_READ: u32 = 200;
/// Data objects read per event and source.
const DATA_OBJECTS_READ: u32 = 100;
/// Differences listed by default and at most.
const DEFAULT_LIMIT: u32 = 50;
const MAX_LIMIT: u32 = 1000;

/// Node counters compared, as (metric name, counter, counter subtracted, direction).
const COUNTERS: &[(&str, &str, Option<&str>, Direction)] = &[
    (
        "numa_hint_faults_remote",
        "numa_hint_faults",
        Some("numa_hint_faults_local"),
        Direction::HigherIsSlower,
    ),
    ("numa_miss", "numa_miss", None, Direction::HigherIsSlower),
    ("numa_pages_migrated", "numa_pages_migrated", None, Direction::Neither),
    ("pgmajfault", "pgmajfault", None, Direction::HigherIsSlower),
];

/// The stored figures of one window, per node.
struct Window {
    nodes: Vec<NodeInfo>,
    /// CPU nanoseconds per node (the `cpu` source most nodes have) of every process of the node,
    /// whatever the selector's process labels: what per-node function values (kept per node, not
    /// per process) are divided by.
    node_cpu_ns: Vec<Option<f64>>,
    /// CPU-seconds of every process of the node ([`node_cpu_seconds`]): what per-node function
    /// rates are divided by.
    node_cpu_seconds: Vec<Option<f64>>,
    metrics: Vec<Metric>,
    /// (event, source, unit of a sample's value) with samples in the window.
    sources: Vec<(&'static str, String, String)>,
    /// Placement findings per node: (what, this node's text).
    findings: Vec<Vec<(String, String)>>,
}

impl Window {
    async fn read(store: &Store, selector: &Selector, from: u32, to: u32) -> Result<Window, AppError> {
        let mut nodes = store.nodes(selector, from, to).await?;
        nodes.sort_by(|a, b| a.node.cmp(&b.node));
        let index: HashMap<String, usize> = nodes.iter().enumerate().map(|(i, n)| (n.node.clone(), i)).collect();
        // Where batches stored before the server counted their length: seconds from the node's
        // first report to now or to its last one (`last_seen` is refreshed once per NODE_REFRESH
        // while a node reports, so a node is counted as reporting until a refresh after it).
        let now = super::params::now();
        let refresh = crate::storage::writer::NODE_REFRESH.as_secs() as u32;
        let estimated: Vec<f64> = nodes
            .iter()
            .map(|n| {
                let start = n.first_seen.max(from);
                let end = to.min(now).min(n.last_seen.saturating_add(refresh));
                f64::from(end.saturating_sub(start).max(1))
            })
            .collect();
        let units: HashMap<(String, String), String> = store
            .sources()
            .await?
            .into_iter()
            .map(|s| ((s.event, s.source), s.unit))
            .collect();
        // Values per (event, source), per node.
        let mut totals: Vec<(&'static str, String, Vec<Option<f64>>)> = Vec::new();
        // Samples behind each total: what a rate rests on.
        let mut samples: HashMap<(&'static str, String), Vec<f64>> = HashMap::new();
        for event in EventKind::ALL {
            let scope = Scope {
                event: event.name(),
                source: None,
                selector: selector.clone(),
                from,
                to,
            };
            let mut by_source: BTreeMap<String, Vec<Option<f64>>> = BTreeMap::new();
            for t in store.node_totals(&scope).await? {
                let Some(&i) = index.get(&t.node) else { continue };
                samples
                    .entry((event.name(), t.source.clone()))
                    .or_insert_with(|| vec![0.0; nodes.len()])[i] = t.samples as f64;
                by_source.entry(t.source).or_insert_with(|| vec![None; nodes.len()])[i] = Some(t.value as f64);
            }
            totals.extend(
                by_source
                    .into_iter()
                    .map(|(source, values)| (event.name(), source, values)),
            );
        }
        let cpu_source = cpu_source_of(
            totals
                .iter()
                .filter(|t| t.0 == EventKind::Cpu.name())
                .map(|t| (t.1.as_str(), t.2.iter().filter(|v| v.is_some()).count())),
        )
        .map(str::to_owned);
        let cpu_ns: Vec<Option<f64>> = totals
            .iter()
            .find(|t| t.0 == EventKind::Cpu.name() && Some(&t.1) == cpu_source.as_ref())
            .map(|t| t.2.clone())
            .unwrap_or_else(|| vec![None; nodes.len()]);
        let names: Vec<String> = nodes.iter().map(|n| n.node.clone()).collect();
        let mut counters: HashMap<(usize, String), f64> = HashMap::new();
        for (node, name, value) in store.node_counters(&names, from, to).await? {
            if let Some(&i) = index.get(&node) {
                counters.insert((i, name), value as f64);
            }
        }
        // Seconds each node reported within the window: the length of its batches.
        let seconds: Vec<f64> = (0..nodes.len())
            .map(|i| {
                counters
                    .get(&(i, bimodal_proto::REPORTED_COUNTER.to_owned()))
                    .map(|ms| ms / 1000.0)
                    .filter(|s| *s > 0.0)
                    .unwrap_or(estimated[i])
            })
            .collect();
        let picks_processes = selector.process_matchers().next().is_some();
        let process_cpu = |i: usize| {
            counters
                .get(&(i, bimodal_proto::PROCESS_CPU_COUNTER.to_owned()))
                .copied()
        };
        let cpu_seconds: Vec<Option<f64>> = (0..nodes.len())
            .map(|i| node_cpu_seconds(cpu_ns[i], process_cpu(i), picks_processes))
            .collect();
        let node_cpu_ns = if !picks_processes {
            cpu_ns.clone()
        } else {
            let mut node_only = selector.clone();
            node_only
                .matchers
                .retain(|m| m.scope() == crate::selector::LabelScope::Node);
            let scope = Scope {
                event: EventKind::Cpu.name(),
                source: cpu_source.clone(),
                selector: node_only,
                from,
                to,
            };
            let mut all = vec![None; nodes.len()];
            for t in store.node_totals(&scope).await? {
                if let Some(&i) = index.get(&t.node) {
                    all[i] = Some(t.value as f64);
                }
            }
            all
        };
        // Per-node function values are kept per node: their rates use the node's CPU-seconds.
        let node_cpu_seconds_all: Vec<Option<f64>> = (0..nodes.len())
            .map(|i| node_cpu_seconds(node_cpu_ns[i], process_cpu(i), false))
            .collect();
        let mut metrics = Vec::new();
        if let Some(source) = &cpu_source {
            metrics.push(Metric {
                kind: MetricKind::Cpu { source: source.clone() },
                name: "cpu".into(),
                unit: "CPU-seconds per second".into(),
                direction: Direction::Neither,
                values: cpu_seconds
                    .iter()
                    .zip(&seconds)
                    .map(|(c, s)| c.map(|c| c / s))
                    .collect(),
                evidence: None,
            });
        }
        // Which (event, source) each node's agent sampled with, for the nodes the ledger still
        // covers (it is kept for days, samples for weeks: older nodes count as sampling all).
        let sampled_with = store.node_sources(&names, from, to).await?;
        let sampled: std::collections::HashSet<(usize, &str, &str)> = sampled_with
            .iter()
            .filter_map(|(node, event, source)| Some((*index.get(node)?, event.as_str(), source.as_str())))
            .collect();
        let ledgered: std::collections::HashSet<usize> = sampled.iter().map(|s| s.0).collect();
        let mut sources = Vec::new();
        let sources_of = |event: &str| totals.iter().filter(|t| t.0 == event).count();
        for (event, source, values) in &totals {
            let unit = units
                .get(&(event.to_string(), source.clone()))
                .cloned()
                .unwrap_or_else(|| "events".into());
            sources.push((*event, source.clone(), unit.clone()));
            if *event == EventKind::Cpu.name() {
                continue;
            }
            metrics.push(Metric {
                kind: MetricKind::EventRate {
                    event: event.to_string(),
                    source: source.clone(),
                },
                // Named by its source too when the event has several: they are never one number.
                name: match sources_of(event) {
                    1 => format!("{event} per CPU-second"),
                    _ => format!("{event} per CPU-second ({source})"),
                },
                unit: format!("{unit} per CPU-second"),
                direction: Direction::HigherIsSlower,
                // A node with CPU time and none of this event had none of it, if its agent
                // sampled the event with this source; else it was not measured.
                values: values
                    .iter()
                    .zip(&cpu_seconds)
                    .enumerate()
                    .map(|(i, (v, c))| {
                        let unsampled = ledgered.contains(&i) && !sampled.contains(&(i, *event, source.as_str()));
                        match (v, unsampled) {
                            (None, true) => None,
                            (v, _) => c.map(|c| v.unwrap_or(0.0) / c),
                        }
                    })
                    .collect(),
                evidence: Some(
                    cpu_seconds
                        .iter()
                        .enumerate()
                        .map(|(i, c)| {
                            let events = samples.get(&(*event, source.clone())).map_or(0.0, |s| s[i]);
                            c.map(|exposure| Evidence { events, exposure })
                        })
                        .collect(),
                ),
            });
        }
        for &(name, counter, minus, direction) in COUNTERS {
            let increase: Vec<Option<f64>> = (0..nodes.len())
                .map(|i| {
                    let v = counters.get(&(i, counter.to_owned()))?;
                    let less = minus.map_or(Some(0.0), |m| counters.get(&(i, m.to_owned())).copied())?;
                    Some((v - less).max(0.0))
                })
                .collect();
            let values: Vec<Option<f64>> = (0..nodes.len()).map(|i| increase[i].map(|v| v / seconds[i])).collect();
            let evidence = (0..nodes.len())
                .map(|i| {
                    increase[i].map(|events| Evidence {
                        events,
                        exposure: seconds[i],
                    })
                })
                .collect();
            if values.iter().any(|v| v.is_some_and(|v| v > 0.0)) {
                metrics.push(Metric {
                    kind: MetricKind::Counter { name: name.into() },
                    name: name.into(),
                    unit: "per second".into(),
                    direction,
                    values,
                    evidence: Some(evidence),
                });
            }
        }
        // Memory placement: the share of each node's judged pages held on NUMA nodes none of
        // their process's threads ran on, and the findings (the ScyllaDB .bss case).
        let mut findings: Vec<Vec<(String, String)>> = vec![Vec::new(); nodes.len()];
        let mut remote: Vec<Option<f64>> = vec![None; nodes.len()];
        // Pages found far over pages judged (the pages of one mapping often move together: a
        // generous count of independent events, so a node with none is judged on many).
        let mut remote_evidence: Vec<Option<Evidence>> = vec![None; nodes.len()];
        for (node, processes) in store.placements_of(&names, from, to).await? {
            let Some(&i) = index.get(&node) else { continue };
            let (far, all) = processes
                .iter()
                .map(|p| p.remote_pages())
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
            remote[i] = (all > 0).then(|| far as f64 / all as f64);
            remote_evidence[i] = (all > 0).then_some(Evidence {
                events: far as f64,
                exposure: all as f64,
            });
            for r in processes.iter().flat_map(|p| p.remote_memory()) {
                let finding = format!(
                    "{} of {} ({}) held on a NUMA node none of its threads ran on",
                    r.kind, r.comm, r.path
                );
                findings[i].push((finding, format!("{}: {}", node, r.text)));
            }
        }
        // Units of work (calls of the function the agent was given) per CPU-second.
        let work: Vec<Option<f64>> = (0..nodes.len())
            .map(|i| {
                let calls = counters.get(&(i, bimodal_proto::WORK_COUNTER.to_owned()))?;
                cpu_seconds[i].map(|c| calls / c)
            })
            .collect();
        if work.iter().any(|v| v.is_some_and(|v| v > 0.0)) {
            metrics.push(Metric {
                kind: MetricKind::Work,
                name: "work per CPU-second".into(),
                unit: "units of work per CPU-second".into(),
                direction: Direction::LowerIsSlower,
                values: work,
                evidence: None,
            });
        }
        if remote.iter().any(|v| v.is_some_and(|v| v > 0.0)) {
            metrics.push(Metric {
                kind: MetricKind::RemoteMemory,
                name: "remote_memory".into(),
                unit: "share of data, bss, heap and anonymous pages far from their threads".into(),
                direction: Direction::HigherIsSlower,
                values: remote,
                evidence: Some(remote_evidence),
            });
        }
        Ok(Window {
            nodes,
            node_cpu_ns,
            node_cpu_seconds: node_cpu_seconds_all,
            metrics,
            sources,
            findings,
        })
    }

    /// A function from values read per node (columns aligned with `read_nodes`) to values
    /// aligned with this window's nodes, each divided by the node's `divisor`: 0 for a node with
    /// a divisor and nothing read, `None` for a node without a divisor.
    fn normalizer<'a>(
        &self,
        read_nodes: &[String],
        divisor: &'a [Option<f64>],
    ) -> impl Fn(&[u64]) -> Vec<Option<f64>> + 'a {
        let index: HashMap<&str, usize> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.node.as_str(), i))
            .collect();
        let columns: Vec<Option<usize>> = read_nodes.iter().map(|n| index.get(n.as_str()).copied()).collect();
        move |per_node: &[u64]| {
            let mut out: Vec<Option<f64>> = divisor.iter().map(|d| d.map(|_| 0.0)).collect();
            for (column, value) in columns.iter().zip(per_node) {
                if let Some(i) = *column {
                    out[i] = divisor[i].map(|d| *value as f64 / d);
                }
            }
            out
        }
    }

    /// Only the metric named `wanted` (its name, or its event or counter name), when given.
    fn keep_metric(&mut self, wanted: Option<&str>) -> Result<(), AppError> {
        let Some(wanted) = wanted.filter(|w| !w.is_empty()) else {
            return Ok(());
        };
        let matches = |m: &Metric| {
            m.name == wanted
                || match &m.kind {
                    MetricKind::EventRate { event, .. } => event == wanted,
                    MetricKind::Counter { name } => name == wanted,
                    MetricKind::Cpu { .. } | MetricKind::RemoteMemory | MetricKind::Work => false,
                }
        };
        let kept: Vec<Metric> = self.metrics.iter().filter(|m| matches(m)).cloned().collect();
        match kept.len() {
            1 => {
                self.metrics = kept;
                Ok(())
            }
            0 => Err(AppError::BadRequest(format!(
                "unknown metric `{wanted}`; this range has: {}",
                self.metrics
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
            _ => Err(AppError::BadRequest(format!(
                "`{wanted}` names several metrics: {}",
                kept.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    fn names(&self, indices: &[usize]) -> Vec<&str> {
        indices.iter().map(|&i| self.nodes[i].node.as_str()).collect()
    }
}

/// A node's CPU-seconds in a window: the sampled process's exact CPU time when its agent sends it
/// (`process_cpu_ns`, agents with `--pid`) and the selector does not pick processes itself;
/// else estimated from its `cpu` samples (`samples_ns`: their value), which is coarse when the
/// process uses a small share of a CPU or the kernel throttles sampling. `None` without either.
/// The `cpu` source CPU-seconds are read from: the one most nodes have (ties: the first by
/// name), given each source's node count.
pub(super) fn cpu_source_of<'a>(nodes_per_source: impl IntoIterator<Item = (&'a str, usize)>) -> Option<&'a str> {
    nodes_per_source
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
        .map(|(source, _)| source)
}

pub(super) fn node_cpu_seconds(
    samples_ns: Option<f64>,
    process_cpu_ns: Option<f64>,
    picks_processes: bool,
) -> Option<f64> {
    let ns = match (process_cpu_ns, picks_processes) {
        (Some(exact), false) if exact > 0.0 => Some(exact),
        _ => samples_ns,
    };
    ns.map(|ns| ns / 1e9).filter(|&s| s > 0.0)
}

/// Band detection on a blocking thread (the null distributions are drawn there once).
async fn find_bands(metrics: Vec<Metric>, null: Arc<Mutex<NullCache>>) -> Result<(Vec<Metric>, BandChoice), AppError> {
    tokio::task::spawn_blocking(move || {
        let mut null = null.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let choice = compare::find_bands(&metrics, &BandConfig::default(), &mut null);
        (metrics, choice)
    })
    .await
    .map_err(|e| AppError::Internal(format!("band detection failed: {e}")))
}

fn split_json(w: &Window, measured: &[usize], s: &Split) -> Value {
    let names = |idx: &[usize]| -> Vec<&str> { idx.iter().map(|&i| w.nodes[measured[i]].node.as_str()).collect() };
    json!({
        "low": names(&s.low),
        "high": names(&s.high),
        "low_median": s.low_median,
        "high_median": s.high_median,
        "threshold": s.threshold,
        "separation": s.separation,
        "d": s.d,
        "p_value": s.p_value,
    })
}

fn bands_json(w: &Window, measured: &[usize], bands: &Bands) -> Value {
    match bands {
        Bands::Two(s) => {
            let mut v = split_json(w, measured, s);
            v["found"] = json!(true);
            v
        }
        Bands::None { reason, best } => json!({
            "found": false,
            "reason": reason.to_string(),
            "best": best.as_ref().map(|s| split_json(w, measured, s)),
        }),
    }
}

pub(super) async fn compare(State(state): State<AppState>, RawQuery(raw): RawQuery) -> Result<Json<Value>, AppError> {
    let p = Params::parse(raw.as_deref(), &["selector", "from", "to", "limit", "metric"])?;
    let selector = p.selector()?;
    // Whole buckets: the explanation reads every node's values of hundreds of functions, and a
    // partial bucket at an edge would be read from the per-minute tables (the answer's `from`
    // and `to` are the range compared).
    let (from, to) = p.time_range(now())?;
    let (from, to) = crate::storage::queries::whole_buckets(from, to);
    let limit = p.bounded("limit", DEFAULT_LIMIT, MAX_LIMIT)?;
    let mut window = timed("window", Window::read(&state.store, &selector, from, to)).await?;
    window.keep_metric(p.one("metric"))?;
    let (metrics, choice) = timed(
        "bands",
        find_bands(std::mem::take(&mut window.metrics), state.bands_null.clone()),
    )
    .await?;
    let metrics_json: Vec<Value> = metrics
        .iter()
        .zip(&choice.tested)
        .map(|(m, t)| {
            let mut v = serde_json::to_value(m).unwrap_or(Value::Null);
            v["bands"] = bands_json(&window, &t.measured, &t.bands);
            v
        })
        .collect();
    let mut answer = json!({
        "selector": selector.to_string(),
        "from": rfc3339(from),
        "to": rfc3339(to),
        "nodes": window.nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(),
        "alpha": BandConfig::default().alpha,
        "alpha_per_metric": choice.alpha_per_metric,
        "metrics": metrics_json,
        "bands": Value::Null,
        "explanation": Value::Null,
    });
    let (Some(chosen), Some(groups)) = (choice.chosen, &choice.groups) else {
        answer["verdict"] = json!(no_bands_verdict(&window, &metrics, &choice));
        return Ok(Json(answer));
    };
    let metric = &metrics[chosen];
    let Bands::Two(split) = &choice.tested[chosen].bands else {
        return Err(AppError::Internal("the chosen metric has no split".into()));
    };
    // The previous window and the explanation's reads, at once.
    let (changed, tables, data) = tokio::try_join!(
        timed(
            "previous window",
            changes(&state, &selector, p.one("metric"), from, to, &window, metric, groups)
        ),
        timed("functions", function_tables(&state.store, &selector, from, to, &window)),
        timed("data objects", data_tables(&state.store, &selector, from, to, &window)),
    )?;
    answer["verdict"] = json!(format!(
        "two bands in {}: {} nodes at a median of {} and {} at {} {}{}",
        metric.name,
        groups.high.len(),
        figure(split.high_median),
        groups.low.len(),
        figure(split.low_median),
        metric.unit,
        match groups.slow {
            Some(band) => format!("; the {band} band is slow"),
            None => String::new(),
        }
    ));
    answer["bands"] = json!({
        "metric": metric.name,
        "kind": metric.kind,
        "unit": metric.unit,
        "slow": groups.slow,
        "low": window.names(&groups.low),
        "high": window.names(&groups.high),
        "low_median": split.low_median,
        "high_median": split.high_median,
        "threshold": split.threshold,
        "separation": split.separation,
        "p_value": split.p_value,
        "previous_window": changed,
    });
    let labels: Vec<_> = window.nodes.iter().map(|n| n.labels.clone()).collect();
    let (groups, findings) = (groups.clone(), window.findings.clone());
    // Hundreds of rank tests: on a blocking thread, not the server's workers.
    answer["explanation"] = timed(
        "explanation",
        tokio::task::spawn_blocking(move || {
            json!({
                "labels": compare::label_splits(&labels, &groups),
                "placement": compare::finding_splits(&findings, &groups),
                "code": compare::code_differences(&tables, &groups, limit as usize),
                "data": compare::data_differences(&data, &groups, limit as usize),
            })
        }),
    )
    .await
    .map_err(|e| AppError::Internal(format!("explaining the bands failed: {e}")))?;
    Ok(Json(answer))
}

/// `step` awaited, its duration logged (debug level) under `what`.
async fn timed<T>(what: &'static str, step: impl std::future::Future<Output = T>) -> T {
    let start = std::time::Instant::now();
    let out = step.await;
    tracing::debug!(step = what, ms = start.elapsed().as_millis() as u64, "compare step");
    out
}

/// A value as a sentence shows it: whole from 100, to three decimals below.
fn figure(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{}", (v * 1e3).round() / 1e3)
    }
}

/// "No bands", with the reason of the metric that came closest.
fn no_bands_verdict(w: &Window, metrics: &[Metric], choice: &BandChoice) -> String {
    if w.nodes.is_empty() {
        return "no bands: no node matches the selector in this range".into();
    }
    let closest = choice
        .tested
        .iter()
        .zip(metrics)
        .filter_map(|(t, m)| match &t.bands {
            Bands::None { reason, best: Some(b) } => Some((b.p_value, b.d, m, reason)),
            _ => None,
        })
        .min_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
    match closest {
        Some((_, _, m, reason)) => format!("no bands: the closest is {}, and {reason}", m.name),
        None => match choice.tested.first().zip(metrics.first()) {
            Some((t, m)) => match &t.bands {
                Bands::None { reason, .. } => format!("no bands: {} — {reason}", m.name),
                Bands::Two(_) => "no bands".into(),
            },
            None => "no bands: the nodes have no samples in this range".into(),
        },
    }
}

/// The chosen metric in the previous window of the same length: its bands, and the nodes of
/// this window's bands that were in another band (or none) then.
#[allow(clippy::too_many_arguments)]
async fn changes(
    state: &AppState,
    selector: &Selector,
    wanted: Option<&str>,
    from: u32,
    to: u32,
    now: &Window,
    metric: &Metric,
    groups: &Groups,
) -> Result<Value, AppError> {
    let (prev_from, prev_to) = (from.saturating_sub(to - from), from);
    let mut before = Window::read(&state.store, selector, prev_from, prev_to).await?;
    // Held to the same level as this window: the same metrics tested, or the one asked for.
    if before.keep_metric(wanted).is_err() {
        before.metrics.clear();
    }
    let (before_metrics, before_choice) =
        find_bands(std::mem::take(&mut before.metrics), state.bands_null.clone()).await?;
    let position = before_metrics.iter().position(|m| m.kind == metric.kind);
    let band_before: HashMap<&str, &str> =
        match position.map(|i| (&before_choice.tested[i].measured, &before_choice.tested[i].bands)) {
            Some((measured, Bands::Two(s))) => s
                .low
                .iter()
                .map(|&i| (before.nodes[measured[i]].node.as_str(), "low"))
                .chain(
                    s.high
                        .iter()
                        .map(|&i| (before.nodes[measured[i]].node.as_str(), "high")),
                )
                .collect(),
            _ => HashMap::new(),
        };
    let mut changed = Vec::new();
    for (band, members) in [("low", &groups.low), ("high", &groups.high)] {
        for &i in members.iter() {
            let node = now.nodes[i].node.as_str();
            let was = band_before.get(node).copied();
            if was != Some(band) && !band_before.is_empty() {
                changed.push(json!({"node": node, "now": band, "before": was}));
            }
        }
    }
    let found = !band_before.is_empty();
    Ok(json!({
        "from": rfc3339(prev_from),
        "to": rfc3339(prev_to),
        "found": found,
        "reason": position.and_then(|i| match &before_choice.tested[i].bands {
            Bands::None { reason, .. } => Some(reason.to_string()),
            Bands::Two(_) => None,
        }).or_else(|| position.is_none().then(|| "the metric was not measured".to_owned())),
        "changed": changed,
    }))
}

/// The largest functions of every event and source, normalized per node: `cpu` as a share of
/// the node's CPU time, other events per CPU-second.
async fn function_tables(
    store: &Store,
    selector: &Selector,
    from: u32,
    to: u32,
    w: &Window,
) -> Result<Vec<FunctionTable>, AppError> {
    let scopes = source_scopes(w.sources.iter(), selector, from, to);
    // One read per source, all at once: ClickHouse overlaps them.
    let reads = futures_util::future::try_join_all(
        scopes
            .iter()
            .map(|s| store.node_functions(s, FUNCTIONS_READ, Measures::Values)),
    )
    .await?;
    let mut tables = Vec::new();
    for ((event, source, unit), found) in w.sources.iter().zip(reads) {
        let is_cpu = *event == EventKind::Cpu.name();
        // Per node: what a value is divided by (CPU-ns sampled for shares of the CPU samples,
        // CPU-seconds for rates).
        let divisor: Vec<Option<f64>> = match is_cpu {
            true => w.node_cpu_ns.iter().map(|c| c.filter(|&c| c > 0.0)).collect(),
            false => w.node_cpu_seconds.clone(),
        };
        let normalize = w.normalizer(&found.nodes, &divisor);
        tables.push(FunctionTable {
            event: event.to_string(),
            source: source.clone(),
            unit: if is_cpu {
                "share of CPU time".into()
            } else {
                format!("{unit} per CPU-second")
            },
            functions: found
                .functions
                .iter()
                .map(|f| FunctionValues {
                    function: f.function.name.clone(),
                    module: f.function.module.clone(),
                    self_values: normalize(&f.self_values),
                    total_values: normalize(&f.total_values),
                })
                .collect(),
        });
    }
    Ok(tables)
}

/// The largest data objects of every event and source with data addresses, per CPU-second
/// of each node.
async fn data_tables(
    store: &Store,
    selector: &Selector,
    from: u32,
    to: u32,
    w: &Window,
) -> Result<Vec<DataTable>, AppError> {
    let sources: Vec<_> = w.sources.iter().filter(|s| s.0 != EventKind::Cpu.name()).collect();
    let scopes = source_scopes(sources.iter().copied(), selector, from, to);
    let reads =
        futures_util::future::try_join_all(scopes.iter().map(|s| store.node_data_objects(s, DATA_OBJECTS_READ)))
            .await?;
    let mut tables = Vec::new();
    for ((event, source, unit), found) in sources.into_iter().zip(reads) {
        if found.objects.is_empty() {
            continue;
        }
        let normalize = w.normalizer(&found.nodes, &w.node_cpu_seconds);
        tables.push(DataTable {
            event: event.to_string(),
            source: source.clone(),
            unit: format!("{unit} per CPU-second"),
            objects: found
                .objects
                .iter()
                .map(|(object, per_node)| DataValues {
                    object: object.to_string(),
                    kind: object.kind.clone(),
                    values: normalize(per_node),
                })
                .collect(),
        });
    }
    Ok(tables)
}

/// The read of each (event, source, unit) over the comparison's selector and range.
fn source_scopes<'a>(
    sources: impl Iterator<Item = &'a (&'static str, String, String)>,
    selector: &Selector,
    from: u32,
    to: u32,
) -> Vec<Scope> {
    sources
        .map(|(event, source, _)| Scope {
            event,
            source: Some(source.clone()),
            selector: selector.clone(),
            from,
            to,
        })
        .collect()
}

/// The bands of `selector` over [from, to) as node names (what `/api/v1/diff?groups=bands`
/// compares), or `None` with the verdict when there are none.
pub(super) struct BandNodes {
    pub metric: String,
    pub low: Vec<String>,
    pub high: Vec<String>,
    pub slow: Option<&'static str>,
}

pub(super) async fn bands_of(
    state: &AppState,
    selector: &Selector,
    metric: Option<&str>,
    from: u32,
    to: u32,
) -> Result<Result<BandNodes, String>, AppError> {
    let mut window = Window::read(&state.store, selector, from, to).await?;
    window.keep_metric(metric)?;
    let (metrics, choice) = timed(
        "bands",
        find_bands(std::mem::take(&mut window.metrics), state.bands_null.clone()),
    )
    .await?;
    Ok(match (choice.chosen, &choice.groups) {
        (Some(i), Some(groups)) => Ok(BandNodes {
            metric: metrics[i].name.clone(),
            low: window.names(&groups.low).into_iter().map(str::to_owned).collect(),
            high: window.names(&groups.high).into_iter().map(str::to_owned).collect(),
            slow: groups.slow,
        }),
        _ => Err(no_bands_verdict(&window, &metrics, &choice)),
    })
}
