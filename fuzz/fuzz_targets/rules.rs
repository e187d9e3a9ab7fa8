//! The fuzz target of `checks/rules.rs` (what it checks is said there).
#![no_main]

#[path = "../checks/rules.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
