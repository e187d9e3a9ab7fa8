//! The bimodal node agent: samples events with stacks through BPF, symbolizes them and either
//! writes a local profile (`record`) or streams batches to the fleet server (`run`).
//!
//! The data path, by module: `events` (which perf event samples each kind) → `bpf` (programs
//! and their maps) → `processes` (the mappings of each process sampled, read at its first
//! sample) → `symbolize` (addresses to frames) → `batch` (wire batches) → `record` / `ship`;
//! `probe` reports which source each event kind uses here.
//!
//! Node facts for the server: `topology` (what the node looks like), `counters` (how its NUMA and
//! fault counters move), `placement` (on which nodes a process's memory and threads are);
//! `collect` reads them, and the rest of a node's state, into every batch `ship` sends.

pub mod batch;
pub mod bpf;
pub mod collect;
pub mod counters;
pub mod debugfile;
pub mod elf;
pub mod events;
pub mod facts;
pub mod identity;
pub mod kubernetes;
pub mod metrics;
pub mod placement;
pub mod probe;
pub mod processes;
pub mod record;
pub mod ship;
pub mod symbolize;
pub mod topology;
pub mod unwind;
pub mod upload;
pub mod work;

#[cfg(test)]
#[path = "../../testdata/fixtures/http.rs"]
mod test_http;
