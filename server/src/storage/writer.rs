//! The write path: batches from every agent stream are buffered and written together, a few
//! large INSERTs per flush instead of several small ones per batch, and each batch is
//! acknowledged only once ClickHouse holds all of it.
//!
//! A flush, for the batches buffered since the last one:
//! 1. claims every batch in the ledger (`ledger`, state 1) and reads the ledger back: a batch
//!    stored before is a duplicate, a batch another server claimed within the claim lease is
//!    answered "retry later" (so two servers never write one batch at once, see
//!    docs/design/007), the rest proceed;
//! 2. for batches that were sent before (or a flush that is tried again), reads which fact
//!    tables hold them already (`batch_progress`, written by the same INSERT as the facts);
//! 3. writes new dimension rows (stacks, frames, processes, functions, nodes, sources: keyed by
//!    content, so writing one twice is harmless);
//! 4. writes the facts, one INSERT per input table, leaving out parts a batch already has;
//! 5. marks the batches stored (state 2) and acknowledges them.
//!
//! A failed flush is tried again (from step 1, with step 2 for every batch) until
//! `retry_for` has passed; then its batches are answered "retry later" and the agents keep them.
//! An attempt that timed out may have left an INSERT running in ClickHouse, which then stores
//! its rows after the attempt gave up: no attempt begins while one does (its queries carry the
//! attempt's id), or step 2 would read those rows as missing and write them again.
//! The buffer is bounded in rows: a stream that finds it full waits a little, then its batch is
//! answered "retry later" with a delay, which the agent honours.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clickhouse::Client;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use super::batch::{BatchRows, Sender};
use super::rows::{
    CounterInputRow, DataSampleInputRow, EventSourceRow, FrameWriteRow, FunctionRow, LedgerRow, LedgerStateRow,
    NodeFactsRow, NodeWriteRow, PlacementInputRow, ProcessRow, ProgressRow, SampleInputRow, StackRow,
};
use super::{queries, StorageError, Store};
use crate::clock::{now_millis, now_secs, today};

/// Ledger states.
const CLAIMED: u8 = 1;
const STORED: u8 = 2;
const WITHDRAWN: u8 = 3;

/// A flush attempt's id (ClickHouse's `query_id` of its queries; its INSERTs' begin with it):
/// this prefix and a UUID's 32 hex digits.
const ATTEMPT_ID_PREFIX: &str = "bimodal-flush-";
const ATTEMPT_ID_LEN: usize = ATTEMPT_ID_PREFIX.len() + 32;

/// Fact parts a batch can have, as `batch_progress.part` names them.
const PARTS: [&str; 4] = ["samples", "data_samples", "counters", "placements"];

/// How the write path behaves.
#[derive(Clone, Debug)]
pub struct WriterConfig {
    /// Flush when this many rows are buffered...
    pub flush_rows: usize,
    /// ...or when the oldest buffered batch has waited this long.
    pub flush_interval: Duration,
    /// Most rows buffered or being written; beyond it streams wait, then get "retry later".
    pub max_buffered_rows: usize,
    /// How long a batch's rows wait for room in the buffer before the batch is answered
    /// "retry". They are built by then: a retry throws that work away and the batch comes back
    /// to be decoded and built again, while a waiting batch holds its share of ingest's bound,
    /// so that the batches beyond it are refused before they are decoded.
    pub wait_for_room: Duration,
    /// How long a failing flush is tried again before its batches are answered "retry".
    pub retry_for: Duration,
    /// How long one attempt may take before it counts as failed (a frozen ClickHouse answers
    /// nothing at all).
    pub attempt_timeout: Duration,
    /// How long a server's claim on a batch keeps others from writing it.
    pub claim_lease: Duration,
    /// Dimension ids remembered as written, per kind (stacks, frames, processes, functions).
    pub dimension_cache_entries: usize,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            flush_rows: 500_000,
            flush_interval: Duration::from_secs(2),
            max_buffered_rows: 2_000_000,
            wait_for_room: Duration::from_secs(60),
            retry_for: Duration::from_secs(60),
            attempt_timeout: Duration::from_secs(30),
            claim_lease: Duration::from_secs(120),
            dimension_cache_entries: 1 << 20,
        }
    }
}

/// What happened to a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// ClickHouse holds it now.
    Stored,
    /// It was stored before; nothing was written.
    Duplicate,
    /// Not stored: send it again after `after`. `cause` names why in a metric label
    /// (`write_buffer`, `stopping`, `storage`, `claimed`), `reason` in words.
    Retry {
        after: Duration,
        cause: &'static str,
        reason: String,
    },
}

struct Pending {
    rows: BatchRows,
    /// The first submitter's reply, then those of duplicates that arrived meanwhile.
    replies: Vec<oneshot::Sender<Outcome>>,
    /// Room in the buffer, given back when the batch is answered.
    _room: Option<OwnedSemaphorePermit>,
    since: Instant,
}

enum Message {
    Batch(Box<Pending>),
    Node(Arc<Sender>),
}

/// Handle of the write path; cheap to clone.
#[derive(Clone, Debug)]
pub struct Writer {
    messages: mpsc::UnboundedSender<Message>,
    room: Arc<Semaphore>,
    config: WriterConfig,
    dimensions: Arc<Dimensions>,
}

impl Writer {
    /// Starts the flushing task.
    pub fn start(store: Arc<Store>, config: WriterConfig) -> Writer {
        let (messages, inbox) = mpsc::unbounded_channel();
        let room = Arc::new(Semaphore::new(config.max_buffered_rows));
        let dimensions = Arc::new(Dimensions::new(config.dimension_cache_entries));
        tokio::spawn(Flusher::new(store, config.clone(), dimensions.clone()).run(inbox));
        Writer {
            messages,
            room,
            config,
            dimensions,
        }
    }

    /// What is written already, for leaving it out of new batches.
    /// What was written today, asked with the day read once (the clock per lookup cost 3% of
    /// ingest CPU).
    pub fn known(&self) -> KnownToday<'_> {
        KnownToday {
            dimensions: &self.dimensions,
            day: today(),
        }
    }

    /// Writes a node's row (labels, facts) with the next flush and keeps it fresh while its
    /// batches come.
    pub fn note_node(&self, sender: Arc<Sender>) {
        let _ = self.messages.send(Message::Node(sender));
    }

    /// Buffers a batch and waits until it is stored (or found stored before, or refused for now).
    /// `admitted` (the batch's share of ingest's bound) is held until the rows hold their share
    /// of the write buffer: rows waiting for room are within one bound or the other, never
    /// outside both.
    pub async fn submit<A>(&self, rows: BatchRows, admitted: A) -> Outcome {
        let weight = rows.weight().clamp(1, self.config.max_buffered_rows) as u32;
        let room =
            match tokio::time::timeout(self.config.wait_for_room, self.room.clone().acquire_many_owned(weight)).await {
                Ok(Ok(permit)) => Some(permit),
                _ => {
                    return Outcome::Retry {
                        after: Duration::from_secs(5),
                        cause: "write_buffer",
                        reason: "the server's write buffer is full: ClickHouse is falling behind".into(),
                    }
                }
            };
        drop(admitted);
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            rows,
            replies: vec![reply],
            _room: room,
            since: Instant::now(),
        };
        if self.messages.send(Message::Batch(Box::new(pending))).is_err() {
            return Outcome::Retry {
                after: Duration::from_secs(5),
                cause: "stopping",
                reason: "the server is stopping".into(),
            };
        }
        answer.await.unwrap_or(Outcome::Retry {
            after: Duration::from_secs(5),
            cause: "stopping",
            reason: "the server is stopping".into(),
        })
    }
}

/// The dimension rows written lately, by id, with the day (ClickHouse `Date`) they were: a row is
/// written again once a day while in use (its `last_seen` keeps it from expiring). Shared with
/// ingest, which leaves known rows out of a batch before it is buffered.
#[derive(Debug)]
pub struct Dimensions {
    stacks: quick_cache::sync::Cache<u64, u16>,
    frames: quick_cache::sync::Cache<u64, u16>,
    processes: quick_cache::sync::Cache<u64, u16>,
    functions: quick_cache::sync::Cache<u64, u16>,
    /// The function of frames named from a symbol table or by their agent, once written.
    frame_functions: quick_cache::sync::Cache<u64, u64>,
}

impl Dimensions {
    fn new(entries: usize) -> Dimensions {
        let cache = || quick_cache::sync::Cache::new(entries.max(1024));
        Dimensions {
            stacks: cache(),
            frames: cache(),
            processes: cache(),
            functions: cache(),
            frame_functions: quick_cache::sync::Cache::new(entries.max(1024)),
        }
    }
}

/// The dimensions written on one day.
#[derive(Debug)]
pub struct KnownToday<'a> {
    dimensions: &'a Dimensions,
    day: u16,
}

impl KnownToday<'_> {
    fn written(&self, cache: &quick_cache::sync::Cache<u64, u16>, id: u64) -> bool {
        cache.get(&id) == Some(self.day)
    }
}

impl super::batch::Known for KnownToday<'_> {
    fn frame(&self, id: u64) -> bool {
        self.written(&self.dimensions.frames, id)
    }
    fn stack(&self, id: u64) -> bool {
        self.written(&self.dimensions.stacks, id)
    }
    fn process(&self, id: u64) -> bool {
        self.written(&self.dimensions.processes, id)
    }
    fn function_of(&self, frame_id: u64) -> Option<u64> {
        let function = self.dimensions.frame_functions.get(&frame_id)?;
        self.written(&self.dimensions.functions, function).then_some(function)
    }
}

/// A node as the writer keeps it: what to write, and when it last was. Its first and last
/// seen are its batches' times, never this server's clock: batches imported later
/// (`bimodal-agent import`) list the node in the time they cover.
struct NodeState {
    sender: Arc<Sender>,
    /// The first_seen written (or stored before), once the node's row was written.
    first_seen: Option<u32>,
    /// When the row was last written, and the last_seen it carried.
    written: Option<(Instant, u32)>,
    first_batch_start: Option<u32>,
    last_batch_end: Option<u32>,
    /// When its last Hello or batch came.
    active: Instant,
}

/// How long a node's state (its last Hello: labels and facts) is kept after its last Hello or
/// batch, once its row is written: longer than a stream may stay quiet
/// (`--stream-idle-timeout`), so a node that streams keeps it, and Hellos without batches do not
/// pile up for as long as the server runs (issue 49: 300 Hellos of ~1 MB facts held 318 MB).
const NODE_STATE_KEPT: Duration = Duration::from_secs(15 * 60);

impl NodeState {
    /// Whether the row is to be (re)written: it never was, a new Hello came, a batch started
    /// before its first_seen, or its batches went on past its last_seen (at most once per
    /// NODE_REFRESH while they come in order; at once when they jump ahead, as imports do).
    fn due(&self) -> bool {
        let Some(end) = self.last_batch_end else {
            return false;
        };
        let Some((at, last_seen)) = self.written else {
            return true;
        };
        let earlier = matches!((self.first_batch_start, self.first_seen), (Some(b), Some(f)) if b < f);
        let refresh = NODE_REFRESH.as_secs() as u32;
        earlier || (end > last_seen && (at.elapsed() >= NODE_REFRESH || end > last_seen.saturating_add(refresh)))
    }
}

/// How often a node's row is rewritten while its batches come (its `last_seen`).
pub const NODE_REFRESH: Duration = Duration::from_secs(60);
/// How often an event source's row is rewritten while in use.
const SOURCE_REFRESH: Duration = Duration::from_secs(600);

struct Flusher {
    store: Arc<Store>,
    config: WriterConfig,
    pending: Vec<Pending>,
    by_id: HashMap<[u8; 16], usize>,
    rows: usize,
    nodes: HashMap<Arc<str>, NodeState>,
    sources: HashMap<(&'static str, Arc<str>), Instant>,
    dimensions: Arc<Dimensions>,
    /// Query ids of attempts that failed after they began writing, whose INSERTs may still run
    /// in ClickHouse (the attempt under way's too, until it succeeds).
    unsettled: Vec<String>,
}

impl Flusher {
    fn new(store: Arc<Store>, config: WriterConfig, dimensions: Arc<Dimensions>) -> Flusher {
        Flusher {
            store,
            pending: Vec::new(),
            by_id: HashMap::new(),
            rows: 0,
            nodes: HashMap::new(),
            sources: HashMap::new(),
            dimensions,
            config,
            unsettled: Vec::new(),
        }
    }

    async fn run(mut self, mut inbox: mpsc::UnboundedReceiver<Message>) {
        loop {
            let due = self
                .pending
                .first()
                .map(|p| p.since + self.config.flush_interval)
                .unwrap_or_else(|| Instant::now() + NODE_REFRESH);
            tokio::select! {
                message = inbox.recv() => match message {
                    Some(message) => {
                        self.take(message);
                        // Everything that arrived during the last flush goes into the next one:
                        // taking one message per turn would flush each alone (they are all due).
                        while let Ok(message) = inbox.try_recv() {
                            self.take(message);
                        }
                    }
                    None => {
                        if !self.pending.is_empty() {
                            self.flush().await;
                        }
                        return;
                    }
                },
                _ = tokio::time::sleep_until(due.into()) => match self.pending.is_empty() {
                    true => self.refresh_nodes().await,
                    false => self.flush().await,
                },
            }
            if self.rows >= self.config.flush_rows {
                self.flush().await;
            }
        }
    }

    fn take(&mut self, message: Message) {
        match message {
            Message::Batch(p) => self.add(*p),
            Message::Node(sender) => self.note_node(sender),
        }
    }

    fn note_node(&mut self, sender: Arc<Sender>) {
        let state = self.nodes.entry(sender.node.clone()).or_insert_with(|| NodeState {
            sender: sender.clone(),
            first_seen: None,
            written: None,
            first_batch_start: None,
            last_batch_end: None,
            active: Instant::now(),
        });
        // A new Hello may carry new labels or facts: write it with the next flush.
        state.sender = sender;
        state.written = None;
        state.active = Instant::now();
    }

    fn add(&mut self, p: Pending) {
        if let Some(&i) = self.by_id.get(&p.rows.batch_id) {
            // The same batch twice in one buffer (two streams of one agent): written once.
            self.pending[i].replies.extend(p.replies);
            return;
        }
        self.rows += p.rows.weight();
        self.by_id.insert(p.rows.batch_id, self.pending.len());
        self.pending.push(p);
    }

    /// Rewrites the rows of nodes whose last batches came after their row was written, when no
    /// batch is pending (the end of an import, a node that stopped).
    async fn refresh_nodes(&mut self) {
        let store = self.store.clone();
        if let Err(e) = self.write_nodes(&store.writer_client(), &[]).await {
            tracing::warn!(error = %e, "rewriting node rows failed; trying again later");
        }
    }

    async fn flush(&mut self) {
        let batches = std::mem::take(&mut self.pending);
        self.by_id.clear();
        self.rows = 0;
        if batches.is_empty() {
            return;
        }
        let deadline = Instant::now() + self.config.retry_for;
        let mut backoff = Duration::from_millis(200);
        let mut attempt = 0;
        let outcomes = loop {
            let attempt_timeout = self.config.attempt_timeout;
            // Every query of the attempt carries this id (ClickHouse's query_id).
            let id = format!("{ATTEMPT_ID_PREFIX}{}", uuid::Uuid::new_v4().simple());
            let result = tokio::time::timeout(attempt_timeout, self.write(&batches, attempt > 0, &id))
                .await
                .unwrap_or_else(|_| Err(StorageError::Timeout(attempt_timeout).counted("write")));
            match result {
                Ok(outcomes) => break outcomes,
                Err(e) if Instant::now() + backoff < deadline => {
                    tracing::warn!(error = %e, batches = batches.len(), retry_in = ?backoff, "flush failed; trying again");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    attempt += 1;
                }
                Err(e) => {
                    tracing::error!(error = %e, batches = batches.len(), "flush failed; the agents will resend");
                    break vec![
                        Outcome::Retry {
                            after: Duration::from_secs(5),
                            cause: "storage",
                            reason: "storage is unavailable".into(),
                        };
                        batches.len()
                    ];
                }
            }
        };
        for (p, outcome) in batches.into_iter().zip(outcomes) {
            for (i, reply) in p.replies.into_iter().enumerate() {
                let outcome = match (&outcome, i) {
                    // Later copies of a batch stored now were duplicates.
                    (Outcome::Stored, 1..) => Outcome::Duplicate,
                    _ => outcome.clone(),
                };
                let _ = reply.send(outcome);
            }
        }
    }

    /// Whether an INSERT of an attempt that failed still runs in ClickHouse (the ids of an
    /// attempt's INSERTs begin with the attempt's): forgets the attempts none of whose INSERTs
    /// does; an error while one does.
    async fn settle(&mut self, client: &Client) -> Result<(), StorageError> {
        if self.unsettled.is_empty() {
            return Ok(());
        }
        // The attempt's id as the start of each INSERT's (no lambda: 18.16's cannot read a
        // column of the table).
        let running: Vec<String> = client
            .query(
                "SELECT DISTINCT substring(query_id, 1, ?) FROM system.processes \
                 WHERE startsWith(query, 'INSERT') AND has(?, substring(query_id, 1, ?))",
            )
            .bind(ATTEMPT_ID_LEN)
            .bind(&self.unsettled)
            .bind(ATTEMPT_ID_LEN)
            .fetch_all()
            .await
            .map_err(StorageError::query("read which writes still run"))?;
        self.unsettled.retain(|attempt| running.contains(attempt));
        match self.unsettled.len() {
            0 => Ok(()),
            n => Err(StorageError::StillWriting(n as u64).counted("write")),
        }
    }

    /// One attempt at writing `batches`, its queries under the query id `id`; `again` when an
    /// earlier attempt may have written part.
    async fn write(&mut self, batches: &[Pending], again: bool, id: &str) -> Result<Vec<Outcome>, StorageError> {
        let store = self.store.clone();
        // 0. No write given up on still runs: it could store rows step 2 reads as missing.
        self.settle(&store.writer_client()).await?;
        // Left among the unsettled if the attempt fails (or is given up on) from here on.
        self.unsettled.push(id.to_owned());
        let client = store.writer_client().with_setting("query_id", id);
        let me = store.server_id;
        let lease_ms = self.config.claim_lease.as_millis() as u64;

        // 1. Claim, then read who else claimed or stored.
        let began = Instant::now();
        self.ledger(&client, batches.iter().map(|p| &p.rows), CLAIMED).await?;
        let ids: Vec<[u8; 16]> = batches.iter().map(|p| p.rows.batch_id).collect();
        let states = read_ledger(&client, &ids).await?;
        let claimed = began.elapsed();
        let now = now_millis();
        let mut outcomes = Vec::with_capacity(batches.len());
        // The ledger's rows by batch (a backlog after an outage flushes thousands at once).
        let mut by_batch: HashMap<[u8; 16], Vec<_>> = HashMap::new();
        for s in &states {
            by_batch.entry(s.batch_id).or_default().push(s);
        }
        for p in batches {
            let rows = by_batch.get(&p.rows.batch_id).into_iter().flatten().copied();
            let mut outcome = None;
            for s in rows {
                // Stored by anyone, ever: a later claim (a resend) does not undo that.
                if s.stored == 1 {
                    outcome = Some(Outcome::Duplicate);
                    break;
                }
                if s.server != me && s.last_state == CLAIMED && s.newest + lease_ms > now {
                    // The other server is most likely writing it right now: ask again soon, at a
                    // random moment, so two servers that deferred to each other do not meet again.
                    let wait = 1000 + u64::from(uuid::Uuid::new_v4().as_bytes()[0]) * 4;
                    outcome = Some(Outcome::Retry {
                        after: Duration::from_millis(wait),
                        cause: "claimed",
                        reason: "another server is storing this batch".into(),
                    });
                }
            }
            outcomes.push(outcome);
        }
        let withdrawn: Vec<&BatchRows> = batches
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| matches!(o, Some(Outcome::Retry { .. })))
            .map(|(p, _)| &p.rows)
            .collect();
        if !withdrawn.is_empty() {
            self.ledger(&client, withdrawn.into_iter(), WITHDRAWN).await?;
        }
        let go: Vec<&BatchRows> = batches
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| o.is_none())
            .map(|(p, _)| &p.rows)
            .collect();

        // 2. Which parts batches sent before already have.
        let recheck: Vec<[u8; 16]> = go.iter().filter(|b| b.resend || again).map(|b| b.batch_id).collect();
        let done: HashSet<([u8; 16], String)> = if recheck.is_empty() {
            HashSet::new()
        } else {
            read_progress(&client, &recheck).await?
        };
        let needs = |b: &BatchRows, part: &str| !done.contains(&(b.batch_id, part.to_owned()));

        // 3. Dimensions, 4. facts, 5. stored.
        let step = Instant::now();
        self.write_dimensions(&client, &go).await?;
        let dimensions = step.elapsed();
        let step = Instant::now();
        write_samples(&client, go.iter().copied().filter(|b| needs(b, PARTS[0]))).await?;
        let samples = step.elapsed();
        let step = Instant::now();
        write_data_samples(&client, go.iter().copied().filter(|b| needs(b, PARTS[1]))).await?;
        write_counters(&client, go.iter().copied().filter(|b| needs(b, PARTS[2]))).await?;
        write_placements(&client, go.iter().copied().filter(|b| needs(b, PARTS[3]))).await?;
        let others = step.elapsed();
        self.ledger(&client, go.iter().copied(), STORED).await?;
        tracing::debug!(
            batches = go.len(),
            rows = go.iter().map(|b| b.weight()).sum::<usize>(),
            ?claimed,
            ?dimensions,
            ?samples,
            ?others,
            total = ?began.elapsed(),
            "flushed"
        );
        self.unsettled.retain(|attempt| attempt != id);
        Ok(outcomes.into_iter().map(|o| o.unwrap_or(Outcome::Stored)).collect())
    }

    async fn ledger<'a>(
        &self,
        client: &Client,
        batches: impl Iterator<Item = &'a BatchRows>,
        state: u8,
    ) -> Result<(), StorageError> {
        let version = now_millis();
        let server = self.store.server_id;
        let mut insert = begin::<LedgerRow<'static>>(client, "ledger").await?;
        let mut any = false;
        for b in batches {
            any = true;
            let events: Vec<&str> = b.sources.iter().map(|s| s.event).collect();
            let names: Vec<&str> = b.sources.iter().map(|s| &*s.name).collect();
            let dropped: Vec<u64> = b.sources.iter().map(|s| s.dropped).collect();
            let row = LedgerRow {
                batch_id: b.batch_id,
                node: &b.node,
                start_time: b.start_time,
                end_time: b.end_time,
                state,
                server,
                version,
                agent_version: &b.agent_version,
                samples: b.sample_count,
                source_events: &events,
                source_names: &names,
                source_dropped: &dropped,
            };
            insert.write(&row).await.map_err(insert_error("ledger"))?;
        }
        finish(insert, any, "ledger").await
    }

    /// Writes the stacks, frames, processes and functions not written today, the nodes whose
    /// row is due and the sources not written lately.
    async fn write_dimensions(&mut self, client: &Client, batches: &[&BatchRows]) -> Result<(), StorageError> {
        let day = today();
        let due = |cache: &quick_cache::sync::Cache<u64, u16>, id: u64| cache.get(&id) != Some(day);
        let dims = self.dimensions.clone();

        let mut stacks: Vec<(u64, &[u64])> = Vec::new();
        let mut frames = Vec::new();
        let mut processes = Vec::new();
        let mut functions = Vec::new();
        let mut seen = HashSet::new();
        for b in batches {
            stacks.extend(
                b.stacks
                    .iter()
                    .filter(|(id, _)| due(&dims.stacks, *id) && seen.insert((0, *id)))
                    .map(|(id, f)| (*id, &f[..])),
            );
            frames.extend(
                b.frames
                    .iter()
                    .filter(|f| due(&dims.frames, f.id) && seen.insert((1, f.id))),
            );
            processes.extend(
                b.processes
                    .iter()
                    .filter(|p| due(&dims.processes, p.process_id) && seen.insert((2, p.process_id))),
            );
            functions.extend(
                b.functions
                    .iter()
                    .filter(|f| due(&dims.functions, f.id) && seen.insert((3, f.id))),
            );
        }
        if !stacks.is_empty() {
            let mut insert = begin::<StackRow>(client, "stacks").await?;
            for (id, f) in &stacks {
                let row = StackRow {
                    stack_id: *id,
                    frame_ids: f.to_vec(),
                    last_seen: day,
                };
                insert.write(&row).await.map_err(insert_error("stacks"))?;
            }
            finish(insert, true, "stacks").await?;
        }
        if !frames.is_empty() {
            let mut insert = begin::<FrameWriteRow<'static>>(client, "frames").await?;
            for f in &frames {
                let row = FrameWriteRow {
                    frame_id: f.id,
                    kind: f.kind,
                    module: &f.module,
                    build_id: &f.build_id,
                    file_offset: f.file_offset,
                    elf_address: f.elf_address,
                    address: f.address,
                    function: &f.function,
                    last_seen: day,
                };
                insert.write(&row).await.map_err(insert_error("frames"))?;
            }
            finish(insert, true, "frames").await?;
        }
        if !processes.is_empty() {
            let mut insert = begin::<ProcessRow>(client, "processes").await?;
            for p in &processes {
                let row = ProcessRow {
                    last_seen: day,
                    ..(*p).clone()
                };
                insert.write(&row).await.map_err(insert_error("processes"))?;
            }
            finish(insert, true, "processes").await?;
        }
        if !functions.is_empty() {
            let mut insert = begin::<FunctionRow>(client, "functions").await?;
            for f in &functions {
                let row = FunctionRow {
                    function_id: f.id,
                    name: f.name.clone(),
                    module: f.module.clone(),
                    last_seen: day,
                };
                insert.write(&row).await.map_err(insert_error("functions"))?;
            }
            finish(insert, true, "functions").await?;
        }
        self.write_nodes(client, batches).await?;
        self.write_sources(client, batches).await?;
        // Remembered only once written.
        for (id, _) in stacks {
            dims.stacks.insert(id, day);
        }
        for f in frames {
            dims.frames.insert(f.id, day);
        }
        for p in processes {
            dims.processes.insert(p.process_id, day);
        }
        for f in functions {
            dims.functions.insert(f.id, day);
        }
        for b in batches {
            for &(frame, function) in &b.frame_functions {
                dims.frame_functions.insert(frame, function);
            }
        }
        Ok(())
    }

    async fn write_nodes(&mut self, client: &Client, batches: &[&BatchRows]) -> Result<(), StorageError> {
        for b in batches {
            if let Some(n) = self.nodes.get_mut(&b.node) {
                n.last_batch_end = Some(n.last_batch_end.map_or(b.end_time, |e| e.max(b.end_time)));
                n.first_batch_start = Some(n.first_batch_start.map_or(b.start_time, |s| s.min(b.start_time)));
                n.active = Instant::now();
            }
        }
        // Nodes quiet for NODE_STATE_KEPT whose rows need no writing are forgotten (a Hello
        // brings them back).
        self.nodes
            .retain(|_, n| n.active.elapsed() < NODE_STATE_KEPT || n.due());
        let due: Vec<Arc<str>> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.due())
            .map(|(k, _)| k.clone())
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        // A node this server has not written yet keeps the first_seen stored before.
        let unknown: Vec<&str> = due
            .iter()
            .filter(|n| self.nodes[*n].first_seen.is_none())
            .map(|n| &**n)
            .collect();
        let known = if unknown.is_empty() {
            HashMap::new()
        } else {
            queries::first_seen(client, &unknown).await?
        };
        let version = now_millis();
        let mut rows = Vec::with_capacity(due.len());
        for name in &due {
            let n = self.nodes.get_mut(name).expect("due nodes are known");
            let (start, end) = (n.first_batch_start, n.last_batch_end);
            let (start, end) = (
                start.expect("due nodes have batches"),
                end.expect("due nodes have batches"),
            );
            let first_seen = [n.first_seen, known.get(&**name).copied(), Some(start)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(start);
            n.first_seen = Some(first_seen);
            rows.push((n.sender.clone(), first_seen, end.max(first_seen)));
        }
        let mut insert = begin::<NodeWriteRow<'static>>(client, "nodes").await?;
        let mut facts_insert = begin::<NodeFactsRow<'static>>(client, "node_facts").await?;
        let mut any_facts = false;
        for (sender, first_seen, last_seen) in &rows {
            let (keys, values) = node_labels(sender);
            let facts = sender
                .facts
                .as_ref()
                .map(prost::Message::encode_to_vec)
                .unwrap_or_default();
            let row = NodeWriteRow {
                node: &sender.node,
                first_seen: *first_seen,
                last_seen: *last_seen,
                label_keys: &keys,
                label_values: &values,
                agent_version: &sender.agent_version,
                facts: &facts,
                version,
            };
            insert.write(&row).await.map_err(insert_error("nodes"))?;
            if let Some(f) = &sender.facts {
                any_facts = true;
                let row = NodeFactsRow {
                    node: &sender.node,
                    facts_hash: twox_hash::XxHash64::oneshot(0, &facts),
                    first_seen: *last_seen,
                    last_seen: *last_seen,
                    kernel_release: &f.kernel_release,
                    cpu_vendor: &f.cpu_vendor,
                    cpu_model_name: &f.cpu_model_name,
                    online_cpus: f.online_cpus.len() as u32,
                    numa_nodes: f.numa_nodes.len() as u32,
                    facts: &facts,
                };
                facts_insert.write(&row).await.map_err(insert_error("node_facts"))?;
            }
        }
        finish(insert, true, "nodes").await?;
        finish(facts_insert, any_facts, "node_facts").await?;
        for (name, (_, _, last_seen)) in due.into_iter().zip(rows) {
            if let Some(n) = self.nodes.get_mut(&name) {
                n.written = Some((Instant::now(), last_seen));
            }
        }
        Ok(())
    }

    async fn write_sources(&mut self, client: &Client, batches: &[&BatchRows]) -> Result<(), StorageError> {
        let mut rows = Vec::new();
        let mut seen = HashSet::new();
        for b in batches {
            for s in &b.sources {
                let key = (s.event, s.name.clone());
                let fresh = self.sources.get(&key).is_some_and(|t| t.elapsed() < SOURCE_REFRESH);
                if !fresh && seen.insert(key.clone()) {
                    rows.push((key, s));
                }
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        let mut insert = begin::<EventSourceRow>(client, "event_sources").await?;
        for ((event, name), s) in &rows {
            let row = EventSourceRow {
                event: (*event).to_owned(),
                source: name.to_string(),
                unit: s.unit.clone(),
                description: s.description.clone(),
                last_seen: now_secs(),
            };
            insert.write(&row).await.map_err(insert_error("event_sources"))?;
        }
        finish(insert, true, "event_sources").await?;
        for (key, _) in rows {
            self.sources.insert(key, Instant::now());
        }
        Ok(())
    }
}

/// A node's labels as selectors see them: the operator's, then the facts' (node, cpu_model...).
pub fn node_labels(sender: &Sender) -> (Vec<String>, Vec<String>) {
    let mut labels: Vec<(String, String)> = sender.labels.clone();
    labels.push(("node".into(), sender.node.to_string()));
    labels.push(("agent_version".into(), sender.agent_version.to_string()));
    if let Some(f) = &sender.facts {
        labels.extend([
            ("cpu_vendor".into(), f.cpu_vendor.clone()),
            ("cpu_model".into(), f.cpu_model_name.clone()),
            ("cpus".into(), f.online_cpus.len().to_string()),
            ("sockets".into(), f.sockets.to_string()),
            ("numa_nodes".into(), f.numa_nodes.len().to_string()),
            ("kernel".into(), f.kernel_release.clone()),
            ("numa_balancing".into(), f.numa_balancing.clone()),
            ("thp".into(), f.transparent_hugepages.clone()),
            ("pmu".into(), f.hardware_pmu.clone()),
            (
                "unwinding".into(),
                f.weakest_unwinding().map_or(String::new(), |m| m.name().to_owned()),
            ),
        ]);
    }
    labels.sort();
    labels.into_iter().unzip()
}

/// An INSERT into `table`; under a client with a query id (a flush attempt's), the INSERT's own
/// id is that id and the table: two may be open at once (`nodes` and `node_facts`), and
/// ClickHouse refuses a query whose id is running.
async fn begin<R: clickhouse::Row>(
    client: &Client,
    table: &'static str,
) -> Result<clickhouse::insert::Insert<R>, StorageError> {
    let insert = client
        .insert::<R>(table)
        .await
        .map_err(insert_error(table))?
        .with_timeouts(Some(Duration::from_secs(30)), Some(Duration::from_secs(60)));
    Ok(match client.get_setting("query_id") {
        Some(attempt) => insert.with_setting("query_id", format!("{attempt}-{table}")),
        None => insert,
    })
}

async fn finish<R>(insert: clickhouse::insert::Insert<R>, any: bool, table: &'static str) -> Result<(), StorageError> {
    if any {
        insert.end().await.map_err(insert_error(table))
    } else {
        Ok(())
    }
}

fn insert_error(table: &'static str) -> impl Fn(clickhouse::error::Error) -> StorageError {
    StorageError::insert(table)
}

async fn write_samples<'a>(client: &Client, batches: impl Iterator<Item = &'a BatchRows>) -> Result<(), StorageError> {
    let mut insert = begin::<SampleInputRow<'static>>(client, "samples_input").await?;
    let mut any = false;
    for b in batches {
        for s in &b.samples {
            any = true;
            let row = SampleInputRow {
                kind: s.kind,
                batch_id: b.batch_id,
                time: b.start_time,
                node: &b.node,
                event: s.event,
                source: &s.source,
                process_id: s.process_id,
                stack_id: s.stack_id,
                function_id: s.function_id,
                count: s.count,
                value: s.value,
                self_count: s.self_count,
                self_value: s.self_value,
            };
            insert.write(&row).await.map_err(insert_error("samples_input"))?;
        }
    }
    finish(insert, any, "samples_input").await
}

async fn write_data_samples<'a>(
    client: &Client,
    batches: impl Iterator<Item = &'a BatchRows>,
) -> Result<(), StorageError> {
    let mut insert = begin::<DataSampleInputRow<'static>>(client, "data_samples_input").await?;
    let mut any = false;
    for b in batches {
        for d in &b.data_samples {
            any = true;
            let row = DataSampleInputRow {
                batch_id: b.batch_id,
                time: b.start_time,
                node: &b.node,
                event: d.event,
                source: &d.source,
                process_id: d.process_id,
                stack_id: d.stack_id,
                mapping_kind: &d.mapping_kind,
                mapping_path: &d.mapping_path,
                symbol: &d.symbol,
                cache_line: d.cache_line,
                count: d.count,
                value: d.value,
            };
            insert.write(&row).await.map_err(insert_error("data_samples_input"))?;
        }
    }
    finish(insert, any, "data_samples_input").await
}

async fn write_counters<'a>(client: &Client, batches: impl Iterator<Item = &'a BatchRows>) -> Result<(), StorageError> {
    let mut insert = begin::<CounterInputRow<'static>>(client, "counters_input").await?;
    let mut any = false;
    for b in batches {
        for (name, value) in &b.counters {
            any = true;
            let row = CounterInputRow {
                batch_id: b.batch_id,
                time: b.start_time,
                node: &b.node,
                name,
                value: *value,
            };
            insert.write(&row).await.map_err(insert_error("counters_input"))?;
        }
    }
    finish(insert, any, "counters_input").await
}

async fn write_placements<'a>(
    client: &Client,
    batches: impl Iterator<Item = &'a BatchRows>,
) -> Result<(), StorageError> {
    let mut insert = begin::<PlacementInputRow<'static>>(client, "placements_input").await?;
    let mut any = false;
    for b in batches {
        for p in &b.placements {
            any = true;
            let row = PlacementInputRow {
                batch_id: b.batch_id,
                time: b.start_time,
                node: &b.node,
                pid: p.pid,
                comm: &p.comm,
                executable: &p.executable,
                thread_nodes: &p.thread_nodes,
                thread_counts: &p.thread_counts,
                kind: &p.kind,
                path: &p.path,
                start: p.start,
                end: p.end,
                permissions: &p.permissions,
                page_nodes: &p.page_nodes,
                page_counts: &p.page_counts,
                page_size: p.page_size,
            };
            insert.write(&row).await.map_err(insert_error("placements_input"))?;
        }
    }
    finish(insert, any, "placements_input").await
}

async fn read_ledger(client: &Client, ids: &[[u8; 16]]) -> Result<Vec<LedgerStateRow>, StorageError> {
    let mut out = Vec::new();
    for chunk in ids.chunks(2000) {
        out.extend(
            queries::ledger_states(chunk)
                .query(client)
                .fetch_all::<LedgerStateRow>()
                .await
                .map_err(StorageError::query("read the batch ledger"))?,
        );
    }
    Ok(out)
}

async fn read_progress(client: &Client, ids: &[[u8; 16]]) -> Result<HashSet<([u8; 16], String)>, StorageError> {
    let mut out = HashSet::new();
    for chunk in ids.chunks(2000) {
        for row in queries::progress(chunk)
            .query(client)
            .fetch_all::<ProgressRow>()
            .await
            .map_err(StorageError::query("read which parts of resent batches are stored"))?
        {
            out.insert((row.batch_id, row.part));
        }
    }
    Ok(out)
}
