//! Rows as ClickHouse reads and writes them (RowBinary); field order follows the SQL of
//! migrations/007_fleet_schema.sql. Rows written borrow their strings from the buffered batches,
//! so a flush copies no node name or function name per row.

use std::hash::Hasher;

use clickhouse::Row;
use serde::{Deserialize, Serialize};
use twox_hash::XxHash64;

/// The ids rows are keyed by (`crate::ingest::rows` says which fields make each): xxHash64 of a
/// tag and length-prefixed fields, the same on every server.
pub(crate) struct IdHasher(XxHash64);

impl IdHasher {
    pub(crate) fn new(tag: u8) -> IdHasher {
        let mut h = XxHash64::with_seed(0);
        h.write_u8(tag);
        IdHasher(h)
    }
    pub(crate) fn bytes(mut self, b: &[u8]) -> Self {
        self.0.write_u32(b.len() as u32);
        self.0.write(b);
        self
    }
    pub(crate) fn u64(mut self, v: u64) -> Self {
        self.0.write_u64(v);
        self
    }
    pub(crate) fn finish(&self) -> u64 {
        self.0.finish()
    }
}

/// The id of a function by its name and module file name: what ingest keys its rows by and a
/// read of chosen functions (`Functions::These`) asks for.
pub fn function_id(name: &str, module: &str) -> u64 {
    IdHasher::new(b'f')
        .bytes(name.as_bytes())
        .bytes(module.as_bytes())
        .finish()
}

/// `samples_input`: kind 0 is a stack's samples, kind 1 a function's.
#[derive(Row, Serialize)]
pub(super) struct SampleInputRow<'a> {
    pub kind: u8,
    pub batch_id: [u8; 16],
    pub time: u32,
    pub node: &'a str,
    pub event: &'a str,
    pub source: &'a str,
    pub process_id: u64,
    pub stack_id: u64,
    pub function_id: u64,
    pub count: u64,
    pub value: u64,
    pub self_count: u64,
    pub self_value: u64,
}

#[derive(Row, Serialize)]
pub(super) struct DataSampleInputRow<'a> {
    pub batch_id: [u8; 16],
    pub time: u32,
    pub node: &'a str,
    pub event: &'a str,
    pub source: &'a str,
    pub process_id: u64,
    pub stack_id: u64,
    pub mapping_kind: &'a str,
    pub mapping_path: &'a str,
    pub symbol: &'a str,
    pub cache_line: u64,
    pub count: u64,
    pub value: u64,
}

#[derive(Row, Serialize)]
pub(super) struct CounterInputRow<'a> {
    pub batch_id: [u8; 16],
    pub time: u32,
    pub node: &'a str,
    pub name: &'a str,
    pub value: u64,
}

#[derive(Row, Serialize)]
pub(super) struct PlacementInputRow<'a> {
    pub batch_id: [u8; 16],
    pub time: u32,
    pub node: &'a str,
    pub pid: u32,
    pub comm: &'a str,
    pub executable: &'a str,
    pub thread_nodes: &'a [u32],
    pub thread_counts: &'a [u32],
    pub kind: &'a str,
    pub path: &'a str,
    pub start: u64,
    pub end: u64,
    pub permissions: &'a str,
    pub page_nodes: &'a [u32],
    pub page_counts: &'a [u64],
    pub page_size: u64,
}

/// `batches`: one state of one batch.
#[derive(Row, Serialize)]
pub(super) struct LedgerRow<'a> {
    pub batch_id: [u8; 16],
    pub node: &'a str,
    pub start_time: u32,
    pub end_time: u32,
    pub state: u8,
    pub server: [u8; 16],
    pub version: u64,
    pub agent_version: &'a str,
    pub samples: u64,
    pub source_events: &'a [&'a str],
    pub source_names: &'a [&'a str],
    pub source_dropped: &'a [u64],
}

/// The newest state per server of one batch.
#[derive(Row, Deserialize)]
pub(super) struct LedgerStateRow {
    pub batch_id: [u8; 16],
    pub server: [u8; 16],
    /// The newest state this server wrote.
    pub last_state: u8,
    /// 1 when this server ever marked the batch stored.
    pub stored: u8,
    /// Milliseconds since the epoch of the newest row.
    pub newest: u64,
}

#[derive(Row, Deserialize)]
pub(super) struct ProgressRow {
    pub batch_id: [u8; 16],
    pub part: String,
}

#[derive(Row, Serialize, Deserialize)]
pub(super) struct StackRow {
    pub stack_id: u64,
    pub frame_ids: Vec<u64>,
    /// Days since the epoch (ClickHouse `Date`).
    pub last_seen: u16,
}

#[derive(Row, Serialize)]
pub(super) struct FrameWriteRow<'a> {
    pub frame_id: u64,
    pub kind: u8,
    pub module: &'a str,
    pub build_id: &'a str,
    pub file_offset: u64,
    pub elf_address: u64,
    pub address: u64,
    pub function: &'a str,
    pub last_seen: u16,
}

#[derive(Row, Deserialize)]
pub(super) struct FrameRow {
    pub frame_id: u64,
    pub kind: u8,
    pub module: String,
    pub build_id: String,
    pub file_offset: u64,
    pub elf_address: u64,
    pub address: u64,
    pub function: String,
}

#[derive(Row, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ProcessRow {
    pub process_id: u64,
    pub comm: String,
    pub executable: String,
    pub container_id: String,
    pub container_runtime: String,
    pub pod_uid: String,
    pub systemd_unit: String,
    pub pod_name: String,
    pub pod_namespace: String,
    pub container_name: String,
    pub last_seen: u16,
}

#[derive(Row, Serialize, Deserialize)]
pub(super) struct FunctionRow {
    pub function_id: u64,
    pub name: String,
    pub module: String,
    pub last_seen: u16,
}

#[derive(Row, Serialize)]
pub(super) struct NodeWriteRow<'a> {
    pub node: &'a str,
    pub first_seen: u32,
    pub last_seen: u32,
    pub label_keys: &'a [String],
    pub label_values: &'a [String],
    pub agent_version: &'a str,
    pub facts: &'a [u8],
    pub version: u64,
}

#[derive(Row, Deserialize)]
pub(super) struct NodeRow {
    pub node: String,
    pub first_seen: u32,
    pub last_seen: u32,
    pub label_keys: Vec<String>,
    pub label_values: Vec<String>,
    pub agent_version: String,
    pub facts: Vec<u8>,
}

#[derive(Row, Serialize)]
pub(super) struct NodeFactsRow<'a> {
    pub node: &'a str,
    pub facts_hash: u64,
    pub first_seen: u32,
    pub last_seen: u32,
    pub kernel_release: &'a str,
    pub cpu_vendor: &'a str,
    pub cpu_model_name: &'a str,
    pub online_cpus: u32,
    pub numa_nodes: u32,
    pub facts: &'a [u8],
}

#[derive(Row, Serialize, Deserialize)]
pub(super) struct EventSourceRow {
    pub event: String,
    pub source: String,
    pub unit: String,
    pub description: String,
    pub last_seen: u32,
}

/// One aggregated stack of a flame graph.
#[derive(Row, Deserialize)]
pub(super) struct FlameRow {
    pub source: String,
    pub stack_id: u64,
    pub process_id: u64,
    pub count: u64,
    pub value: u64,
}

/// One mapping of one process in one placement snapshot.
#[derive(Row, Deserialize, Clone, Debug)]
pub struct PlacementRow {
    pub time: u32,
    pub pid: u32,
    pub comm: String,
    pub executable: String,
    pub thread_nodes: Vec<u32>,
    pub thread_counts: Vec<u32>,
    pub kind: String,
    pub path: String,
    pub start: u64,
    pub end: u64,
    pub permissions: String,
    pub page_nodes: Vec<u32>,
    pub page_counts: Vec<u64>,
    pub page_size: u64,
}

#[derive(Row, Deserialize)]
pub(super) struct CounterPointRow {
    pub time: u32,
    pub name: String,
    pub value: u64,
}

#[derive(Row, Deserialize)]
pub(super) struct NodeTotalRow {
    pub node: String,
    pub source: String,
    pub count: u64,
    pub value: u64,
}

#[derive(Row, Deserialize)]
pub(super) struct NodeDataRow {
    pub node: String,
    pub mapping_kind: String,
    pub mapping_path: String,
    pub symbol: String,
    /// 0 in a read of whole objects.
    pub cache_line: u64,
    pub value: u64,
}

/// Borrowed: a fleet's read has a row per node and function, and the name is copied once per
/// node, not once per row.
#[derive(Row, Deserialize)]
pub(super) struct NodeFunctionRow<'a> {
    pub node: &'a str,
    pub function_id: u64,
    pub self_count: u64,
    pub self_value: u64,
    pub total_count: u64,
    pub total_value: u64,
}
