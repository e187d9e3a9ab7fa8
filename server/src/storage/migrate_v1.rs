//! Copies schema v1's rows (set aside as `v1_*` by migration 006) into schema v2, then drops the
//! v1 tables, so a server upgraded in place keeps its history.
//!
//! Each v1 batch is rebuilt as the wire batch it was (v1 kept every row's batch id) and stored
//! through the same path as a batch an agent resends: ids, aggregation and the ledger are those
//! of any other batch, and running the copy twice stores nothing twice. v1 knew no source names:
//! a batch's source description stands in for its name, as for agents that sent none.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bimodal_proto::v1;
use clickhouse::Client;

use super::batch::{BatchRows, Known, Sender};
use super::writer::{Outcome, Writer};
use super::{lease, migrations, StorageError, Store};

/// Turns a wire batch of a sender into the rows storage writes (ingest's, given by the caller:
/// storage knows rows, not how a wire batch becomes them).
pub type BuildRows = dyn Fn(&Sender, &v1::Batch, &dyn Known) -> BatchRows + Send + Sync;

const V1_TABLES: &[&str] = &[
    "v1_samples",
    "v1_stacks",
    "v1_batches",
    "v1_node_facts",
    "v1_counters",
    "v1_placements",
    "v1_data_samples",
];

#[derive(clickhouse::Row, serde::Deserialize)]
struct StackRow {
    stack_id: u64,
    kinds: Vec<u8>,
    functions: Vec<String>,
    modules: Vec<String>,
    build_ids: Vec<String>,
    addresses: Vec<u64>,
    file_offsets: Vec<u64>,
    elf_addresses: Vec<u64>,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct BatchRow {
    batch_id: [u8; 16],
    node: String,
    start_secs: u32,
    end_secs: u32,
    label_keys: Vec<String>,
    label_values: Vec<String>,
    agent_version: String,
    source_events: Vec<String>,
    source_descriptions: Vec<String>,
    source_periods: Vec<u64>,
    source_dropped: Vec<u64>,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct SampleRow {
    batch_id: [u8; 16],
    event: String,
    pid: u32,
    tid: u32,
    comm: String,
    stack_id: u64,
    count: u64,
    value: u64,
    executable: String,
    container_id: String,
    pod_uid: String,
    systemd_unit: String,
    pod_name: String,
    pod_namespace: String,
    container_name: String,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct CounterRow {
    batch_id: [u8; 16],
    name: String,
    value: u64,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct PlacementRow {
    batch_id: [u8; 16],
    pid: u32,
    comm: String,
    executable: String,
    thread_nodes: Vec<u32>,
    thread_counts: Vec<u32>,
    kind: String,
    path: String,
    start: u64,
    end: u64,
    permissions: String,
    page_nodes: Vec<u32>,
    page_counts: Vec<u64>,
    page_size: u64,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct DataRow {
    batch_id: [u8; 16],
    event: String,
    pid: u32,
    tid: u32,
    comm: String,
    stack_id: u64,
    mapping_kind: String,
    mapping_path: String,
    symbol: String,
    cache_line: u64,
    count: u64,
    value: u64,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct FactsRow {
    node: String,
    facts: Vec<u8>,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct Day {
    day: u32,
}

fn q(what: &'static str) -> impl FnOnce(clickhouse::error::Error) -> StorageError {
    StorageError::query(what)
}

/// Copies the v1 tables into v2 and drops them; does nothing where there are none. Holds a
/// lease so that servers starting together copy once.
pub async fn copy(store: Arc<Store>, writer: Writer, build: &BuildRows) -> Result<(), StorageError> {
    let client = store.client().clone();
    if !migrations::table_exists(&client, "v1_samples").await? {
        return Ok(());
    }
    let lease = lease::Lease::acquire(client.clone(), "migrate_v1", Duration::from_secs(120)).await?;
    let result = copy_held(&client, &writer, build).await;
    lease.release().await;
    result
}

async fn copy_held(client: &Client, writer: &Writer, build: &BuildRows) -> Result<(), StorageError> {
    if !migrations::table_exists(client, "v1_samples").await? {
        return Ok(());
    }
    tracing::info!("copying schema v1's rows into schema v2");
    let stacks: HashMap<u64, StackRow> = client
        .query(
            "SELECT stack_id, any(kinds) AS kinds, any(functions) AS functions, any(modules) AS modules, \
             any(build_ids) AS build_ids, any(addresses) AS addresses, any(file_offsets) AS file_offsets, \
             any(elf_addresses) AS elf_addresses FROM v1_stacks GROUP BY stack_id",
        )
        .fetch_all::<StackRow>()
        .await
        .map_err(q("read v1 stacks"))?
        .into_iter()
        .map(|s| (s.stack_id, s))
        .collect();
    let facts: HashMap<String, v1::NodeFacts> = client
        .query("SELECT node, argMax(facts, received) AS facts FROM v1_node_facts GROUP BY node")
        .fetch_all::<FactsRow>()
        .await
        .map_err(q("read v1 node facts"))?
        .into_iter()
        .filter_map(|r| Some((r.node, prost::Message::decode(r.facts.as_slice()).ok()?)))
        .collect();
    let days = client
        .query("SELECT DISTINCT toUInt32(toYYYYMMDD(start_time)) AS day FROM v1_batches ORDER BY day")
        .fetch_all::<Day>()
        .await
        .map_err(q("list v1 days"))?;
    let mut copied = 0usize;
    for Day { day } in days {
        let in_day = "toUInt32(toYYYYMMDD(time)) = ?";
        let batches = client
            .query(
                "SELECT batch_id, node, toUInt32(start_time) AS start_secs, toUInt32(end_time) AS end_secs, \
                 label_keys, label_values, agent_version, source_events, source_descriptions, source_periods, \
                 source_dropped FROM v1_batches WHERE toUInt32(toYYYYMMDD(start_time)) = ?",
            )
            .bind(day)
            .fetch_all::<BatchRow>()
            .await
            .map_err(q("read v1 batches"))?;
        let samples = client
            .query(&format!(
                "SELECT batch_id, event, pid, tid, comm, stack_id, count, value, executable, container_id, \
                 pod_uid, systemd_unit, pod_name, pod_namespace, container_name FROM v1_samples WHERE {in_day}"
            ))
            .bind(day)
            .fetch_all::<SampleRow>()
            .await
            .map_err(q("read v1 samples"))?;
        let counters = client
            .query(&format!("SELECT batch_id, name, value FROM v1_counters WHERE {in_day}"))
            .bind(day)
            .fetch_all::<CounterRow>()
            .await
            .map_err(q("read v1 counters"))?;
        let placements = client
            .query(&format!(
                "SELECT batch_id, pid, comm, executable, thread_nodes, thread_counts, kind, path, start, end, \
                 permissions, page_nodes, page_counts, page_size FROM v1_placements WHERE {in_day}"
            ))
            .bind(day)
            .fetch_all::<PlacementRow>()
            .await
            .map_err(q("read v1 placements"))?;
        let data = client
            .query(&format!(
                "SELECT batch_id, event, pid, tid, comm, stack_id, mapping_kind, mapping_path, symbol, \
                 cache_line, count, value FROM v1_data_samples WHERE {in_day}"
            ))
            .bind(day)
            .fetch_all::<DataRow>()
            .await
            .map_err(q("read v1 data samples"))?;
        let mut by_batch: HashMap<[u8; 16], v1::Batch> = HashMap::new();
        let mut frames_of: HashMap<[u8; 16], HashMap<u64, u32>> = HashMap::new();
        let mut stack_index = |b: &mut v1::Batch, id: u64| -> u32 {
            let index = frames_of
                .entry(b.batch_id.as_slice().try_into().unwrap_or([0; 16]))
                .or_default();
            if let Some(&i) = index.get(&id) {
                return i;
            }
            let frames: Vec<v1::Frame> = stacks.get(&id).map(v1_frames).unwrap_or_default();
            let first = b.frames.len() as u32;
            b.frames.extend(frames);
            b.stacks.push(v1::Stack {
                frame_indices: (first..b.frames.len() as u32).collect(),
            });
            let i = b.stacks.len() as u32 - 1;
            index.insert(id, i);
            i
        };
        for r in &batches {
            by_batch.insert(
                r.batch_id,
                v1::Batch {
                    batch_id: r.batch_id.to_vec(),
                    resend: true,
                    start_unix_nanos: i64::from(r.start_secs) * 1_000_000_000,
                    end_unix_nanos: i64::from(r.end_secs) * 1_000_000_000,
                    sources: (0..r.source_events.len())
                        .map(|i| v1::EventSource {
                            event: event(&r.source_events[i]),
                            description: r.source_descriptions[i].clone(),
                            period: r.source_periods.get(i).copied().unwrap_or(0),
                            dropped: r.source_dropped.get(i).copied().unwrap_or(0),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                },
            );
        }
        // The processes each batch has already: looked up per sample.
        let mut pids: HashSet<([u8; 16], u32)> = HashSet::new();
        for s in samples {
            let Some(b) = by_batch.get_mut(&s.batch_id) else {
                continue;
            };
            let stack = stack_index(b, s.stack_id);
            b.samples.push(v1::Sample {
                event: event(&s.event),
                stack_index: stack,
                pid: s.pid,
                tid: s.tid,
                comm: s.comm,
                count: s.count,
                value: s.value,
            });
            if pids.insert((s.batch_id, s.pid)) {
                b.processes.push(v1::Process {
                    pid: s.pid,
                    executable: s.executable,
                    container_id: s.container_id,
                    pod_uid: s.pod_uid,
                    systemd_unit: s.systemd_unit,
                    pod_name: s.pod_name,
                    pod_namespace: s.pod_namespace,
                    container_name: s.container_name,
                    ..Default::default()
                });
            }
        }
        for d in data {
            let Some(b) = by_batch.get_mut(&d.batch_id) else {
                continue;
            };
            let stack = stack_index(b, d.stack_id);
            b.data_samples.push(v1::DataSample {
                event: event(&d.event),
                stack_index: stack,
                pid: d.pid,
                tid: d.tid,
                comm: d.comm,
                count: d.count,
                value: d.value,
                mapping_kind: d.mapping_kind,
                mapping_path: d.mapping_path,
                symbol: d.symbol,
                cache_line: d.cache_line,
            });
        }
        for c in counters {
            if let Some(b) = by_batch.get_mut(&c.batch_id) {
                b.counters.push(v1::Counter {
                    name: c.name,
                    value: c.value,
                });
            }
        }
        for p in placements {
            if let Some(b) = by_batch.get_mut(&p.batch_id) {
                b.placements.push(v1::Placement {
                    pid: p.pid,
                    comm: p.comm,
                    executable: p.executable,
                    threads_per_node: p.thread_nodes.into_iter().zip(p.thread_counts).collect(),
                    mappings: vec![v1::MappingPlacement {
                        kind: p.kind,
                        path: p.path,
                        start: p.start,
                        end: p.end,
                        permissions: p.permissions,
                        pages_per_node: p.page_nodes.into_iter().zip(p.page_counts).collect(),
                        page_size: p.page_size,
                    }],
                });
            }
        }
        for r in batches {
            let Some(batch) = by_batch.remove(&r.batch_id) else {
                continue;
            };
            let sender = Arc::new(Sender {
                node: r.node.as_str().into(),
                labels: r.label_keys.into_iter().zip(r.label_values).collect(),
                agent_version: r.agent_version.as_str().into(),
                facts: facts.get(&r.node).cloned(),
            });
            writer.note_node(sender.clone());
            let rows = build(&sender, &batch, &writer.known());
            loop {
                match writer.submit(rows.clone(), ()).await {
                    Outcome::Stored | Outcome::Duplicate => break,
                    Outcome::Retry { after, reason, .. } => {
                        tracing::info!(%reason, "copying v1 rows: waiting");
                        tokio::time::sleep(after).await;
                    }
                }
            }
            copied += 1;
        }
    }
    for table in V1_TABLES {
        client
            .query(&format!("DROP TABLE IF EXISTS {table}"))
            .execute()
            .await
            .map_err(q("drop a v1 table"))?;
    }
    tracing::info!(batches = copied, "schema v1's rows are in schema v2; v1 tables dropped");
    Ok(())
}

fn event(name: &str) -> i32 {
    v1::EventKind::from_name(name).unwrap_or_default() as i32
}

/// The wire frames of a v1 stack (v1 stored names with stacks).
fn v1_frames(s: &StackRow) -> Vec<v1::Frame> {
    (0..s.kinds.len())
        .map(|i| v1::Frame {
            kind: i32::from(s.kinds[i]),
            address: s.addresses.get(i).copied().unwrap_or(0),
            module: s.modules.get(i).cloned().unwrap_or_default(),
            build_id: s
                .build_ids
                .get(i)
                .and_then(|h| bimodal_profile::unhex(h))
                .unwrap_or_default(),
            file_offset: s.file_offsets.get(i).copied().unwrap_or(0),
            function: s.functions.get(i).cloned().unwrap_or_default(),
            elf_address: s.elf_addresses.get(i).copied().unwrap_or(0),
            ..Default::default()
        })
        .collect()
}
