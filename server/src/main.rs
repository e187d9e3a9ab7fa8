//! `bimodal-server`: flags in, library call out.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::path::PathBuf;

use bimodal_server::storage::writer::WriterConfig;
use bimodal_server::storage::{migrations, queries, Dialect};
use bimodal_server::{Config, Server};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "bimodal-server",
    version,
    about = "bimodal fleet server: ingest, storage, API and web UI"
)]
struct Cli {
    /// More logging (-v info, -vv debug, -vvv trace).
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Address for gRPC ingest, the HTTP API and the web UI.
    #[arg(long, env = "BIMODAL_LISTEN", default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    /// HTTP URL of an existing ClickHouse; without it a local clickhouse-server is started.
    #[arg(long, env = "BIMODAL_CLICKHOUSE_URL")]
    clickhouse_url: Option<String>,
    /// ClickHouse database for bimodal's tables.
    #[arg(long, env = "BIMODAL_CLICKHOUSE_DATABASE", default_value = "bimodal")]
    clickhouse_database: String,
    /// ClickHouse user (the server's default user when absent).
    #[arg(long, env = "BIMODAL_CLICKHOUSE_USER")]
    clickhouse_user: Option<String>,
    /// ClickHouse password.
    #[arg(long, env = "BIMODAL_CLICKHOUSE_PASSWORD", hide_env_values = true)]
    clickhouse_password: Option<String>,
    /// A cluster in ClickHouse's `remote_servers`: tables are created ON CLUSTER, replicated on
    /// each shard (Replicated*, needs ZooKeeper) with Distributed tables over them.
    #[arg(long, env = "BIMODAL_CLICKHOUSE_CLUSTER")]
    clickhouse_cluster: Option<String>,
    /// Directory for the managed ClickHouse's data, config and logs.
    #[arg(long, env = "BIMODAL_DATA_DIR", default_value = "bimodal-data")]
    data_dir: PathBuf,
    /// Days of samples to keep (by TTL on ClickHouse 19.6+, else by dropping partitions hourly).
    #[arg(long, env = "BIMODAL_RETENTION_DAYS", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=3650))]
    retention_days: u32,
    /// Largest executable or debug file accepted from an upload, in bytes.
    #[arg(long, env = "BIMODAL_DEBUGINFO_MAX_BYTES", default_value_t = 2 << 30)]
    debuginfo_max_bytes: u64,
    /// Bytes of function tables kept in memory to name frames.
    #[arg(long, env = "BIMODAL_SYMBOL_CACHE_BYTES", default_value_t = 256 << 20)]
    symbol_cache_bytes: u64,
    /// Stacks, frames, processes and functions kept in memory, per kind.
    #[arg(long, env = "BIMODAL_CACHE_ENTRIES", default_value_t = 1 << 20)]
    cache_entries: usize,
    /// Write buffered batches once this many rows wait...
    #[arg(long, env = "BIMODAL_FLUSH_ROWS", default_value_t = 500_000)]
    flush_rows: usize,
    /// ...or once the oldest has waited this long.
    #[arg(long, env = "BIMODAL_FLUSH_INTERVAL", value_parser = humantime::parse_duration, default_value = "2s")]
    flush_interval: std::time::Duration,
    /// Most rows buffered for writing; beyond it agents are told to retry later.
    #[arg(long, env = "BIMODAL_MAX_BUFFERED_ROWS", default_value_t = 2_000_000)]
    max_buffered_rows: usize,
    /// How long a batch, decoded and turned into rows, waits for room among them before its
    /// agent is told to retry (and the batch must be decoded again when it comes back).
    #[arg(long, env = "BIMODAL_WAIT_FOR_ROOM", value_parser = humantime::parse_duration, default_value = "60s")]
    wait_for_room: std::time::Duration,
    /// Alert rules (YAML; `bimodal rules check FILE` checks one): this server then evaluates
    /// them (one server at a time does, whatever the number of servers) and serves
    /// /api/v1/alerts.
    #[arg(long, env = "BIMODAL_RULES")]
    rules: Option<PathBuf>,
    /// Alertmanager to send alerts to, by its base URL (http://host:9093); repeat or separate
    /// by commas for several.
    #[arg(long, env = "BIMODAL_ALERTMANAGER_URL", value_delimiter = ',', requires = "rules")]
    alertmanager_url: Vec<String>,
    /// Webhook to send alerts to in Alertmanager's webhook format; repeat or separate by commas.
    #[arg(long, env = "BIMODAL_WEBHOOK_URL", value_delimiter = ',', requires = "rules")]
    webhook_url: Vec<String>,
    /// Bearer tokens with their scopes (read: the API and /metrics; write: ingest and uploads of
    /// executables; symbols: uploads of separate debug files) and
    /// the nodes agents may write as, as SHA-256 digests (`bimodal-server token` makes entries);
    /// read again when it changes. Without it every request is allowed, on loopback only.
    #[arg(long, env = "BIMODAL_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Serve TLS (HTTPS and gRPC over TLS on the one port) with this certificate chain (PEM);
    /// read again when it changes.
    #[arg(long, env = "BIMODAL_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, env = "BIMODAL_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Agents must present a client certificate signed by this CA (PEM) whose DNS name (subject
    /// alternative name) is their node name: a node cannot write as another. Read again when it
    /// changes. Readers without a certificate still use tokens.
    #[arg(long, env = "BIMODAL_TLS_CLIENT_CA", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Agent streams served at once at most (one per agent); more are told to retry later.
    #[arg(long, env = "BIMODAL_MAX_STREAMS", default_value_t = 20_000)]
    max_streams: usize,
    /// Agent streams served at once from one client address at most; more are told to retry
    /// later. Default: a quarter of --max-streams, so that one address cannot take every
    /// agent's place. Behind a load balancer or a NAT, where many agents share an address,
    /// raise it.
    #[arg(long, env = "BIMODAL_MAX_STREAMS_PER_ADDRESS", value_parser = clap::value_parser!(u64).range(1..))]
    max_streams_per_address: Option<u64>,
    /// An agent stream that sends no batch for this long is closed (agents send one every
    /// interval, 10 s by default, and open another): a client that sends a Hello and nothing
    /// more does not hold a place for good.
    #[arg(long, env = "BIMODAL_STREAM_IDLE_TIMEOUT", default_value = "5m")]
    stream_idle_timeout: humantime::Duration,
    /// Connections served at once at most (agents, uploads, readers); one more is closed at once.
    /// Default: the process's open-file limit less 256 descriptors kept for ClickHouse and files.
    #[arg(long, env = "BIMODAL_MAX_CONNECTIONS", value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: Option<u64>,
    /// Connections from one client address served at once at most; one more is closed at once.
    /// Default: a quarter of --max-connections, so that one address cannot lock every agent and
    /// reader out. Behind a load balancer or a NAT, where many agents share an address, raise it.
    #[arg(long, env = "BIMODAL_MAX_CONNECTIONS_PER_ADDRESS", value_parser = clap::value_parser!(u64).range(1..))]
    max_connections_per_address: Option<u64>,
    /// A connection with no request under way for this long is closed (an HTTP/2 client that
    /// only answers pings does not hold its place for good; agents keep a stream open).
    #[arg(long, env = "BIMODAL_CONNECTION_IDLE_TIMEOUT", default_value = "60s")]
    connection_idle_timeout: humantime::Duration,
    /// Encoded bytes of batches held at once while they are decoded, checked and converted and
    /// their rows wait for room in the write buffer (their rows take several times this); more
    /// are told to retry later.
    #[arg(long, env = "BIMODAL_MAX_IN_FLIGHT_BYTES", default_value_t = bimodal_server::ingest::DEFAULT_MAX_IN_FLIGHT_BYTES, value_parser = clap::value_parser!(u64).range(1024..))]
    max_in_flight_bytes: u64,
    /// Batches a second each node may send on average (an agent sends one per interval, faster
    /// while it empties its spool); beyond it, and beyond --node-batch-burst at once, batches are
    /// answered "retry later".
    #[arg(long, env = "BIMODAL_NODE_BATCH_RATE", default_value_t = bimodal_server::rate::Rate::NODE_BATCHES.per_second, value_parser = positive_rate)]
    node_batch_rate: f64,
    /// Batches a node may send at once before its rate applies.
    #[arg(long, env = "BIMODAL_NODE_BATCH_BURST", default_value_t = bimodal_server::rate::Rate::NODE_BATCHES.burst, value_parser = clap::value_parser!(u32).range(1..))]
    node_batch_burst: u32,
    /// Ingest streams a second each node may open on average (an agent keeps one open); beyond
    /// it, and beyond --node-stream-burst at once, a stream is refused with RESOURCE_EXHAUSTED.
    #[arg(long, env = "BIMODAL_NODE_STREAM_RATE", default_value_t = bimodal_server::rate::Rate::NODE_STREAMS.per_second, value_parser = positive_rate)]
    node_stream_rate: f64,
    /// Ingest streams a node may open at once before its rate applies.
    #[arg(long, env = "BIMODAL_NODE_STREAM_BURST", default_value_t = bimodal_server::rate::Rate::NODE_STREAMS.burst, value_parser = clap::value_parser!(u32).range(1..))]
    node_stream_burst: u32,
    /// Node names new to the store a token (or, without tokens, a client address) may introduce a
    /// minute on average; beyond it, and beyond --new-node-burst at once, a new node's stream is
    /// refused with RESOURCE_EXHAUSTED and the wait (its agent spools and tries again).
    #[arg(long, env = "BIMODAL_NEW_NODE_RATE", default_value_t = bimodal_server::rate::Rate::NEW_NODES.per_second * 60.0, value_parser = positive_rate)]
    new_node_rate: f64,
    /// New node names a token (or address) may introduce at once before its rate applies.
    #[arg(long, env = "BIMODAL_NEW_NODE_BURST", default_value_t = bimodal_server::rate::Rate::NEW_NODES.burst, value_parser = clap::value_parser!(u32).range(1..))]
    new_node_burst: u32,
    /// Debug-info checks and uploads a second each client address may send on average; beyond
    /// it, and beyond --debuginfo-call-burst at once, they are refused with RESOURCE_EXHAUSTED
    /// (agents try the build id again in minutes).
    #[arg(long, env = "BIMODAL_DEBUGINFO_CALL_RATE", default_value_t = bimodal_server::rate::Rate::DEBUGINFO_CALLS.per_second, value_parser = positive_rate)]
    debuginfo_call_rate: f64,
    /// Debug-info checks and uploads a client address may send at once before its rate applies.
    #[arg(long, env = "BIMODAL_DEBUGINFO_CALL_BURST", default_value_t = bimodal_server::rate::Rate::DEBUGINFO_CALLS.burst, value_parser = clap::value_parser!(u32).range(1..))]
    debuginfo_call_burst: u32,
    /// API requests a second each reader may send on average (each token; each client address
    /// without --token-file); beyond it, and beyond --api-request-burst at once, requests are
    /// answered 429 with Retry-After. /healthz and the UI's files are not counted.
    #[arg(long, env = "BIMODAL_API_REQUEST_RATE", default_value_t = bimodal_server::rate::Rate::API_REQUESTS.per_second, value_parser = positive_rate)]
    api_request_rate: f64,
    /// Stacks of flame graphs and diffs built at once (each costs memory while it is built);
    /// requests beyond wait their turn for 30 s, then are answered 503 with Retry-After.
    #[arg(long, env = "BIMODAL_MAX_BUILDING_STACKS", default_value_t = bimodal_server::api::StackBudget::DEFAULT_STACKS, value_parser = clap::value_parser!(u32).range(1..))]
    max_building_stacks: u32,
    /// API requests a reader may send at once before its rate applies.
    #[arg(long, env = "BIMODAL_API_REQUEST_BURST", default_value_t = bimodal_server::rate::Rate::API_REQUESTS.burst, value_parser = clap::value_parser!(u32).range(1..))]
    api_request_burst: u32,
    /// Listen on an address other than loopback without --token-file.
    #[arg(long, env = "BIMODAL_ALLOW_UNAUTHENTICATED")]
    allow_unauthenticated: bool,
    /// The server's URL as users open it, for the links alerts carry (default http://LISTEN).
    #[arg(long, env = "BIMODAL_EXTERNAL_URL")]
    external_url: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Print the schema and every query for a ClickHouse version, `;`-separated, to check them
    /// against that version (tests/modern_sql.py runs them in chdb).
    Sql {
        /// The ClickHouse version to render for, e.g. 18.16.1 or 26.9.
        #[arg(long, default_value = "26.9")]
        clickhouse_version: String,
        /// Print only the reads of one scope (flame graph, per-node totals, per-node functions)
        /// for this event, as the API would send them: for timing them elsewhere.
        #[arg(long)]
        event: Option<String>,
        /// The scope's source.
        #[arg(long, requires = "event")]
        source: Option<String>,
        /// The scope's selector.
        #[arg(long, requires = "event", default_value = "{}")]
        selector: String,
        /// The scope's range, Unix seconds.
        #[arg(long, requires = "event")]
        from: Option<u32>,
        #[arg(long, requires = "event")]
        to: Option<u32>,
        /// How the reads sum their nodes (the server picks it from the nodes a selector
        /// matches): fleet, every-node, matching (--nodes) or fleet-minus (all but --nodes).
        #[arg(long, requires = "event", default_value = "every-node")]
        reach: String,
        /// The nodes of `--reach matching`, or those left out by `--reach fleet-minus`.
        #[arg(long, requires = "event", value_delimiter = ',')]
        nodes: Vec<String>,
    },
    /// Print a new random token and its entry for --token-file (which keeps only its digest).
    Token {
        /// The token's name, shown in logs.
        #[arg(long)]
        name: String,
        /// What it may do: read (the API), write (ingest, uploads of executables), symbols
        /// (uploads of separate debug files, which name frames in place of their executables).
        #[arg(long = "scope", value_delimiter = ',', required = true, value_parser = ["read", "write", "symbols"])]
        scopes: Vec<String>,
        /// For agents: the node names it may write as (a regular expression, anchored).
        #[arg(long)]
        nodes: Option<String>,
    },
    /// The debug-info store of a running server.
    Debuginfo {
        #[command(subcommand)]
        command: DebuginfoCommand,
    },
}

/// Prints `statements`, `;`-terminated; a reader that stops early (`| head`) is not an error.
fn print_statements(statements: impl IntoIterator<Item = String>) -> std::process::ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for statement in statements {
        if writeln!(out, "{statement};").is_err() {
            break;
        }
    }
    std::process::ExitCode::SUCCESS
}

#[derive(clap::Subcommand, Debug)]
enum DebuginfoCommand {
    /// Upload an executable with symbols or a separate debug file (`objcopy --only-keep-debug`,
    /// a -dbg package's file) so the server names frames of the binary with the same build id.
    Upload {
        /// The ELF file.
        file: PathBuf,
        #[command(flatten)]
        server: ServerConnection,
    },
    /// List the build ids whose stored executable agents' copies contradict: their names are
    /// withheld until resolved (needs the `symbols` scope).
    Disputes {
        #[command(flatten)]
        server: ServerConnection,
    },
    /// Resolve a disputed build id: keep its stored files (names are given again) or drop them
    /// (the next agent that runs it uploads its copy). Needs the `symbols` scope.
    #[command(group(clap::ArgGroup::new("resolution").required(true)))]
    Resolve {
        /// The build id, in hex.
        build_id: String,
        /// The stored files are right.
        #[arg(long, group = "resolution")]
        keep: bool,
        /// The stored files are wrong.
        #[arg(long, group = "resolution")]
        drop: bool,
        #[command(flatten)]
        server: ServerConnection,
    },
}

/// How `bimodal-server debuginfo` reaches a running server.
#[derive(clap::Args, Debug)]
struct ServerConnection {
    /// The server's gRPC address.
    #[arg(long, env = "BIMODAL_SERVER_URL", default_value = "http://127.0.0.1:7070")]
    server_url: String,
    /// A token with the `write` scope (and `symbols` for a debug file, disputes and
    /// resolutions), when the server has tokens.
    #[arg(long, env = "BIMODAL_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// PEM certificates of the CA that signed the server's certificate (https:// URLs).
    #[arg(long, env = "BIMODAL_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// A client certificate (PEM), for a server that asks for one (--tls-client-ca).
    #[arg(long, env = "BIMODAL_CLIENT_CERT", requires = "client_key")]
    client_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long, env = "BIMODAL_CLIENT_KEY", requires = "client_cert")]
    client_key: Option<PathBuf>,
}

impl ServerConnection {
    fn connection(&self) -> bimodal_server::debuginfo::service::Connection<'_> {
        bimodal_server::debuginfo::service::Connection {
            server_url: &self.server_url,
            ca_file: self.ca_file.as_deref(),
            identity: self
                .client_cert
                .clone()
                .zip(self.client_key.clone())
                .map(|(cert, key)| bimodal_proto::client::ClientIdentity { cert, key }),
            token: self.token.as_deref(),
        }
    }
}

fn positive_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r.is_finite() => Ok(r),
        _ => Err(format!("`{s}` is not a number a second above 0")),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Token { name, scopes, nodes }) = &cli.command {
        let scopes: Vec<_> = scopes
            .iter()
            .map(|s| match s.as_str() {
                "read" => bimodal_server::auth::Scope::Read,
                "symbols" => bimodal_server::auth::Scope::Symbols,
                _ => bimodal_server::auth::Scope::Write,
            })
            .collect();
        let (token, entry) = bimodal_server::auth::new_token(name, &scopes, nodes.as_deref());
        println!("# the token (give it to its holder; it is not kept):\n{token}\n# its entry under `tokens:` in the token file:\n{entry}");
        return std::process::ExitCode::SUCCESS;
    }
    if let Some(Command::Debuginfo { command }) = &cli.command {
        use bimodal_server::debuginfo::service as client;
        let done = match command {
            DebuginfoCommand::Upload { file, server } => client::upload_file(file, &server.connection()).await,
            DebuginfoCommand::Disputes { server } => client::list_disputes(&server.connection()).await,
            DebuginfoCommand::Resolve {
                build_id,
                keep,
                drop: _,
                server,
            } => client::resolve(&server.connection(), build_id, *keep).await,
        };
        return match done {
            Ok(said) => {
                eprintln!("bimodal-server: {said}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("bimodal-server: error: {e:#}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    if let Some(Command::Sql {
        clickhouse_version,
        event,
        source,
        selector,
        from,
        to,
        reach,
        nodes,
    }) = &cli.command
    {
        let dialect = Dialect::for_version(clickhouse_version, cli.retention_days)
            .on_cluster(cli.clickhouse_cluster.clone(), &cli.clickhouse_database);
        let client = clickhouse::Client::default().with_database(cli.clickhouse_database.clone());
        if let Some(event) = event {
            let scope = (|| {
                let event = bimodal_proto::v1::EventKind::from_name(event).ok_or(format!("unknown event `{event}`"))?;
                let selector = selector.parse().map_err(|e| format!("{e}"))?;
                let (from, to) = (from.ok_or("--from is required")?, to.ok_or("--to is required")?);
                let reach = match reach.as_str() {
                    "fleet" => bimodal_server::storage::Reach::Fleet,
                    "every-node" => bimodal_server::storage::Reach::EveryNode,
                    "matching" => bimodal_server::storage::Reach::Matching(nodes.clone()),
                    "fleet-minus" => bimodal_server::storage::Reach::FleetMinus(nodes.clone()),
                    other => {
                        return Err(format!(
                            "unknown --reach `{other}`: fleet, every-node, matching or fleet-minus"
                        ))
                    }
                };
                Ok::<_, String>((
                    queries::Scope {
                        event: event.name(),
                        source: source.clone(),
                        selector,
                        from,
                        to,
                    },
                    reach,
                ))
            })();
            return match scope {
                Ok((scope, reach)) => print_statements(queries::reads(&client, &scope, &reach)),
                Err(e) => {
                    eprintln!("bimodal-server: error: {e}");
                    std::process::ExitCode::FAILURE
                }
            };
        }
        return print_statements(
            migrations::all_statements(&dialect)
                .into_iter()
                .chain(queries::examples(&client)),
        );
    }
    let level = match cli.verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into()))
        .with_writer(std::io::stderr)
        .init();
    let alerts = match &cli.rules {
        None => None,
        Some(path) => match bimodal_server::alerts::rules::load(path) {
            Ok(rules) => Some(bimodal_server::alerts::AlertConfig {
                rules,
                alertmanagers: cli.alertmanager_url.clone(),
                webhooks: cli.webhook_url.clone(),
                external_url: cli
                    .external_url
                    .clone()
                    .unwrap_or_else(|| format!("http://{}", cli.listen)),
            }),
            Err(mistakes) => {
                eprintln!("{mistakes}");
                eprintln!("bimodal-server: error: the rule file has mistakes");
                return std::process::ExitCode::FAILURE;
            }
        },
    };
    let config = Config {
        alerts,
        token_file: cli.token_file,
        max_streams: cli.max_streams,
        max_streams_per_address: cli.max_streams_per_address.map_or_else(
            || bimodal_server::serve::Limits::per_address_default(cli.max_streams),
            |n| usize::try_from(n).unwrap_or(usize::MAX),
        ),
        stream_idle: cli.stream_idle_timeout.into(),
        // The soft limit up to the hard one whatever the bound: ClickHouse connections and
        // uploads need descriptors too.
        connections: {
            let max = cli
                .max_connections
                .inspect(|_| {
                    bimodal_server::serve::raise_open_file_limit();
                })
                .map_or_else(bimodal_server::serve::default_max_connections, |n| n as usize);
            bimodal_server::serve::Limits {
                max,
                per_address: cli.max_connections_per_address.map_or_else(
                    || bimodal_server::serve::Limits::per_address_default(max),
                    |n| n as usize,
                ),
                idle: cli.connection_idle_timeout.into(),
                evict_after: bimodal_server::serve::EVICT_AFTER,
            }
        },
        max_in_flight_bytes: cli.max_in_flight_bytes,
        node_batches: bimodal_server::rate::Rate {
            per_second: cli.node_batch_rate,
            burst: cli.node_batch_burst,
        },
        node_streams: bimodal_server::rate::Rate {
            per_second: cli.node_stream_rate,
            burst: cli.node_stream_burst,
        },
        new_nodes: bimodal_server::rate::Rate {
            per_second: cli.new_node_rate / 60.0,
            burst: cli.new_node_burst,
        },
        debuginfo_calls: bimodal_server::rate::Rate {
            per_second: cli.debuginfo_call_rate,
            burst: cli.debuginfo_call_burst,
        },
        max_building_stacks: cli.max_building_stacks,
        api_requests: bimodal_server::rate::Rate {
            per_second: cli.api_request_rate,
            burst: cli.api_request_burst,
        },
        tls: cli
            .tls_cert
            .zip(cli.tls_key)
            .map(|(cert, key)| bimodal_server::tls::TlsFiles {
                cert,
                key,
                client_ca: cli.tls_client_ca,
            }),
        allow_unauthenticated: cli.allow_unauthenticated,
        listen: cli.listen,
        clickhouse_url: cli.clickhouse_url,
        clickhouse_database: cli.clickhouse_database,
        clickhouse_user: cli.clickhouse_user,
        clickhouse_password: cli.clickhouse_password,
        clickhouse_cluster: cli.clickhouse_cluster,
        debuginfo_max_bytes: cli.debuginfo_max_bytes,
        symbol_cache_bytes: cli.symbol_cache_bytes,
        cache_entries: cli.cache_entries,
        data_dir: cli.data_dir,
        retention_days: cli.retention_days,
        writer: WriterConfig {
            flush_rows: cli.flush_rows.max(1),
            flush_interval: cli.flush_interval,
            max_buffered_rows: cli.max_buffered_rows.max(1),
            wait_for_room: cli.wait_for_room,
            ..WriterConfig::default()
        },
    };
    match run(config).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bimodal-server: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> anyhow::Result<()> {
    let server = Server::bind(&config).await?;
    let addr = server.local_addr()?;
    eprintln!("bimodal-server: listening on {addr}: UI http://{addr}/  gRPC ingest http://{addr}");
    server.serve(shutdown_signal()).await
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}
