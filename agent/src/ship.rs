//! `bimodal-agent run`: sample continuously and stream batches to the server.
//!
//! A batch stays in a bounded spool until the server acks it. After a broken stream every
//! spooled batch is sent again with `resend = true`, and the server stores it at most once.
//! When the spool is full the oldest batch is dropped and counted, never silently.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use bimodal_proto::v1::{self, ingest_client::IngestClient, ingest_request, ingest_response};
use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt;

use crate::batch::{self, Interval};
use crate::bpf::{MapSizes, Sampler, SamplerOptions, UnwindMode};
use crate::counters::{CounterDelta, NodeCounters};
use crate::events::counting::CountingEvents;
use crate::events::{self, EventKind, LiveProber, Machine, Rates};
use crate::kubernetes::{ApiConfig, PodResolver};
use crate::placement::{self, Placement};
use crate::symbolize::Frames;
use crate::topology::Topology;
use crate::{facts, probe, upload};

/// Settings of `bimodal-agent run`.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// gRPC endpoint of the server, e.g. `http://127.0.0.1:7070`.
    pub server_url: String,
    pub node: String,
    pub labels: BTreeMap<String, String>,
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
    /// Unacknowledged batches kept for resending.
    pub spool_batches: usize,
    /// Memory placement is read every this many intervals (0: never); reading `numa_maps`
    /// walks page tables, so it is not done at every drain.
    pub placement_every: u32,
    /// How many processes' placement is read: those with the most samples, then the largest.
    pub placement_processes: usize,
    /// The Kubernetes API server that names the pods of sampled processes (namespace, pod and
    /// container name); `None`: samples carry pod UIDs only.
    pub kubernetes: Option<ApiConfig>,
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

/// Samples and ships until `shutdown` turns true, then sends what is left once.
pub async fn run(opts: RunOptions, shutdown: watch::Receiver<bool>) -> anyhow::Result<()> {
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
    let prober = LiveProber::default();
    let report = probe::probe(&machine, &opts.rates, &prober);
    let sources = opts
        .events
        .iter()
        .map(|&e| events::resolve(e, &opts.rates, &machine, &prober).into_source())
        .collect::<Result<Vec<_>, _>>()?;
    let root = Path::new("/");
    let topology = Topology::read_from(root).context("failed to read the node's topology")?;
    let node_facts = facts::node_facts(&topology, &report);
    let mut sampler = Sampler::start(SamplerOptions {
        sources,
        pid: opts.pid,
        map_sizes: opts.map_sizes,
        unwind: opts.unwind,
        // The server stores what data the samples touched.
        data_addresses: true,
    })?;
    for s in sampler.sources() {
        tracing::info!(event = s.event.name(), source = %s.description, "sampling");
    }

    let hello = v1::Hello {
        node: opts.node.clone(),
        labels: opts.labels.clone().into_iter().collect(),
        agent_version: env!("CARGO_PKG_VERSION").into(),
        agent_instance: uuid::Uuid::new_v4().as_bytes().to_vec(),
        kernel_release: kernel_release(),
        facts: Some(node_facts),
    };

    // Draining and symbolizing are blocking work: they run on their own thread.
    let (batches_tx, batches_rx) = mpsc::channel::<v1::Batch>(4);
    let interval = opts.interval;
    let placement_every = u64::from(opts.placement_every);
    let placement_processes = opts.placement_processes;
    let mut stop = shutdown.clone();
    let by_server = opts.symbolize == Symbolize::Server;
    let (images_tx, images_rx) = mpsc::channel::<Vec<upload::ImageRef>>(16);
    if by_server {
        tokio::spawn(upload::run(opts.server_url.clone(), opts.upload_max_bytes, images_rx));
    }
    let sampling = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let frames = if by_server {
            Frames::by_server()
        } else {
            Frames::default()
        };
        let mut start = SystemTime::now();
        let mut counters = NodeCounters::read_from(root).ok();
        let mut counting = CountingEvents::open();
        for (name, reason) in &counting.unavailable {
            tracing::info!(counter = name, %reason, "cannot be counted here");
        }
        counting.deltas();
        let mut busiest: HashMap<u32, u64> = HashMap::new();
        for n in 0u64.. {
            let done = wait_or_stop(&mut stop, interval);
            let drained = sampler.drain()?;
            let end = SystemTime::now();
            let mut b = batch::build(&drained, sampler.sources(), &frames, Interval { start, end });
            start = end;
            if let Some(pods) = &mut pods {
                batch::name_pods(&mut b, pods);
            }
            if by_server {
                // The uploader skips build ids it has handled; a full queue only delays one.
                let _ = images_tx.try_send(upload::unnamed_images(&b));
            }
            let now = NodeCounters::read_from(root).ok();
            if let (Some(prev), Some(next)) = (&counters, &now) {
                b.counters = facts::counters(&CounterDelta::between(prev, next));
            }
            counters = now;
            for (name, value) in counting.deltas() {
                b.counters.push(v1::Counter {
                    name: name.into(),
                    value,
                });
            }
            for source in sampler.sources() {
                let taken = b
                    .samples
                    .iter()
                    .filter(|s| s.event == source.event as i32)
                    .map(|s| s.count)
                    .sum();
                b.counters.push(v1::Counter {
                    name: format!("samples_{}", source.event.name()),
                    value: taken,
                });
            }
            for s in &b.samples {
                *busiest.entry(s.pid).or_default() += s.count;
            }
            if placement_every > 0 && n % placement_every == 0 {
                b.placements = placements(root, &topology, std::mem::take(&mut busiest), placement_processes);
            }
            if batches_tx.blocking_send(b).is_err() || done {
                return Ok(());
            }
        }
        Ok(())
    });

    let shipping = ship(opts.clone(), hello, batches_rx, shutdown.clone());
    let (sampled, shipped) = tokio::join!(sampling, shipping);
    sampled.context("sampling thread panicked")??;
    shipped
}

/// Sleeps for `interval` in short steps; true when shutdown was asked for.
fn wait_or_stop(stop: &mut watch::Receiver<bool>, interval: Duration) -> bool {
    let step = Duration::from_millis(100);
    let mut waited = Duration::ZERO;
    while waited < interval {
        if *stop.borrow() {
            return true;
        }
        std::thread::sleep(step);
        waited += step;
    }
    *stop.borrow()
}

struct Spool {
    batches: VecDeque<(v1::Batch, bool)>,
    limit: usize,
    dropped_batches: u64,
}

impl Spool {
    fn push(&mut self, b: v1::Batch) {
        if self.batches.len() >= self.limit {
            if let Some((old, _)) = self.batches.pop_front() {
                self.dropped_batches += 1;
                tracing::warn!(
                    samples = old.samples.len(),
                    dropped_batches = self.dropped_batches,
                    "spool full: dropped the oldest unacknowledged batch"
                );
            }
        }
        self.batches.push_back((b, false));
    }

    fn ack(&mut self, id: &[u8]) {
        self.batches.retain(|(b, _)| b.batch_id != id);
    }
}

async fn ship(
    opts: RunOptions,
    hello: v1::Hello,
    mut batches: mpsc::Receiver<v1::Batch>,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut spool = Spool {
        batches: VecDeque::new(),
        limit: opts.spool_batches.max(1),
        dropped_batches: 0,
    };
    let mut backoff = Duration::from_millis(200);
    let mut sampler_done = false;
    loop {
        match stream_once(&opts.server_url, &hello, &mut spool, &mut batches, &mut sampler_done).await {
            Ok(()) => return Ok(()),
            Err(e) => {
                let stopping = *shutdown.borrow();
                if stopping && sampler_done {
                    anyhow::bail!(
                        "stopping with {} unacknowledged batches: the server at {} is unreachable: {e:#}",
                        spool.batches.len(),
                        opts.server_url
                    );
                }
                tracing::warn!(error = format!("{e:#}"), retry_in = ?backoff, spooled = spool.batches.len(), "stream to server failed");
                // Keep accepting batches while waiting, so sampling never blocks.
                let sleep = tokio::time::sleep(backoff);
                tokio::pin!(sleep);
                loop {
                    tokio::select! {
                        _ = &mut sleep => break,
                        b = batches.recv(), if !sampler_done => match b {
                            Some(b) => spool.push(b),
                            None => sampler_done = true,
                        },
                    }
                }
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    }
}

/// One stream: hello, every spooled batch, then new ones as they come, until the sampler is
/// done and everything is acked (Ok) or the stream breaks (Err).
async fn stream_once(
    url: &str,
    hello: &v1::Hello,
    spool: &mut Spool,
    batches: &mut mpsc::Receiver<v1::Batch>,
    sampler_done: &mut bool,
) -> anyhow::Result<()> {
    let mut client = IngestClient::connect(url.to_owned())
        .await
        .with_context(|| format!("failed to connect to `{url}`"))?
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    let (tx, rx) = mpsc::channel::<v1::IngestRequest>(16);
    let request = |m| v1::IngestRequest { message: Some(m) };
    tx.send(request(ingest_request::Message::Hello(hello.clone()))).await?;
    let mut acks = client
        .stream(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .context("server refused the stream")?
        .into_inner();
    for (b, sent) in spool.batches.iter_mut() {
        let mut b = b.clone();
        b.resend = *sent;
        *sent = true;
        tx.send(request(ingest_request::Message::Batch(b))).await?;
    }
    loop {
        if *sampler_done && spool.batches.is_empty() {
            return Ok(());
        }
        tokio::select! {
            b = batches.recv(), if !*sampler_done => match b {
                Some(b) => {
                    spool.push(b.clone());
                    if let Some(last) = spool.batches.back_mut() { last.1 = true; }
                    tx.send(request(ingest_request::Message::Batch(b))).await?;
                }
                None => *sampler_done = true,
            },
            msg = acks.next() => match msg {
                Some(Ok(v1::IngestResponse { message: Some(ingest_response::Message::Ack(ack)) })) => {
                    match v1::ack::Status::try_from(ack.status) {
                        Ok(v1::ack::Status::Stored | v1::ack::Status::Duplicate) => {}
                        _ => tracing::error!(error = %ack.error, "server rejected a batch; it will not be resent"),
                    }
                    spool.ack(&ack.batch_id);
                }
                Some(Ok(_)) => {}
                Some(Err(status)) => anyhow::bail!("server ended the stream: {status}"),
                None => anyhow::bail!("server closed the stream"),
            },
        }
    }
}

/// Placement of the processes with the most samples since the last reading, topped up with the
/// largest by resident memory; processes that exit meanwhile are skipped.
fn placements(root: &Path, topology: &Topology, busiest: HashMap<u32, u64>, n: usize) -> Vec<v1::Placement> {
    let mut by_samples: Vec<(u32, u64)> = busiest.into_iter().collect();
    by_samples.sort_unstable_by_key(|&(_, count)| std::cmp::Reverse(count));
    let mut pids: Vec<u32> = by_samples.into_iter().map(|(pid, _)| pid).take(n).collect();
    for pid in placement::top_by_rss(root, n).unwrap_or_default() {
        if pids.len() >= n {
            break;
        }
        if !pids.contains(&pid) {
            pids.push(pid);
        }
    }
    pids.into_iter()
        .filter_map(|pid| Placement::read(root, pid, &|cpu| topology.node_of_cpu(cpu)).ok())
        .map(|p| facts::placement(&p, root))
        .collect()
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}
