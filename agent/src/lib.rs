//! The bimodal node agent: samples events with stacks through BPF, symbolizes them and either
//! writes a local profile (`record`) or streams batches to the fleet server (`run`).
//!
//! Laid out by stage, in the order a sample travels:
//! - [`host`]: reading the machine's files that many stages need (ELF images, debug files, paths
//!   inside a process's root, /sys and /proc text, `/proc/cpuinfo`);
//! - [`sample`]: which perf event or tracing hook samples each kind (`events`, `probe`), the BPF
//!   programs and their maps (`bpf`), the unwind tables they walk (`unwind`), and the mappings of
//!   each process sampled (`processes`);
//! - [`symbolize`]: addresses to frames;
//! - [`node`]: the node's state that goes with the samples: `topology`, `counters`,
//!   `placement`, `identity`, `kubernetes`, `facts`, units of `work`; `collect` reads them every
//!   interval;
//! - [`ship`]: wire batches (`batch`), the stream to the server and its spool, and image uploads
//!   (`upload`); [`record`] writes a local profile instead;
//! - [`metrics`]: the agent's own `/metrics`.

pub mod host;
pub mod metrics;
pub mod node;
pub mod record;
pub mod sample;
pub mod ship;
pub mod symbolize;

#[cfg(test)]
#[path = "../../testdata/fixtures/http.rs"]
mod test_http;
