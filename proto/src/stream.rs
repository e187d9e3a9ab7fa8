//! Streaming batches to a server, shared by `bimodal-agent run`, `bimodal-agent import` and
//! `bimodal import`.
//!
//! A batch stays in a bounded [`Spool`] (in memory or on disk) until the server acks it. After a
//! broken stream, or a restart of an agent with a spool on disk, every spooled batch is sent
//! again with `resend = true`, and the server stores it at most once. When the server is
//! overloaded it answers "retry" with a delay, which is honoured. When the spool is full the
//! oldest batch is dropped and counted, never silently; so is a batch the server refuses for
//! good (malformed, undecodable, larger than it accepts).
//!
//! Batches can also go to files instead ([`write_out`], for a node that cannot reach a server)
//! and be sent from them later ([`import`]), through the same stream.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::Duration;

use anyhow::Context;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt;

use crate::client::ServerAddress;
use crate::spool::{Dropped, Spool, SpoolOptions, MAX_BATCH_BYTES};
use crate::v1::{self, ingest_request, ingest_response};

/// What the stream reports of itself; a process serving `/metrics` registers them
/// ([`StreamMetrics::register`]).
#[derive(Debug, Default)]
pub struct StreamMetrics {
    /// Batches waiting for the server's acknowledgement.
    pub spool_batches: Gauge,
    /// Their encoded bytes (the spool's bound is in bytes).
    pub spool_bytes: Gauge,
    /// Batches dropped, by `reason` (spool_full, refused, unreadable).
    pub batches_dropped: Family<[(&'static str, String); 1], Counter>,
    /// Batches the server acknowledged as stored (or stored before).
    pub batches_acked: Counter,
}

impl StreamMetrics {
    /// Adds them to `registry`, each name prefixed with `prefix` (e.g. `bimodal_agent_`).
    pub fn register(&self, registry: &mut Registry, prefix: &str) {
        registry.register(
            format!("{prefix}spool_batches"),
            "Batches waiting for the server's acknowledgement",
            self.spool_batches.clone(),
        );
        registry.register(
            format!("{prefix}spool_bytes"),
            "Encoded bytes of the batches waiting for the server's acknowledgement",
            self.spool_bytes.clone(),
        );
        registry.register(
            format!("{prefix}batches_dropped"),
            "Batches dropped, by reason (spool_full: the server was unreachable too long; refused: the server refused them for good; unreadable: a spooled file could not be read back)",
            self.batches_dropped.clone(),
        );
        registry.register(
            format!("{prefix}batches_acked"),
            "Batches the server acknowledged as stored",
            self.batches_acked.clone(),
        );
    }
}

static METRICS: LazyLock<StreamMetrics> = LazyLock::new(StreamMetrics::default);

/// The process's stream metrics.
pub fn metrics() -> &'static StreamMetrics {
    &METRICS
}

/// The hello of a node's written batches, and the batches' file names (in the order written).
pub const HELLO_FILE: &str = "hello.pb";
const BATCH_PREFIX: &str = "batch-";

/// Writes the hello and every batch under `dir` (`bimodal-agent run --output-dir`), each file
/// complete or absent (written aside, then renamed): for nodes that cannot reach a server
/// (air-gapped, a test guest). [`import`] sends them later, through the same stream as `run`.
pub async fn write_out(dir: &Path, hello: &v1::Hello, mut batches: mpsc::Receiver<v1::Batch>) -> anyhow::Result<()> {
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

/// Sends the batches `bimodal-agent run --output-dir` wrote under `dir` to `server` through
/// [`ship`]: acks, resends and the server's retry delays; a batch the server holds
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

/// The gRPC trailer in which a server names the batch of a stream it could not decode.
pub const BATCH_INDEX_TRAILER: &str = "bimodal-batch-index";

/// Streams `hello`, then every batch of `batches` as it comes, to `server` until `batches` is
/// closed and every batch is acknowledged, reconnecting (with a growing, jittered delay) after a
/// broken stream. Batches wait in a spool of `spool`'s kind meanwhile. Once `shutdown` is true and
/// `batches` closed, a server that cannot be reached ends it: with an error for a spool in
/// memory, with the batches left for the next start in one on disk. The number of batches
/// dropped (spool full, refused, unreadable).
pub async fn ship(
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
