//! Sampling: which source measures each event kind on this machine (`events`, `probe`), the BPF
//! programs that take the samples with their stacks (`bpf`), the unwind tables those programs
//! walk where frame pointers are missing (`unwind`), and the mappings of every process sampled,
//! read at its first sample (`processes`).

pub mod bpf;
pub mod events;
pub mod probe;
pub mod processes;
pub mod unwind;
