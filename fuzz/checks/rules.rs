//! Alert rule files are written by hand: any text is rules or a list of positioned mistakes,
//! never a panic.
//!
//! One check per input, run by the fuzz target (fuzz/fuzz_targets) and, over the committed
//! corpus, by the server's tests (server/tests/suite/corpus.rs).

use bimodal_server::alerts::rules;

/// Checks one input; panics on what may not happen.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match rules::read(text) {
        Ok(_) => {}
        Err(mistakes) => assert!(!mistakes.is_empty(), "an error without a mistake"),
    }
}
