//! Protobuf written by hand, and a gRPC request body that sends it as is.
//!
//! Building a `v1::Batch` of 5,000 frames means 10,000 small strings allocated and freed per
//! batch, a thousand batches a second at 10,000 nodes. Instead every frame's fields except its
//! address are encoded once per profile, and a batch is those bytes copied behind a few varints.
//! The bytes decode to the message prost would write (zero scalars left out as proto3 does).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use bimodal_proto::v1;
use prost::bytes::Bytes;
use prost::Message;
use tokio::sync::mpsc;
use tonic::codec::{DecodeBuf, Decoder};
use tonic::Status;

const VARINT: u32 = 0;
const LEN: u32 = 2;

/// Appends `v` as a varint.
pub fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Bytes `v` takes as a varint.
pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn key_len(field: u32) -> usize {
    varint_len(u64::from(field) << 3)
}

/// Appends an unsigned (or enum, or bool) field; zero is the default and not written.
pub fn put_uint(buf: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        put_varint(buf, u64::from(field << 3 | VARINT));
        put_varint(buf, v);
    }
}

/// Bytes [`put_uint`] writes.
pub fn uint_len(field: u32, v: u64) -> usize {
    if v == 0 {
        0
    } else {
        key_len(field) + varint_len(v)
    }
}

/// Appends an int64 field (two's complement, as protobuf encodes negative int64).
pub fn put_int(buf: &mut Vec<u8>, field: u32, v: i64) {
    put_uint(buf, field, v as u64);
}

/// Appends a bytes or string field; empty is the default and not written.
pub fn put_bytes(buf: &mut Vec<u8>, field: u32, v: &[u8]) {
    if !v.is_empty() {
        put_len_key(buf, field, v.len());
        buf.extend_from_slice(v);
    }
}

/// Bytes [`put_bytes`] writes.
pub fn bytes_len(field: u32, len: usize) -> usize {
    if len == 0 {
        0
    } else {
        key_len(field) + varint_len(len as u64) + len
    }
}

/// Appends the key and length of a length-delimited field whose `len` bytes follow.
pub fn put_len_key(buf: &mut Vec<u8>, field: u32, len: usize) {
    put_varint(buf, u64::from(field << 3 | LEN));
    put_varint(buf, len as u64);
}

/// Buffers of batches tonic has copied, for the next batches: a megabyte allocated and freed
/// per batch costs more in malloc and page faults than filling it.
static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
const POOL_BUFFERS: usize = 256;
/// Buffers larger than this are freed, not kept.
const POOL_BUFFER_BYTES: usize = 8 << 20;

/// An empty buffer of at least `capacity` bytes, reused when one is at hand.
pub fn buffer(capacity: usize) -> Vec<u8> {
    // The smallest kept buffer that is large enough: batches' parts differ a hundredfold.
    let reused = POOL.lock().ok().and_then(|mut pool| {
        let best = pool
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= capacity)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i)?;
        Some(pool.swap_remove(best))
    });
    match reused {
        Some(mut b) => {
            b.clear();
            b
        }
        None => Vec::with_capacity(capacity),
    }
}

fn recycle(parts: Vec<Vec<u8>>) {
    if let Ok(mut pool) = POOL.lock() {
        for p in parts {
            if pool.len() < POOL_BUFFERS && p.capacity() >= 4096 && p.capacity() <= POOL_BUFFER_BYTES {
                pool.push(p);
            }
        }
    }
}

/// One `IngestRequest`, already encoded, in parts that go out as they are.
#[derive(Debug, Default)]
pub struct Encoded {
    parts: Vec<Vec<u8>>,
}

impl Encoded {
    /// The request carrying `hello`.
    pub fn hello(hello: v1::Hello) -> Self {
        let request = v1::IngestRequest {
            message: Some(v1::ingest_request::Message::Hello(hello)),
        };
        Encoded {
            parts: vec![request.encode_to_vec()],
        }
    }

    /// The request carrying a batch whose fields are `parts`, in order.
    pub fn batch(parts: Vec<Vec<u8>>) -> Self {
        let len: usize = parts.iter().map(Vec::len).sum();
        let mut head = Vec::with_capacity(8);
        // IngestRequest.batch is field 2.
        put_len_key(&mut head, 2, len);
        let mut all = Vec::with_capacity(parts.len() + 1);
        all.push(head);
        all.extend(parts.into_iter().filter(|p| !p.is_empty()));
        Encoded { parts: all }
    }

    /// Encoded size, without gRPC's 5-byte message prefix.
    pub fn len(&self) -> usize {
        self.parts.iter().map(Vec::len).sum()
    }

    /// The request as one buffer (to decode it again when checking what is generated).
    pub fn to_vec(&self) -> Vec<u8> {
        self.parts.concat()
    }
}

impl Drop for Encoded {
    fn drop(&mut self) {
        recycle(std::mem::take(&mut self.parts));
    }
}

/// The body of one `Ingest/Stream` request: the encoded requests of a channel, each as a gRPC
/// message (5-byte prefix, then its parts), handed to HTTP/2 without copying.
///
/// tonic's own client encodes every message into one buffer per stream that keeps the capacity
/// of the largest message it ever held; a megabyte per stream times 10,000 streams is more
/// memory than the batches in flight. Here each part is freed (back to the pool) as soon as
/// HTTP/2 has written it.
#[derive(Debug)]
pub struct RequestBody {
    rx: mpsc::Receiver<Encoded>,
    pending: VecDeque<Bytes>,
}

impl RequestBody {
    /// A body sending what arrives on `rx`, ending when every sender is dropped.
    pub fn new(rx: mpsc::Receiver<Encoded>) -> Self {
        RequestBody {
            rx,
            pending: VecDeque::new(),
        }
    }
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        loop {
            if let Some(chunk) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(http_body::Frame::data(chunk))));
            }
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(mut request)) => {
                    let parts = std::mem::take(&mut request.parts);
                    let len = parts.iter().map(Vec::len).sum::<usize>();
                    let mut prefix = Vec::with_capacity(5);
                    // Uncompressed, then the length, big-endian.
                    prefix.push(0);
                    prefix.extend_from_slice(&(len as u32).to_be_bytes());
                    this.pending.push_back(Bytes::from(prefix));
                    this.pending.extend(
                        parts
                            .into_iter()
                            .filter(|p| !p.is_empty())
                            .map(|p| Bytes::from_owner(Pooled(p))),
                    );
                }
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// A part of a batch on its way: back to the pool when HTTP/2 is done with it.
struct Pooled(Vec<u8>);

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        recycle(vec![std::mem::take(&mut self.0)]);
    }
}

/// Decodes the `IngestResponse`s of a stream with prost.
#[derive(Debug)]
pub struct ResponseDecoder;

impl Decoder for ResponseDecoder {
    type Item = v1::IngestResponse;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<v1::IngestResponse>, Status> {
        v1::IngestResponse::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(format!("undecodable ack: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_lengths_match_the_encoding() {
        for v in [0u64, 1, 127, 128, 16_383, 16_384, u64::from(u32::MAX), u64::MAX] {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            assert_eq!(buf.len(), varint_len(v), "{v}");
        }
    }
}
