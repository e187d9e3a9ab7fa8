//! `bimodal-agent`: flags in, library call out.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use bimodal_agent::node::facts;
use bimodal_agent::node::kubernetes::ApiConfig;
use bimodal_agent::node::placement::Placement;
use bimodal_agent::node::topology::Topology;
use bimodal_agent::record::{self, Format, RecordOptions};
use bimodal_agent::sample::bpf::{MapSizes, TestRefusals, UnwindMode};
use bimodal_agent::sample::events::{EventKind, Machine, Rates};
use bimodal_agent::sample::probe::{self, LiveProber};
use bimodal_agent::ship::{self, RunOptions, Symbolize};
use bimodal_proto::spool::SpoolOptions;
use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "bimodal-agent",
    version,
    about = "bimodal node agent: memory-system and CPU profiles with stacks, via eBPF"
)]
struct Cli {
    /// More logging (-v info, -vv debug, -vvv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Profile this machine for a while and write a file; no server needed.
    Record(RecordArgs),
    /// Sample continuously and stream to a bimodal server.
    Run(Box<RunArgs>),
    /// Show which source samples each event kind on this machine, and why others were rejected.
    Probe(ProbeArgs),
    /// Show where a process's memory lives, per mapping and NUMA node, and where its threads run.
    Placement(PlacementArgs),
    /// Send batches `run --output-dir` wrote to a server (safe to repeat: stored once).
    Import(ImportArgs),
}

/// How the agent reaches the server: its URL, the CA of its certificate, the token it presents
/// to a server that has tokens (`bimodal-server --token-file`).
#[derive(Args, Debug)]
struct ServerArgs {
    /// gRPC URL of the bimodal server (https:// for TLS).
    #[arg(long, env = "BIMODAL_SERVER_URL", default_value = "http://127.0.0.1:7070")]
    server_url: String,
    /// PEM certificates of the CA that signed the server's certificate (default for https://:
    /// the system's roots); read at every connection.
    #[arg(long, env = "BIMODAL_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// A file holding the token (read again at every connection: rotate it in place).
    #[arg(long, env = "BIMODAL_TOKEN_FILE", conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// The token itself (prefer --token-file: a flag shows in the process list).
    #[arg(long, env = "BIMODAL_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// This agent's client certificate (PEM), naming its node as a DNS name, for a server that
    /// asks for one (--tls-client-ca); read again at every connection.
    #[arg(long, env = "BIMODAL_CLIENT_CERT", requires = "client_key")]
    client_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long, env = "BIMODAL_CLIENT_KEY", requires = "client_cert")]
    client_key: Option<PathBuf>,
}

impl ServerArgs {
    fn address(&self) -> bimodal_proto::client::ServerAddress {
        use bimodal_proto::client::{ClientIdentity, ServerAddress, Token};
        ServerAddress::new(
            self.server_url.clone(),
            Token::from_flags(&self.token_file, &self.token),
        )
        .with_ca_file(self.ca_file.clone())
        .with_identity(ClientIdentity::from_flags(&self.client_cert, &self.client_key))
    }
}

#[derive(Args, Debug)]
struct ImportArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Directories `run --output-dir` wrote, one per node.
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
}

#[derive(Args, Debug)]
struct PlacementArgs {
    /// The process.
    #[arg(long)]
    pid: u32,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct ProbeArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Also load every BPF program alone and show the verifier's figures for each (instructions
    /// processed and states against its limits), or why it was refused.
    #[arg(long, env = "BIMODAL_PROBE_VERIFIER")]
    verifier: bool,
    #[command(flatten)]
    sampling: SamplingArgs,
}

/// Sampling knobs shared by `record` and `run`.
#[derive(Args, Debug)]
struct SamplingArgs {
    /// Only sample this process id.
    #[arg(long, env = "BIMODAL_PID")]
    pid: Option<u32>,
    /// CPU samples per second, per CPU.
    #[arg(long, env = "BIMODAL_CPU_FREQUENCY", default_value_t = 99)]
    cpu_frequency: u64,
    /// Page faults per page_fault sample.
    #[arg(long, env = "BIMODAL_PAGE_FAULT_PERIOD", default_value_t = 100)]
    page_fault_period: u64,
    /// Hardware events (cache misses, remote accesses) per sample.
    #[arg(long, env = "BIMODAL_HARDWARE_PERIOD", default_value_t = 10_000)]
    hardware_period: u64,
    /// Distinct (thread, event, stack) keys the kernel holds per drain interval; default: one
    /// per CPU sample of an interval (online CPUs × --cpu-frequency × interval), 16,384 to
    /// 262,144. Samples that do not fit are counted as lost (`sample_map_full`).
    #[arg(long, env = "BIMODAL_MAP_SAMPLES", value_parser = clap::value_parser!(u32).range(1..))]
    map_samples: Option<u32>,
    /// Distinct stacks the kernel holds at once; default: half the sample keys, 16,384 to 65,536.
    #[arg(long, env = "BIMODAL_MAP_STACKS", value_parser = clap::value_parser!(u32).range(1..))]
    map_stacks: Option<u32>,
    /// How user call chains are recovered: `auto` unwinds every process in the kernel from
    /// tables compiled from .eh_frame (frame pointers where no table covers the code).
    #[arg(long, env = "BIMODAL_UNWIND", value_enum, default_value_t = UnwindMode::Auto)]
    unwind: UnwindMode,
    /// Rows of unwind tables the kernel holds, for all images together (12 bytes each, kernel
    /// memory); images that do not fit walk frame pointers.
    #[arg(long, env = "BIMODAL_UNWIND_ROWS", default_value_t = bimodal_agent::sample::bpf::DEFAULT_UNWIND_ROWS, value_parser = clap::value_parser!(u32).range(1..=1 << 26))]
    unwind_rows: u32,
    /// Bytes of the kernel ring carrying stack copies to unwind (a power of two); default: half a
    /// second of copies from every CPU at --cpu-frequency, 1 to 64 MiB. Its pages count twice in
    /// the agent's RSS.
    #[arg(long, env = "BIMODAL_SNAPSHOT_RING_BYTES", value_parser = parse_ring_size)]
    snapshot_ring_bytes: Option<u32>,
    /// Directories of separate debug files, searched by build id (`DIR/.build-id/xx/rest.debug`)
    /// and through an image's .gnu_debuglink, in the sampled process's mount namespace and on the
    /// host; repeat the flag, or separate them with `:` in the variable.
    #[arg(long = "debug-dir", env = "BIMODAL_DEBUG_DIRS", value_delimiter = ':', default_values = bimodal_agent::host::debugfile::DEFAULT_DIRS)]
    debug_dirs: Vec<PathBuf>,
    /// Images (executables, libraries, and processes' views of them) kept parsed for naming and
    /// unwinding; past it the least recent are dropped, and parsed again when needed.
    #[arg(long, env = "BIMODAL_CACHED_IMAGES", default_value_t = bimodal_agent::symbolize::DEFAULT_CACHED_IMAGES, value_parser = parse_cached_images)]
    cached_images: usize,
    /// Tests only: make the kernel refuse these programs (`unwinder`, or event kinds), to see
    /// what the agent does without them. Never set it in production.
    #[arg(long, env = "BIMODAL_TEST_REFUSE", hide = true, default_value = "")]
    test_refuse: TestRefusals,
}

fn parse_cached_images(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        Ok(_) => Err("at least one image must be kept".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_ring_size(s: &str) -> Result<u32, String> {
    let n: u32 = s.parse().map_err(|e| format!("{e}"))?;
    if n.is_power_of_two() && n >= 64 << 10 {
        Ok(n)
    } else {
        Err(format!("{n} is not a power of two of at least 65536"))
    }
}

impl SamplingArgs {
    fn rates(&self) -> Rates {
        Rates {
            cpu_frequency_hz: self.cpu_frequency,
            page_fault_period: self.page_fault_period,
            hardware_period: self.hardware_period,
        }
    }

    /// The kernel maps for this machine, drained every `interval`, with the flags given.
    fn map_sizes(&self, interval: Duration) -> MapSizes {
        let cpus = bimodal_agent::sample::events::perf::online_cpus().map_or(1, |c| c.len());
        let machine = MapSizes::for_machine(cpus, self.cpu_frequency, interval);
        MapSizes {
            samples: self.map_samples.unwrap_or(machine.samples),
            stacks: self.map_stacks.unwrap_or(machine.stacks),
            snapshot_ring: self.snapshot_ring_bytes.unwrap_or(machine.snapshot_ring),
            unwind_rows: self.unwind_rows,
            processes: machine.processes,
        }
    }
}

#[derive(Args, Debug)]
struct RecordArgs {
    /// Event kind to sample.
    #[arg(long, env = "BIMODAL_RECORD_EVENT", value_parser = parse_event, default_value = "cpu")]
    event: EventKind,
    /// How long to sample, e.g. 5s, 2m: at most, with --until-samples.
    #[arg(long, env = "BIMODAL_RECORD_DURATION", value_parser = humantime::parse_duration, default_value = "5s")]
    duration: Duration,
    /// Stop as soon as this many samples are recorded (checked at every drain).
    #[arg(long, env = "BIMODAL_UNTIL_SAMPLES", value_parser = clap::value_parser!(u64).range(1..))]
    until_samples: Option<u64>,
    #[arg(long, env = "BIMODAL_RECORD_FORMAT", value_enum, default_value_t = Format::Folded)]
    format: Format,
    /// File to write.
    #[arg(long, short, env = "BIMODAL_RECORD_OUTPUT")]
    output: PathBuf,
    /// Profile the data the samples touched: each stack is topped by its data object
    /// (`[bss] table`, `[heap]`). Needs an event source with data addresses (page_fault here).
    #[arg(long, env = "BIMODAL_DATA_OBJECTS")]
    data_objects: bool,
    #[command(flatten)]
    sampling: SamplingArgs,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// This node's name (in Kubernetes: the node name from the downward API); default: hostname.
    #[arg(long, env = "BIMODAL_NODE_NAME")]
    node_name: Option<String>,
    /// A label of this node, key=value; repeatable. From the environment: comma-separated. A
    /// label with an empty value is left out (as Prometheus reads it: no such label), so that a
    /// DaemonSet can pass labels the downward API may find empty.
    #[arg(long = "label", env = "BIMODAL_LABELS", value_delimiter = ',', value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// Event kinds to sample, repeatable; `all`: every kind this machine offers (`bimodal-agent
    /// probe` lists them, and why the others are not).
    #[arg(long = "event", env = "BIMODAL_EVENTS", value_delimiter = ',', value_parser = parse_events, default_values = ["all"])]
    events: Vec<Events>,
    /// How often samples are drained and shipped.
    #[arg(long, env = "BIMODAL_INTERVAL", value_parser = humantime::parse_duration, default_value = "10s")]
    interval: Duration,
    /// Keep unacknowledged batches as files in this directory (one subdirectory per node name),
    /// so that they outlive the agent: after a crash, an upgrade or a node reboot the next agent
    /// sends them first. Without it they are kept in memory and lost when the agent stops.
    #[arg(long, env = "BIMODAL_SPOOL_DIR")]
    spool_dir: Option<PathBuf>,
    /// Bytes of unacknowledged batches kept while the server is unreachable; past it the oldest
    /// are dropped and counted (bimodal_agent_batches_dropped{reason="spool_full"}).
    #[arg(long, env = "BIMODAL_SPOOL_BYTES", default_value_t = 256 << 20, value_parser = clap::value_parser!(u64).range(1..))]
    spool_bytes: u64,
    /// Read the memory placement (numa_maps) of the busiest processes every N intervals; 0: never.
    #[arg(long, env = "BIMODAL_PLACEMENT_EVERY", default_value_t = 6)]
    placement_every: u32,
    /// How many processes' placement is read each time.
    #[arg(long, env = "BIMODAL_PLACEMENT_PROCESSES", default_value_t = 5)]
    placement_processes: usize,
    /// A function whose calls are this node's units of work, BINARY:SYMBOL (e.g. a request
    /// handler): the server then compares nodes by work per CPU-second. Counted in the
    /// sampled process only when --pid is given.
    #[arg(long, env = "BIMODAL_WORK_UPROBE")]
    work_uprobe: Option<bimodal_agent::sample::bpf::WorkUprobe>,
    /// Stop after this long (e.g. 30s), sending what is left, and say what was sampled: for
    /// trials and benchmarks. Default: run until SIGTERM or SIGINT.
    #[arg(long, env = "BIMODAL_DURATION", value_parser = humantime::parse_duration)]
    duration: Option<std::time::Duration>,
    /// Write batches as files in this directory instead of sending them (a node that cannot
    /// reach the server); `bimodal-agent import DIR` sends them later. Frames are named here.
    #[arg(long, env = "BIMODAL_OUTPUT_DIR")]
    output_dir: Option<PathBuf>,
    /// Serve the agent's own metrics (samples and losses per event, drain time, spool depth,
    /// its CPU and memory) for Prometheus on GET /metrics at this address, e.g. 0.0.0.0:9464.
    #[arg(long, env = "BIMODAL_METRICS_LISTEN")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Or a counter on a local Prometheus endpoint whose increase is this node's units of work,
    /// URL#NAME (e.g. http://127.0.0.1:9100/metrics#http_requests_total, summed over series).
    #[arg(long, env = "BIMODAL_WORK_METRIC", conflicts_with = "work_uprobe")]
    work_metric: Option<bimodal_agent::node::work::WorkMetric>,
    /// Where user frames are named: `server` sends (build id, offset) and uploads each image
    /// with symbols once; `local` names them here.
    #[arg(long, env = "BIMODAL_SYMBOLIZE", value_enum, default_value_t = Symbolize::Server)]
    symbolize: Symbolize,
    /// Largest image uploaded for the server to symbolize from, in bytes.
    #[arg(long, env = "BIMODAL_UPLOAD_MAX_BYTES", default_value_t = 512 << 20)]
    upload_max_bytes: u64,
    #[command(flatten)]
    kubernetes: KubernetesArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
}

/// Where pod names come from; without either flag samples carry pod UIDs only. Pods are listed
/// for this agent's node (`--node-name`).
#[derive(Args, Debug)]
struct KubernetesArgs {
    /// Name the pods of sampled processes (namespace, pod, container) through the in-cluster
    /// Kubernetes API, as this pod's service account (which needs RBAC to list pods).
    #[arg(long, env = "BIMODAL_KUBERNETES", value_parser = clap::builder::BoolishValueParser::new())]
    kubernetes: bool,
    /// Name pods through the Kubernetes API server at this URL instead (e.g. `kubectl proxy`'s
    /// `http://127.0.0.1:8001`).
    #[arg(long, env = "BIMODAL_KUBERNETES_API_URL", conflicts_with = "kubernetes")]
    kubernetes_api_url: Option<String>,
    /// File holding the bearer token sent to `--kubernetes-api-url`.
    #[arg(long, env = "BIMODAL_KUBERNETES_TOKEN_FILE", requires = "kubernetes_api_url")]
    kubernetes_token_file: Option<PathBuf>,
    /// PEM CA bundle that signs `--kubernetes-api-url`'s certificate; default: the public web roots.
    #[arg(long, env = "BIMODAL_KUBERNETES_CA_FILE", requires = "kubernetes_api_url")]
    kubernetes_ca_file: Option<PathBuf>,
}

impl KubernetesArgs {
    /// The API server configuration for listing `node`'s pods, or `None` when none is asked for.
    fn config(&self, node: &str) -> anyhow::Result<Option<ApiConfig>> {
        if self.kubernetes {
            return ApiConfig::in_cluster(node)
                .map(Some)
                .context("--kubernetes: cannot use the in-cluster Kubernetes API");
        }
        let Some(url) = &self.kubernetes_api_url else {
            return Ok(None);
        };
        ApiConfig::from_url(
            url.as_str(),
            self.kubernetes_token_file.as_deref(),
            self.kubernetes_ca_file.as_deref(),
            node,
        )
        .map(Some)
        .context("--kubernetes-api-url: cannot use the Kubernetes API server")
    }
}

/// A `--event` of `run`: one kind, or every kind the machine offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Events {
    All,
    Kind(EventKind),
}

fn parse_events(s: &str) -> Result<Events, String> {
    if s == "all" {
        return Ok(Events::All);
    }
    parse_event(s).map(Events::Kind).map_err(|e| format!("{e}, or all"))
}

fn parse_event(s: &str) -> Result<EventKind, String> {
    EventKind::from_name(s)
        .filter(|k| *k != EventKind::Unspecified)
        .ok_or_else(|| {
            let names: Vec<_> = EventKind::ALL.iter().map(|k| k.name()).collect();
            format!("unknown event `{s}`; expected one of: {}", names.join(", "))
        })
}

/// Threads of the async runtime: it streams batches, uploads images and answers `/metrics`, while
/// sampling, unwinding and naming run on threads of their own. A fixed number, not one per CPU:
/// the agent's cost must not grow with the node's CPUs.
const RUNTIME_WORKERS: usize = 2;

fn async_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(RUNTIME_WORKERS)
        .enable_all()
        .build()
        .context("failed to start the async runtime")
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.trim().to_owned())),
        _ => Err(format!("label `{s}` is not key=value")),
    }
}

fn main() -> std::process::ExitCode {
    bimodal_agent::host::memory::set_up_allocator();
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    // Colours only on a terminal: a DaemonSet's log goes to a file, where escapes are noise.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bimodal-agent: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Record(a) => {
            let opts = RecordOptions {
                event: a.event,
                duration: a.duration,
                until_samples: a.until_samples,
                pid: a.sampling.pid,
                format: a.format,
                output: a.output,
                rates: a.sampling.rates(),
                map_sizes: a.sampling.map_sizes(bimodal_agent::record::DRAIN_INTERVAL),
                unwind: a.sampling.unwind,
                data_objects: a.data_objects,
                debug_dirs: a.sampling.debug_dirs,
                cached_images: a.sampling.cached_images,
                test_refusals: a.sampling.test_refuse,
            };
            let summary = record::record(&opts)?;
            eprintln!(
                "bimodal-agent: wrote {} ({} samples of {}, {} lost; {} unwound from .eh_frame ({} in the kernel), {} of them cut short; {} bytes of batches; unwind tables of {} images in {} rows, {} refused)",
                opts.output.display(),
                summary.samples,
                opts.event.name(),
                summary.dropped,
                summary.unwound,
                summary.unwound_in_kernel,
                summary.unwound_truncated,
                summary.wire_bytes,
                summary.tables.images_loaded,
                summary.tables.rows,
                summary.tables.images_refused
            );
            if let Some((method, why)) = &summary.reduced_unwinding {
                eprintln!("bimodal-agent: stacks walked by {method}, less than asked for: {why}");
            }
            Ok(())
        }
        Command::Probe(a) => {
            let prober = LiveProber::new(a.sampling.test_refuse);
            let mut report = probe::probe(&Machine::read(), &a.sampling.rates(), a.sampling.unwind, &prober);
            if a.verifier {
                report.programs = probe::verifier(&prober);
            }
            if a.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.to_text());
            }
            Ok(())
        }
        Command::Import(a) => {
            let runtime = async_runtime()?;
            for dir in &a.dirs {
                let sent = runtime.block_on(bimodal_proto::stream::import(dir, &a.server.address()))?;
                eprintln!(
                    "bimodal-agent: {}: {sent} batches acknowledged by {}",
                    dir.display(),
                    a.server.server_url
                );
            }
            Ok(())
        }
        Command::Placement(a) => {
            let root = std::path::Path::new("/");
            let topology = Topology::read_from(root)?;
            let p = Placement::read(root, a.pid, &|cpu| topology.node_of_cpu(cpu))?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&facts::placement_json(&p, root))?);
            } else {
                for m in p.mappings.iter().filter(|m| m.resident_pages() > 0) {
                    println!("{}", m.describe());
                }
                println!("threads ran on nodes: {:?}", p.thread_nodes);
                for f in p.remote_mappings() {
                    println!("finding: {f}");
                }
            }
            Ok(())
        }
        Command::Run(a) => {
            let node = match a.node_name {
                Some(n) => n,
                None => hostname().context("no --node-name given and the hostname is unreadable")?,
            };
            let kubernetes = a.kubernetes.config(&node)?;
            let opts = RunOptions {
                server: a.server.address(),
                node,
                labels: a
                    .labels
                    .into_iter()
                    .filter(|(_, v)| !v.is_empty())
                    .collect::<BTreeMap<_, _>>(),
                // Empty: every kind the machine offers.
                events: if a.events.contains(&Events::All) {
                    Vec::new()
                } else {
                    a.events
                        .iter()
                        .filter_map(|e| match e {
                            Events::Kind(k) => Some(*k),
                            Events::All => None,
                        })
                        .collect()
                },
                pid: a.sampling.pid,
                interval: a.interval,
                rates: a.sampling.rates(),
                map_sizes: a.sampling.map_sizes(a.interval),
                unwind: a.sampling.unwind,
                symbolize: a.symbolize,
                upload_max_bytes: a.upload_max_bytes,
                debug_dirs: a.sampling.debug_dirs,
                cached_images: a.sampling.cached_images,
                test_refusals: a.sampling.test_refuse,
                spool: SpoolOptions {
                    dir: a.spool_dir,
                    max_bytes: a.spool_bytes,
                },
                placement_every: a.placement_every,
                placement_processes: a.placement_processes,
                kubernetes,
                work_uprobe: a.work_uprobe,
                work_metric: a.work_metric,
                output_dir: a.output_dir,
                metrics_listen: a.metrics_listen,
            };
            let runtime = async_runtime()?;
            let duration = a.duration;
            let started = std::time::Instant::now();
            let summary = runtime.block_on(async {
                let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
                tokio::spawn(async move {
                    match duration {
                        Some(duration) => {
                            tokio::select! {
                                () = shutdown_signal() => {},
                                () = tokio::time::sleep(duration) => {},
                            }
                        }
                        None => shutdown_signal().await,
                    }
                    let _ = stop_tx.send(true);
                });
                ship::run(opts, stop_rx).await
            })?;
            eprintln!(
                "bimodal-agent: ran {:.0?}: {} batches ({} samples of {}, {} lost), {} batches dropped",
                started.elapsed(),
                summary.batches,
                summary.samples,
                summary.events.join(","),
                summary.lost,
                summary.dropped_batches
            );
            Ok(())
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}

fn hostname() -> anyhow::Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/kernel/hostname")?.trim().to_owned())
}
