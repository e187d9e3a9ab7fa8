//! The bimodal node agent: samples events with stacks through BPF, symbolizes them and either
//! writes a local profile (`record`) or streams batches to the fleet server (`run`).
//!
//! The data path, by module: `events` (which perf event samples each kind) → `bpf` (programs
//! and their maps) → `symbolize` (addresses to frames) → `batch` (wire batches) → `record` /
//! `ship`; `probe` reports which source each event kind uses here.

pub mod batch;
pub mod bpf;
pub mod events;
pub mod probe;
pub mod record;
pub mod ship;
pub mod symbolize;
