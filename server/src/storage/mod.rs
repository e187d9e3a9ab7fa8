//! ClickHouse storage: schema migrations, batch ingest (idempotent by batch id) and the
//! queries behind the API.

pub mod managed;
pub mod migrations;
pub mod placement;
pub mod queries;
mod rows;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use bimodal_profile::{Frame, FrameKind, Profile, Sample};
use bimodal_proto::v1;
use clickhouse::Client;

pub use migrations::Dialect;
use rows::{
    BatchRow, CounterRow, DataSampleRow, FactsBlobRow, FlameRow, NodeFactsRow, NodeRow, PlacementRow, SampleRow,
    StackRow,
};

/// A storage failure; the message says which step failed.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("ClickHouse failed to {what}: {source}")]
    Query {
        what: &'static str,
        source: clickhouse::error::Error,
    },
    #[error("ClickHouse failed to insert into `{table}`: {source}")]
    Insert {
        table: &'static str,
        source: clickhouse::error::Error,
    },
}

impl StorageError {
    fn query(what: &'static str) -> impl FnOnce(clickhouse::error::Error) -> StorageError {
        move |source| StorageError::Query { what, source }
    }
}

/// Why a batch was refused; resending it will not help.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidBatch {
    #[error("batch_id must be 16 bytes, got {0}")]
    BatchId(usize),
    #[error("sample {sample} has event {event}, which is not a known event kind")]
    Event { sample: usize, event: i32 },
    #[error("sample {sample} points at stack {stack}, but the batch has {stacks} stacks")]
    Stack { sample: usize, stack: u32, stacks: usize },
    #[error("stack {stack} points at frame {frame}, but the batch has {frames} frames")]
    Frame { stack: usize, frame: u32, frames: usize },
}

/// What happened to a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Written now.
    New,
    /// Written before (a resend); nothing was written again.
    Duplicate,
}

/// Who sent a batch.
#[derive(Clone, Debug, Default)]
pub struct Sender {
    pub node: String,
    pub labels: Vec<(String, String)>,
    pub agent_version: String,
    pub kernel_release: String,
}

/// One node as the API lists it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NodeInfo {
    pub node: String,
    pub labels: std::collections::BTreeMap<String, String>,
    /// Unix seconds of the newest batch.
    pub last_seen: u32,
}

/// Which samples a flame graph covers.
#[derive(Clone, Debug, Default)]
pub struct FlameQuery {
    pub event: v1::EventKind,
    /// Unix seconds, inclusive.
    pub from: u32,
    /// Unix seconds, exclusive.
    pub to: u32,
    /// Empty: every node.
    pub nodes: Vec<String>,
    /// Container ids; empty: any.
    pub containers: Vec<String>,
    /// Kubernetes pod UIDs; empty: any.
    pub pods: Vec<String>,
    /// systemd units; empty: any.
    pub units: Vec<String>,
    /// Kubernetes namespaces of the pods; empty: any.
    pub namespaces: Vec<String>,
    /// Kubernetes pod names; empty: any.
    pub pod_names: Vec<String>,
}

/// Stack ids known to be stored already, so repeated stacks are not written again.
/// Bounded: when full it is cleared, which only costs a few redundant (deduplicated) writes.
const KNOWN_STACKS_LIMIT: usize = 1 << 20;

/// The ClickHouse store.
#[derive(Debug)]
pub struct Store {
    client: Client,
    pub dialect: Dialect,
    pub version: String,
    known_stacks: Mutex<HashSet<u64>>,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct Version {
    version: String,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct Count {
    n: u64,
}

impl Store {
    /// Connects, probes the server version and applies pending migrations.
    pub async fn open(url: &str, database: &str, retention_days: u32) -> Result<Store, StorageError> {
        let probe = Client::default().with_url(url).with_validation(false);
        let version = probe
            .query("SELECT version() AS version")
            .fetch_one::<Version>()
            .await
            .map_err(StorageError::query("answer `SELECT version()`"))?
            .version;
        let dialect = Dialect::for_version(&version, retention_days);
        probe
            .query(&format!(
                "CREATE DATABASE IF NOT EXISTS `{}`",
                database.replace('`', "")
            ))
            .execute()
            .await
            .map_err(StorageError::query("create the database"))?;
        // RowBinaryWithNamesAndTypes (the crate's validation) only exists on modern servers.
        let client = Client::default()
            .with_url(url)
            .with_database(database)
            .with_validation(dialect.modern);
        migrations::apply(&client, &dialect).await?;
        tracing::info!(%version, modern = dialect.modern, "ClickHouse schema ready");
        Ok(Store {
            client,
            dialect,
            version,
            known_stacks: Mutex::new(HashSet::new()),
        })
    }

    /// True when ClickHouse answers.
    pub async fn ping(&self) -> Result<(), StorageError> {
        self.client
            .query("SELECT 1")
            .execute()
            .await
            .map_err(StorageError::query("answer a ping"))
    }

    /// Stores a batch once: a resent batch that was stored before is recognised by its id.
    ///
    /// Samples go in one INSERT (one partition, so ClickHouse writes them atomically) after the
    /// stacks they reference and before the `batches` row that marks the batch complete; a
    /// crash between the two is repaired on resend by finding the samples by batch id.
    pub async fn ingest(
        &self,
        sender: &Sender,
        batch: &v1::Batch,
    ) -> Result<Result<Stored, InvalidBatch>, StorageError> {
        let batch_id: [u8; 16] = match batch.batch_id.as_slice().try_into() {
            Ok(id) => id,
            Err(_) => return Ok(Err(InvalidBatch::BatchId(batch.batch_id.len()))),
        };
        if let Err(e) = validate(batch) {
            return Ok(Err(e));
        }
        if batch.resend && self.count_batch("batches", &batch_id).await? > 0 {
            return Ok(Ok(Stored::Duplicate));
        }
        let time = unix_secs(batch.start_unix_nanos);
        let stack_ids: Vec<u64> = batch.stacks.iter().map(|s| stack_id(batch, s)).collect();
        // Stacks are keyed by content: writing one twice is harmless.
        self.insert_stacks(batch, &stack_ids).await?;

        // Each table is written once per batch: a resend skips the tables that already hold it.
        let node = &sender.node;
        let data = batch.data_samples.iter().map(|d| DataSampleRow {
            time,
            node: node.clone(),
            event: event_name(d.event),
            pid: d.pid,
            tid: d.tid,
            comm: d.comm.clone(),
            stack_id: stack_ids[d.stack_index as usize],
            mapping_kind: d.mapping_kind.clone(),
            mapping_path: d.mapping_path.clone(),
            symbol: d.symbol.clone(),
            cache_line: d.cache_line,
            count: d.count,
            value: d.value,
            batch_id,
        });
        self.insert_once("data_samples", batch, &batch_id, data.collect())
            .await?;
        let counters = batch.counters.iter().map(|c| CounterRow {
            time,
            node: node.clone(),
            name: c.name.clone(),
            value: c.value,
            batch_id,
        });
        self.insert_once("counters", batch, &batch_id, counters.collect())
            .await?;
        let placements = batch.placements.iter().flat_map(|p| {
            let mut threads: Vec<(u32, u32)> = p.threads_per_node.iter().map(|(&n, &c)| (n, c)).collect();
            threads.sort_unstable();
            p.mappings.iter().map(move |m| {
                let mut pages: Vec<(u32, u64)> = m.pages_per_node.iter().map(|(&n, &c)| (n, c)).collect();
                pages.sort_unstable();
                PlacementRow {
                    time,
                    node: node.clone(),
                    pid: p.pid,
                    comm: p.comm.clone(),
                    executable: p.executable.clone(),
                    thread_nodes: threads.iter().map(|t| t.0).collect(),
                    thread_counts: threads.iter().map(|t| t.1).collect(),
                    kind: m.kind.clone(),
                    path: m.path.clone(),
                    start: m.start,
                    end: m.end,
                    permissions: m.permissions.clone(),
                    page_nodes: pages.iter().map(|p| p.0).collect(),
                    page_counts: pages.iter().map(|p| p.1).collect(),
                    page_size: m.page_size,
                    batch_id,
                }
            })
        });
        self.insert_once("placements", batch, &batch_id, placements.collect())
            .await?;
        let processes: HashMap<u32, &v1::Process> = batch.processes.iter().map(|p| (p.pid, p)).collect();
        let identity = |pid: u32| processes.get(&pid).copied().cloned().unwrap_or_default();
        let samples = batch.samples.iter().map(|s| {
            let who = identity(s.pid);
            SampleRow {
                time,
                node: node.clone(),
                event: event_name(s.event),
                pid: s.pid,
                tid: s.tid,
                comm: s.comm.clone(),
                stack_id: stack_ids[s.stack_index as usize],
                count: s.count,
                value: s.value,
                batch_id,
                executable: who.executable,
                container_id: who.container_id,
                pod_uid: who.pod_uid,
                systemd_unit: who.systemd_unit,
                pod_name: who.pod_name,
                pod_namespace: who.pod_namespace,
                container_name: who.container_name,
            }
        });
        self.insert_once("samples", batch, &batch_id, samples.collect()).await?;

        // Last: the record that marks the batch complete.
        let row = BatchRow {
            received: now_secs(),
            node: sender.node.clone(),
            batch_id,
            start_time: time,
            end_time: unix_secs(batch.end_unix_nanos),
            label_keys: sender.labels.iter().map(|(k, _)| k.clone()).collect(),
            label_values: sender.labels.iter().map(|(_, v)| v.clone()).collect(),
            agent_version: sender.agent_version.clone(),
            kernel_release: sender.kernel_release.clone(),
            samples: batch.samples.iter().map(|s| s.count).sum(),
            source_events: batch.sources.iter().map(|s| event_name(s.event)).collect(),
            source_descriptions: batch.sources.iter().map(|s| s.source.clone()).collect(),
            source_periods: batch.sources.iter().map(|s| s.period).collect(),
            source_dropped: batch.sources.iter().map(|s| s.dropped).collect(),
        };
        self.insert_rows("batches", vec![row]).await?;
        Ok(Ok(Stored::New))
    }

    /// Writes `rows` into `table` unless this is a resend and the table holds the batch already.
    async fn insert_once<R: clickhouse::RowOwned + clickhouse::RowWrite + serde::Serialize>(
        &self,
        table: &'static str,
        batch: &v1::Batch,
        batch_id: &[u8; 16],
        rows: Vec<R>,
    ) -> Result<(), StorageError> {
        if batch.resend && self.count_batch(table, batch_id).await? > 0 {
            return Ok(());
        }
        self.insert_rows(table, rows).await
    }

    /// One INSERT of all `rows` (nothing when there are none).
    async fn insert_rows<R: clickhouse::RowOwned + clickhouse::RowWrite + serde::Serialize>(
        &self,
        table: &'static str,
        rows: Vec<R>,
    ) -> Result<(), StorageError> {
        if rows.is_empty() {
            return Ok(());
        }
        let err = |e| StorageError::Insert { table, source: e };
        let mut insert = self.client.insert::<R>(table).await.map_err(err)?;
        for row in rows {
            insert.write(&row).await.map_err(err)?;
        }
        insert.end().await.map_err(err)
    }

    /// Stores what a node is; the newest facts of a node replace the older ones.
    pub async fn record_node_facts(&self, node: &str, facts: &v1::NodeFacts) -> Result<(), StorageError> {
        use prost::Message;
        let row = NodeFactsRow {
            received: now_secs(),
            node: node.to_owned(),
            kernel_release: facts.kernel_release.clone(),
            cpu_vendor: facts.cpu_vendor.clone(),
            cpu_model_name: facts.cpu_model_name.clone(),
            cpu_family: facts.cpu_family,
            cpu_model: facts.cpu_model,
            online_cpus: facts.online_cpus.len() as u32,
            sockets: facts.sockets,
            numa_nodes: facts.numa_nodes.len() as u32,
            numa_balancing: facts.numa_balancing.clone(),
            hardware_pmu: facts.hardware_pmu.clone(),
            facts: facts.encode_to_vec(),
        };
        self.insert_rows("node_facts", vec![row]).await
    }

    /// The newest facts of every node.
    pub async fn node_facts(&self) -> Result<HashMap<String, v1::NodeFacts>, StorageError> {
        use prost::Message;
        let rows = queries::node_facts(&self.client)
            .fetch_all::<FactsBlobRow>()
            .await
            .map_err(StorageError::query("read node facts"))?;
        Ok(rows
            .into_iter()
            .filter_map(|r| Some((r.node, v1::NodeFacts::decode(r.facts.as_slice()).ok()?)))
            .collect())
    }

    async fn count_batch(&self, table: &'static str, batch_id: &[u8; 16]) -> Result<u64, StorageError> {
        Ok(queries::batch_rows(&self.client, table, bimodal_profile::hex(batch_id))
            .fetch_one::<Count>()
            .await
            .map_err(StorageError::query("look up a resent batch"))?
            .n)
    }

    async fn insert_stacks(&self, batch: &v1::Batch, ids: &[u64]) -> Result<(), StorageError> {
        let new: Vec<usize> = {
            let known = self.known_stacks.lock().expect("lock not poisoned");
            let mut seen = HashSet::new();
            (0..ids.len())
                .filter(|&i| !known.contains(&ids[i]) && seen.insert(ids[i]))
                .collect()
        };
        if new.is_empty() {
            return Ok(());
        }
        let rows = new
            .iter()
            .map(|&i| {
                let frames: Vec<&v1::Frame> = batch.stacks[i]
                    .frame_indices
                    .iter()
                    .map(|&f| &batch.frames[f as usize])
                    .collect();
                StackRow {
                    stack_id: ids[i],
                    kinds: frames.iter().map(|f| f.kind.clamp(0, 255) as u8).collect(),
                    functions: frames.iter().map(|f| f.function.clone()).collect(),
                    modules: frames.iter().map(|f| f.module.clone()).collect(),
                    build_ids: frames.iter().map(|f| bimodal_profile::hex(&f.build_id)).collect(),
                    addresses: frames.iter().map(|f| f.address).collect(),
                    file_offsets: frames.iter().map(|f| f.file_offset).collect(),
                    elf_addresses: frames.iter().map(|f| f.elf_address).collect(),
                }
            })
            .collect();
        self.insert_rows("stacks", rows).await?;
        let mut known = self.known_stacks.lock().expect("lock not poisoned");
        if known.len() + new.len() > KNOWN_STACKS_LIMIT {
            known.clear();
        }
        known.extend(new.iter().map(|&i| ids[i]));
        Ok(())
    }

    /// Every node that sent a batch, with its newest labels.
    pub async fn nodes(&self) -> Result<Vec<NodeInfo>, StorageError> {
        let rows = queries::nodes(&self.client)
            .fetch_all::<NodeRow>()
            .await
            .map_err(StorageError::query("list nodes"))?;
        Ok(rows
            .into_iter()
            .map(|r| NodeInfo {
                node: r.node,
                labels: r.last_label_keys.into_iter().zip(r.last_label_values).collect(),
                last_seen: r.last_seen,
            })
            .collect())
    }

    /// The profile of one event over a time range and set of nodes.
    pub async fn flame_graph(&self, q: &FlameQuery) -> Result<Profile, StorageError> {
        let rows = queries::flame_samples(&self.client, q)
            .fetch_all::<FlameRow>()
            .await
            .map_err(StorageError::query("aggregate samples"))?;
        let stacks = queries::flame_stacks(&self.client, q)
            .fetch_all::<StackRow>()
            .await
            .map_err(StorageError::query("read stacks"))?;

        let mut profile = Profile::new(q.event.name(), q.event.unit());
        profile.start_unix_nanos = i64::from(q.from) * 1_000_000_000;
        profile.duration_nanos = i64::from(q.to.saturating_sub(q.from)) * 1_000_000_000;
        // ReplacingMergeTree may still hold duplicates before a merge: the last one wins.
        let mut frames_of: HashMap<u64, Vec<u32>> = HashMap::with_capacity(stacks.len());
        for s in stacks {
            let frames = (0..s.functions.len())
                .map(|i| {
                    profile.intern(Frame {
                        kind: v1::FrameKind::try_from(i32::from(s.kinds[i]))
                            .unwrap_or_default()
                            .into(),
                        function: s.functions[i].clone(),
                        module: s.modules[i].clone(),
                        build_id: s.build_ids[i].clone(),
                        address: s.addresses[i],
                        file_offset: s.file_offsets[i],
                        // stacks stored before migration 004 have none
                        elf_address: s.elf_addresses.get(i).copied().unwrap_or(0),
                    })
                })
                .collect();
            frames_of.insert(s.stack_id, frames);
        }
        let mut missing = 0u64;
        for r in rows {
            let stack = match frames_of.get(&r.stack_id) {
                Some(f) => f.clone(),
                None => {
                    missing += r.samples;
                    vec![profile.intern(Frame {
                        kind: FrameKind::Unknown,
                        function: "[stack not stored]".into(),
                        module: String::new(),
                        build_id: String::new(),
                        address: 0,
                        file_offset: 0,
                        elf_address: 0,
                    })]
                }
            };
            profile.samples.push(Sample {
                comm: r.comm,
                stack,
                count: r.samples,
                value: r.total,
            });
        }
        if missing > 0 {
            tracing::warn!(missing, "samples reference stacks that are not stored");
        }
        Ok(profile)
    }
}

fn unix_secs(nanos: i64) -> u32 {
    (nanos / 1_000_000_000).clamp(0, i64::from(u32::MAX)) as u32
}

fn event_name(event: i32) -> String {
    v1::EventKind::try_from(event).unwrap_or_default().name().to_owned()
}

fn now_secs() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}

fn validate(batch: &v1::Batch) -> Result<(), InvalidBatch> {
    for (i, s) in batch.samples.iter().enumerate() {
        match v1::EventKind::try_from(s.event) {
            Ok(v1::EventKind::Unspecified) | Err(_) => {
                return Err(InvalidBatch::Event {
                    sample: i,
                    event: s.event,
                })
            }
            Ok(_) => {}
        }
        if s.stack_index as usize >= batch.stacks.len() {
            return Err(InvalidBatch::Stack {
                sample: i,
                stack: s.stack_index,
                stacks: batch.stacks.len(),
            });
        }
    }
    for (i, d) in batch.data_samples.iter().enumerate() {
        if d.stack_index as usize >= batch.stacks.len() {
            return Err(InvalidBatch::Stack {
                sample: i,
                stack: d.stack_index,
                stacks: batch.stacks.len(),
            });
        }
        if !matches!(v1::EventKind::try_from(d.event), Ok(e) if e != v1::EventKind::Unspecified) {
            return Err(InvalidBatch::Event {
                sample: i,
                event: d.event,
            });
        }
    }
    for (i, st) in batch.stacks.iter().enumerate() {
        if let Some(&f) = st.frame_indices.iter().find(|&&f| f as usize >= batch.frames.len()) {
            return Err(InvalidBatch::Frame {
                stack: i,
                frame: f,
                frames: batch.frames.len(),
            });
        }
    }
    Ok(())
}

/// A stable id for a stack: xxHash64 of its frames' identities, the same on every server.
fn stack_id(batch: &v1::Batch, stack: &v1::Stack) -> u64 {
    let mut buf = Vec::with_capacity(stack.frame_indices.len() * 48);
    for &i in &stack.frame_indices {
        let f = &batch.frames[i as usize];
        buf.extend_from_slice(&f.kind.to_le_bytes());
        // A frame of an image with a build id is the same in every process and on every node,
        // wherever the image was loaded.
        if f.build_id.is_empty() {
            buf.extend_from_slice(&f.address.to_le_bytes());
        }
        buf.extend_from_slice(&f.file_offset.to_le_bytes());
        for s in [f.function.as_bytes(), f.module.as_bytes(), &f.build_id] {
            buf.extend_from_slice(&(s.len() as u32).to_le_bytes());
            buf.extend_from_slice(s);
        }
    }
    twox_hash::XxHash64::oneshot(0, &buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> v1::Batch {
        v1::Batch {
            batch_id: vec![7; 16],
            frames: vec![v1::Frame {
                function: "main".into(),
                ..Default::default()
            }],
            stacks: vec![v1::Stack { frame_indices: vec![0] }],
            samples: vec![v1::Sample {
                event: v1::EventKind::Cpu as i32,
                stack_index: 0,
                count: 1,
                value: 1,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// Indices that point outside the batch and unknown events are refused with their kind.
    #[test]
    fn malformed_batches_are_refused() {
        assert_eq!(validate(&batch()), Ok(()));
        let mut b = batch();
        b.samples[0].stack_index = 3;
        assert!(matches!(validate(&b), Err(InvalidBatch::Stack { stack: 3, .. })));
        let mut b = batch();
        b.stacks[0].frame_indices.push(9);
        assert!(matches!(validate(&b), Err(InvalidBatch::Frame { frame: 9, .. })));
        let mut b = batch();
        b.samples[0].event = 99;
        assert!(matches!(validate(&b), Err(InvalidBatch::Event { event: 99, .. })));
    }

    /// Equal stacks get equal ids across batches; different frames give different ids.
    #[test]
    fn stack_ids_are_content_hashes() {
        let a = batch();
        let mut b = batch();
        b.frames.push(v1::Frame::default());
        assert_eq!(stack_id(&a, &a.stacks[0]), stack_id(&b, &b.stacks[0]));
        b.frames[0].function = "other".into();
        assert_ne!(stack_id(&a, &a.stacks[0]), stack_id(&b, &b.stacks[0]));
    }
}
