//! The fuzz target of `checks/ingest.rs` (what it checks is said there).
#![no_main]

#[path = "../checks/ingest.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
