//! The stored figures of one window, per node: the metrics compare splits into bands and alert
//! rules judge, read through storage once for both.
//!
//! Per-node metrics, from what is stored:
//! - `cpu`: CPU-seconds per second the node reported in the window;
//! - per event and source other than `cpu`: the event's value per CPU-second (the `cpu` event's
//!   source with the most nodes is the CPU-seconds of every rate);
//! - node counters per second: remote NUMA hinting faults, `numa_miss`, pages migrated, major
//!   faults (node-wide, not per workload);
//! - where the PMU counts them (node-wide): `cpi`, cycles per instruction, and `cache_miss per
//!   kilo-instruction`;
//! - `work per CPU-second`: calls of the function the agents count (`--work-uprobe`), per
//!   CPU-second;
//! - `remote_memory`: the share of the placed processes' data, bss, heap and anonymous pages
//!   held on NUMA nodes none of their threads ran on (when some node has any).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bimodal_proto::v1::EventKind;

use crate::analysis::bands::{BandConfig, Bands, Evidence, NullCache};
use crate::analysis::compare::{
    self, BandChoice, DataTable, DataValues, Direction, FunctionTable, FunctionValues, Metric, MetricKind,
};
use crate::analysis::{chains, held_out, Columns, NodeValues};
use crate::selector::Selector;
use crate::storage::placement::ProcessPlacement;
use crate::storage::queries::Measures;
use crate::storage::{Functions, NodeFunctions, NodeInfo, NodeSet, NodeTotal, NodesRead, Scope, StorageError, Store};

/// Functions read per event and source for the explanation (the largest over the fleet).
const FUNCTIONS_READ: u32 = 200;
/// Data objects read per event and source.
const DATA_OBJECTS_READ: u32 = 100;

/// Ratios of counted hardware events compared, as (metric name, counter, counter divided by,
/// per how many of it, unit). Only where a node's PMU counted both (no PMU in most VMs).
const RATIOS: &[(&str, &str, &str, f64, &str)] = &[
    ("cpi", "cycles", "instructions", 1.0, "cycles per instruction"),
    (
        "cache_miss per kilo-instruction",
        "cache_miss",
        "instructions",
        1000.0,
        "cache misses per 1,000 instructions",
    ),
];

/// Node counters compared, as (metric name, counter, counter subtracted, direction, whether it
/// counts between NUMA nodes).
const COUNTERS: &[(&str, &str, Option<&str>, Direction, bool)] = &[
    (
        "numa_hint_faults_remote",
        "numa_hint_faults",
        Some("numa_hint_faults_local"),
        Direction::HigherIsSlower,
        true,
    ),
    ("numa_miss", "numa_miss", None, Direction::HigherIsSlower, true),
    (
        "numa_pages_migrated",
        "numa_pages_migrated",
        None,
        Direction::Neither,
        true,
    ),
    ("pgmajfault", "pgmajfault", None, Direction::HigherIsSlower, false),
];

/// Whether a node's facts say it has one NUMA node: its counters of traffic between NUMA nodes
/// are zero by construction, not measured. Compared with the nodes that have several, those
/// zeros would make a band of the machines' shape (issue 48), and whether they are stored at all
/// depends on merges (a summed row of zeros is dropped).
fn single_numa_node(node: &NodeInfo) -> bool {
    node.facts.as_ref().is_some_and(|f| f.numa_nodes.len() == 1)
}

/// Whether an event kind counts traffic between NUMA nodes (none by construction on a node with
/// one): remote accesses and NUMA hinting faults. Page migrations are not: compaction migrates
/// pages on any machine.
fn between_numa_nodes(event: &str) -> bool {
    event == EventKind::RemoteAccess.name() || event == EventKind::NumaHintFault.name()
}

/// The stored figures of one window, per node.
#[derive(Clone, Debug)]
pub struct Window {
    pub nodes: Vec<NodeInfo>,
    /// CPU nanoseconds per node (the `cpu` source most nodes have) of every process of the node,
    /// whatever the selector's process labels: what per-node function values (kept per node, not
    /// per process) are divided by.
    pub node_cpu_ns: Vec<Option<f64>>,
    /// CPU-seconds of every process of the node ([`node_cpu_seconds`]): what per-node function
    /// rates are divided by.
    pub node_cpu_seconds: Vec<Option<f64>>,
    pub metrics: Vec<Metric>,
    /// (event, source, unit of a sample's value) with samples in the window.
    pub sources: Vec<(&'static str, String, String)>,
    /// Placement findings per node: (what, this node's text).
    pub findings: Vec<Vec<(String, String)>>,
}

/// What a window is made of, as storage answers it: every read [`Window::assemble`] needs,
/// nothing derived.
#[derive(Clone, Debug, Default)]
pub struct WindowRows {
    /// The nodes the selector reaches, by name.
    pub nodes: Vec<NodeInfo>,
    /// The unit of each (event, source)'s values.
    pub units: HashMap<(String, String), String>,
    /// Per event kind, each node's total per source.
    pub totals: Vec<(EventKind, Vec<NodeTotal>)>,
    /// Each node's counters' increases in the range: (node, counter, increase).
    pub counters: Vec<(String, String, u64)>,
    /// Which (node, event, source) agents sampled with.
    pub sampled_with: Vec<(String, String, String)>,
    /// The placement of each node's busiest processes.
    pub placements: BTreeMap<String, Vec<ProcessPlacement>>,
    /// When the selector picks processes: every process's `cpu` totals of each node, from the
    /// `cpu` source most nodes have (what per-node function values are divided by); `None`
    /// when the selector's own totals are those.
    pub node_cpu: Option<Vec<NodeTotal>>,
}

impl WindowRows {
    /// The reads of a window, at once where one does not need another's answer.
    pub async fn read(store: &Store, selector: &Selector, from: u32, to: u32) -> Result<WindowRows, StorageError> {
        let (mut nodes, rows) = tokio::try_join!(
            timed("window: nodes", store.nodes(selector, from, to)),
            WindowRows::figures(store, selector, from, to, true)
        )?;
        nodes.sort_by(|a, b| a.node.cmp(&b.node));
        Ok(WindowRows { nodes, ..rows })
    }

    /// The reads of a part of a window already read (its halves): the window's `nodes` as they
    /// are, with their facts, not read again (at 100,000 nodes they are most of a window's
    /// bytes), and placements only when `placements` (the one metric they make).
    pub async fn read_part(
        store: &Store,
        selector: &Selector,
        (from, to): (u32, u32),
        nodes: &[NodeInfo],
        placements: bool,
    ) -> Result<WindowRows, StorageError> {
        let rows = WindowRows::figures(store, selector, from, to, placements).await?;
        Ok(WindowRows {
            nodes: nodes.to_vec(),
            ..rows
        })
    }

    /// Every read of a window but its nodes: what the nodes did over [from, to).
    async fn figures(
        store: &Store,
        selector: &Selector,
        from: u32,
        to: u32,
        placements: bool,
    ) -> Result<WindowRows, StorageError> {
        let scope_of = |event: EventKind| Scope {
            event: event.name(),
            source: None,
            selector: selector.clone(),
            from,
            to,
        };
        // Which nodes the selector reaches is the same for every event's totals.
        let any_event = scope_of(EventKind::Cpu);
        let reach = timed("window: reach", store.reach(&any_event)).await?;
        // Every read below needs only the nodes: they run at once (one after another, their
        // round trips and ClickHouse times added up). The per-node reads take the selector's
        // nodes as a subquery, not their names: a fleet of 100,000 names inlined is a query
        // ClickHouse refuses.
        let totals_of = |event: EventKind| {
            let (scope, reach) = (scope_of(event), &reach);
            async move { store.node_totals_over(&scope, reach).await.map(|t| (event, t)) }
        };
        let (sources, totals, counters, sampled_with, placements) = tokio::try_join!(
            store.sources(),
            timed(
                "window: totals",
                futures_util::future::try_join_all(EventKind::ALL.into_iter().map(totals_of))
            ),
            timed(
                "window: counters",
                store.node_counters(NodeSet::Selected(selector), from, to)
            ),
            timed(
                "window: sources sampled",
                store.node_sources(NodeSet::Selected(selector), from, to)
            ),
            timed("window: placements", async {
                match placements {
                    true => store.placements_of(NodeSet::Selected(selector), from, to).await,
                    false => Ok(BTreeMap::new()),
                }
            }),
        )?;
        let units = sources.into_iter().map(|s| ((s.event, s.source), s.unit)).collect();
        let node_cpu = if selector.process_matchers().next().is_none() {
            None
        } else {
            // The same nodes' CPU of every process: the node labels of the selector only.
            let cpu = totals
                .iter()
                .find(|(e, _)| *e == EventKind::Cpu)
                .map(|(_, t)| t.as_slice());
            let source = cpu_source_of(
                cpu_nodes_per_source(cpu.unwrap_or_default())
                    .iter()
                    .map(|(s, n)| (s.as_str(), *n)),
            )
            .map(str::to_owned);
            let mut node_only = selector.clone();
            node_only
                .matchers
                .retain(|m| m.scope() == crate::selector::LabelScope::Node);
            let scope = Scope {
                event: EventKind::Cpu.name(),
                source,
                selector: node_only,
                from,
                to,
            };
            // The nodes reached are the same: a selector reaches nodes by their node labels.
            Some(store.node_totals_over(&scope, &reach).await?)
        };
        Ok(WindowRows {
            nodes: Vec::new(),
            units,
            totals,
            counters,
            sampled_with,
            placements,
            node_cpu,
        })
    }
}

/// How many nodes have a total of each `cpu` source.
fn cpu_nodes_per_source(totals: &[NodeTotal]) -> BTreeMap<String, usize> {
    let mut per_source = BTreeMap::new();
    for t in totals {
        *per_source.entry(t.source.clone()).or_default() += 1;
    }
    per_source
}

impl Window {
    /// The window over [from, to) of the nodes `selector` reaches, read at `now` (when nodes
    /// still reporting are counted to): its reads ([`WindowRows::read`]), then its figures
    /// ([`Window::assemble`]).
    pub async fn read(
        store: &Store,
        selector: &Selector,
        from: u32,
        to: u32,
        now: u32,
    ) -> Result<Window, StorageError> {
        let rows = WindowRows::read(store, selector, from, to).await?;
        Ok(timed("window: assemble", async {
            Window::assemble(rows, selector, from, to, now)
        })
        .await)
    }

    /// The part [from, to) of `window` (one of its halves), read at `now`, for `metric`:
    /// [`WindowRows::read_part`] with `window`'s nodes.
    pub async fn read_part(
        store: &Store,
        selector: &Selector,
        (from, to): (u32, u32),
        now: u32,
        window: &Window,
        metric: &MetricKind,
    ) -> Result<Window, StorageError> {
        let placements = *metric == MetricKind::RemoteMemory;
        let rows = WindowRows::read_part(store, selector, (from, to), &window.nodes, placements).await?;
        Ok(Window::assemble(rows, selector, from, to, now))
    }

    /// A window's figures from its rows, without a database: per-node metrics, the sources
    /// sampled, placement findings.
    pub fn assemble(rows: WindowRows, selector: &Selector, from: u32, to: u32, now: u32) -> Window {
        let picks_processes = selector.process_matchers().next().is_some();
        let WindowRows {
            nodes,
            units,
            totals: event_totals,
            counters: counter_rows,
            sampled_with,
            placements,
            ..
        } = rows;
        let index: HashMap<String, usize> = nodes.iter().enumerate().map(|(i, n)| (n.node.clone(), i)).collect();
        // Where batches stored before the server counted their length: seconds from the node's
        // first report to now or to its last one (`last_seen` is refreshed once per NODE_REFRESH
        // while a node reports, so a node is counted as reporting until a refresh after it).
        let refresh = crate::storage::writer::NODE_REFRESH.as_secs() as u32;
        let estimated: Vec<f64> = nodes
            .iter()
            .map(|n| {
                let start = n.first_seen.max(from);
                let end = to.min(now).min(n.last_seen.saturating_add(refresh));
                f64::from(end.saturating_sub(start).max(1))
            })
            .collect();
        // Values per (event, source), per node.
        let mut totals: Vec<(&'static str, String, Vec<Option<f64>>)> = Vec::new();
        // Samples behind each total: what a rate rests on.
        let mut samples: HashMap<(&'static str, String), Vec<f64>> = HashMap::new();
        for (event, found) in event_totals {
            let mut by_source: BTreeMap<String, Vec<Option<f64>>> = BTreeMap::new();
            for t in found {
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
        let mut counters: HashMap<(usize, String), f64> = HashMap::new();
        for (node, name, value) in counter_rows {
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
        let process_cpu = |i: usize| {
            counters
                .get(&(i, bimodal_proto::PROCESS_CPU_COUNTER.to_owned()))
                .copied()
        };
        let cpu_seconds: Vec<Option<f64>> = (0..nodes.len())
            .map(|i| node_cpu_seconds(cpu_ns[i], process_cpu(i), picks_processes))
            .collect();
        // Every process's CPU of each node (the selector's own when it picks no processes).
        let node_cpu_ns = match rows.node_cpu {
            None => cpu_ns.clone(),
            Some(found) => {
                let mut all = vec![None; nodes.len()];
                for t in found {
                    if let Some(&i) = index.get(&t.node) {
                        all[i] = Some(t.value as f64);
                    }
                }
                all
            }
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
        // Which (event, source) each node's agent sampled with (kept as long as samples; nodes
        // without any, as before `node_sources` where only the ledger's days tell, count as
        // sampling all).
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
                        if between_numa_nodes(event) && single_numa_node(&nodes[i]) {
                            return None;
                        }
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
        for &(name, counter, minus, direction, between_numa_nodes) in COUNTERS {
            let increase: Vec<Option<f64>> = (0..nodes.len())
                .map(|i| {
                    if between_numa_nodes && single_numa_node(&nodes[i]) {
                        return None;
                    }
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
        for &(name, numerator, denominator, per, unit) in RATIOS {
            let values: Vec<Option<f64>> = (0..nodes.len())
                .map(|i| {
                    let n = counters.get(&(i, numerator.to_owned()))?;
                    let d = counters.get(&(i, denominator.to_owned())).filter(|&&d| d > 0.0)?;
                    Some(n / (d / per))
                })
                .collect();
            if values.iter().any(|v| v.is_some_and(|v| v > 0.0)) {
                metrics.push(Metric {
                    kind: MetricKind::Ratio {
                        numerator: numerator.into(),
                        denominator: denominator.into(),
                    },
                    name: name.into(),
                    unit: unit.into(),
                    direction: Direction::HigherIsSlower,
                    values,
                    evidence: None,
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
        for (node, processes) in placements {
            let Some(&i) = index.get(&node) else { continue };
            if single_numa_node(&nodes[i]) {
                continue;
            }
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
        Window {
            nodes,
            node_cpu_ns,
            node_cpu_seconds: node_cpu_seconds_all,
            metrics,
            sources,
            findings,
        }
    }

    /// A function from values read per node (columns aligned with `read_nodes`) to values
    /// aligned with this window's nodes, each divided by the node's `divisor`: 0 for a node with
    /// a divisor and nothing read, `None` for a node without a divisor. With `read` a sample,
    /// only its nodes have values (kept for them alone: [`NodeValues`]).
    pub fn normalizer<'a>(
        &self,
        read_nodes: &[String],
        divisor: &'a [Option<f64>],
        read: NodesRead<'_>,
    ) -> impl Fn(&[u64]) -> NodeValues + 'a {
        let index: HashMap<&str, usize> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.node.as_str(), i))
            .collect();
        let of_nodes =
            |names: &[String]| -> Vec<Option<usize>> { names.iter().map(|n| index.get(n.as_str()).copied()).collect() };
        let found = of_nodes(read_nodes);
        // The window's nodes given a column, in its order.
        let kept: Vec<usize> = match read.sample() {
            None => (0..self.nodes.len()).collect(),
            Some(sample) => {
                let mut asked: Vec<usize> = of_nodes(sample)
                    .into_iter()
                    .chain(found.iter().copied())
                    .flatten()
                    .collect();
                asked.sort_unstable();
                asked.dedup();
                asked
            }
        };
        let columns = Columns::of(self.nodes.len(), kept.iter().copied());
        let unread: Vec<Option<f64>> = kept.iter().map(|&i| divisor[i].map(|_| 0.0)).collect();
        // Per node read: (its window index, its column).
        let found: Vec<Option<(usize, usize)>> = found
            .into_iter()
            .map(|i| i.and_then(|i| columns.column(i).map(|c| (i, c))))
            .collect();
        move |per_node: &[u64]| {
            let mut values = unread.clone();
            for (at, value) in found.iter().zip(per_node) {
                if let Some((i, c)) = *at {
                    values[c] = divisor[i].map(|d| *value as f64 / d);
                }
            }
            NodeValues::new(columns.clone(), values)
        }
    }

    /// Only the metric named `wanted` (its name, or its event or counter name), when given.
    pub fn keep_metric(&mut self, wanted: Option<&str>) -> Result<(), String> {
        let Some(wanted) = wanted.filter(|w| !w.is_empty()) else {
            return Ok(());
        };
        let matches = |m: &Metric| {
            m.name == wanted
                || match &m.kind {
                    MetricKind::EventRate { event, .. } => event == wanted,
                    MetricKind::Counter { name } => name == wanted,
                    MetricKind::Cpu { .. } | MetricKind::Ratio { .. } | MetricKind::RemoteMemory | MetricKind::Work => {
                        false
                    }
                }
        };
        let kept: Vec<Metric> = self.metrics.iter().filter(|m| matches(m)).cloned().collect();
        match kept.len() {
            1 => {
                self.metrics = kept;
                Ok(())
            }
            0 => Err(format!(
                "unknown metric `{wanted}`; this range has: {}",
                self.metrics
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            _ => Err(format!(
                "`{wanted}` names several metrics: {}",
                kept.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join(", ")
            )),
        }
    }

    pub fn names(&self, indices: &[usize]) -> Vec<&str> {
        indices.iter().map(|&i| self.nodes[i].node.as_str()).collect()
    }

    /// Each node's labels, in the nodes' order (their hardware class among them).
    pub fn labels(&self) -> Vec<BTreeMap<String, String>> {
        self.nodes.iter().map(|n| n.labels.clone()).collect()
    }

    /// The nodes whose `event` stacks may stop short beside the others' (their agents walk
    /// frame pointers): their stack-derived values are not compared ([`chains::short_chains`]).
    pub fn short_chains(&self, event: &str) -> Vec<usize> {
        match EventKind::from_name(event) {
            Some(kind) => chains::short_chains(self.nodes.iter().map(|n| n.facts.as_ref()), kind),
            None => Vec::new(),
        }
    }
}

/// A node's CPU-seconds in a window: the sampled process's exact CPU time when its agent sends it
/// (`process_cpu_ns`, agents with `--pid`) and the selector does not pick processes itself;
/// else estimated from its `cpu` samples (`samples_ns`: their value), which is coarse when the
/// process uses a small share of a CPU or the kernel throttles sampling. `None` without either.
/// The `cpu` source CPU-seconds are read from: the one most nodes have (ties: the first by
/// name), given each source's node count.
pub fn cpu_source_of<'a>(nodes_per_source: impl IntoIterator<Item = (&'a str, usize)>) -> Option<&'a str> {
    nodes_per_source
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
        .map(|(source, _)| source)
}

pub fn node_cpu_seconds(samples_ns: Option<f64>, process_cpu_ns: Option<f64>, picks_processes: bool) -> Option<f64> {
    let ns = match (process_cpu_ns, picks_processes) {
        (Some(exact), false) if exact > 0.0 => Some(exact),
        _ => samples_ns,
    };
    ns.map(|ns| ns / 1e9).filter(|&s| s > 0.0)
}

/// `step` awaited, its duration logged (debug level) under `what`: compare's steps, and the
/// reads of its window.
pub async fn timed<T>(what: &'static str, step: impl std::future::Future<Output = T>) -> T {
    let start = std::time::Instant::now();
    let out = step.await;
    tracing::debug!(step = what, ms = start.elapsed().as_millis() as u64, "compare step");
    out
}

/// Band detection on a blocking thread (the null distributions are drawn there once).
pub async fn find_bands(w: &mut Window, null: Arc<Mutex<NullCache>>) -> Result<(Vec<Metric>, BandChoice), String> {
    let (metrics, labels) = (std::mem::take(&mut w.metrics), w.labels());
    tokio::task::spawn_blocking(move || {
        let mut null = null.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let choice = compare::find_bands_by_class(&metrics, &labels, &BandConfig::default(), &mut null);
        (metrics, choice)
    })
    .await
    .map_err(|e| format!("band detection failed: {e}"))
}

/// "No bands", with the reason of the metric that came closest.
pub fn no_bands_verdict(w: &Window, metrics: &[Metric], choice: &BandChoice) -> String {
    if w.nodes.is_empty() {
        return "no bands: no node matches the selector in this range".into();
    }
    let closest = choice
        .tested
        .iter()
        .zip(metrics)
        .filter_map(|(t, m)| match &t.bands {
            Bands::None {
                reason, best: Some(b), ..
            } => Some((b.p_value, b.d, m, reason)),
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

/// The largest functions of every event and source, normalized per node: `cpu` as a share of
/// the node's CPU time, other events per CPU-second. Values of the nodes `read` only when a
/// sample (the others' values are 0, so only those nodes may be compared); the functions are
/// the largest over every node. A function's total over its callees is not measured on nodes
/// whose chains may stop short beside the others' ([`Window::short_chains`]): a lost caller
/// would read as a smaller total there.
pub async fn function_tables(
    store: &Store,
    selector: &Selector,
    from: u32,
    to: u32,
    w: &Window,
    read: NodesRead<'_>,
) -> Result<Vec<FunctionTable>, StorageError> {
    let which = Functions::Largest(FUNCTIONS_READ);
    let reads = function_reads(store, w.sources.iter(), selector, (from, to), read, which).await?;
    Ok(function_tables_of(w, w.sources.iter(), reads, read))
}

/// The reads of [`function_tables`] for `sources` over [from, to), of the `which` functions,
/// before their values are normalized by a window's nodes: one read per source, all at once
/// (ClickHouse overlaps them).
pub async fn function_reads<'a>(
    store: &Store,
    sources: impl Iterator<Item = &'a (&'static str, String, String)>,
    selector: &Selector,
    (from, to): (u32, u32),
    read: NodesRead<'_>,
    which: Functions<'_>,
) -> Result<Vec<NodeFunctions>, StorageError> {
    let scopes = source_scopes(sources, selector, from, to);
    futures_util::future::try_join_all(
        scopes
            .iter()
            .map(|s| store.node_functions_of(s, which, Measures::Values, read)),
    )
    .await
}

/// The tables of [`function_tables`] from its `reads` of `sources`, normalized by `w`'s nodes.
pub fn function_tables_of<'a>(
    w: &Window,
    sources: impl Iterator<Item = &'a (&'static str, String, String)>,
    reads: Vec<NodeFunctions>,
    read: NodesRead<'_>,
) -> Vec<FunctionTable> {
    let mut tables = Vec::new();
    for ((event, source, unit), found) in sources.zip(reads) {
        let is_cpu = *event == EventKind::Cpu.name();
        // Per node: what a value is divided by (CPU-ns sampled for shares of the CPU samples,
        // CPU-seconds for rates).
        let divisor: Vec<Option<f64>> = match is_cpu {
            true => w.node_cpu_ns.iter().map(|c| c.filter(|&c| c > 0.0)).collect(),
            false => w.node_cpu_seconds.clone(),
        };
        let normalize = w.normalizer(&found.nodes, &divisor, read);
        let short = w.short_chains(event);
        let totals = |per_node: &[u64]| {
            let mut values = normalize(per_node);
            for &i in &short {
                values.clear(i);
            }
            values
        };
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
                    total_values: totals(&f.total_values),
                })
                .collect(),
        });
    }
    tables
}

/// The largest data objects of every event and source with data addresses, per CPU-second
/// of each node; of the nodes `read` only when a sample (as [`function_tables`]).
pub async fn data_tables(
    store: &Store,
    selector: &Selector,
    from: u32,
    to: u32,
    w: &Window,
    read: NodesRead<'_>,
) -> Result<Vec<DataTable>, StorageError> {
    let sources: Vec<_> = w.sources.iter().filter(|s| s.0 != EventKind::Cpu.name()).collect();
    let scopes = source_scopes(sources.iter().copied(), selector, from, to);
    let reads = futures_util::future::try_join_all(
        scopes
            .iter()
            .map(|s| store.node_data_objects(s, DATA_OBJECTS_READ, read)),
    )
    .await?;
    let mut tables = Vec::new();
    for ((event, source, unit), found) in sources.into_iter().zip(reads) {
        if found.objects.is_empty() {
            continue;
        }
        let normalize = w.normalizer(&found.nodes, &w.node_cpu_seconds, read);
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

/// The window's two halves ([`crate::storage::plan::half_way`]) as read for its band metric:
/// what the window's nodes did in each half, and the metric there aligned with the window's
/// nodes. Compare flags the nodes that moved band between the halves; compare and alert rules
/// test the band event's functions on them held out (docs/design/037).
#[derive(Clone, Debug)]
pub struct Halves {
    pub ranges: [(u32, u32); 2],
    pub windows: [Window; 2],
    pub metrics: [Metric; 2],
}

/// Why a window has no halves.
pub const ONE_BUCKET: &str = "the window is one bucket: it has no halves to compare";

impl Halves {
    /// The halves of [from, to) of `window` for `metric`, read as of `read_at` (as the window
    /// was); `None` when the window is one bucket.
    pub async fn read(
        store: &Store,
        selector: &Selector,
        (from, to): (u32, u32),
        read_at: u32,
        window: &Window,
        metric: &Metric,
    ) -> Result<Option<Halves>, StorageError> {
        let Some(mid) = crate::storage::plan::half_way(from, to) else {
            return Ok(None);
        };
        // The window's nodes and facts as they are: only what they did in each half is read.
        let (first, second) = tokio::try_join!(
            Window::read_part(store, selector, (from, mid), read_at, window, &metric.kind),
            Window::read_part(store, selector, (mid, to), read_at, window, &metric.kind),
        )?;
        fn names_of(w: &Window) -> Vec<&str> {
            w.nodes.iter().map(|n| n.node.as_str()).collect()
        }
        let names = names_of(window);
        // A half in which no node measured the metric: every node's half is unknown.
        let half = |w: &Window| -> Metric {
            match w.metrics.iter().find(|m| m.kind == metric.kind) {
                Some(m) => m.aligned(&names_of(w), &names),
                None => metric.only(&[]),
            }
        };
        let metrics = [half(&first), half(&second)];
        Ok(Some(Halves {
            ranges: [(from, mid), (mid, to)],
            windows: [first, second],
            metrics,
        }))
    }
}

/// The halves of a window whose bands were cut on one event's rate, and that event: its
/// functions made the very values the bands were cut on, so they are tested again held out.
#[derive(Clone, Debug)]
pub struct HeldOutHalves {
    pub halves: Halves,
    /// (event, source, unit) of the band metric.
    pub source: (&'static str, String, String),
}

/// The event and source of `window` whose functions made `metric`'s values, when it is one
/// event's rate: theirs are the functions to hold out; else why no function's values chose the
/// bands. Known before the halves are read.
pub fn band_source(window: &Window, metric: &Metric) -> Result<(&'static str, String, String), &'static str> {
    match &metric.kind {
        MetricKind::EventRate { event, source } => window
            .sources
            .iter()
            .find(|(e, s, _)| e == event && s == source)
            .cloned()
            .ok_or("the band metric's event has no functions in this window"),
        _ => Err("the bands are not cut on one event's samples: no function's values chose them"),
    }
}

impl HeldOutHalves {
    /// The band event's `listed` functions in each half, of the nodes `read`: only those
    /// functions are read, not ranked again. `None` when none of them is listed.
    pub async fn tables(
        &self,
        store: &Store,
        selector: &Selector,
        listed: &[compare::CodeDifference],
        read: NodesRead<'_>,
    ) -> Result<Option<[FunctionTable; 2]>, StorageError> {
        let mut ids: Vec<u64> = listed
            .iter()
            .filter(|d| d.difference.event == self.source.0 && d.difference.source == self.source.1)
            .map(|d| crate::storage::rows::function_id(&d.function, &d.module))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() {
            return Ok(None);
        }
        let source = std::iter::once(&self.source);
        let which = Functions::These(&ids);
        let ranges = self.halves.ranges;
        let (first, second) = tokio::try_join!(
            function_reads(store, source.clone(), selector, ranges[0], read, which),
            function_reads(store, source.clone(), selector, ranges[1], read, which),
        )?;
        let windows = &self.halves.windows;
        let table = |w: &Window, reads| function_tables_of(w, source.clone(), reads, read).pop();
        Ok(table(&windows[0], first)
            .zip(table(&windows[1], second))
            .map(|(a, b)| [a, b]))
    }

    /// Tests the band event's functions in `listed` on `tables` (of [`HeldOutHalves::tables`])
    /// between `groups`, as [`held_out::held_out`] does.
    pub fn test(
        &self,
        listed: &mut Vec<compare::CodeDifference>,
        groups: &compare::Groups,
        tables: &[FunctionTable; 2],
    ) -> held_out::HeldOutSummary {
        let halves = [0, 1].map(|i| held_out::Half {
            metric: &self.halves.metrics[i],
            table: &tables[i],
        });
        held_out::held_out(listed, groups, halves)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bimodal_proto::{PROCESS_CPU_COUNTER, REPORTED_COUNTER};

    use super::*;
    use crate::storage::placement::MappingPages;

    const FROM: u32 = 1_000_000;
    const TO: u32 = FROM + 600;

    fn node(name: &str) -> NodeInfo {
        NodeInfo {
            node: name.into(),
            labels: BTreeMap::new(),
            first_seen: FROM - 3600,
            last_seen: TO,
            agent_version: "test".into(),
            facts: None,
        }
    }

    fn total(node: &str, source: &str, samples: u64, value: u64) -> NodeTotal {
        NodeTotal {
            node: node.into(),
            source: source.into(),
            samples,
            value,
        }
    }

    fn counter(node: &str, name: &str, value: u64) -> (String, String, u64) {
        (node.into(), name.into(), value)
    }

    /// Two nodes that reported for 100 s each: one used 20 CPU-seconds and faulted 2,000 times,
    /// the other 40 CPU-seconds and 1,000 faults.
    fn two_nodes() -> WindowRows {
        WindowRows {
            nodes: vec![node("a"), node("b")],
            units: [(("page_fault".to_owned(), "page-faults".to_owned()), "faults".to_owned())].into(),
            totals: vec![
                (
                    EventKind::Cpu,
                    vec![
                        total("a", "cpu-clock", 2000, 20_000_000_000),
                        total("b", "cpu-clock", 4000, 40_000_000_000),
                    ],
                ),
                (
                    EventKind::PageFault,
                    vec![total("a", "page-faults", 20, 2000), total("b", "page-faults", 10, 1000)],
                ),
            ],
            counters: vec![
                counter("a", REPORTED_COUNTER, 100_000),
                counter("b", REPORTED_COUNTER, 100_000),
                counter("a", "numa_miss", 500),
            ],
            ..WindowRows::default()
        }
    }

    fn metric<'a>(w: &'a Window, name: &str) -> &'a Metric {
        w.metrics.iter().find(|m| m.name == name).unwrap_or_else(|| {
            panic!(
                "no metric {name}: {:?}",
                w.metrics.iter().map(|m| &m.name).collect::<Vec<_>>()
            )
        })
    }

    /// CPU per second of reporting, events per CPU-second, counters per second; the unit of a
    /// rate is its source's.
    #[test]
    fn rates_are_per_cpu_second_and_counters_per_second() {
        let w = Window::assemble(two_nodes(), &Selector::all(), FROM, TO, TO);
        assert_eq!(w.nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(metric(&w, "cpu").values, [Some(0.2), Some(0.4)]);
        let faults = metric(&w, "page_fault per CPU-second");
        assert_eq!(faults.values, [Some(100.0), Some(25.0)]);
        assert_eq!(faults.unit, "faults per CPU-second");
        assert_eq!(
            metric(&w, "numa_miss").values,
            [Some(5.0), None],
            "b counted no numa_miss"
        );
        assert_eq!(w.sources.len(), 2);
        assert_eq!(w.node_cpu_seconds, [Some(20.0), Some(40.0)]);
    }

    /// Counters and events of traffic between NUMA nodes are not measured on a node with one NUMA
    /// node (its zero is the machine's shape), measured on one with two, and on one without facts
    /// as counted; counters and events of anything else are measured everywhere.
    #[test]
    fn numa_counters_are_not_measured_on_a_single_numa_node() {
        let mut rows = two_nodes();
        let numa = |n: usize| bimodal_proto::v1::NodeFacts {
            numa_nodes: (0..n as u32)
                .map(|id| bimodal_proto::v1::NumaNode {
                    id,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        rows.nodes.push(node("c"));
        rows.nodes[0].facts = Some(numa(2));
        rows.nodes[1].facts = Some(numa(1));
        rows.counters.extend([
            counter("b", "numa_miss", 0),
            counter("b", "pgmajfault", 300),
            counter("c", REPORTED_COUNTER, 100_000),
            counter("c", "numa_miss", 200),
        ]);
        rows.totals.push((
            EventKind::RemoteAccess,
            vec![total("a", "remote-dram", 30, 3000), total("c", "remote-dram", 10, 1000)],
        ));
        let w = Window::assemble(rows, &Selector::all(), FROM, TO, TO);
        assert_eq!(metric(&w, "numa_miss").values, [Some(5.0), None, Some(2.0)]);
        assert_eq!(metric(&w, "pgmajfault").values, [None, Some(3.0), None]);
        // b had CPU time and no remote access: not a zero, not measured. c had no CPU time.
        assert_eq!(
            metric(&w, "remote_access per CPU-second").values,
            [Some(150.0), None, None]
        );
        assert_eq!(metric(&w, "page_fault per CPU-second").values[1], Some(25.0));
    }

    /// Values read for a sample of the nodes are kept for the sample: a node of it with a
    /// divisor and nothing read is 0, a node outside it has no value; read from every node, every
    /// node with a divisor has one.
    #[test]
    fn a_sample_s_values_are_kept_for_its_nodes() {
        let mut rows = two_nodes();
        rows.nodes.extend([node("c"), node("d")]);
        let w = Window::assemble(rows, &Selector::all(), FROM, TO, TO);
        let divisor = [Some(2.0), Some(4.0), Some(5.0), None];
        let sample = ["b".to_owned(), "c".to_owned(), "d".to_owned()];
        let read = NodesRead::Sample { nodes: &sample, of: 4 };
        let normalize = w.normalizer(&["c".to_owned(), "d".to_owned()], &divisor, read);
        let values = normalize(&[10, 7]);
        let by_node: Vec<Option<f64>> = (0..4).map(|i| values[i]).collect();
        assert_eq!(by_node, [None, Some(0.0), Some(2.0), None]);
        let every = w.normalizer(&["c".to_owned()], &divisor, NodesRead::Every)(&[10]);
        let by_node: Vec<Option<f64>> = (0..4).map(|i| every[i]).collect();
        assert_eq!(by_node, [Some(0.0), Some(0.0), Some(2.0), None]);
    }

    /// A node whose agent sampled the event and had none of it has 0; one whose agent did not
    /// sample it was not measured.
    #[test]
    fn an_event_a_node_did_not_sample_is_not_measured_there() {
        let mut rows = two_nodes();
        rows.nodes.push(node("c"));
        rows.nodes.push(node("d"));
        rows.totals[0].1.extend([
            total("c", "cpu-clock", 1000, 10_000_000_000),
            total("d", "cpu-clock", 1000, 10_000_000_000),
        ]);
        rows.counters.extend([
            counter("c", REPORTED_COUNTER, 100_000),
            counter("d", REPORTED_COUNTER, 100_000),
        ]);
        rows.sampled_with = ["a", "b", "c"]
            .into_iter()
            .map(|n| (n.to_owned(), "page_fault".to_owned(), "page-faults".to_owned()))
            .chain([("d".to_owned(), "cpu".to_owned(), "cpu-clock".to_owned())])
            .collect();
        let w = Window::assemble(rows, &Selector::all(), FROM, TO, TO);
        assert_eq!(
            metric(&w, "page_fault per CPU-second").values,
            [Some(100.0), Some(25.0), Some(0.0), None]
        );
    }

    /// Without a reported length (batches stored before it was counted), a node reported from
    /// its first sight, or the window's start, to its last refresh, or now.
    #[test]
    fn without_a_reported_length_a_node_reported_until_its_last_refresh() {
        let mut rows = two_nodes();
        rows.counters.clear();
        rows.nodes[1].last_seen = FROM + 100;
        let refresh = crate::storage::writer::NODE_REFRESH.as_secs() as f64;
        let w = Window::assemble(rows, &Selector::all(), FROM, TO, FROM + 300);
        let cpu = &metric(&w, "cpu").values;
        assert_eq!(cpu[0], Some(20.0 / 300.0), "a: until now");
        assert_eq!(
            cpu[1],
            Some(40.0 / (100.0 + refresh).min(300.0)),
            "b: until its last refresh"
        );
    }

    /// Where an agent sends its process's exact CPU time (`run --pid`), rates are divided by it
    /// rather than by the CPU samples; not when the selector picks processes itself (the
    /// process it picks may be another), and per-node function values are then divided by every
    /// process's CPU, read apart.
    #[test]
    fn exact_process_cpu_divides_unless_the_selector_picks_processes() {
        let mut rows = two_nodes();
        rows.counters.push(counter("a", PROCESS_CPU_COUNTER, 10_000_000_000));
        let w = Window::assemble(rows.clone(), &Selector::all(), FROM, TO, TO);
        assert_eq!(
            metric(&w, "page_fault per CPU-second").values,
            [Some(200.0), Some(25.0)]
        );
        assert_eq!(w.node_cpu_ns, [Some(20e9), Some(40e9)]);

        rows.node_cpu = Some(vec![
            total("a", "cpu-clock", 0, 50_000_000_000),
            total("b", "cpu-clock", 0, 60_000_000_000),
        ]);
        let selector = Selector::parse(r#"{comm="app"}"#).unwrap();
        let w = Window::assemble(rows, &selector, FROM, TO, TO);
        assert_eq!(
            metric(&w, "page_fault per CPU-second").values,
            [Some(100.0), Some(25.0)]
        );
        assert_eq!(w.node_cpu_ns, [Some(50e9), Some(60e9)]);
    }

    /// The share of placed pages far from their process's threads, and the finding it makes.
    #[test]
    fn remote_memory_and_its_findings() {
        let mut rows = two_nodes();
        let placement = |bss_node: u32| ProcessPlacement {
            time: FROM + 10,
            pid: 42,
            comm: "app".into(),
            executable: "/usr/bin/app".into(),
            threads_per_node: [(0, 4)].into(),
            mappings: vec![MappingPages {
                kind: "bss".into(),
                path: "/usr/bin/app".into(),
                start: 0x1000,
                end: 0x101000,
                permissions: "rw-p".into(),
                pages_per_node: [(bss_node, 256)].into(),
                page_size: 4096,
            }],
        };
        rows.placements = [
            ("a".to_owned(), vec![placement(1)]),
            ("b".to_owned(), vec![placement(0)]),
        ]
        .into();
        let w = Window::assemble(rows, &Selector::all(), FROM, TO, TO);
        assert_eq!(metric(&w, "remote_memory").values, [Some(1.0), Some(0.0)]);
        assert_eq!(w.findings[0].len(), 1, "{:?}", w.findings);
        assert!(w.findings[0][0].0.contains("bss of app"), "{:?}", w.findings[0]);
        assert!(w.findings[1].is_empty());
    }
}
