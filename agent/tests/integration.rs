//! The agent's integration tests: real BPF programs on this kernel, real fixture processes.
//! They need root (CAP_BPF + CAP_PERFMON), as the agent does.

#[path = "../../testdata/fixtures/fixture.rs"]
mod fixture;
#[path = "../../testdata/fixtures/golden.rs"]
mod golden;
mod suite;
