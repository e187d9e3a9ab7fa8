//! Ingest messages built by hand, and one stream's exchange with a server: for tests that need
//! exact control of batch ids, resends and timing, which a real agent does not give.

use bimodal_proto::v1::{self, ingest_request::Message};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// A Hello for `node`.
pub fn hello(node: &str) -> v1::IngestRequest {
    v1::IngestRequest {
        message: Some(Message::Hello(v1::Hello {
            node: node.into(),
            agent_version: "test".into(),
            ..Default::default()
        })),
    }
}

/// Now, in Unix nanoseconds.
pub fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// A batch of `count` page faults (value 100 each) on a one-frame stack named `leaf`.
pub fn batch(id: [u8; 16], resend: bool, leaf: &str, count: u64) -> v1::Batch {
    let now = now_nanos();
    v1::Batch {
        batch_id: id.to_vec(),
        resend,
        start_unix_nanos: now - 1_000_000_000,
        end_unix_nanos: now,
        frames: vec![v1::Frame {
            kind: v1::FrameKind::User as i32,
            function: leaf.into(),
            ..Default::default()
        }],
        stacks: vec![v1::Stack { frame_indices: vec![0] }],
        samples: vec![v1::Sample {
            event: v1::EventKind::PageFault as i32,
            stack_index: 0,
            pid: 1,
            tid: 1,
            comm: "ingest".into(),
            count,
            value: count * 100,
        }],
        sources: vec![v1::EventSource {
            event: v1::EventKind::PageFault as i32,
            description: "software page-faults, 1 in 100".into(),
            name: "page-faults".into(),
            unit: "faults".into(),
            period: 100,
            dropped: 0,
        }],
        ..Default::default()
    }
}

pub fn req(b: v1::Batch) -> v1::IngestRequest {
    v1::IngestRequest {
        message: Some(Message::Batch(b)),
    }
}

/// Sends messages on one stream to `url` and collects the acks (or the stream's error).
pub async fn exchange_with(url: String, messages: Vec<v1::IngestRequest>) -> Result<Vec<v1::Ack>, tonic::Status> {
    exchange_as(url, None, messages).await
}

/// [`exchange_with`] presenting `token`.
pub async fn exchange_as(
    url: String,
    token: Option<&str>,
    messages: Vec<v1::IngestRequest>,
) -> Result<Vec<v1::Ack>, tonic::Status> {
    let token = token.map(|t| bimodal_proto::client::Token::Value(t.to_owned()));
    let server = bimodal_proto::client::ServerAddress::new(url, token);
    exchange_at(&server, messages)
        .await
        .map_err(|e| e.downcast::<tonic::Status>().unwrap_or_else(|e| panic!("{e:#}")))
}

/// [`exchange_with`] the server as an agent reaches it (TLS, token): a connection that fails
/// is an error too.
pub async fn exchange_at(
    server: &bimodal_proto::client::ServerAddress,
    messages: Vec<v1::IngestRequest>,
) -> anyhow::Result<Vec<v1::Ack>> {
    let mut client = server.ingest().await?;
    let (tx, rx) = mpsc::channel(messages.len().max(1));
    let n = messages.len();
    for m in messages {
        tx.send(m).await.unwrap();
    }
    let mut acks = client.stream(ReceiverStream::new(rx)).await?.into_inner();
    let mut out = Vec::new();
    while out.len() + 1 < n {
        match acks.message().await? {
            Some(v1::IngestResponse {
                message: Some(v1::ingest_response::Message::Ack(a)),
            }) => out.push(a),
            _ => break,
        }
    }
    Ok(out)
}

/// Opens a stream to `server` (a connection of its own) and sends `first` on it; the stream is
/// kept open: the sender for more messages, and its acks.
pub async fn open_stream(
    server: &bimodal_proto::client::ServerAddress,
    first: Vec<v1::IngestRequest>,
) -> (mpsc::Sender<v1::IngestRequest>, tonic::Streaming<v1::IngestResponse>) {
    let mut client = server.ingest().await.unwrap();
    let (tx, rx) = mpsc::channel(first.len().max(4));
    for m in first {
        tx.send(m).await.unwrap();
    }
    let acks = client.stream(ReceiverStream::new(rx)).await.unwrap().into_inner();
    (tx, acks)
}

/// [`exchange_with`] a test server.
pub async fn exchange(
    server: &super::common::TestServer,
    messages: Vec<v1::IngestRequest>,
) -> Result<Vec<v1::Ack>, tonic::Status> {
    exchange_with(server.url(), messages).await
}
