//! The parts of `bimodal-loadgen`: real stack shapes in (`profile`), simulated nodes (`fleet`),
//! wire batches out (`batch`, `wire`), one gRPC stream per node (`stream`), figures (`stats`).

pub mod batch;
pub mod fleet;
pub mod profile;
pub mod rng;
pub mod stats;
pub mod stream;
pub mod wire;
