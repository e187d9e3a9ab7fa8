//! `bimodal-agent run`: sample continuously and stream batches to the server.
//!
//! The batches go out through [`bimodal_proto::stream`] (a bounded spool until the server
//! acknowledges each, resends after a broken stream, the server's retry delays honoured), or to
//! files with `--output-dir` for `import` to send later. Each interval's samples become a wire
//! batch in `batch`; the images they were taken in are uploaded by `upload`.

pub mod batch;
pub mod upload;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use bimodal_proto::client::ServerAddress;
use bimodal_proto::spool::SpoolOptions;
use bimodal_proto::stream::{ship, write_out};
use bimodal_proto::v1;
use tokio::sync::{mpsc, watch};

use crate::node::collect::{self, Collectors};
use crate::node::facts;
use crate::node::kubernetes::{ApiConfig, PodResolver};
use crate::node::topology::Topology;
use crate::node::work::WorkMetric;
use crate::sample::bpf::{MapSizes, Sampler, SamplerOptions, UnwindMode, WorkUprobe};
use crate::sample::events::{self, EventKind, Machine, Rates};
use crate::sample::probe::{self, LiveProber};
use crate::symbolize::Frames;
use batch::Interval;

/// Settings of `bimodal-agent run`.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The server (gRPC URL, e.g. `http://127.0.0.1:7070`), the CA its certificate is checked
    /// against and the token presented to it.
    pub server: ServerAddress,
    pub node: String,
    pub labels: BTreeMap<String, String>,
    /// Event kinds to sample; empty: every kind this machine offers.
    pub events: Vec<EventKind>,
    pub pid: Option<u32>,
    /// How often samples are drained and shipped.
    pub interval: Duration,
    pub rates: Rates,
    pub map_sizes: MapSizes,
    pub unwind: UnwindMode,
    pub symbolize: Symbolize,
    /// Largest image uploaded for the server to symbolize from, in bytes.
    pub upload_max_bytes: u64,
    /// Where separate debug files are looked for (`/usr/lib/debug`, `/lib/debug` by default).
    pub debug_dirs: Vec<PathBuf>,
    /// Images kept parsed for naming and unwinding.
    pub cached_images: usize,
    /// Tests only: programs the kernel is made to refuse.
    pub test_refusals: crate::sample::bpf::TestRefusals,
    /// Where unacknowledged batches are kept for resending, and how many bytes of them.
    pub spool: SpoolOptions,
    /// Memory placement is read every this many intervals (0: never); reading `numa_maps`
    /// walks page tables, so it is not done at every drain.
    pub placement_every: u32,
    /// How many processes' placement is read: those with the most samples, then the largest.
    pub placement_processes: usize,
    /// The Kubernetes API server that names the pods of sampled processes (namespace, pod and
    /// container name); `None`: samples carry pod UIDs only.
    pub kubernetes: Option<ApiConfig>,
    /// Calls of this function are the node's units of work, sent as the counter `work`.
    pub work_uprobe: Option<WorkUprobe>,
    /// Or the increase of this Prometheus counter.
    pub work_metric: Option<WorkMetric>,
    /// Write the hello and every batch here instead of sending them (`import` sends them later).
    pub output_dir: Option<PathBuf>,
    /// Serve the agent's own metrics on `GET /metrics` at this address.
    pub metrics_listen: Option<std::net::SocketAddr>,
}

/// Where user frames are named.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Symbolize {
    /// Frames of images with a build id go out as (build id, file offset); the server names them
    /// from images the agent uploads once per build id, and from debug files uploaded to it.
    #[default]
    Server,
    /// The agent names every frame it can before sending.
    Local,
}

/// What a `run` sampled and sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// The event kinds sampled.
    pub events: Vec<&'static str>,
    pub batches: u64,
    pub samples: u64,
    /// Samples lost whole or in part (the batches' loss counters).
    pub lost: u64,
    /// Batches that left the spool without being stored (full, refused, unreadable); those
    /// left in a spool on disk for the next start are not counted.
    pub dropped_batches: u64,
}

/// Samples and ships until `shutdown` turns true, then sends what is left once.
pub async fn run(opts: RunOptions, shutdown: watch::Receiver<bool>) -> anyhow::Result<RunSummary> {
    if let Some(listen) = opts.metrics_listen {
        let bound = crate::metrics::serve(listen).await?;
        tracing::info!(%bound, "serving the agent's metrics on /metrics");
    }
    // A bad CA bundle is a startup error, not a warning at the first lookup.
    let mut pods = opts
        .kubernetes
        .clone()
        .map(|config| {
            let url = config.url.clone();
            PodResolver::new(config).with_context(|| format!("failed to set up the Kubernetes API client for `{url}`"))
        })
        .transpose()?;
    let machine = Machine::read();
    let prober = LiveProber::new(opts.test_refusals);
    // One resolution of every kind: the facts sent to the server and the sources sampled.
    let resolutions = events::resolve_all(&opts.rates, &machine, &prober);
    let report = probe::report(&machine, &resolutions);
    let sources = if opts.events.is_empty() {
        for r in resolutions.iter().filter(|r| r.chosen.is_none()) {
            let why: Vec<String> = r
                .rejected
                .iter()
                .map(|x| format!("{}: {}", x.candidate, x.reason))
                .collect();
            tracing::info!(
                event = r.event.name(),
                "not offered by this machine: {}",
                why.join("; ")
            );
        }
        let offered: Vec<_> = resolutions.into_iter().filter_map(|r| r.chosen).collect();
        anyhow::ensure!(
            !offered.is_empty(),
            "no event kind can be sampled on this machine (see `bimodal-agent probe`)"
        );
        offered
    } else {
        // Kinds asked for that this node cannot sample (a kernel that refuses their program, a
        // PMU it lacks) are left out, said so, and the others sampled: a node of a fleet never
        // goes without a profile for one of them. Only when none can be sampled is it an error.
        let (available, unavailable): (Vec<_>, Vec<_>) = opts
            .events
            .iter()
            .map(|&e| {
                resolutions
                    .iter()
                    .find(|r| r.event == e)
                    .cloned()
                    .unwrap_or_else(|| events::resolve(e, &opts.rates, &machine, &prober))
                    .into_source()
            })
            .partition(Result::is_ok);
        let mut unavailable: Vec<events::Unavailable> = unavailable.into_iter().filter_map(Result::err).collect();
        if available.is_empty() {
            if let Some(first) = unavailable.drain(..).next() {
                return Err(first.into());
            }
        }
        for u in &unavailable {
            tracing::warn!("left out: {u}");
        }
        available.into_iter().filter_map(Result::ok).collect()
    };
    let root = Path::new("/");
    let topology = Topology::read_from(root).context("failed to read the node's topology")?;
    let mut sampler = Sampler::start(SamplerOptions {
        sources,
        pid: opts.pid,
        map_sizes: opts.map_sizes,
        unwind: opts.unwind,
        // The server stores what data the samples touched.
        data_addresses: true,
        work_uprobe: opts.work_uprobe.clone(),
        cached_images: opts.cached_images,
        test_refusals: opts.test_refusals,
    })?;
    // The facts say what the sampler does: the unwinding each source got, the sources whose
    // programs the kernel refused.
    let report = report.with_sampler(&sampler);
    let node_facts = facts::node_facts(&topology, &report);
    for s in sampler.sources() {
        let unwinding = sampler.unwinding(s.event);
        let method = unwinding.map_or("", |u| u.method.name());
        match unwinding.and_then(|u| u.reduced.as_deref()) {
            None => tracing::info!(event = s.event.name(), source = %s.description, unwinding = method, "sampling"),
            Some(why) => tracing::warn!(
                event = s.event.name(),
                source = %s.description,
                unwinding = method,
                "sampling with reduced unwinding, chains may be short: {why}"
            ),
        }
    }
    for (s, why) in sampler.refused_sources() {
        tracing::warn!(
            event = s.event.name(),
            "not sampled, the kernel refused its program: {why}"
        );
    }
    crate::metrics::programs(sampler.program_loads(), &report);

    let hello = v1::Hello {
        node: opts.node.clone(),
        labels: opts.labels.clone().into_iter().collect(),
        agent_version: env!("CARGO_PKG_VERSION").into(),
        agent_instance: uuid::Uuid::new_v4().as_bytes().to_vec(),
        kernel_release: kernel_release(),
        facts: Some(node_facts),
    };

    // Draining and symbolizing are blocking work: they run on their own thread. Its batches
    // wait for their new images to be offered to the server (`hold_for_uploads`), then ship.
    let (held_tx, held_rx) = mpsc::channel::<Held>(16);
    let (batches_tx, batches_rx) = mpsc::channel::<v1::Batch>(4);
    tokio::spawn(hold_for_uploads(held_rx, batches_tx));
    let interval = opts.interval;
    let mut stop = shutdown.clone();
    // Batches written to files are imported later, maybe far away: named here.
    let by_server = opts.symbolize == Symbolize::Server && opts.output_dir.is_none();
    let work_metric = opts.work_metric.clone();
    let (images_tx, images_rx) = mpsc::channel::<upload::Offer>(16);
    if by_server {
        tokio::spawn(upload::run(
            opts.server.clone(),
            opts.upload_max_bytes,
            opts.debug_dirs.clone(),
            images_rx,
        ));
    }
    let debug_dirs = opts.debug_dirs.clone();
    let processes = sampler.processes();
    let cached_images = opts.cached_images;
    let (pid, placement_every, placement_processes) = (opts.pid, opts.placement_every, opts.placement_processes);
    let sampling = tokio::task::spawn_blocking(move || -> anyhow::Result<RunSummary> {
        let frames = if by_server {
            Frames::by_server()
        } else {
            Frames::default()
        }
        .with_debug_dirs(debug_dirs)
        .with_processes(processes)
        .with_cached_images(cached_images);
        // Every baseline is read here: the first interval's increases are measured from now.
        let mut collectors = Collectors::default().with(collect::NodeCounterDeltas::new(root.into()));
        if let Some(pid) = pid {
            collectors = collectors.with(collect::ProcessCpu::new(root.into(), pid));
        }
        let mut collectors = collectors
            .with(collect::Work::new(work_metric))
            .with(collect::Counted::open())
            .with(collect::SamplesTaken)
            .with(collect::Placements::new(
                root.into(),
                topology,
                placement_every,
                placement_processes,
            ));
        let mut summary = RunSummary {
            events: sampler.sources().iter().map(|s| s.event.name()).collect(),
            ..RunSummary::default()
        };
        let mut start = SystemTime::now();
        loop {
            // Data samples are read as they come: an interval of page faults holds more than
            // their ring does.
            let done = wait_or_stop(&mut stop, interval, || {
                if let Err(e) = sampler.read_data() {
                    tracing::warn!("{e}");
                }
            });
            let draining = std::time::Instant::now();
            let drained = sampler.drain()?;
            let end = SystemTime::now();
            let mut b = batch::build(&drained, sampler.sources(), &frames, Interval { start, end });
            start = end;
            if let Some(pods) = &mut pods {
                batch::name_pods(&mut b, pods);
            }
            let mut offered = None;
            if by_server {
                // The uploader skips build ids it has handled; a full queue only delays one.
                let (tx, rx) = tokio::sync::oneshot::channel();
                let offer = upload::Offer {
                    images: upload::unnamed_images(&b),
                    offered: tx,
                };
                offered = images_tx.try_send(offer).is_ok().then_some(rx);
            }
            collectors.collect(&mut b, &mut sampler);
            crate::metrics::count_batch(&b, draining.elapsed());
            summary.batches += 1;
            summary.samples += b.samples.iter().map(|s| s.count).sum::<u64>();
            summary.lost += b.sources.iter().map(|s| s.dropped).sum::<u64>();
            let held = Held {
                batch: b,
                offered,
                until: tokio::time::Instant::now() + HOLD_FOR_UPLOADS,
            };
            if held_tx.blocking_send(held).is_err() || done {
                return Ok(summary);
            }
            crate::host::memory::release_freed();
        }
    });

    let shipping = async {
        match &opts.output_dir {
            Some(dir) => write_out(dir, &hello, batches_rx).await.map(|()| 0),
            None => ship(opts.server.clone(), &opts.spool, hello, batches_rx, shutdown.clone()).await,
        }
    };
    let (sampled, shipped) = tokio::join!(sampling, shipping);
    let summary = sampled.context("sampling thread panicked")??;
    Ok(RunSummary {
        dropped_batches: shipped?,
        ..summary
    })
}

/// How long a batch waits at most for the images its frames point into to be offered to the
/// server. The server names frames from its debug-info store as it writes their per-function
/// rows: a batch that arrives before its executable is stored is written with `[module+0x…]`
/// in place of each name, and compare reads those as functions of their own. In a clean-clone
/// CI run, with eight agents uploading the same images at once, the fleet's first batches
/// came before the upload and split `load_session` in two. An image is offered once per build
/// id, so only batches with new images wait.
pub const HOLD_FOR_UPLOADS: Duration = Duration::from_secs(10);

/// A batch on its way out, and the sign that its images were offered.
struct Held {
    batch: v1::Batch,
    offered: Option<tokio::sync::oneshot::Receiver<()>>,
    until: tokio::time::Instant,
}

/// Passes batches on in order, each once its images were offered or [`HOLD_FOR_UPLOADS`] after it
/// was made, whichever comes first.
async fn hold_for_uploads(mut held: mpsc::Receiver<Held>, batches: mpsc::Sender<v1::Batch>) {
    while let Some(Held { batch, offered, until }) = held.recv().await {
        if let Some(offered) = offered {
            let _ = tokio::time::timeout_at(until, offered).await;
        }
        if batches.send(batch).await.is_err() {
            return;
        }
    }
}

/// Sleeps for `interval` in short steps, calling `each_step` after each; true when shutdown was asked
/// for.
fn wait_or_stop(stop: &mut watch::Receiver<bool>, interval: Duration, mut each_step: impl FnMut()) -> bool {
    let step = Duration::from_millis(100);
    let mut waited = Duration::ZERO;
    while waited < interval {
        if *stop.borrow() {
            return true;
        }
        std::thread::sleep(step);
        waited += step;
        each_step();
    }
    *stop.borrow()
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(n: u8) -> v1::Batch {
        v1::Batch {
            batch_id: vec![n],
            ..Default::default()
        }
    }

    /// A batch waits for its images to be offered, at most until its deadline; batches stay in
    /// order, and one with nothing to offer does not wait. (Real time, in tenths of a second:
    /// tokio's paused clock needs its `test-util` feature, which made the images' build of the
    /// binaries, without dev-dependencies, build tokio and everything above it again.)
    #[tokio::test]
    async fn batches_wait_for_their_images_at_most_their_hold() {
        let (held_tx, held_rx) = mpsc::channel(4);
        let (batches_tx, mut batches_rx) = mpsc::channel(4);
        tokio::spawn(hold_for_uploads(held_rx, batches_tx));
        let start = tokio::time::Instant::now();
        let (offered_tx, offered_rx) = tokio::sync::oneshot::channel();
        let held = |n, offered| Held {
            batch: batch(n),
            offered,
            until: start + HOLD_FOR_UPLOADS,
        };
        held_tx.send(held(1, Some(offered_rx))).await.unwrap();
        held_tx.send(held(2, None)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(batches_rx.try_recv().is_err(), "sent before its images were offered");
        drop(offered_tx);
        assert_eq!(batches_rx.recv().await.unwrap().batch_id, [1]);
        assert_eq!(batches_rx.recv().await.unwrap().batch_id, [2]);
        assert!(start.elapsed() < HOLD_FOR_UPLOADS, "held past the offer");

        // An upload that never ends holds its batch until the deadline, no longer.
        let (_never, never_rx) = tokio::sync::oneshot::channel::<()>();
        let start = tokio::time::Instant::now();
        let hold = Duration::from_millis(300);
        held_tx
            .send(Held {
                batch: batch(3),
                offered: Some(never_rx),
                until: start + hold,
            })
            .await
            .unwrap();
        assert_eq!(batches_rx.recv().await.unwrap().batch_id, [3]);
        let waited = start.elapsed();
        assert!(waited >= hold, "held {waited:?}");
    }
}
