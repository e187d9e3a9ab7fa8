//! The gRPC ingest service: one bidirectional stream per agent, a Hello, then batches, each
//! answered by an ack once ClickHouse holds it.
//!
//! A stream's batches are checked (`validate`), turned into rows (`rows`) and handed to the
//! write path, which stores batches of every stream together; a stream keeps up to
//! [`MAX_IN_FLIGHT`] batches waiting there and answers each as it is stored, so an agent
//! catching up after an outage is not held to one flush per batch. A batch that cannot be
//! decoded ends the stream with its position (`bimodal-batch-index`) so the agent drops it
//! instead of sending it first forever.

pub mod encoded;
pub mod rows;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bimodal_proto::stream::BATCH_INDEX_TRAILER;
use bimodal_proto::v1::{self, ingest_request, ingest_response};
use futures_util::stream::{FuturesOrdered, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::{wrappers::ReceiverStream, Stream};
use tonic::metadata::MetadataMap;
use tonic::Status;

use crate::debuginfo::Names;
use crate::metrics::{label, metrics};
use crate::serve::Peer;
use crate::storage::writer::{Outcome, Writer};
use crate::validate;
use encoded::{Inbound, ReadError};
use rows::Sender;

/// Batches of one stream waiting in the write path at once; the stream reads no more until one
/// is answered (HTTP/2 flow control then holds the agent back).
pub const MAX_IN_FLIGHT: usize = 32;

/// Bytes of batches (encoded size, counted by the KiB) the server holds by default while it
/// decodes, checks and converts them and their rows wait for room in the write buffer, over all
/// streams (`--max-in-flight-bytes`): with thousands of agents catching up at once, memory
/// stays bounded and the batches beyond it are answered "retry later" without being decoded. A
/// stream reads its next batch only once the last one is admitted or answered, so beyond this
/// each stream holds at most one encoded batch.
pub const DEFAULT_MAX_IN_FLIGHT_BYTES: u64 = 128 << 20;

/// What agent streams may hold and how fast they may go (the server's flags).
#[derive(Clone, Copy, Debug)]
pub struct StreamBounds {
    /// Agent streams open at once at most.
    pub max_streams: usize,
    /// Agent streams served at once from one client address at most.
    pub max_streams_per_address: usize,
    /// Encoded bytes of batches held at once between admission and the write buffer.
    pub max_in_flight_bytes: u64,
    /// How fast each node may send batches, and open streams.
    pub node_batches: crate::rate::Rate,
    pub node_streams: crate::rate::Rate,
    /// How fast a token (or a client address, without tokens) may introduce node names.
    pub new_nodes: crate::rate::Rate,
    /// How long an open stream may go without a batch.
    pub idle: std::time::Duration,
}

/// Node names known to be stored that ingest remembers, so that a node's Hello is not looked up
/// in the store at each stream it opens (about 100 bytes each).
const KNOWN_NODES: usize = 1 << 18;
/// Lookups of node names in the store at once, and how long a Hello waits for its lookup (a
/// frozen ClickHouse must not hold Hellos; a storm of reconnecting agents must not send it
/// thousands of queries at once).
const NODE_LOOKUPS: usize = 16;
const NODE_LOOKUP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Serves `bimodal.v1.Ingest` into the write path (through [`encoded::EncodedIngestServer`]).
#[derive(Debug, Clone)]
pub struct IngestService {
    writer: Writer,
    names: Arc<Names>,
    auth: crate::auth::Auth,
    /// Agent streams open at once at most.
    streams: Arc<crate::serve::Places>,
    max_streams: usize,
    in_flight: Arc<Admission>,
    /// How fast each node may send batches.
    rates: Arc<crate::rate::Buckets>,
    /// Streams each node opens.
    opens: Arc<crate::rate::Buckets>,
    /// New node names each token (or address) introduces.
    new_nodes: Arc<crate::rate::Buckets>,
    /// Node names stored, or introduced here: they are not counted again.
    known_nodes: Arc<quick_cache::sync::Cache<String, ()>>,
    store: Arc<crate::storage::Store>,
    lookups: Arc<tokio::sync::Semaphore>,
    /// How long an open stream may go without a batch.
    idle: std::time::Duration,
}

impl IngestService {
    pub fn new(
        writer: Writer,
        names: Arc<Names>,
        store: Arc<crate::storage::Store>,
        auth: crate::auth::Auth,
        bounds: StreamBounds,
    ) -> Self {
        let StreamBounds {
            max_streams,
            max_streams_per_address,
            max_in_flight_bytes,
            node_batches,
            node_streams,
            new_nodes,
            idle,
        } = bounds;
        let capacity_kib = usize::try_from(max_in_flight_bytes.div_ceil(1024))
            .unwrap_or(usize::MAX)
            .clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        IngestService {
            writer,
            names,
            auth,
            streams: crate::serve::Places::new(max_streams, max_streams_per_address),
            max_streams,
            rates: Arc::new(crate::rate::Buckets::new(node_batches)),
            opens: Arc::new(crate::rate::Buckets::new(node_streams)),
            new_nodes: Arc::new(crate::rate::Buckets::new(new_nodes)),
            known_nodes: Arc::new(quick_cache::sync::Cache::new(KNOWN_NODES)),
            store,
            lookups: Arc::new(tokio::sync::Semaphore::new(NODE_LOOKUPS)),
            in_flight: Arc::new(Admission {
                room: Arc::new(tokio::sync::Semaphore::new(capacity_kib)),
                capacity_kib,
                waiting: std::sync::atomic::AtomicUsize::new(0),
            }),
            idle,
        }
    }
}

pub(crate) type AckStream = Pin<Box<dyn Stream<Item = Result<v1::IngestResponse, Status>> + Send>>;

fn ack(batch_id: Vec<u8>, status: v1::ack::Status, error: String, retry_after_millis: u32) -> v1::IngestResponse {
    let m = metrics();
    let outcome = match status {
        v1::ack::Status::Stored => "stored",
        v1::ack::Status::Duplicate => "duplicate",
        v1::ack::Status::Retry => "retry",
        v1::ack::Status::Rejected => {
            count_refused("invalid_batch");
            "rejected"
        }
        v1::ack::Status::Unspecified => "unspecified",
    };
    m.ingest_batches.get_or_create(&label("outcome", outcome)).inc();
    v1::IngestResponse {
        message: Some(ingest_response::Message::Ack(v1::Ack {
            batch_id,
            status: status as i32,
            error,
            retry_after_millis,
        })),
    }
}

/// Counts an agent's open stream while it lives.
struct Connected;

impl Connected {
    fn new() -> Connected {
        metrics().agents_connected.inc();
        Connected
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        metrics().agents_connected.dec();
    }
}

impl IngestService {
    /// Serves one agent's stream: a Hello, then batches, each admitted by its size before its
    /// bytes are held ([`encoded`]).
    async fn stream(
        &self,
        metadata: MetadataMap,
        peer: Option<Peer>,
        mut inbound: Inbound,
    ) -> Result<AckStream, Status> {
        // Without a token (or client certificate, where needed) nothing of the stream is read.
        self.auth
            .allow_grpc(&metadata, peer.as_ref(), crate::auth::Scope::Write, None)?;
        // A bound on streams: each holds a task, buffers and a share of the admission bound.
        // And a share of them per client address: one address cannot take every agent's place.
        let ip = peer
            .as_ref()
            .map_or(std::net::IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), |p| p.addr.ip());
        let open_stream = match self.streams.take(ip) {
            Ok(place) => place,
            Err(crate::serve::Full::All) => {
                count_refused("too_many_streams");
                return Err(Status::resource_exhausted(format!(
                    "the server serves {} agent streams at most; retry later",
                    self.max_streams
                )));
            }
            Err(crate::serve::Full::Address) => {
                count_refused("too_many_streams_from_address");
                return Err(Status::resource_exhausted(format!(
                    "the server serves {} agent streams at most from one client address ({ip}); retry later",
                    self.streams.per_address()
                )));
            }
        };
        // The Hello arrives in the time a message of a Hello's largest size may take (11 s from
        // the stream's opening), or the stream and its place are given up: a client that opens
        // a stream and sends nothing (its HTTP/2 stack answering pings) would hold a place for
        // as long as it liked.
        let hello = async {
            match inbound.head().await {
                Ok(Some(head)) if head.len > validate::MAX_HELLO_BYTES => Err(ReadError::Unreadable(format!(
                    "it is {} bytes, more than the {} a Hello may have",
                    head.len,
                    validate::MAX_HELLO_BYTES
                ))),
                Ok(Some(head)) => inbound.rest(head).await.map(Some),
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            }
        };
        let first = in_time(
            validate::MAX_HELLO_BYTES,
            |secs| format!("the stream's Hello did not arrive within {secs} s"),
            hello,
        )
        .await?;
        let invalid_hello = |status: Status| {
            count_refused("invalid_hello");
            status
        };
        let first = match first {
            Ok(first) => first.map(|m| m.decode()),
            Err(ReadError::Stream(status)) => return Err(status),
            Err(ReadError::Unreadable(why)) => {
                return Err(invalid_hello(Status::invalid_argument(format!(
                    "the stream's first message cannot be read: {why}"
                ))))
            }
        };
        let hello = match first {
            Some(Ok(v1::IngestRequest {
                message: Some(ingest_request::Message::Hello(h)),
            })) => h,
            // Said as it is (invalid UTF-8 in a name, a field of the wrong type), not as "not a
            // Hello".
            Some(Err(e)) => {
                return Err(invalid_hello(Status::invalid_argument(format!(
                    "the stream's first message cannot be decoded: {e}"
                ))))
            }
            _ => {
                return Err(invalid_hello(Status::invalid_argument(
                    "the first message of a stream must be a Hello",
                )))
            }
        };
        // The token (and certificate) may write as this node. (The tokens' version first: a
        // change after it is checked again at the next batch.)
        let mut allowed_by = self.auth.version();
        let token = self
            .auth
            .allow_grpc(&metadata, peer.as_ref(), crate::auth::Scope::Write, Some(&hello.node))?;
        let labels = validate::hello(&hello).map_err(|e| invalid_hello(Status::invalid_argument(e.to_string())))?;
        if let Err(wait) = self.opens.take(&hello.node, std::time::Instant::now()) {
            count_refused("stream_rate");
            let rate = self.opens.rate();
            return Err(Status::resource_exhausted(format!(
                "node `{}` opens more than {} streams a second ({} at once): retry in {} ms",
                hello.node,
                rate.per_second,
                rate.burst,
                wait.as_millis()
            )));
        }
        self.admit_node(token.as_deref(), peer.as_ref(), &hello.node).await?;
        let sender = Arc::new(Sender {
            node: hello.node.as_str().into(),
            labels,
            agent_version: hello.agent_version.as_str().into(),
            facts: hello.facts.clone(),
        });
        tracing::info!(node = %sender.node, agent = %sender.agent_version, "agent connected");
        self.writer.note_node(sender.clone());

        let (tx, rx) = mpsc::channel(MAX_IN_FLIGHT);
        let writer = self.writer.clone();
        let names = self.names.clone();
        let in_flight = self.in_flight.clone();
        let rates = self.rates.clone();
        let auth = self.auth.clone();
        let idle = self.idle;
        tokio::spawn(async move {
            let _connected = Connected::new();
            let _open_stream = open_stream;
            // Acks go out in the order batches came, whatever order they are stored in.
            // Each admitted batch is stored by its own task, so that it goes on (and frees its
            // share of the bound) while this loop waits to admit the next one.
            let mut pending: FuturesOrdered<Pin<Box<dyn Future<Output = v1::IngestResponse> + Send>>> =
                FuturesOrdered::new();
            let mut read = 0usize;
            let mut open = true;
            // A stream that carries no batch for `idle` is closed: an agent sends one every
            // interval, and a client that sends a Hello and then nothing (its HTTP/2 stack
            // answering pings) would hold one of `--max-streams` places for good (issue 49).
            let mut quiet_until = tokio::time::Instant::now() + idle;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(quiet_until), if open && pending.is_empty() => {
                        count_refused("idle");
                        tracing::info!(node = %sender.node, "closed a stream that sent no batch for {} s", idle.as_secs());
                        let _ = tx.send(Err(Status::deadline_exceeded(format!(
                            "no batch came for {} s: the stream is closed (an agent sends one every interval, and opens another)",
                            idle.as_secs()
                        )))).await;
                        return;
                    }
                    head = inbound.head(), if open && pending.len() < MAX_IN_FLIGHT => {
                        quiet_until = tokio::time::Instant::now() + idle;
                        let refuse = |why: String| {
                            count_refused("undecodable");
                            tracing::warn!(node = %sender.node, batch = read, %why, "refused a batch that cannot be decoded");
                            let mut refusal = Status::invalid_argument(format!(
                                "batch {read} of this stream cannot be decoded ({why}); resending it will not help"
                            ));
                            if let Ok(v) = read.to_string().parse() {
                                refusal.metadata_mut().insert(BATCH_INDEX_TRAILER, v);
                            }
                            refusal
                        };
                        let ended = |status: Status| tracing::debug!(node = %sender.node, %status, "agent stream ended");
                        let head = match head {
                            Ok(Some(head)) => head,
                            Ok(None) => { open = false; continue; }
                            Err(ReadError::Unreadable(why)) => {
                                let _ = tx.send(Err(refuse(why))).await;
                                return;
                            }
                            Err(ReadError::Stream(status)) => return ended(status),
                        };
                        // A token taken out of the token file while the stream is open ends
                        // it at its next batch: a revoked agent does not write on for as long
                        // as its connection lives. Checked again only when the tokens changed.
                        if auth.version() != allowed_by {
                            allowed_by = auth.version();
                            let write = crate::auth::Scope::Write;
                            if let Err(status) = auth.allow_grpc(&metadata, peer.as_ref(), write, Some(&sender.node)) {
                                tracing::info!(node = %sender.node, %status, "ended a stream whose token or certificate is no longer allowed");
                                let _ = tx.send(Err(status)).await;
                                return;
                            }
                        }
                        // Admitted here, from the batch's first bytes, before the rest of it is
                        // held and before the next message is read: a waiting stream holds
                        // nothing of its batch.
                        let id = head.batch_id().map(<[u8]>::to_vec);
                        let retry = |id: Vec<u8>, why: String, after: u32| ack(id, v1::ack::Status::Retry, why, after);
                        // A node beyond its rate is told when to come back, before anything
                        // else is spent on the batch.
                        let limited = match &id {
                            Some(id) => rates.take(&sender.node, std::time::Instant::now()).err().map(|wait| {
                                count_refused("rate");
                                let rate = rates.rate();
                                retry(
                                    id.clone(),
                                    format!(
                                        "node `{}` sends more than {} batches a second ({} at once): retry later",
                                        sender.node, rate.per_second, rate.burst
                                    ),
                                    wait.as_millis().clamp(100, u128::from(MAX_RETRY_MILLIS)) as u32,
                                )
                            }),
                            None => None,
                        };
                        // The share of the bound (or, without an id, the delay `store` answers
                        // with), or the reply to a batch refused here.
                        let admitted = match limited {
                            Some(reply) => Err(reply),
                            None => match (in_flight.admit(head.len, id.as_deref().unwrap_or_default()).await, id) {
                                (Err(retry_after), Some(id)) => Err(held_back(id, retry_after)),
                                (held, _) => Ok(held),
                            },
                        };
                        let held = match admitted {
                            Ok(held) => held,
                            Err(reply) => {
                                if let Err(ReadError::Stream(status)) = inbound.skip(head).await {
                                    return ended(status);
                                }
                                read += 1;
                                pending.push_back(Box::pin(std::future::ready(reply)));
                                continue;
                            }
                        };
                        // An admitted batch holds its share while it arrives: a client that
                        // sends its head and then trickles (or stops) is cut off in time.
                        let late = |secs| format!("batch {read} of this stream took more than {secs} s to arrive after its first bytes");
                        let encoded = match in_time(head.len, late, inbound.rest(head)).await {
                            Err(late) => {
                                let _ = tx.send(Err(late)).await;
                                return;
                            }
                            Ok(read) => read,
                        };
                        let encoded = match encoded {
                            Ok(encoded) => encoded,
                            Err(ReadError::Unreadable(why)) => {
                                let _ = tx.send(Err(refuse(why))).await;
                                return;
                            }
                            Err(ReadError::Stream(status)) => return ended(status),
                        };
                        let batch = match encoded.decode() {
                            Ok(v1::IngestRequest { message: Some(ingest_request::Message::Batch(b)) }) => b,
                            Ok(_) => {
                                count_refused("invalid_batch");
                                let _ = tx.send(Err(Status::invalid_argument("only the first message may be a Hello"))).await;
                                return;
                            }
                            Err(e) => {
                                let _ = tx.send(Err(refuse(e.to_string()))).await;
                                return;
                            }
                        };
                        drop(encoded);
                        read += 1;
                        let (writer, names, sender) = (writer.clone(), names.clone(), sender.clone());
                        let batch_id = batch.batch_id.clone();
                        let stored = tokio::spawn(store(writer, names, sender, held, batch));
                        pending.push_back(Box::pin(async move {
                            stored.await.unwrap_or_else(|e| {
                                tracing::error!(error = %e, "storing a batch failed");
                                ack(batch_id, v1::ack::Status::Retry, "the server failed storing this batch".into(), 5_000)
                            })
                        }));
                    }
                    Some(reply) = pending.next(), if !pending.is_empty() => {
                        if tx.send(Ok(reply)).await.is_err() {
                            return;
                        }
                    }
                    else => return,
                }
            }
        });
        Ok(Box::pin(ReceiverStream::new(rx)))
    }
}

/// The server's bound on decoded batches, and how many batches wait for a share of it.
#[derive(Debug)]
struct Admission {
    room: Arc<tokio::sync::Semaphore>,
    /// The bound, in KiB.
    capacity_kib: usize,
    waiting: std::sync::atomic::AtomicUsize,
}

/// The answer to a batch refused by the bound on batches held (`in_flight`): send it again
/// after `retry_after` ms.
fn held_back(batch_id: Vec<u8>, retry_after: u32) -> v1::IngestResponse {
    count_refused("in_flight");
    ack(
        batch_id,
        v1::ack::Status::Retry,
        "the server holds as many batches as it may: retry later".into(),
        retry_after,
    )
}

impl IngestService {
    /// A node name new to the store is introduced within the rate of its token (or, without
    /// tokens, of its client address): `RESOURCE_EXHAUSTED` with the wait beyond it, counted as
    /// `new_node_rate`. A name stored before, or introduced here, is not counted again. When
    /// the store cannot say within [`NODE_LOOKUP_WAIT`], the name is counted as new: the bound
    /// holds while ClickHouse is away, and Hellos do not wait for it.
    #[allow(clippy::result_large_err)]
    async fn admit_node(&self, token: Option<&str>, peer: Option<&Peer>, node: &str) -> Result<(), Status> {
        if self.known_nodes.get(node).is_some() {
            return Ok(());
        }
        let lookup = async {
            let _lookup = self.lookups.acquire().await;
            self.store.node_stored(node).await
        };
        let stored = match tokio::time::timeout(NODE_LOOKUP_WAIT, lookup).await {
            Ok(Ok(stored)) => stored,
            Ok(Err(e)) => {
                tracing::debug!(node, error = %e, "cannot tell whether a node is stored; counted as new");
                false
            }
            Err(_) => {
                tracing::debug!(
                    node,
                    "the store did not say in time whether a node is stored; counted as new"
                );
                false
            }
        };
        if !stored {
            let key = match token {
                Some(token) => format!("token `{token}`"),
                None => peer.map_or_else(
                    || "address:unknown".to_owned(),
                    |p| crate::rate::address_key(p.addr.ip()),
                ),
            };
            if let Err(wait) = self.new_nodes.take(&key, std::time::Instant::now()) {
                count_refused("new_node_rate");
                let rate = self.new_nodes.rate();
                return Err(Status::resource_exhausted(format!(
                    "{key} introduces more than {} new node names a minute ({} at once): node `{node}` is new; retry in {} ms",
                    (rate.per_second * 6000.0).round() / 100.0,
                    rate.burst,
                    wait.as_millis().max(1)
                )));
            }
        }
        self.known_nodes.insert(node.to_owned(), ());
        Ok(())
    }
}

/// Counts a batch or stream refused, under `reason` (`bimodal_ingest_rejected_batches_total`).
fn count_refused(reason: &'static str) {
    metrics().ingest_rejected.get_or_create(&label("reason", reason)).inc();
}

/// What `read` gives if it completes within the time a message of `bytes` may take
/// ([`time_to_receive`]); else DEADLINE_EXCEEDED, counted as `slow`, in the words `late` gives
/// for that many seconds.
async fn in_time<T>(
    bytes: usize,
    late: impl FnOnce(u64) -> String,
    read: impl Future<Output = T>,
) -> Result<T, Status> {
    let allowed = crate::serve::time_to_receive(bytes);
    tokio::time::timeout(allowed, read).await.map_err(|_| {
        count_refused("slow");
        Status::deadline_exceeded(late(allowed.as_secs()))
    })
}

/// How long an agent is asked to wait per batch waiting ahead of its own, and the bounds.
const RETRY_PER_WAITING_MILLIS: u32 = 100;
const MIN_RETRY_MILLIS: u32 = 5_000;
const MAX_RETRY_MILLIS: u32 = 300_000;

impl Admission {
    /// A share of the bound for a batch of `bytes` encoded bytes if one frees within 5 s; else
    /// how long the agent should wait before sending it again. The wait grows with the batches
    /// waiting, so that a fleet catching up at once resends about as fast as the server stores,
    /// not every 5 s: each resend costs a transfer.
    async fn admit(&self, bytes: usize, batch_id: &[u8]) -> Result<tokio::sync::OwnedSemaphorePermit, u32> {
        use std::sync::atomic::Ordering::Relaxed;
        // A batch larger than the whole bound takes all of it.
        let kib = bytes.div_ceil(1024).clamp(1, self.capacity_kib) as u32;
        let ahead = self.waiting.fetch_add(1, Relaxed);
        let got = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            self.room.clone().acquire_many_owned(kib),
        )
        .await;
        self.waiting.fetch_sub(1, Relaxed);
        match got {
            Ok(Ok(held)) => Ok(held),
            _ => Err(retry_millis(ahead, batch_id)),
        }
    }
}

/// The retry delay for a batch with `ahead` batches waiting before it: proportional to them,
/// spread by ±25% from the batch id so that agents told together do not return together.
fn retry_millis(ahead: usize, batch_id: &[u8]) -> u32 {
    let base = u32::try_from(ahead)
        .unwrap_or(u32::MAX)
        .saturating_mul(RETRY_PER_WAITING_MILLIS)
        .clamp(MIN_RETRY_MILLIS, MAX_RETRY_MILLIS);
    let spread = batch_id
        .iter()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(*b)))
        % 51;
    (u64::from(base) * u64::from(75 + spread) / 100) as u32
}

/// Checks, names, converts and stores one batch admitted with `held` (`None`: not admitted,
/// the agent is told to retry); the ack to send.
async fn store(
    writer: Writer,
    names: Arc<Names>,
    sender: Arc<Sender>,
    held: Result<tokio::sync::OwnedSemaphorePermit, u32>,
    batch: v1::Batch,
) -> v1::IngestResponse {
    let held = match held {
        Ok(held) => held,
        // Refused by the bound as a batch with an id is, decoded only to find its id.
        Err(retry_after) => return held_back(batch.batch_id, retry_after),
    };
    if let Err(invalid) = validate::batch(&batch, i64::from(crate::clock::now_secs())) {
        tracing::warn!(node = %sender.node, error = %invalid, "rejected a malformed batch");
        return ack(batch.batch_id, v1::ack::Status::Rejected, invalid.to_string(), 0);
    }
    // Frames sent as (build id, offset) are named from the shared symbol tables.
    if let Err(e) = names.load_for(&batch.frames).await {
        tracing::warn!(error = %e, "symbol tables unavailable; functions of this batch stay unnamed");
    }
    // The decoded batch is several times its rows: it is not kept while they wait to be written
    // (the write path bounds those).
    let batch_id = batch.batch_id.clone();
    let samples: u64 = batch.samples.iter().map(|s| s.count).sum();
    // Turning a batch into rows is CPU work of up to a second for the largest batches allowed:
    // on the blocking pool, so that no stream waits behind it.
    let rows = {
        let writer = writer.clone();
        tokio::task::spawn_blocking(move || rows::build(&sender, &batch, &*names, &writer.known())).await
    };
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            tracing::error!(error = %e, "building the rows of a batch failed");
            return ack(
                batch_id,
                v1::ack::Status::Retry,
                "the server failed storing this batch".into(),
                5_000,
            );
        }
    };
    // The batch's share of the bound goes once its rows have room in the write buffer: rows
    // waiting for room count against it (they are several times the encoded batch; released
    // when built, 100 agents catching up left 800 MB of rows outside every bound).
    match writer.submit(rows, held).await {
        Outcome::Stored => {
            metrics().ingest_samples.inc_by(samples);
            ack(batch_id, v1::ack::Status::Stored, String::new(), 0)
        }
        Outcome::Duplicate => ack(batch_id, v1::ack::Status::Duplicate, String::new(), 0),
        Outcome::Retry { after, cause, reason } => {
            count_refused(cause);
            ack(
                batch_id,
                v1::ack::Status::Retry,
                reason,
                after.as_millis().min(u128::from(u32::MAX)) as u32,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The delay grows with the batches waiting, within bounds, spread by batch id.
    #[test]
    fn retry_delay_follows_the_queue() {
        let id = [7u8; 16];
        assert!((3_750..=6_250).contains(&retry_millis(0, &id)));
        assert!((75_000..=125_000).contains(&retry_millis(1_000, &id)));
        assert!(retry_millis(1_000_000, &id) <= 375_000);
        let spread: std::collections::HashSet<u32> = (0..50u8).map(|i| retry_millis(1_000, &[i; 16])).collect();
        assert!(spread.len() > 10, "{spread:?}");
    }
}
