//! The bimodal fleet server: agents stream batches over gRPC (`ingest`), they are stored in
//! ClickHouse (`storage`), and the HTTP API and web UI read them back (`api`). gRPC and HTTP
//! share one port.

pub mod api;
pub mod ingest;
pub mod storage;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use bimodal_proto::v1::ingest_server::IngestServer;
use tonic::server::NamedService;

use crate::storage::managed::ManagedClickHouse;
use crate::storage::Store;

/// Server settings, from flags or the environment.
#[derive(Clone, Debug)]
pub struct Config {
    /// Address for gRPC ingest, the HTTP API and the UI.
    pub listen: SocketAddr,
    /// An existing ClickHouse (HTTP interface); `None` starts a managed one under `data_dir`.
    pub clickhouse_url: Option<String>,
    pub clickhouse_database: String,
    /// Where the managed ClickHouse keeps its files.
    pub data_dir: PathBuf,
    /// Days of samples kept (on ClickHouse versions with TTL).
    pub retention_days: u32,
}

/// A bound, running server (before it serves).
#[derive(Debug)]
pub struct Server {
    listener: tokio::net::TcpListener,
    store: Arc<Store>,
    managed: Option<ManagedClickHouse>,
}

impl Server {
    /// Starts storage (managed or given), applies migrations and binds the port.
    pub async fn bind(config: &Config) -> anyhow::Result<Server> {
        let (managed, url) = match &config.clickhouse_url {
            Some(url) => (None, url.clone()),
            None => {
                let dir = config.data_dir.join("clickhouse");
                let m = ManagedClickHouse::start(&dir).await?;
                let url = m.url.clone();
                (Some(m), url)
            }
        };
        let store = Store::open(&url, &config.clickhouse_database, config.retention_days)
            .await
            .with_context(|| format!("failed to open ClickHouse storage at {url}"))?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("failed to listen on {}", config.listen))?;
        Ok(Server {
            listener,
            store: Arc::new(store),
            managed,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then stops the managed ClickHouse.
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let ingest =
            IngestServer::new(ingest::IngestService::new(self.store.clone())).max_decoding_message_size(64 << 20);
        // gRPC calls are HTTP/2 POSTs to /<service>/<method>: route them before the UI fallback.
        let grpc_path = format!(
            "/{}/{{*method}}",
            <IngestServer<ingest::IngestService> as NamedService>::NAME
        );
        let app = api::app(api::AppState { store: self.store }).route_service(&grpc_path, ingest);
        let served = axum::serve(self.listener, app).with_graceful_shutdown(shutdown).await;
        if let Some(m) = self.managed {
            m.shutdown().await;
        }
        served.context("HTTP server failed")
    }
}
