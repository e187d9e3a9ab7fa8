//! One simulated agent's stream, driven as agent/src/ship/mod.rs drives it: a Hello, then batches,
//! each kept until acked. STORED and DUPLICATE end a batch; REJECTED drops it (and is counted:
//! the run fails); RETRY means not stored: nothing is sent for `retry_after_millis`, then the
//! batch goes again. A broken stream is reopened with backoff (reset when the stream had got
//! somewhere) and every unacked batch is sent again with `resend = true`; a batch the server
//! names in the `bimodal-batch-index` trailer as undecodable is dropped like a rejected one.
//!
//! Unlike the agent, the loadgen keeps no batch bytes: an unacked batch is its number, and is
//! generated again when it must be resent (see `batch`). What it cannot avoid holding are the
//! bytes of batches sent but not yet read by the server, in tonic's and HTTP/2's buffers: a
//! run-wide budget of unacked bytes bounds them, so 10,000 nodes against a slow server wait for
//! it (and report the lag) instead of filling memory.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bimodal_proto::v1::{self, ingest_response};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tonic::client::GrpcService;
use tonic::codec::Streaming;
use tonic::codegen::http;
use tonic::transport::Channel;

use super::batch::{self, Window};
use super::fleet::Node;
use super::profile::Catalog;
use super::stats::Stats;
use super::wire::{Encoded, RequestBody, ResponseDecoder};

/// Largest message either side accepts, as agent and server set it.
const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// The gRPC trailer in which a server names the batch of a stream it could not decode.
use bimodal_proto::stream::BATCH_INDEX_TRAILER;

/// Errors printed in full; after these, only the progress line counts them.
const LOGGED_ERRORS: u64 = 20;

/// When batches are due and which time they cover.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// Each node sends one batch per interval for this long, as live agents do.
    RealTime(Duration),
    /// Each node sends the batches of this much history at once, as fast as they are acked.
    Backfill(Duration),
}

/// The run's clock: when it started, in monotonic and in Unix time.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    pub mode: Mode,
    pub interval: Duration,
    pub start: Instant,
    pub start_unix_ns: i64,
}

impl Schedule {
    fn offset(&self, node: &Node) -> Duration {
        self.interval.mul_f64(node.phase)
    }

    /// How many batches `node` sends in the run.
    pub fn batches(&self, node: &Node) -> u32 {
        match self.mode {
            Mode::RealTime(d) => {
                let offset = self.offset(node);
                if d <= offset {
                    0
                } else {
                    (d - offset).as_nanos().div_ceil(self.interval.as_nanos().max(1)) as u32
                }
            }
            Mode::Backfill(d) => ((d.as_secs_f64() / self.interval.as_secs_f64()).round() as u32).max(1),
        }
    }

    /// When batch `k` of `node` may be sent; in real time, the end of the interval it covers.
    fn due(&self, node: &Node, k: u32) -> Instant {
        match self.mode {
            Mode::RealTime(_) => self.start + self.offset(node) + self.interval * k,
            Mode::Backfill(_) => self.start,
        }
    }

    /// The interval batch `k` of `node` covers.
    fn window(&self, node: &Node, k: u32) -> Window {
        let interval = self.interval.as_nanos() as i64;
        let offset = self.offset(node).as_nanos() as i64;
        let end = match self.mode {
            Mode::RealTime(_) => self.start_unix_ns + offset + i64::from(k) * interval,
            // Oldest first, the newest ending before the run started.
            Mode::Backfill(_) => {
                let n = i64::from(self.batches(node));
                self.start_unix_ns - offset - (n - 1 - i64::from(k)) * interval
            }
        };
        Window {
            start_ns: end - interval,
            end_ns: end,
        }
    }
}

/// What every node task shares.
#[derive(Debug)]
pub struct Shared {
    pub catalog: Catalog,
    pub options: batch::Options,
    pub stats: Stats,
    /// HTTP/2 connections; node i streams over `channels[i % len]`.
    pub channels: Vec<Channel>,
    pub schedule: Schedule,
    /// Most unacked batches per stream (backfill); unlimited in real time, as in the agent.
    pub in_flight: usize,
    /// Random per run: batch ids differ between runs of the same seed.
    pub run: u64,
    /// Turns true when the run must end (deadline or Ctrl-C).
    pub stop: watch::Receiver<bool>,
    /// Errors printed so far.
    pub errors_logged: AtomicU64,
    /// KiB of batches sent and not acked, run-wide; each unacked batch holds its size.
    pub budget: Arc<Semaphore>,
    /// The budget's size in KiB.
    pub budget_kib: u32,
    /// Size of the last batch generated, in KiB: what the next one is expected to take.
    pub last_batch_kib: AtomicU64,
}

impl Shared {
    fn log_error(&self, node: &Node, what: &str) {
        let n = self.errors_logged.fetch_add(1, Relaxed);
        if n < LOGGED_ERRORS {
            eprintln!("bimodal-loadgen: {}: {what}", node.name());
        } else if n == LOGGED_ERRORS {
            eprintln!("bimodal-loadgen: further errors are only counted");
        }
    }
}

/// An unacked batch.
#[derive(Debug)]
struct Entry {
    k: u32,
    id: [u8; 16],
    /// Sent on the current stream and not answered "retry".
    sent: bool,
    /// Sent on any stream before: a resend.
    ever_sent: bool,
    sent_at: Instant,
    samples: u64,
    rows: u64,
    /// Its share of the budget while its bytes may still be in buffers on their way.
    budget: Option<OwnedSemaphorePermit>,
}

/// A node's batches: those not made yet (from `next`) and those unacked.
#[derive(Debug)]
struct Batches {
    next: u32,
    total: u32,
    unacked: VecDeque<Entry>,
}

impl Batches {
    fn done(&self) -> bool {
        self.next >= self.total && self.unacked.is_empty()
    }

    /// Takes on the batches that may go now: those due (real time) or up to the window.
    fn produce(&mut self, shared: &Shared, node: &Node, now: Instant) {
        while self.next < self.total {
            let due = shared.schedule.due(node, self.next) <= now;
            if !due || self.unacked.len() >= shared.in_flight {
                break;
            }
            self.unacked.push_back(Entry {
                k: self.next,
                id: batch::batch_id(shared.run, node.index, self.next),
                sent: false,
                ever_sent: false,
                sent_at: now,
                samples: 0,
                rows: 0,
                budget: None,
            });
            self.next += 1;
        }
    }

    fn next_due(&self, shared: &Shared, node: &Node) -> Option<Instant> {
        match shared.schedule.mode {
            Mode::RealTime(_) if self.next < self.total => Some(shared.schedule.due(node, self.next)),
            _ => None,
        }
    }
}

/// Why a stream ended early.
struct Broken {
    message: String,
    /// The server acked something on it: the backoff starts over.
    progressed: bool,
    /// The run is stopping: do not reconnect.
    stopped: bool,
}

impl Broken {
    fn new(message: impl Into<String>, progressed: bool) -> Self {
        Broken {
            message: message.into(),
            progressed,
            stopped: false,
        }
    }
}

/// Counts a stream as open while it lives.
struct OpenGuard<'a>(&'a Stats);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.streams_open.fetch_sub(1, Relaxed);
    }
}

/// Plays node `node` until its batches are acked or the run stops.
pub async fn run_node(shared: Arc<Shared>, node: Node, stagger: Duration) {
    let mut batches = Batches {
        next: 0,
        total: shared.schedule.batches(&node),
        unacked: VecDeque::new(),
    };
    let mut stop = shared.stop.clone();
    // Real-time agents start through the interval: each connects when its first batch is due.
    let first = match shared.schedule.mode {
        Mode::RealTime(_) => shared.schedule.due(&node, 0),
        Mode::Backfill(_) => shared.schedule.start + stagger,
    };
    let mut stopped = tokio::select! {
        _ = tokio::time::sleep_until(first) => false,
        _ = stop.wait_for(|s| *s) => true,
    };
    let mut backoff = Duration::from_millis(200);
    let mut jitter = super::rng::Rng::new(node.seed ^ 0x0ff);
    while !stopped && !batches.done() {
        match stream_once(&shared, &node, &mut batches).await {
            Ok(()) => break,
            Err(b) if b.stopped => stopped = true,
            Err(b) => {
                shared.stats.stream_failures.fetch_add(1, Relaxed);
                shared.log_error(&node, &b.message);
                if b.progressed {
                    backoff = Duration::from_millis(200);
                }
                // Nodes that broke together do not all come back in the same millisecond.
                let wait = backoff.mul_f64(0.75 + 0.5 * jitter.unit());
                stopped = tokio::select! {
                    _ = tokio::time::sleep(wait) => false,
                    _ = stop.wait_for(|s| *s) => true,
                };
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    }
    let left = batches.unacked.len() as u64 + u64::from(batches.total - batches.next);
    shared.stats.unacked.fetch_add(left, Relaxed);
    shared.stats.nodes_done.fetch_add(1, Relaxed);
}

/// One stream: Hello, the unacked batches, then new ones as they fall due, until all are acked
/// (Ok) or the stream breaks or the run stops (Err).
async fn stream_once(shared: &Shared, node: &Node, batches: &mut Batches) -> Result<(), Broken> {
    let stats = &shared.stats;
    let mut channel = shared.channels[node.index as usize % shared.channels.len()].clone();
    std::future::poll_fn(|cx| GrpcService::<tonic::body::Body>::poll_ready(&mut channel, cx))
        .await
        .map_err(|e| Broken::new(format!("cannot connect: {e}"), false))?;
    let (tx, rx) = mpsc::channel::<Encoded>(1);
    let hello = Encoded::hello(node.hello());
    stats.wire_bytes.fetch_add(hello.len() as u64 + 5, Relaxed);
    tx.try_send(hello)
        .map_err(|_| Broken::new("request stream closed before the Hello", false))?;
    // The request tonic's generated client would make, with a body that does not copy.
    let mut request = http::Request::new(tonic::body::Body::new(RequestBody::new(rx)));
    *request.method_mut() = http::Method::POST;
    *request.uri_mut() = http::Uri::from_static("/bimodal.v1.Ingest/Stream");
    *request.version_mut() = http::Version::HTTP_2;
    let headers = request.headers_mut();
    headers.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    let response = GrpcService::call(&mut channel, request)
        .await
        .map_err(|e| Broken::new(format!("server refused the stream: {e}"), false))?;
    // A stream refused at once answers with headers only.
    if let Some(status) = tonic::Status::from_header_map(response.headers()) {
        if status.code() != tonic::Code::Ok {
            return Err(Broken::new(
                format!("server refused the stream: {}", describe(&status)),
                false,
            ));
        }
    }
    let code = response.status();
    let mut acks = Streaming::new_response(
        ResponseDecoder,
        response.into_body(),
        code,
        None,
        Some(MAX_MESSAGE_BYTES),
    );
    stats.streams_opened.fetch_add(1, Relaxed);
    stats.streams_open.fetch_add(1, Relaxed);
    let _open = OpenGuard(stats);

    // What went out on a broken stream is gone from the buffers with it.
    for e in batches.unacked.iter_mut() {
        e.sent = false;
        e.budget = None;
    }
    let mut held: Option<OwnedSemaphorePermit> = None;
    // Batch ids in the order they went out on this stream: the server names a bad one by index.
    let mut order: Vec<[u8; 16]> = Vec::new();
    let mut paused_until: Option<Instant> = None;
    let mut acked = 0u64;
    let mut stop = shared.stop.clone();
    loop {
        let now = Instant::now();
        batches.produce(shared, node, now);
        if batches.done() {
            return Ok(());
        }
        if paused_until.is_some_and(|t| t <= now) {
            paused_until = None;
        }
        let sendable = paused_until.is_none() && batches.unacked.iter().any(|e| !e.sent);
        let estimate = (shared.last_batch_kib.load(Relaxed).max(64) as u32).min(shared.budget_kib);
        let wake = [paused_until, batches.next_due(shared, node)]
            .into_iter()
            .flatten()
            .min();
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => {
                return Err(Broken { message: "stopped".into(), progressed: false, stopped: true });
            }
            msg = acks.message() => match msg {
                Ok(Some(v1::IngestResponse { message: Some(ingest_response::Message::Ack(ack)) })) => {
                    acked += 1;
                    if let Some(until) = on_ack(shared, node, batches, ack) {
                        paused_until = Some(paused_until.map_or(until, |t| t.max(until)));
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => return Err(Broken::new("server closed the stream", acked > 0)),
                Err(status) => {
                    // A batch the server could not read is dropped, not sent first forever.
                    let index = status
                        .metadata()
                        .get(BATCH_INDEX_TRAILER)
                        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
                    if let Some(id) = index.and_then(|i| order.get(i)) {
                        if let Some(at) = batches.unacked.iter().position(|e| &e.id == id) {
                            batches.unacked.remove(at);
                            stats.rejected.fetch_add(1, Relaxed);
                            shared.log_error(node, &format!("server could not decode a batch: {}", describe(&status)));
                        }
                    }
                    let message = format!("server ended the stream: {}", describe(&status));
                    return Err(Broken::new(message, acked > 0 || index.is_some()));
                }
            },
            budget = shared.budget.clone().acquire_many_owned(estimate), if sendable && held.is_none() => {
                held = budget.ok();
            }
            permit = tx.reserve(), if sendable && held.is_some() => {
                let Ok(permit) = permit else {
                    return Err(Broken::new("request stream closed", acked > 0));
                };
                let Some(e) = batches.unacked.iter_mut().find(|e| !e.sent) else { continue };
                let began = std::time::Instant::now();
                let window = shared.schedule.window(node, e.k);
                let g = batch::generate(&shared.catalog, &shared.options, node, e.k, window, e.id, e.ever_sent);
                stats.generate_us.fetch_add(began.elapsed().as_micros() as u64, Relaxed);
                let now = Instant::now();
                if e.ever_sent {
                    stats.resent.fetch_add(1, Relaxed);
                } else {
                    stats.sent.fetch_add(1, Relaxed);
                    stats.samples_sent.fetch_add(g.samples, Relaxed);
                    stats.rows_sent.fetch_add(g.rows, Relaxed);
                    if let Mode::RealTime(_) = shared.schedule.mode {
                        let lag = now.saturating_duration_since(shared.schedule.due(node, e.k));
                        stats.max_lag_us.fetch_max(lag.as_micros() as u64, Relaxed);
                    }
                }
                stats.wire_bytes.fetch_add(g.request.len() as u64 + 5, Relaxed);
                let kib = g.request.len().div_ceil(1024) as u64;
                shared.last_batch_kib.store(kib, Relaxed);
                let mut budget = held.take();
                // A batch larger than expected takes the rest if it is free now; the budget is
                // a bound on memory, not an exact count.
                if let Some(b) = budget.as_mut() {
                    let more = kib.saturating_sub(b.num_permits() as u64) as u32;
                    if more > 0 {
                        if let Ok(extra) = shared.budget.clone().try_acquire_many_owned(more) {
                            b.merge(extra);
                        }
                    }
                }
                e.budget = budget;
                e.samples = g.samples;
                e.rows = g.rows;
                e.sent = true;
                e.ever_sent = true;
                e.sent_at = now;
                order.push(e.id);
                permit.send(g.request);
            }
            _ = tokio::time::sleep_until(wake.unwrap_or(now)), if wake.is_some() => {}
        }
    }
}

/// Books an ack; returns until when to pause after a "retry".
fn on_ack(shared: &Shared, node: &Node, batches: &mut Batches, ack: v1::Ack) -> Option<Instant> {
    let stats = &shared.stats;
    let at = batches.unacked.iter().position(|e| e.id[..] == ack.batch_id[..])?;
    match v1::ack::Status::try_from(ack.status) {
        Ok(v1::ack::Status::Stored | v1::ack::Status::Duplicate) => {
            let e = batches.unacked.remove(at)?;
            stats.latency.record(e.sent_at.elapsed());
            if ack.status == v1::ack::Status::Stored as i32 {
                stats.stored.fetch_add(1, Relaxed);
            } else {
                stats.duplicate.fetch_add(1, Relaxed);
            }
            stats.samples_acked.fetch_add(e.samples, Relaxed);
            stats.rows_acked.fetch_add(e.rows, Relaxed);
            None
        }
        Ok(v1::ack::Status::Retry) => {
            stats.retried.fetch_add(1, Relaxed);
            // The server has read it: its bytes are no longer buffered here.
            batches.unacked[at].sent = false;
            batches.unacked[at].budget = None;
            // As the agent: at least 100 ms, so a server saying 0 is not hammered.
            let wait = Duration::from_millis(u64::from(ack.retry_after_millis.max(100)));
            Some(Instant::now() + wait)
        }
        _ => {
            batches.unacked.remove(at);
            stats.rejected.fetch_add(1, Relaxed);
            shared.log_error(node, &format!("server rejected a batch: {}", ack.error));
            None
        }
    }
}

fn describe(status: &tonic::Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}
