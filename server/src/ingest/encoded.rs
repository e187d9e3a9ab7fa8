//! `bimodal.v1.Ingest` served with its requests kept encoded until the server admits them.
//!
//! A stream's batch is admitted by its encoded size before it is decoded: a batch the server
//! has no room for is answered "retry later" from its id alone (read from the wire without
//! decoding the rest), so a fleet catching up costs the server a transfer per resend, not a
//! decode, and a waiting stream holds its batch's bytes, not the decoded batch (several times
//! larger). The service is the one `tonic-prost-build` generates, with this codec in place of
//! prost's for requests.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bimodal_proto::v1;
use bytes::{Buf, Bytes};
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::server::NamedService;
use tonic::{Request, Response, Status, Streaming};

use super::{AckStream, IngestService};

/// An `IngestRequest` as it came off the wire.
#[derive(Debug)]
pub struct Encoded(pub Bytes);

impl Encoded {
    /// Decodes the whole request.
    pub fn decode(&self) -> Result<v1::IngestRequest, prost::DecodeError> {
        prost::Message::decode(self.0.clone())
    }

    /// The `batch_id` of a request holding a batch, read without decoding the batch (prost
    /// writes fields in number order, so the id is at the batch's start); `None` for a Hello or
    /// a message that is not protobuf.
    pub fn batch_id(&self) -> Option<&[u8]> {
        let batch = field(&self.0, 2)?;
        field(batch, 1)
    }
}

/// The first length-delimited field `number` of a protobuf message, read up to it only (a batch
/// has thousands of fields after its id); `None` if absent or the message is malformed before
/// it. Decoding keeps a repeated field's last occurrence: a message repeating it answered
/// "retry" carries the first, and the agent that sent it is the one confused.
fn field(mut message: &[u8], number: u64) -> Option<&[u8]> {
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
        if message.len() < len {
            return None;
        }
        if key >> 3 == number && key & 7 == 2 {
            return Some(&message[..len]);
        }
        message = &message[len..];
    }
    None
}

/// Requests as [`Encoded`], responses by prost.
#[derive(Debug, Clone, Default)]
pub struct EncodedCodec;

impl Codec for EncodedCodec {
    type Encode = v1::IngestResponse;
    type Decode = Encoded;
    type Encoder = tonic_prost::ProstEncoder<v1::IngestResponse>;
    type Decoder = EncodedDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        EncodedDecoder
    }
}

#[derive(Debug)]
pub struct EncodedDecoder;

impl Decoder for EncodedDecoder {
    type Item = Encoded;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Encoded>, Status> {
        Ok(Some(Encoded(src.copy_to_bytes(src.remaining()))))
    }
}

/// The `bimodal.v1.Ingest` service over [`EncodedCodec`], routed as the generated server is.
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

/// The one method, as tonic calls it.
struct StreamMethod(IngestService);

impl tower_service::Service<Request<Streaming<Encoded>>> for StreamMethod {
    type Response = Response<AckStream>;
    type Error = Status;
    type Future = BoxFuture<Self::Response, Status>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Streaming<Encoded>>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { service.stream(request).await })
    }
}

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
        let method = StreamMethod(self.service.clone());
        let limit = self.max_decoding_message_size;
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(EncodedCodec).apply_max_message_size_config(Some(limit), None);
            Ok(grpc.streaming(method, request).await)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The id is read from the wire as decoding reads it, and malformed input gives none.
    #[test]
    fn batch_id_is_read_without_decoding() {
        let request = v1::IngestRequest {
            message: Some(v1::ingest_request::Message::Batch(v1::Batch {
                batch_id: vec![9; 16],
                resend: true,
                start_unix_nanos: 5,
                samples: vec![v1::Sample::default(); 3],
                ..Default::default()
            })),
        };
        let bytes = Bytes::from(prost::Message::encode_to_vec(&request));
        assert_eq!(Encoded(bytes.clone()).batch_id(), Some(&[9u8; 16][..]));
        assert_eq!(Encoded(bytes.slice(..bytes.len() - 1)).batch_id(), None);
        let hello = v1::IngestRequest {
            message: Some(v1::ingest_request::Message::Hello(v1::Hello {
                node: "n".into(),
                ..Default::default()
            })),
        };
        assert_eq!(Encoded(prost::Message::encode_to_vec(&hello).into()).batch_id(), None);
        assert_eq!(Encoded(Bytes::from_static(&[0xff; 4])).batch_id(), None);
    }
}
