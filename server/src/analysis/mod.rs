//! What the server concludes from stored samples, on plain data: no database in here. Storage
//! reads feed it; the API and the `bimodal` CLI present it.
//!
//! - [`bands`]: bands of nodes in one metric, or a reasoned "no bands";
//! - [`modes`]: whether a fleet's values have more than one mode, against its own shape;
//! - [`rank`]: tests between two groups of nodes that count each node once;
//! - [`compare`]: the strongest bands over every metric, and the labels and functions that
//!   differ between them;
//! - [`held_out`]: the band metric's own functions tested on the half of the window that did
//!   not cut the bands;
//! - [`chains`]: which nodes' stacks may stop short beside the others', and stay out of
//!   stack-derived comparisons.

pub mod bands;
pub mod chains;
pub mod compare;
pub mod held_out;
pub mod modes;
pub mod rank;

/// A value as a sentence shows it: whole from 100, to three decimals below.
pub fn figure(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{}", (v * 1e3).round() / 1e3)
    }
}
