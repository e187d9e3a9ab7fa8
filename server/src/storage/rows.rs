//! Rows as ClickHouse reads and writes them (RowBinary); field order follows the SQL.

use clickhouse::Row;
use serde::{Deserialize, Serialize};

#[derive(Row, Serialize)]
pub(super) struct SampleRow {
    pub time: u32,
    pub node: String,
    pub event: String,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub stack_id: u64,
    pub count: u64,
    pub value: u64,
    pub batch_id: [u8; 16],
    pub executable: String,
    pub container_id: String,
    pub pod_uid: String,
    pub systemd_unit: String,
    pub pod_name: String,
    pub pod_namespace: String,
    pub container_name: String,
}

#[derive(Row, Serialize, Deserialize)]
pub(super) struct StackRow {
    pub stack_id: u64,
    pub kinds: Vec<u8>,
    pub functions: Vec<String>,
    pub modules: Vec<String>,
    pub build_ids: Vec<String>,
    pub addresses: Vec<u64>,
    pub file_offsets: Vec<u64>,
    pub elf_addresses: Vec<u64>,
}

#[derive(Row, Serialize)]
pub(super) struct BatchRow {
    pub received: u32,
    pub node: String,
    pub batch_id: [u8; 16],
    pub start_time: u32,
    pub end_time: u32,
    pub label_keys: Vec<String>,
    pub label_values: Vec<String>,
    pub agent_version: String,
    pub kernel_release: String,
    pub samples: u64,
    pub source_events: Vec<String>,
    pub source_descriptions: Vec<String>,
    pub source_periods: Vec<u64>,
    pub source_dropped: Vec<u64>,
}

#[derive(Row, Deserialize)]
pub(super) struct NodeRow {
    pub node: String,
    pub last_label_keys: Vec<String>,
    pub last_label_values: Vec<String>,
    pub last_seen: u32,
}

#[derive(Row, Deserialize)]
pub(super) struct FlameRow {
    pub stack_id: u64,
    pub comm: String,
    pub samples: u64,
    pub total: u64,
}

#[derive(Row, Serialize)]
pub(super) struct NodeFactsRow {
    pub received: u32,
    pub node: String,
    pub kernel_release: String,
    pub cpu_vendor: String,
    pub cpu_model_name: String,
    pub cpu_family: u32,
    pub cpu_model: u32,
    pub online_cpus: u32,
    pub sockets: u32,
    pub numa_nodes: u32,
    pub numa_balancing: String,
    pub hardware_pmu: String,
    pub facts: Vec<u8>,
}

#[derive(Row, Deserialize)]
pub(super) struct FactsBlobRow {
    pub node: String,
    pub facts: Vec<u8>,
}

#[derive(Row, Serialize)]
pub(super) struct CounterRow {
    pub time: u32,
    pub node: String,
    pub name: String,
    pub value: u64,
    pub batch_id: [u8; 16],
}

/// One mapping of one process in one placement snapshot; written by ingest, read by the API.
#[derive(Row, Serialize, Deserialize)]
pub(super) struct PlacementRow {
    pub time: u32,
    pub node: String,
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
    pub batch_id: [u8; 16],
}

#[derive(Row, Serialize)]
pub(super) struct DataSampleRow {
    pub time: u32,
    pub node: String,
    pub event: String,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub stack_id: u64,
    pub mapping_kind: String,
    pub mapping_path: String,
    pub symbol: String,
    pub cache_line: u64,
    pub count: u64,
    pub value: u64,
    pub batch_id: [u8; 16],
}

#[derive(Row, Deserialize)]
pub(super) struct CounterPointRow {
    pub time: u32,
    pub name: String,
    pub value: u64,
}
