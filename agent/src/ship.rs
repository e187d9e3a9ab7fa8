//! `bimodal-agent run`: sample continuously and stream batches to the server.
//!
//! A batch stays in a bounded spool ([`crate::spool`], in memory or on disk) until the server
//! acks it. After a broken stream, or a restart of an agent with a spool on disk, every spooled
//! batch is sent again with `resend = true`, and the server stores it at most once. When the
//! server is overloaded it answers "retry" with a delay, which is honoured. When the spool is
//! full the oldest batch is dropped and counted, never silently; so is a batch the server
//! refuses for good (malformed, undecodable, larger than it accepts).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use bimodal_proto::v1::{self, ingest_request, ingest_response};
use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt;

use crate::batch::{self, Interval};
use crate::bpf::{MapSizes, Sampler, SamplerOptions, UnwindMode, WorkUprobe};
use crate::collect::{self, Collectors};
use crate::connect::ServerAddress;
use crate::events::{self, EventKind, LiveProber, Machine, Rates};
use crate::kubernetes::{ApiConfig, PodResolver};
use crate::metrics::metrics;
use crate::spool::{Dropped, Spool, SpoolOptions, MAX_BATCH_BYTES};
use crate::symbolize::Frames;
use crate::topology::Topology;
use crate::work::WorkMetric;
use crate::{facts, probe, upload};

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
    let prober = LiveProber::default();
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
        opts.events
            .iter()
            .map(|&e| {
                resolutions
                    .iter()
                    .find(|r| r.event == e)
                    .cloned()
                    .unwrap_or_else(|| events::resolve(e, &opts.rates, &machine, &prober))
                    .into_source()
            })
            .collect::<Result<Vec<_>, _>>()?
    };
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
        work_uprobe: opts.work_uprobe.clone(),
        cached_images: opts.cached_images,
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
    let mut stop = shutdown.clone();
    // Batches written to files are imported later, maybe far away: named here.
    let by_server = opts.symbolize == Symbolize::Server && opts.output_dir.is_none();
    let work_metric = opts.work_metric.clone();
    let (images_tx, images_rx) = mpsc::channel::<Vec<upload::ImageRef>>(16);
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
            if by_server {
                // The uploader skips build ids it has handled; a full queue only delays one.
                let _ = images_tx.try_send(upload::unnamed_images(&b));
            }
            collectors.collect(&mut b, &mut sampler);
            crate::metrics::count_batch(&b, draining.elapsed());
            summary.batches += 1;
            summary.samples += b.samples.iter().map(|s| s.count).sum::<u64>();
            summary.lost += b.sources.iter().map(|s| s.dropped).sum::<u64>();
            if batches_tx.blocking_send(b).is_err() || done {
                return Ok(summary);
            }
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

/// The hello of a node's written batches, and the batches' file names (in the order written).
const HELLO_FILE: &str = "hello.pb";
const BATCH_PREFIX: &str = "batch-";

/// Writes the hello and every batch under `dir` (`run --output-dir`), each file complete or
/// absent (written aside, then renamed): for nodes that cannot reach a server (air-gapped, a test
/// guest). [`import`] sends them later, through the same shipping as `run`.
async fn write_out(dir: &Path, hello: &v1::Hello, mut batches: mpsc::Receiver<v1::Batch>) -> anyhow::Result<()> {
    let write = |name: String, bytes: Vec<u8>| -> anyhow::Result<()> {
        let path = dir.join(&name);
        let aside = dir.join(format!(".{name}.part"));
        std::fs::write(&aside, bytes).with_context(|| format!("failed to write {}", aside.display()))?;
        std::fs::rename(&aside, &path).with_context(|| format!("failed to write {}", path.display()))
    };
    std::fs::create_dir_all(dir).with_context(|| format!("failed to create {}", dir.display()))?;
    write(HELLO_FILE.into(), prost::Message::encode_to_vec(hello))?;
    let mut written = 0u64;
    while let Some(b) = batches.recv().await {
        // Sortable by time, then by order within the agent's run.
        let name = format!("{BATCH_PREFIX}{:020}-{written:08}.pb", b.start_unix_nanos.max(0));
        write(name, prost::Message::encode_to_vec(&b))?;
        written += 1;
    }
    tracing::info!(batches = written, dir = %dir.display(), "wrote batches for import");
    Ok(())
}

/// Sends the batches `run --output-dir` wrote under `dir` to `server`, with
/// `run`'s shipping: acks, resends and the server's retry delays; a batch the server holds
/// already is acknowledged as a duplicate, so importing twice stores once. The number of
/// batches sent.
pub async fn import(dir: &Path, server: &ServerAddress) -> anyhow::Result<usize> {
    let hello_path = dir.join(HELLO_FILE);
    let hello_bytes = std::fs::read(&hello_path)
        .with_context(|| format!("{} is not a directory `run --output-dir` wrote", dir.display()))?;
    let hello: v1::Hello = prost::Message::decode(&hello_bytes[..])
        .with_context(|| format!("{} is not a hello bimodal-agent wrote", hello_path.display()))?;
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("failed to list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(BATCH_PREFIX) && n.ends_with(".pb"))
        })
        .collect();
    names.sort();
    let count = names.len();
    let (tx, rx) = mpsc::channel::<v1::Batch>(4);
    let reader = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        for path in names {
            let bytes = std::fs::read(&path).with_context(|| format!("failed to read {}", path.display()))?;
            let batch: v1::Batch = prost::Message::decode(&bytes[..])
                .with_context(|| format!("{} is not a batch bimodal-agent wrote", path.display()))?;
            if tx.blocking_send(batch).is_err() {
                break;
            }
        }
        Ok(())
    });
    // Stopping from the start: a server that cannot be reached once every batch is read ends the
    // import with an error (nothing is lost: the files stay, and importing again is safe).
    let (_stop, stopping) = watch::channel(true);
    // Every batch may wait unacknowledged at once: none is dropped for room.
    let shipped = ship(server.clone(), &SpoolOptions::memory(u64::MAX), hello, rx, stopping).await;
    reader.await.context("reading the batches panicked")??;
    shipped?;
    Ok(count)
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

/// The gRPC trailer in which a server names the batch of a stream it could not decode.
const BATCH_INDEX_TRAILER: &str = "bimodal-batch-index";

async fn ship(
    server: ServerAddress,
    spool: &SpoolOptions,
    hello: v1::Hello,
    mut batches: mpsc::Receiver<v1::Batch>,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<u64> {
    let mut spool = Spool::open(spool, &hello.node)?;
    let mut backoff = Duration::from_millis(200);
    let mut sampler_done = false;
    loop {
        match stream_once(&server, &hello, &mut spool, &mut batches, &mut sampler_done).await {
            Ok(()) => return Ok(spool.dropped_total()),
            Err(e) => {
                let stopping = *shutdown.borrow();
                if stopping && sampler_done {
                    if spool.is_durable() {
                        tracing::warn!(
                            batches = spool.len(),
                            "stopping with unacknowledged batches, kept in the spool for the next start: \
                             the server at {} is unreachable: {e:#}",
                            server.url
                        );
                        return Ok(spool.dropped_total());
                    }
                    anyhow::bail!(
                        "stopping with {} unacknowledged batches: the server at {} is unreachable: {e:#}",
                        spool.len(),
                        server.url
                    );
                }
                // A stream that got somewhere resets the backoff.
                if e.downcast_ref::<Progressed>().is_some() {
                    backoff = Duration::from_millis(200);
                }
                tracing::warn!(error = format!("{e:#}"), retry_in = ?backoff, spooled = spool.len(), "stream to server failed");
                // Keep accepting batches while waiting, so sampling never blocks.
                let sleep = tokio::time::sleep(jittered(backoff));
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

/// `delay` spread over [0.5, 1.5) of itself: agents cut off together (a server restart) do not
/// all come back in the same instant.
fn jittered(delay: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // A fresh random key per call (std's hash seeds come from the OS).
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    delay.mul_f64(0.5 + (random % 1000) as f64 / 1000.0)
}

/// A stream that broke after the server acknowledged something on it.
#[derive(Debug)]
struct Progressed(String);

impl std::fmt::Display for Progressed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Progressed {}

/// One stream: hello, every spooled batch, then new ones as they come, until the sampler is
/// done and everything is acked (Ok) or the stream breaks (Err). A "retry" answer pauses sending
/// for the delay the server asks, then the batches it refused for now go again, oldest first.
async fn stream_once(
    server: &ServerAddress,
    hello: &v1::Hello,
    spool: &mut Spool,
    batches: &mut mpsc::Receiver<v1::Batch>,
    sampler_done: &mut bool,
) -> anyhow::Result<()> {
    let mut client = server
        .ingest()
        .await?
        .max_decoding_message_size(MAX_BATCH_BYTES)
        .max_encoding_message_size(MAX_BATCH_BYTES);
    let (tx, rx) = mpsc::channel::<v1::IngestRequest>(16);
    let request = |m| v1::IngestRequest { message: Some(m) };
    tx.send(request(ingest_request::Message::Hello(hello.clone()))).await?;
    let mut acks = client
        .stream(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .context("server refused the stream")?
        .into_inner();
    for e in spool.entries_mut() {
        e.sent = false;
    }
    // Batch ids in the order they went out on this stream (the server names a bad one by index).
    let mut order: Vec<Vec<u8>> = Vec::new();
    let mut paused_until: Option<tokio::time::Instant> = None;
    let mut acked = 0u64;
    loop {
        if paused_until.is_none_or(|t| t <= tokio::time::Instant::now()) {
            paused_until = None;
            let mut i = 0;
            while let Some(e) = spool.entry_mut(i) {
                if e.sent {
                    i += 1;
                    continue;
                }
                let resend = e.ever_sent;
                // An unreadable file leaves the spool (counted): the next entry takes its place.
                let Some(mut b) = spool.load(i) else { continue };
                let e = spool.entry_mut(i).expect("loaded just now");
                e.sent = true;
                e.ever_sent = true;
                b.resend = resend;
                order.push(b.batch_id.clone());
                tx.send(request(ingest_request::Message::Batch(b))).await?;
                i += 1;
            }
        }
        if *sampler_done && spool.is_empty() {
            return Ok(());
        }
        let pause = tokio::time::sleep_until(
            paused_until.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600)),
        );
        tokio::select! {
            b = batches.recv(), if !*sampler_done => match b {
                Some(b) => spool.push(b),
                None => *sampler_done = true,
            },
            _ = pause, if paused_until.is_some() => {}
            msg = acks.next() => match msg {
                Some(Ok(v1::IngestResponse { message: Some(ingest_response::Message::Ack(ack)) })) => {
                    acked += 1;
                    match v1::ack::Status::try_from(ack.status) {
                        Ok(v1::ack::Status::Stored | v1::ack::Status::Duplicate) => {
                            metrics().batches_acked.inc();
                            spool.remove(&ack.batch_id)
                        }
                        Ok(v1::ack::Status::Retry) => {
                            let wait = Duration::from_millis(u64::from(ack.retry_after_millis.max(100)));
                            tracing::info!(reason = %ack.error, ?wait, "server asks to send again later");
                            if let Some(e) = spool.entries_mut().find(|e| e.id == ack.batch_id) {
                                e.sent = false;
                            }
                            let until = tokio::time::Instant::now() + wait;
                            paused_until = Some(paused_until.map_or(until, |t| t.max(until)));
                        }
                        _ => {
                            spool.refused(&ack.batch_id);
                            tracing::error!(error = %ack.error, dropped = spool.dropped(Dropped::Refused), "server rejected a batch; it will not be resent");
                        }
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(status)) => {
                    // A batch the server could not read is dropped, not sent first forever.
                    let index = status
                        .metadata()
                        .get(BATCH_INDEX_TRAILER)
                        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
                    if let Some(id) = index.and_then(|i| order.get(i)) {
                        spool.refused(id);
                        tracing::error!(%status, dropped = spool.dropped(Dropped::Refused), "server could not decode a batch; it will not be resent");
                    }
                    let message = format!("server ended the stream: {status}");
                    if acked > 0 || index.is_some() {
                        return Err(Progressed(message).into());
                    }
                    anyhow::bail!(message);
                }
                None => anyhow::bail!("server closed the stream"),
            },
        }
    }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_delays_are_spread() {
        let base = Duration::from_secs(2);
        let delays: std::collections::HashSet<Duration> = (0..50).map(|_| jittered(base)).collect();
        assert!(delays.iter().all(|d| *d >= base / 2 && *d < base * 3 / 2), "{delays:?}");
        assert!(delays.len() > 10, "{delays:?}");
    }
}
