//! The gRPC ingest service: one bidirectional stream per agent, a hello, then batches, each
//! answered by an ack once stored. Batches of one stream are stored in order, one at a time,
//! which is also the backpressure: an agent cannot outrun its ClickHouse writes.

use std::pin::Pin;
use std::sync::Arc;

use bimodal_proto::v1::{self, ingest_request, ingest_response, ingest_server::Ingest};
use tokio::sync::mpsc;
use tokio_stream::{wrappers::ReceiverStream, Stream};
use tonic::{Request, Response, Status, Streaming};

use crate::debuginfo::Symbolizer;
use crate::storage::{Sender, Store, Stored};

/// Serves `bimodal.v1.Ingest` into a [`Store`].
#[derive(Debug, Clone)]
pub struct IngestService {
    store: Arc<Store>,
    symbolizer: Arc<Symbolizer>,
}

impl IngestService {
    pub fn new(store: Arc<Store>, symbolizer: Arc<Symbolizer>) -> Self {
        IngestService { store, symbolizer }
    }
}

type AckStream = Pin<Box<dyn Stream<Item = Result<v1::IngestResponse, Status>> + Send>>;

fn ack(batch_id: Vec<u8>, status: v1::ack::Status, error: String) -> v1::IngestResponse {
    v1::IngestResponse {
        message: Some(ingest_response::Message::Ack(v1::Ack {
            batch_id,
            status: status as i32,
            error,
        })),
    }
}

#[tonic::async_trait]
impl Ingest for IngestService {
    type StreamStream = AckStream;

    async fn stream(&self, request: Request<Streaming<v1::IngestRequest>>) -> Result<Response<AckStream>, Status> {
        let mut inbound = request.into_inner();
        let hello = match inbound.message().await? {
            Some(v1::IngestRequest {
                message: Some(ingest_request::Message::Hello(h)),
            }) => h,
            _ => {
                return Err(Status::invalid_argument(
                    "the first message of a stream must be a Hello",
                ))
            }
        };
        if hello.node.trim().is_empty() {
            return Err(Status::invalid_argument("Hello.node must name the node"));
        }
        let mut labels: Vec<(String, String)> = hello.labels.clone().into_iter().collect();
        labels.sort();
        let sender = Sender {
            node: hello.node.clone(),
            labels,
            agent_version: hello.agent_version.clone(),
            kernel_release: hello.kernel_release.clone(),
        };
        tracing::info!(node = %sender.node, agent = %sender.agent_version, "agent connected");
        if let Some(facts) = &hello.facts {
            if let Err(e) = self.store.record_node_facts(&sender.node, facts).await {
                tracing::error!(node = %sender.node, error = %e, "failed to store node facts");
                return Err(Status::unavailable("storage is unavailable; reconnect later"));
            }
        }

        let (tx, rx) = mpsc::channel(16);
        let store = self.store.clone();
        let symbolizer = self.symbolizer.clone();
        tokio::spawn(async move {
            loop {
                let batch = match inbound.message().await {
                    Ok(Some(v1::IngestRequest {
                        message: Some(ingest_request::Message::Batch(b)),
                    })) => b,
                    Ok(Some(_)) => {
                        let _ = tx
                            .send(Err(Status::invalid_argument("only the first message may be a Hello")))
                            .await;
                        return;
                    }
                    Ok(None) => return,
                    Err(status) => {
                        tracing::debug!(node = %sender.node, %status, "agent stream ended");
                        return;
                    }
                };
                // Frames sent as (build id, offset) are named now where the store has symbols.
                let sym = symbolizer.clone();
                let batch = match tokio::task::spawn_blocking(move || {
                    let mut batch = batch;
                    sym.name_wire_frames(&mut batch.frames);
                    batch
                })
                .await
                {
                    Ok(batch) => batch,
                    Err(e) => {
                        tracing::error!(error = %e, "symbolizing a batch failed");
                        return;
                    }
                };
                let reply = match store.ingest(&sender, &batch).await {
                    Ok(Ok(Stored::New)) => Ok(ack(batch.batch_id, v1::ack::Status::Stored, String::new())),
                    Ok(Ok(Stored::Duplicate)) => Ok(ack(batch.batch_id, v1::ack::Status::Duplicate, String::new())),
                    Ok(Err(invalid)) => {
                        tracing::warn!(node = %sender.node, error = %invalid, "rejected a malformed batch");
                        Ok(ack(batch.batch_id, v1::ack::Status::Rejected, invalid.to_string()))
                    }
                    Err(e) => {
                        // The agent keeps the batch and resends it on a new stream.
                        tracing::error!(node = %sender.node, error = %e, "failed to store a batch");
                        Err(Status::unavailable("storage is unavailable; resend later"))
                    }
                };
                let failed = reply.is_err();
                if tx.send(reply).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
