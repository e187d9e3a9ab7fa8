//! The bimodal fleet server: agents stream batches over gRPC (`ingest`), they are stored in
//! ClickHouse (`storage`), and the HTTP API and web UI read them back (`api`). gRPC and HTTP
//! share one port.

pub mod api;
pub mod debuginfo;
pub mod ingest;
pub mod storage;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use bimodal_proto::v1::debuginfo_server::DebuginfoServer;
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
    /// Where uploaded executables and debug files are kept, by build id.
    pub debuginfo_dir: PathBuf,
    /// Largest debug-info upload accepted, in bytes.
    pub debuginfo_max_bytes: u64,
}

/// A bound, running server (before it serves).
#[derive(Debug)]
pub struct Server {
    listener: tokio::net::TcpListener,
    store: Arc<Store>,
    symbolizer: Arc<debuginfo::Symbolizer>,
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
        let debuginfo = debuginfo::DebuginfoStore::open(&config.debuginfo_dir, config.debuginfo_max_bytes)
            .with_context(|| format!("failed to open the debug-info store {}", config.debuginfo_dir.display()))?;
        let symbolizer = Arc::new(debuginfo::Symbolizer::new(Arc::new(debuginfo)));
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("failed to listen on {}", config.listen))?;
        Ok(Server {
            listener,
            store: Arc::new(store),
            symbolizer,
            managed,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then stops the managed ClickHouse.
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let ingest = IngestServer::new(ingest::IngestService::new(self.store.clone(), self.symbolizer.clone()))
            .max_decoding_message_size(64 << 20);
        let debuginfo = DebuginfoServer::new(debuginfo::DebuginfoService::new(self.symbolizer.clone()))
            .max_decoding_message_size(8 << 20);
        // gRPC calls are HTTP/2 POSTs to /<service>/<method>: route them before the UI fallback.
        let path = |name: &str| format!("/{name}/{{*method}}");
        let app = api::app(api::AppState {
            store: self.store,
            symbolizer: self.symbolizer,
        })
        .route_service(
            &path(<IngestServer<ingest::IngestService> as NamedService>::NAME),
            ingest,
        )
        .route_service(
            &path(<DebuginfoServer<debuginfo::DebuginfoService> as NamedService>::NAME),
            debuginfo,
        );
        let served = axum::serve(self.listener, app).with_graceful_shutdown(shutdown).await;
        if let Some(m) = self.managed {
            m.shutdown().await;
        }
        served.context("HTTP server failed")
    }
}
