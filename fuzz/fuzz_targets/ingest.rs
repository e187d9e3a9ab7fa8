//! One ingest message as a hostile client could send it: the server peeks its batch id from
//! the wire, decodes it, validates it, and (when valid) turns it into rows. None of it may
//! panic, whatever the bytes.
#![no_main]

use std::sync::Arc;

use bimodal_proto::v1;
use bimodal_server::ingest::encoded::Encoded;
use bimodal_server::ingest::rows::{self, NoNames, NothingKnown, Sender};
use bimodal_server::ingest::validate;
use libfuzzer_sys::fuzz_target;

/// A fixed "now" (2026-11-25 12:33 UTC), hours after the committed corpus's batches were taken:
/// validation judges times against it, and the seeds must pass it to reach the rows.
const NOW: i64 = 1_795_610_000;

fuzz_target!(|data: &[u8]| {
    let encoded = Encoded(bytes::Bytes::copy_from_slice(data));
    let _ = encoded.batch_id();
    let Ok(request) = encoded.decode() else { return };
    match request.message {
        Some(v1::ingest_request::Message::Hello(hello)) => {
            let _ = validate::hello(&hello);
        }
        Some(v1::ingest_request::Message::Batch(batch)) => {
            if validate::batch(&batch, NOW).is_ok() {
                let sender = Sender {
                    node: Arc::from("fuzz-node"),
                    labels: Vec::new(),
                    agent_version: Arc::from("fuzz"),
                    facts: None,
                };
                let built = rows::build(&sender, &batch, &NoNames, &NothingKnown);
                let _ = built.weight();
            }
        }
        None => {}
    }
});
