//! `bimodal.v1.Ingest` served with its requests read off the wire by the server itself.
//!
//! A batch is admitted by its size before its bytes are held: the stream reads a message's
//! gRPC header (its length) and its first bytes (the batch id), asks admission for a share of
//! the in-flight bound, and only then receives the rest, into one buffer of exactly the
//! message's size. A batch the server has no room for is answered "retry later" from its id
//! and its bytes are dropped as they arrive, so a fleet catching up costs the server a
//! transfer per resend, neither a decode nor memory; an idle stream holds no buffer.
//!
//! tonic's `Streaming` is not used for requests: it reads every message into one growing
//! buffer per stream that keeps its largest size for the stream's life and that a message kept
//! as bytes shares (heaptrack over 1,000 agents catching up: 2.5 GB of a 3.3 GB heap peak in
//! those buffers, outside every bound). Responses (acks) are encoded by prost and framed here
//! too, with the stream's status in the trailers, as tonic's server does.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bimodal_proto::v1;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body::Frame;
use http_body_util::{combinators::UnsyncBoxBody, BodyExt};
use tonic::metadata::MetadataMap;
use tonic::server::NamedService;
use tonic::Status;

use super::{AckStream, IngestService};
use crate::serve::Peer;

/// An `IngestRequest` as it came off the wire.
#[derive(Debug)]
pub struct Encoded(pub Bytes);

impl Encoded {
    /// Decodes the whole request.
    pub fn decode(&self) -> Result<v1::IngestRequest, prost::DecodeError> {
        prost::Message::decode(self.0.clone())
    }
}

/// Bytes of a message read before it is admitted: enough for a batch's id (prost writes
/// fields in number order, so the id is at the batch's start: two keys, two lengths and 16
/// bytes).
const PREFIX_BYTES: usize = 64;

/// A message's length and its first bytes, read before the rest.
#[derive(Debug)]
pub struct Head {
    /// The message's length in bytes (without gRPC's 5-byte header).
    pub len: usize,
    /// Its first `min(len, PREFIX_BYTES)` bytes.
    prefix: Bytes,
}

impl Head {
    /// The `batch_id` of a request holding a batch, from the first bytes; `None` for a Hello
    /// or a message that is not protobuf.
    pub fn batch_id(&self) -> Option<&[u8]> {
        let batch = field(&self.prefix, 2, true)?;
        field(batch, 1, false)
    }
}

/// The first length-delimited field `number` of a protobuf message, read up to it only (a batch
/// has thousands of fields after its id); with `truncated`, the field may end beyond the bytes
/// given and what is there of it is returned. `None` if absent or the message is malformed
/// before it. Decoding keeps a repeated field's last occurrence: a message repeating it answered
/// "retry" carries the first, and the agent that sent it is the one confused.
fn field(mut message: &[u8], number: u64, truncated: bool) -> Option<&[u8]> {
    while !message.is_empty() {
        let key = prost::encoding::decode_varint(&mut message).ok()?;
        let len = match key & 7 {
            0 => {
                prost::encoding::decode_varint(&mut message).ok()?;
                continue;
            }
            1 => 8,
            2 => usize::try_from(prost::encoding::decode_varint(&mut message).ok()?).ok()?,
            5 => 4,
            _ => return None,
        };
        let wanted = key >> 3 == number && key & 7 == 2;
        if message.len() < len {
            return (wanted && truncated).then_some(message);
        }
        if wanted {
            return Some(&message[..len]);
        }
        message = &message[len..];
    }
    None
}

/// Why the next message cannot be had.
#[derive(Debug)]
pub enum ReadError {
    /// The message itself cannot be read (too large, compressed): resending it will not help.
    Unreadable(String),
    /// The connection failed or the client left mid-message.
    Stream(Status),
}

impl ReadError {
    /// The body ended inside a message.
    fn cut_short() -> ReadError {
        ReadError::Stream(Status::cancelled("the stream ended mid-message"))
    }
}

/// The request messages of one stream, read from its HTTP/2 body.
pub struct Inbound {
    body: UnsyncBoxBody<Bytes, Status>,
    /// Received and not yet consumed: the rest of the body's last data frame.
    chunk: Bytes,
    /// Bytes of a header or prefix gathered across frames (kept here so that reading a head is
    /// cancel-safe).
    partial: BytesMut,
    /// The length of the message whose header was read and whose prefix is being read.
    header: Option<usize>,
    max_message_bytes: usize,
}

impl std::fmt::Debug for Inbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbound")
            .field("chunk", &self.chunk.len())
            .finish_non_exhaustive()
    }
}

impl Inbound {
    pub fn new<B>(body: B, max_message_bytes: usize) -> Inbound
    where
        B: http_body::Body + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let body = body
            .map_frame(|frame| frame.map_data(|mut data| data.copy_to_bytes(data.remaining())))
            .map_err(|e| Status::from_error(e.into()))
            .boxed_unsync();
        Inbound {
            body,
            chunk: Bytes::new(),
            partial: BytesMut::new(),
            header: None,
            max_message_bytes,
        }
    }

    /// A body of `chunks` sent as data frames, for tests and fuzzing.
    pub fn from_chunks(chunks: Vec<Bytes>, max_message_bytes: usize) -> Inbound {
        let frames = chunks.into_iter().map(|c| Ok::<_, Infallible>(Frame::data(c)));
        Inbound::new(
            http_body_util::StreamBody::new(futures_util::stream::iter(frames)),
            max_message_bytes,
        )
    }

    /// The next data of the body into `chunk`; false at its end.
    async fn fill(&mut self) -> Result<bool, ReadError> {
        while self.chunk.is_empty() {
            match self.body.frame().await {
                None => return Ok(false),
                Some(Err(status)) => return Err(ReadError::Stream(status)),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.chunk = data;
                    }
                }
            }
        }
        Ok(true)
    }

    /// The next `n` bytes, gathered in `partial` across frames (cancel-safe); `None` at the end
    /// of the body before any of them.
    async fn take(&mut self, n: usize) -> Result<Option<Bytes>, ReadError> {
        loop {
            let wanted = n - self.partial.len();
            if self.partial.is_empty() && self.chunk.len() >= n {
                return Ok(Some(self.chunk.split_to(n)));
            }
            if self.chunk.len() >= wanted {
                self.partial.extend_from_slice(&self.chunk.split_to(wanted));
                return Ok(Some(self.partial.split().freeze()));
            }
            self.partial.extend_from_slice(&std::mem::take(&mut self.chunk));
            if !self.fill().await? {
                return match self.partial.is_empty() && self.header.is_none() {
                    true => Ok(None),
                    false => Err(ReadError::cut_short()),
                };
            }
        }
    }

    /// The next message's length and first bytes; `None` at the end of the stream.
    /// Cancel-safe: a head cut short is taken up where it stopped.
    pub async fn head(&mut self) -> Result<Option<Head>, ReadError> {
        let len = match self.header {
            Some(len) => len,
            None => {
                let Some(header) = self.take(5).await? else {
                    return Ok(None);
                };
                if header[0] != 0 {
                    return Err(ReadError::Unreadable(
                        "it is compressed, and the server accepts no compression".into(),
                    ));
                }
                let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
                if len > self.max_message_bytes {
                    return Err(ReadError::Unreadable(format!(
                        "it is {len} bytes, more than the {} the server accepts",
                        self.max_message_bytes
                    )));
                }
                self.header = Some(len);
                len
            }
        };
        let prefix = self.take(len.min(PREFIX_BYTES)).await?.unwrap_or_default();
        self.header = None;
        Ok(Some(Head { len, prefix }))
    }

    /// The whole message of `head`, its rest received into one buffer of its exact size.
    pub async fn rest(&mut self, head: Head) -> Result<Encoded, ReadError> {
        if head.prefix.len() == head.len {
            return Ok(Encoded(head.prefix));
        }
        let mut message = BytesMut::with_capacity(head.len);
        message.put(head.prefix);
        while message.len() < head.len {
            if !self.fill().await? {
                return Err(ReadError::cut_short());
            }
            let n = self.chunk.len().min(head.len - message.len());
            message.put(self.chunk.split_to(n));
        }
        Ok(Encoded(message.freeze()))
    }

    /// Receives the rest of `head`'s message and drops it as it comes.
    pub async fn skip(&mut self, head: Head) -> Result<(), ReadError> {
        let mut left = head.len - head.prefix.len();
        while left > 0 {
            if !self.fill().await? {
                return Err(ReadError::cut_short());
            }
            let n = self.chunk.len().min(left);
            self.chunk.advance(n);
            left -= n;
        }
        Ok(())
    }
}

/// The response body: each ack framed as gRPC frames it, then the stream's status as trailers.
struct Acks {
    acks: AckStream,
    done: bool,
}

impl http_body::Body for Acks {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let status = match std::task::ready!(self.acks.as_mut().poll_next(cx)) {
            Some(Ok(ack)) => {
                let len = prost::Message::encoded_len(&ack);
                let mut frame = BytesMut::with_capacity(5 + len);
                frame.put_u8(0);
                frame.put_u32(len as u32);
                prost::Message::encode(&ack, &mut frame).expect("the frame has the ack's length");
                return Poll::Ready(Some(Ok(Frame::data(frame.freeze()))));
            }
            Some(Err(status)) => status,
            None => Status::ok(""),
        };
        self.done = true;
        let mut trailers = http::HeaderMap::new();
        let _ = status.add_header(&mut trailers);
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

/// The `bimodal.v1.Ingest` service, routed as the generated server is.
#[derive(Debug, Clone)]
pub struct EncodedIngestServer {
    service: IngestService,
    max_decoding_message_size: usize,
}

impl EncodedIngestServer {
    pub fn new(service: IngestService, max_decoding_message_size: usize) -> Self {
        EncodedIngestServer {
            service,
            max_decoding_message_size,
        }
    }
}

impl NamedService for EncodedIngestServer {
    const NAME: &'static str = v1::ingest_server::SERVICE_NAME;
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<B> tower_service::Service<http::Request<B>> for EncodedIngestServer
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let path = format!("/{}/Stream", v1::ingest_server::SERVICE_NAME);
        if request.uri().path() != path {
            return Box::pin(async move { Ok(Status::unimplemented("no such method").into_http()) });
        }
        let service = self.service.clone();
        let limit = self.max_decoding_message_size;
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let metadata = MetadataMap::from_headers(parts.headers);
            let peer = parts.extensions.get::<Peer>().cloned();
            let inbound = Inbound::new(body, limit);
            Ok(match service.stream(metadata, peer, inbound).await {
                Ok(acks) => {
                    let mut response = http::Response::new(tonic::body::Body::new(Acks { acks, done: false }));
                    response
                        .headers_mut()
                        .insert(http::header::CONTENT_TYPE, tonic::metadata::GRPC_CONTENT_TYPE);
                    response
                }
                Err(status) => status.into_http(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(message: &[u8]) -> Head {
        let prefix = Bytes::copy_from_slice(&message[..message.len().min(PREFIX_BYTES)]);
        Head {
            len: message.len(),
            prefix,
        }
    }

    /// The id is read from a batch's first bytes as decoding reads it, and malformed input
    /// gives none.
    #[test]
    fn batch_id_is_read_from_the_first_bytes() {
        let request = v1::IngestRequest {
            message: Some(v1::ingest_request::Message::Batch(v1::Batch {
                batch_id: vec![9; 16],
                resend: true,
                start_unix_nanos: 5,
                samples: vec![v1::Sample::default(); 300],
                ..Default::default()
            })),
        };
        let bytes = prost::Message::encode_to_vec(&request);
        assert!(bytes.len() > PREFIX_BYTES);
        assert_eq!(head(&bytes).batch_id(), Some(&[9u8; 16][..]));
        // Cut inside the id: none.
        assert_eq!(head(&bytes[..10]).batch_id(), None);
        let hello = v1::IngestRequest {
            message: Some(v1::ingest_request::Message::Hello(v1::Hello {
                node: "n".into(),
                ..Default::default()
            })),
        };
        assert_eq!(head(&prost::Message::encode_to_vec(&hello)).batch_id(), None);
        assert_eq!(head(&[0xff; 4]).batch_id(), None);
    }

    async fn message(inbound: &mut Inbound) -> Result<Option<Encoded>, ReadError> {
        match inbound.head().await? {
            Some(head) => inbound.rest(head).await.map(Some),
            None => Ok(None),
        }
    }

    /// A body of gRPC-framed `messages`, cut into data frames of `frame` bytes.
    fn body(messages: &[&[u8]], frame: usize) -> Inbound {
        let mut wire = Vec::new();
        for m in messages {
            wire.push(0);
            wire.extend_from_slice(&(m.len() as u32).to_be_bytes());
            wire.extend_from_slice(m);
        }
        Inbound::from_chunks(wire.chunks(frame).map(Bytes::copy_from_slice).collect(), 1 << 20)
    }

    /// Messages come back whole whatever the frames cut them into, skipped ones are passed
    /// over, and the end of the body ends the stream.
    #[tokio::test]
    async fn messages_are_read_across_frames() {
        let long: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let short = b"abc".to_vec();
        for frame in [1, 3, 7, 64, 100_000] {
            let mut inbound = body(&[&long, &short, &long, &[]], frame);
            let first = inbound.head().await.unwrap().unwrap();
            assert_eq!(first.len, 1000);
            assert_eq!(inbound.rest(first).await.unwrap().0, long);
            let second = inbound.head().await.unwrap().unwrap();
            assert_eq!(inbound.rest(second).await.unwrap().0, short);
            let third = inbound.head().await.unwrap().unwrap();
            inbound.skip(third).await.unwrap();
            assert_eq!(message(&mut inbound).await.unwrap().unwrap().0.len(), 0);
            assert!(message(&mut inbound).await.unwrap().is_none(), "frame {frame}");
        }
    }

    /// A message over the limit, a compressed one and a body cut mid-message are errors of
    /// their own kinds.
    #[tokio::test]
    async fn what_cannot_be_read_says_why() {
        let big = vec![0u8; (1 << 20) + 1];
        assert!(
            matches!(body(&[&big], 4096).head().await, Err(ReadError::Unreadable(why)) if why.contains("more than"))
        );
        let mut compressed = body(&[b"x"], 10);
        compressed.chunk = Bytes::from_static(&[1, 0, 0, 0, 1, b'x']);
        assert!(matches!(compressed.head().await, Err(ReadError::Unreadable(why)) if why.contains("compress")));
        let mut cut = Inbound::from_chunks(vec![Bytes::from_static(&[0, 0, 0, 0, 9, 1, 2])], 100);
        assert!(matches!(message(&mut cut).await, Err(ReadError::Stream(_))));
    }
}
