//! What `run` adds to each batch besides its samples, one collector per kind of node state, all
//! called once per interval in order ([`Collectors::collect`]): the node's NUMA and fault counter
//! increases, the sampled process's CPU time, units of work, counted hardware events, samples
//! taken per event kind, and every few intervals memory placement. A new kind of node state is a
//! new [`Collector`], not another branch of the sampling loop.

use std::collections::HashMap;
use std::path::PathBuf;

use bimodal_proto::v1;

use crate::node::counters::{self, CounterDelta, NodeCounters};
use crate::node::facts;
use crate::node::placement::{self, Placement};
use crate::node::topology::Topology;
use crate::node::work::{WorkMetric, WorkScraper};
use crate::sample::bpf::Sampler;
use crate::sample::events::counting::CountingEvents;

/// One kind of node state, read at the end of every interval into that interval's batch.
pub trait Collector: Send {
    /// Adds what it read over the interval that just ended to `batch` (whose samples are in).
    fn collect(&mut self, batch: &mut v1::Batch, sampler: &mut Sampler);
}

/// The collectors of one `run`, called in the order they were added.
#[derive(Default)]
pub struct Collectors(Vec<Box<dyn Collector>>);

impl std::fmt::Debug for Collectors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collectors").field("count", &self.0.len()).finish()
    }
}

impl Collectors {
    pub fn with(mut self, collector: impl Collector + 'static) -> Self {
        self.0.push(Box::new(collector));
        self
    }

    /// Every collector, in order, into `batch`.
    pub fn collect(&mut self, batch: &mut v1::Batch, sampler: &mut Sampler) {
        for collector in &mut self.0 {
            collector.collect(batch, sampler);
        }
    }
}

fn counter(batch: &mut v1::Batch, name: impl Into<String>, value: u64) {
    batch.counters.push(v1::Counter {
        name: name.into(),
        value,
    });
}

/// How the node's NUMA, migration and fault counters (`/proc/vmstat`, per-node stats) grew.
#[derive(Debug)]
pub struct NodeCounterDeltas {
    root: PathBuf,
    previous: Option<NodeCounters>,
}

impl NodeCounterDeltas {
    /// Reads the baseline now: the first interval's increase is measured from here.
    pub fn new(root: PathBuf) -> Self {
        let previous = NodeCounters::read_from(&root).ok();
        NodeCounterDeltas { root, previous }
    }
}

impl Collector for NodeCounterDeltas {
    fn collect(&mut self, batch: &mut v1::Batch, _: &mut Sampler) {
        let now = NodeCounters::read_from(&self.root).ok();
        if let (Some(before), Some(now)) = (&self.previous, &now) {
            batch
                .counters
                .extend(facts::counters(&CounterDelta::between(before, now)));
        }
        self.previous = now;
    }
}

/// The sampled process's CPU time over the interval, exact (`run --pid`): what the server divides
/// that node's rates by.
#[derive(Debug)]
pub struct ProcessCpu {
    root: PathBuf,
    pid: u32,
    previous: Option<u64>,
}

impl ProcessCpu {
    pub fn new(root: PathBuf, pid: u32) -> Self {
        let previous = counters::process_cpu_ns(&root, pid);
        ProcessCpu { root, pid, previous }
    }
}

impl Collector for ProcessCpu {
    fn collect(&mut self, batch: &mut v1::Batch, _: &mut Sampler) {
        let now = counters::process_cpu_ns(&self.root, self.pid);
        if let (Some(before), Some(now)) = (self.previous, now) {
            counter(batch, bimodal_proto::PROCESS_CPU_COUNTER, now.saturating_sub(before));
        }
        self.previous = now;
    }
}

/// Units of work over the interval: the increase of a scraped Prometheus counter
/// (`--work-metric`), or else calls counted by the work uprobe (`--work-uprobe`), when either
/// is set.
#[derive(Debug)]
pub struct Work {
    scraper: Option<WorkScraper>,
}

impl Work {
    /// With a metric, scrapes the baseline now.
    pub fn new(metric: Option<WorkMetric>) -> Self {
        let mut scraper = metric.map(WorkScraper::new);
        if let Some(scraper) = &mut scraper {
            if let Err(e) = scraper.work_done() {
                tracing::warn!("units of work: {e}");
            }
        }
        Work { scraper }
    }
}

impl Collector for Work {
    fn collect(&mut self, batch: &mut v1::Batch, sampler: &mut Sampler) {
        let work = match &mut self.scraper {
            Some(scraper) => scraper.work_done().unwrap_or_else(|e| {
                // Not measured is not zero work: the interval goes without the counter.
                tracing::warn!("units of work: {e}");
                None
            }),
            None => sampler.work_done(),
        };
        if let Some(work) = work {
            counter(batch, bimodal_proto::WORK_COUNTER, work);
        }
    }
}

/// Hardware events counted, not sampled (instructions, cycles, ... where a PMU counts them).
#[derive(Debug)]
pub struct Counted(CountingEvents);

impl Counted {
    /// Opens what this machine can count, says what it cannot, and takes the baseline.
    pub fn open() -> Self {
        let mut counting = CountingEvents::open();
        for (name, reason) in &counting.unavailable {
            tracing::info!(counter = name, %reason, "cannot be counted here");
        }
        counting.deltas();
        Counted(counting)
    }
}

impl Collector for Counted {
    fn collect(&mut self, batch: &mut v1::Batch, _: &mut Sampler) {
        for (name, value) in self.0.deltas() {
            counter(batch, name, value);
        }
    }
}

/// Samples taken per event kind (`samples_<event>`), zeros included: an interval without
/// samples of a kind is told apart from one whose batch went missing.
#[derive(Debug)]
pub struct SamplesTaken;

impl Collector for SamplesTaken {
    fn collect(&mut self, batch: &mut v1::Batch, sampler: &mut Sampler) {
        for source in sampler.sources() {
            let taken = batch
                .samples
                .iter()
                .filter(|s| s.event == source.event as i32)
                .map(|s| s.count)
                .sum();
            counter(batch, format!("samples_{}", source.event.name()), taken);
        }
    }
}

/// Memory placement of the processes with the most samples since the last reading, topped up
/// with the largest by resident memory, every `every` intervals (reading `numa_maps` walks page
/// tables, so not at every one).
#[derive(Debug)]
pub struct Placements {
    root: PathBuf,
    topology: Topology,
    every: u64,
    processes: usize,
    interval: u64,
    busiest: HashMap<u32, u64>,
}

impl Placements {
    pub fn new(root: PathBuf, topology: Topology, every: u32, processes: usize) -> Self {
        Placements {
            root,
            topology,
            every: u64::from(every),
            processes,
            interval: 0,
            busiest: HashMap::new(),
        }
    }

    fn read(&mut self) -> Vec<v1::Placement> {
        let mut by_samples: Vec<(u32, u64)> = std::mem::take(&mut self.busiest).into_iter().collect();
        by_samples.sort_unstable_by_key(|&(_, count)| std::cmp::Reverse(count));
        let n = self.processes;
        let mut pids: Vec<u32> = by_samples.into_iter().map(|(pid, _)| pid).take(n).collect();
        for pid in placement::top_by_rss(&self.root, n).unwrap_or_default() {
            if pids.len() >= n {
                break;
            }
            if !pids.contains(&pid) {
                pids.push(pid);
            }
        }
        // Processes that exit meanwhile are skipped.
        pids.into_iter()
            .filter_map(|pid| Placement::read(&self.root, pid, &|cpu| self.topology.node_of_cpu(cpu)).ok())
            .map(|p| facts::placement(&p, &self.root))
            .collect()
    }
}

impl Collector for Placements {
    fn collect(&mut self, batch: &mut v1::Batch, _: &mut Sampler) {
        for s in &batch.samples {
            *self.busiest.entry(s.pid).or_default() += s.count;
        }
        if self.every > 0 && self.interval.is_multiple_of(self.every) {
            batch.placements = self.read();
        }
        self.interval += 1;
    }
}
