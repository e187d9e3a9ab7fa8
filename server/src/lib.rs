//! The bimodal fleet server: agents stream batches over gRPC (`ingest`), they are buffered and
//! written to ClickHouse (`storage`), and the HTTP API and web UI read them back (`api`). gRPC
//! and HTTP share one port. Servers keep no state of their own: several can serve one
//! ClickHouse (or cluster) and answer the same.

pub mod alerts;
pub mod analysis;
pub mod api;
pub mod auth;
pub mod clock;
pub mod debuginfo;
pub mod ingest;
pub mod metrics;
pub mod rate;
pub mod selector;
pub mod serve;
pub mod storage;
pub mod tls;
pub mod validate;
pub mod window;
pub mod yaml;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use bimodal_proto::v1::debuginfo_server::DebuginfoServer;
use tonic::server::NamedService;

use crate::debuginfo::{DebuginfoService, Names};
use crate::storage::managed::ManagedClickHouse;
use crate::storage::writer::{Writer, WriterConfig};
use crate::storage::{Store, StoreConfig};

/// Server settings, from flags or the environment.
#[derive(Clone, Debug)]
pub struct Config {
    /// Address for gRPC ingest, the HTTP API and the UI.
    pub listen: SocketAddr,
    /// An existing ClickHouse (HTTP interface); `None` starts a managed one under `data_dir`.
    pub clickhouse_url: Option<String>,
    pub clickhouse_database: String,
    pub clickhouse_user: Option<String>,
    pub clickhouse_password: Option<String>,
    /// Create tables on this ClickHouse cluster (replicated and distributed).
    pub clickhouse_cluster: Option<String>,
    /// Where the managed ClickHouse keeps its files, and uploads wait while they arrive.
    pub data_dir: PathBuf,
    /// Days of samples kept.
    pub retention_days: u32,
    /// Largest debug-info upload accepted, in bytes.
    pub debuginfo_max_bytes: u64,
    /// Bytes of function tables kept in memory for naming frames.
    pub symbol_cache_bytes: u64,
    /// Stacks, frames, processes and functions kept in memory, per kind.
    pub cache_entries: usize,
    /// How batches are buffered and written.
    pub writer: WriterConfig,
    /// Alert rules and where alerts go; `None`: no alerting.
    pub alerts: Option<alerts::AlertConfig>,
    /// Bearer tokens and their scopes (`auth`); `None`: every request allowed.
    pub token_file: Option<PathBuf>,
    /// Listen on a non-loopback address without tokens.
    pub allow_unauthenticated: bool,
    /// Serve TLS with this certificate and key; `None`: plain text.
    pub tls: Option<tls::TlsFiles>,
    /// Agent streams served at once at most, and from one client address at most; more are
    /// told to retry later.
    pub max_streams: usize,
    pub max_streams_per_address: usize,
    /// How long an agent stream may go without a batch before it is closed.
    pub stream_idle: std::time::Duration,
    /// Connections served at once, overall ([`serve::default_max_connections`] from the
    /// descriptor limit) and per client address, at most (more are closed), and how long one
    /// may stay open with no request under way.
    pub connections: serve::Limits,
    /// Encoded bytes of batches held at once between admission and the write buffer
    /// ([`ingest::DEFAULT_MAX_IN_FLIGHT_BYTES`]); more are told to retry later.
    pub max_in_flight_bytes: u64,
    /// How fast each node may send batches; faster ones are told to retry later.
    pub node_batches: rate::Rate,
    /// How fast each node may open ingest streams.
    pub node_streams: rate::Rate,
    /// How fast a token (or, without tokens, a client address) may introduce node names new to
    /// the store.
    pub new_nodes: rate::Rate,
    /// How fast each client address may check and upload debug info.
    pub debuginfo_calls: rate::Rate,
    /// How fast each reader (token, or address without tokens) may send API requests.
    pub api_requests: rate::Rate,
    /// Stacks of flame graphs built at once ([`api::StackBudget`]).
    pub max_building_stacks: u32,
}

/// A bound, running server (before it serves).
#[derive(Debug)]
pub struct Server {
    listener: tokio::net::TcpListener,
    store: Arc<Store>,
    writer: Writer,
    names: Arc<Names>,
    debuginfo: DebuginfoService,
    managed: Option<ManagedClickHouse>,
    alerts: Option<alerts::AlertConfig>,
    auth: auth::Auth,
    tls: Option<tls::Acceptor>,
    max_streams: usize,
    max_streams_per_address: usize,
    stream_idle: std::time::Duration,
    connections: serve::Limits,
    max_in_flight_bytes: u64,
    node_batches: rate::Rate,
    node_streams: rate::Rate,
    new_nodes: rate::Rate,
    api_requests: rate::Rate,
    max_building_stacks: u32,
}

impl Server {
    /// Starts storage (managed or given), applies migrations and binds the port.
    pub async fn bind(config: &Config) -> anyhow::Result<Server> {
        let auth = match &config.token_file {
            Some(path) => {
                auth::Auth::from_file(path).map_err(|m| anyhow::anyhow!("{m}\nthe token file has mistakes"))?
            }
            None if !config.listen.ip().is_loopback() && !config.allow_unauthenticated => anyhow::bail!(
                "refusing to listen on {} without --token-file: anyone who reaches the port could write and read \
                 profiles (bimodal-server token prints a token and its entry); --allow-unauthenticated listens anyway",
                config.listen
            ),
            None => auth::Auth::open(),
        };
        let tls = match &config.tls {
            Some(files) => Some(tls::acceptor(files).map_err(|e| anyhow::anyhow!("cannot serve TLS: {e}"))?),
            None => None,
        };
        let auth = auth.with_client_certificates(tls.as_ref().and_then(tls::Acceptor::client_trust));
        let (managed, url) = match &config.clickhouse_url {
            Some(url) => (None, url.clone()),
            None => {
                let dir = config.data_dir.join("clickhouse");
                let m = ManagedClickHouse::start(&dir).await?;
                let url = m.url.clone();
                (Some(m), url)
            }
        };
        let store = Store::open(&StoreConfig {
            url: url.clone(),
            database: config.clickhouse_database.clone(),
            user: config.clickhouse_user.clone(),
            password: config.clickhouse_password.clone(),
            retention_days: config.retention_days,
            cluster: config.clickhouse_cluster.clone(),
            cache_entries: config.cache_entries,
        })
        .await
        .with_context(|| format!("failed to open ClickHouse storage at {url}"))?;
        let store = Arc::new(store);
        let writer = Writer::start(store.clone(), config.writer.clone());
        let names = Arc::new(Names::new(store.clone(), config.symbol_cache_bytes));
        let incoming = config.data_dir.join("incoming");
        let debuginfo = DebuginfoService::new(
            store.clone(),
            names.clone(),
            incoming.clone(),
            config.debuginfo_max_bytes,
            auth.clone(),
        )
        .map(|d| d.with_call_rate(config.debuginfo_calls))
        .with_context(|| format!("failed to create {}", incoming.display()))?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("failed to listen on {}", config.listen))?;
        storage::retention::spawn(store.clone());
        // A database upgraded from schema v1 has its old rows copied in while the server runs.
        let (copy_store, copy_writer) = (store.clone(), writer.clone());
        tokio::spawn(async move {
            let build =
                |sender: &ingest::rows::Sender, batch: &bimodal_proto::v1::Batch, known: &dyn ingest::rows::Known| {
                    ingest::rows::build(sender, batch, &ingest::rows::NoNames, known)
                };
            if let Err(e) = storage::migrate_v1::copy(copy_store, copy_writer, &build).await {
                tracing::error!(error = %e, "copying schema v1's rows failed; it is tried again at the next start");
            }
        });
        Ok(Server {
            listener,
            store,
            writer,
            names,
            debuginfo,
            managed,
            alerts: config.alerts.clone(),
            auth,
            tls,
            max_streams: config.max_streams.max(1),
            max_streams_per_address: config.max_streams_per_address.max(1),
            stream_idle: config.stream_idle,
            connections: config.connections,
            max_in_flight_bytes: config.max_in_flight_bytes,
            node_batches: config.node_batches,
            node_streams: config.node_streams,
            new_nodes: config.new_nodes,
            api_requests: config.api_requests,
            max_building_stacks: config.max_building_stacks,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then stops the managed ClickHouse.
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let ingest = ingest::encoded::EncodedIngestServer::new(
            ingest::IngestService::new(
                self.writer.clone(),
                self.names.clone(),
                self.store.clone(),
                self.auth.clone(),
                ingest::StreamBounds {
                    max_streams: self.max_streams,
                    max_streams_per_address: self.max_streams_per_address,
                    max_in_flight_bytes: self.max_in_flight_bytes,
                    node_batches: self.node_batches,
                    node_streams: self.node_streams,
                    new_nodes: self.new_nodes,
                    idle: self.stream_idle,
                },
            ),
            MAX_MESSAGE_BYTES,
        );
        let debuginfo = DebuginfoServer::new(self.debuginfo).max_decoding_message_size(8 << 20);
        // gRPC calls are HTTP/2 POSTs to /<service>/<method>: route them before the UI fallback.
        let path = |name: &str| format!("/{name}/{{*method}}");
        let bands_null: Arc<std::sync::Mutex<analysis::bands::NullCache>> = Default::default();
        let alerting = self.alerts.is_some();
        let evaluation = self
            .alerts
            .map(|config| alerts::spawn(self.store.clone(), bands_null.clone(), config));
        let app = api::app(api::AppState {
            store: self.store,
            names: self.names,
            bands_null,
            alerting,
            auth: self.auth,
            requests: Arc::new(rate::Buckets::new(self.api_requests)),
            building: Arc::new(api::StackBudget::new(self.max_building_stacks)),
        })
        .route_service(
            &path(<ingest::encoded::EncodedIngestServer as NamedService>::NAME),
            ingest,
        )
        .route_service(
            &path(<DebuginfoServer<debuginfo::DebuginfoService> as NamedService>::NAME),
            debuginfo,
        );
        let incoming = match self.tls {
            Some(acceptor) => serve::Incoming::Tls(serve::TlsListener::new(self.listener, acceptor)),
            None => serve::Incoming::Plain(self.listener),
        };
        serve::serve(incoming, app, self.connections, shutdown).await;
        if let Some(evaluation) = evaluation {
            evaluation.stop().await;
        }
        if let Some(m) = self.managed {
            m.shutdown().await;
        }
        Ok(())
    }
}

/// Largest ingest message the server decodes; agents never send larger ones.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;
