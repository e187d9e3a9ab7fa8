//! Ingest streams as a hostile client could send them: the bytes as a stream's body (gRPC
//! framing included) read message by message as the server reads them, and the bytes as one
//! message, whose batch id the server reads from its first bytes, then decodes, validates and
//! (when valid) turns into rows. None of it may panic, whatever the bytes.
//!
//! One check per input, run by the fuzz target (fuzz/fuzz_targets) and, over the committed
//! corpus, by the server's tests (server/tests/suite/corpus.rs).

use std::sync::Arc;

use bimodal_proto::v1;
use bimodal_server::ingest::encoded::Inbound;
use bimodal_server::ingest::rows::{self, NoNames, NothingKnown, Sender};
use bimodal_server::validate;
use bytes::Bytes;
use futures_util::FutureExt;

/// A fixed "now" (2026-11-25 12:33 UTC), hours after the committed corpus's batches were taken:
/// validation judges times against it, and the seeds must pass it to reach the rows.
const NOW: i64 = 1_795_610_000;

/// Checks one input; panics on what may not happen.
pub fn check(data: &[u8]) {
    // The bytes as a body in frames of 7 bytes: headers, lengths and messages cut anywhere.
    // Every other message is skipped, as a refused batch is.
    let mut body = Inbound::from_chunks(data.chunks(7).map(Bytes::copy_from_slice).collect(), 1 << 16);
    let mut skip = false;
    while let Some(Ok(Some(head))) = body.head().now_or_never() {
        let _ = head.batch_id();
        let len = head.len;
        skip = !skip;
        let read = match skip {
            true => body
                .skip(head)
                .now_or_never()
                .expect("a body in memory is read at once"),
            false => body
                .rest(head)
                .now_or_never()
                .expect("a body in memory is read at once")
                .map(|m| assert_eq!(m.0.len(), len)),
        };
        if read.is_err() {
            break;
        }
    }

    // The bytes as one message.
    let mut framed = vec![0];
    framed.extend_from_slice(&(data.len() as u32).to_be_bytes());
    framed.extend_from_slice(data);
    let mut one = Inbound::from_chunks(vec![Bytes::from(framed)], usize::MAX);
    let Some(Ok(Some(head))) = one.head().now_or_never() else {
        panic!("a framed message has a head")
    };
    let _ = head.batch_id();
    let Some(Ok(encoded)) = one.rest(head).now_or_never() else {
        panic!("a framed message is read whole")
    };
    assert_eq!(&encoded.0[..], data);
    let Ok(request) = encoded.decode() else { return };
    match request.message {
        Some(v1::ingest_request::Message::Hello(hello)) => {
            let _ = validate::hello(&hello);
        }
        Some(v1::ingest_request::Message::Batch(batch)) if validate::batch(&batch, NOW).is_ok() => {
            let sender = Sender {
                node: Arc::from("fuzz-node"),
                labels: Vec::new(),
                agent_version: Arc::from("fuzz"),
                facts: None,
            };
            let built = rows::build(&sender, &batch, &NoNames, &NothingKnown);
            let _ = built.weight();
        }
        Some(v1::ingest_request::Message::Batch(_)) | None => {}
    }
}
