//! Alert rule files are written by hand: any text is rules or a list of positioned mistakes,
//! never a panic.
#![no_main]

use bimodal_server::alerts::rules;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match rules::read(text) {
        Ok(_) => {}
        Err(mistakes) => assert!(!mistakes.is_empty(), "an error without a mistake"),
    }
});
