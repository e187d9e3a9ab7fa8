//! What the server concludes from stored samples, on plain data: no database in here. Storage
//! reads feed it; the API and the `bimodal` CLI present it.
//!
//! - [`bands`]: two bands of nodes in one metric, or a reasoned "no bands".

pub mod bands;
