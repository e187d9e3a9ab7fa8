//! `bimodal-loadgen`: plays a fleet of agents against a bimodal server over real gRPC, to
//! measure what ingest and queries cost at fleet scale before a fleet pays for it.
//!
//! Each simulated node is one `bimodal.v1.Ingest/Stream` stream driven like the agent drives
//! its own (Hello, batches kept until acked, retry and reconnect as agent/src/ship/mod.rs does).
//! Batches are drawn from real profiles (`bimodal-agent record` output, testdata/loadgen/): the
//! same stack shapes, depths, names and per-interval figures, with node-to-node differences.
//! Real time (`--duration`) sends one batch per node per interval; backfill (`--backfill`)
//! sends hours of history as fast as the server acks it. Progress goes to stderr, one JSON
//! report to stdout.

mod loadgen;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context};
use bimodal_proto::v1;
use clap::Parser;
use prost::Message;
use tokio::sync::watch;
use tokio::time::Instant;

use loadgen::batch::{self, Options};
use loadgen::fleet::Node;
use loadgen::profile::{self, Catalog, FrameNames};
use loadgen::stats::{rss_bytes, Snapshot, Stats};
use loadgen::stream::{self, Mode, Schedule, Shared};

#[derive(Parser, Debug)]
#[command(
    name = "bimodal-loadgen",
    version,
    about = "Plays N bimodal agents against a server over gRPC and reports ingest figures",
    group(clap::ArgGroup::new("mode").args(["duration", "backfill"]).multiple(false))
)]
struct Cli {
    /// gRPC URL of the server.
    #[arg(long, env = "BIMODAL_LOADGEN_SERVER_URL", default_value = "http://127.0.0.1:7070")]
    server_url: String,
    /// Simulated nodes, each an agent with its own stream.
    #[arg(long, env = "BIMODAL_LOADGEN_NODES", default_value_t = 100)]
    nodes: u32,
    /// Index of the first node (`loadgen-00000` is 0), so several loadgen processes can each play
    /// a slice of one fleet: `--first-node 5000 --nodes 5000` plays the second half of 10,000.
    #[arg(long, env = "BIMODAL_LOADGEN_FIRST_NODE", default_value_t = 0)]
    first_node: u32,
    /// The simulated agents' interval: one batch per node covers this long.
    #[arg(long, env = "BIMODAL_LOADGEN_INTERVAL", value_parser = humantime::parse_duration, default_value = "10s")]
    interval: Duration,
    /// Real time for this long: each node sends one batch per interval, the nodes' start times
    /// spread over the first interval.
    #[arg(long, env = "BIMODAL_LOADGEN_DURATION", value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// History: each node sends the batches covering [now - BACKFILL, now) with their past
    /// timestamps, oldest first, as fast as the server acks them.
    #[arg(long, env = "BIMODAL_LOADGEN_BACKFILL", value_parser = humantime::parse_duration)]
    backfill: Option<Duration>,
    /// Most unacked batches per stream in backfill (real time sends each batch when due, as the
    /// agent does).
    #[arg(long, env = "BIMODAL_LOADGEN_IN_FLIGHT", default_value_t = 4)]
    in_flight: usize,
    /// HTTP/2 connections the nodes' streams share [default: one per node, as real agents].
    /// hyper-based servers allow 200 concurrent streams per connection.
    #[arg(long, env = "BIMODAL_LOADGEN_CONNECTIONS")]
    connections: Option<usize>,
    /// A folded profile from `bimodal-agent record` (plain or gzip; testdata/loadgen/README.md
    /// says how to make one); repeatable, one event kind each [default: testdata/loadgen/
    /// cpu.folded.gz and page_fault.folded.gz].
    #[arg(long = "profile", env = "BIMODAL_LOADGEN_PROFILE", value_delimiter = ',')]
    profiles: Vec<PathBuf>,
    /// Seed of everything simulated: the same seed plays the same fleet (batch ids still differ
    /// between runs).
    #[arg(long, env = "BIMODAL_LOADGEN_SEED", default_value_t = 1)]
    seed: u64,
    /// `named`: frames carry function names (agents symbolizing locally); `build-id`: user frames
    /// carry build id, file offset and ELF address for the server to name (the agent's default).
    #[arg(long, env = "BIMODAL_LOADGEN_FRAMES", value_enum, default_value_t = FrameNames::Named)]
    frames: FrameNames,
    /// Multiplies every node's sample rate (the profiles come from a 2-CPU machine).
    #[arg(long, env = "BIMODAL_LOADGEN_SCALE", default_value_t = 1.0)]
    scale: f64,
    /// Sigma of the log-normal factor (mean 1) each node scales its rates by.
    #[arg(long, env = "BIMODAL_LOADGEN_NODE_SPREAD", default_value_t = 0.5)]
    node_spread: f64,
    /// Share of each node's samples on stacks only that node has.
    #[arg(long, env = "BIMODAL_LOADGEN_NODE_SPECIFIC", default_value_t = 0.05)]
    node_specific: f64,
    /// Share of a stack's samples taken on the stack's own thread rather than any thread of its
    /// comm (fitted to the recorded (thread, stack) rows per interval).
    #[arg(long, env = "BIMODAL_LOADGEN_THREAD_AFFINITY", default_value_t = 0.6)]
    thread_affinity: f64,
    /// Page-fault samples carry data samples (the data they touched), as from agents whose
    /// page-fault source has data addresses.
    #[arg(long, env = "BIMODAL_LOADGEN_DATA_SAMPLES", default_value_t = true, action = clap::ArgAction::Set)]
    data_samples: bool,
    /// MiB of batches sent and not yet acked across all nodes: bounds what waits in buffers for
    /// a slow server; nodes wait (and fall behind schedule) when it is used up.
    #[arg(long, env = "BIMODAL_LOADGEN_MAX_UNACKED_MIB", default_value_t = 1024)]
    max_unacked_mib: u32,
    /// How often progress is printed to stderr.
    #[arg(long, env = "BIMODAL_LOADGEN_PROGRESS", value_parser = humantime::parse_duration, default_value = "5s")]
    progress: Duration,
    /// Real time: how long after the last batch fell due acks are waited for.
    #[arg(long, env = "BIMODAL_LOADGEN_DRAIN_TIMEOUT", value_parser = humantime::parse_duration, default_value = "60s")]
    drain_timeout: Duration,
    /// Print per-interval figures of the batches the first nodes would send (and check that
    /// they decode), without a server.
    #[arg(long, env = "BIMODAL_LOADGEN_DESCRIBE", value_parser = clap::builder::BoolishValueParser::new())]
    describe: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bimodal-loadgen: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The profiles in testdata/loadgen, from the working directory or the source tree.
fn default_profiles() -> anyhow::Result<Vec<PathBuf>> {
    let dirs = [
        PathBuf::from("testdata/loadgen"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/loadgen"),
    ];
    for dir in dirs {
        let files = [dir.join("cpu.folded.gz"), dir.join("page_fault.folded.gz")];
        if files.iter().all(|f| f.exists()) {
            return Ok(files.to_vec());
        }
    }
    bail!("no testdata/loadgen profiles here or in the source tree: pass --profile")
}

/// 10,000 streams over their own connections need more descriptors than the usual soft limit.
fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed by reference.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if cli.nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    if cli.interval.is_zero() {
        bail!("--interval must be longer than zero");
    }
    let paths = if cli.profiles.is_empty() {
        default_profiles()?
    } else {
        cli.profiles.clone()
    };
    let catalog = profile::load(&paths, cli.frames).context("failed to load the profiles")?;
    eprintln!(
        "bimodal-loadgen: {} frames, {} stacks, {} modules, {} comms from {}",
        catalog.frames.len(),
        catalog.stacks.len(),
        catalog.modules.len(),
        catalog.comms.len(),
        catalog.describe()
    );
    let options = Options {
        interval: cli.interval,
        scale: cli.scale,
        node_specific: cli.node_specific,
        affinity: cli.thread_affinity.clamp(0.0, 1.0),
        data_samples: cli.data_samples,
    };
    if cli.describe {
        return describe(&cli, &catalog, &options);
    }
    let mode = match (cli.duration, cli.backfill) {
        (Some(d), None) => Mode::RealTime(d),
        (None, Some(d)) => Mode::Backfill(d),
        _ => bail!("say how long: --duration D (real time) or --backfill D (history)"),
    };
    raise_fd_limit();

    let connections = cli
        .connections
        .unwrap_or(cli.nodes as usize)
        .clamp(1, cli.nodes as usize);
    let per_connection = (cli.nodes as usize).div_ceil(connections);
    if per_connection > 200 {
        eprintln!(
            "bimodal-loadgen: warning: {per_connection} streams per connection; hyper-based servers allow 200 at once, the rest wait: use --connections {} or more",
            (cli.nodes as usize).div_ceil(200)
        );
    }
    let endpoint = tonic::transport::Endpoint::from_shared(cli.server_url.clone())
        .with_context(|| format!("`{}` is not a URL", cli.server_url))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10));
    let channels = (0..connections).map(|_| endpoint.connect_lazy()).collect();

    let budget_kib = cli.max_unacked_mib.clamp(16, 1 << 21) * 1024;
    let (stop_tx, stop_rx) = watch::channel(false);
    let start = Instant::now();
    let start_unix_ns = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .context("the clock is before 1970")?
        .as_nanos() as i64;
    let run_id = u64::from_le_bytes(uuid::Uuid::new_v4().as_bytes()[..8].try_into().unwrap_or_default());
    let shared = Arc::new(Shared {
        catalog,
        options,
        stats: Stats::default(),
        channels,
        schedule: Schedule {
            mode,
            interval: cli.interval,
            start,
            start_unix_ns,
        },
        in_flight: match mode {
            Mode::RealTime(_) => usize::MAX,
            Mode::Backfill(_) => cli.in_flight.max(1),
        },
        run: run_id,
        stop: stop_rx,
        errors_logged: AtomicU64::new(0),
        budget: Arc::new(tokio::sync::Semaphore::new(budget_kib as usize)),
        budget_kib,
        last_batch_kib: AtomicU64::new(0),
    });

    let nodes: Vec<Node> = (0..cli.nodes)
        .map(|i| Node::new(cli.seed, run_id, cli.first_node + i, cli.node_spread))
        .collect();
    let planned: u64 = nodes.iter().map(|n| u64::from(shared.schedule.batches(n))).sum();
    shared.stats.planned.store(planned, Relaxed);
    eprintln!(
        "bimodal-loadgen: {} nodes ({}..{}) → {} over {connections} connections: {planned} batches, {}",
        cli.nodes,
        Node::new(cli.seed, run_id, cli.first_node, 0.0).name(),
        Node::new(cli.seed, run_id, cli.first_node + cli.nodes - 1, 0.0).name(),
        cli.server_url,
        match mode {
            Mode::RealTime(d) => format!("real time for {}", humantime::format_duration(d)),
            Mode::Backfill(d) => format!("backfill of {}", humantime::format_duration(d)),
        }
    );

    // Backfilling nodes do not all connect in the same millisecond.
    let spread = Duration::from_millis(u64::from(cli.nodes)).min(Duration::from_secs(2));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, node) in nodes.into_iter().enumerate() {
        let stagger = spread.mul_f64(i as f64 / f64::from(cli.nodes));
        tasks.spawn(stream::run_node(shared.clone(), node, stagger));
    }
    if let Mode::RealTime(d) = mode {
        let stop = stop_tx.clone();
        let deadline = start + d + cli.drain_timeout;
        tokio::spawn(async move {
            tokio::time::sleep_until(deadline).await;
            let _ = stop.send(true);
        });
    }
    {
        let stop = stop_tx.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("bimodal-loadgen: interrupted: stopping and reporting");
                let _ = stop.send(true);
            }
        });
    }
    let progress = tokio::spawn(progress(shared.clone(), cli.nodes, cli.progress));
    while let Some(done) = tasks.join_next().await {
        done.context("a node task panicked")?;
    }
    progress.abort();
    let elapsed = start.elapsed();
    print_progress(&shared, cli.nodes, elapsed, &mut Snapshot::default(), elapsed);
    let s = &shared.stats;
    let acked_samples = s.samples_acked.load(Relaxed);
    let acked_rows = s.rows_acked.load(Relaxed);
    let secs = elapsed.as_secs_f64();
    let report = serde_json::json!({
        "mode": match mode { Mode::RealTime(_) => "real_time", Mode::Backfill(_) => "backfill" },
        "server_url": cli.server_url,
        "nodes": cli.nodes,
        "first_node": cli.first_node,
        "connections": connections,
        "interval_seconds": cli.interval.as_secs_f64(),
        "span_seconds": match mode { Mode::RealTime(d) | Mode::Backfill(d) => d.as_secs_f64() },
        "frames": match cli.frames { FrameNames::Named => "named", FrameNames::BuildId => "build-id" },
        "seed": cli.seed,
        "batches_planned": planned,
        "batches_sent": s.sent.load(Relaxed),
        "batches_resent": s.resent.load(Relaxed),
        "batches_acked": s.stored.load(Relaxed) + s.duplicate.load(Relaxed),
        "batches_stored": s.stored.load(Relaxed),
        "batches_duplicate": s.duplicate.load(Relaxed),
        "batches_rejected": s.rejected.load(Relaxed),
        "batches_retried": s.retried.load(Relaxed),
        "batches_unacked": s.unacked.load(Relaxed),
        "samples_sent": s.samples_sent.load(Relaxed),
        "sample_rows_sent": s.rows_sent.load(Relaxed),
        "samples_acked": acked_samples,
        "sample_rows_acked": acked_rows,
        "elapsed_seconds": round3(secs),
        "acked_samples_per_second": round3(acked_samples as f64 / secs),
        "acked_rows_per_second": round3(acked_rows as f64 / secs),
        "ack_latency_p50_ms": round3(s.latency.quantile_ms(0.50)),
        "ack_latency_p95_ms": round3(s.latency.quantile_ms(0.95)),
        "ack_latency_p99_ms": round3(s.latency.quantile_ms(0.99)),
        "ack_latency_max_ms": round3(s.latency.max_ms()),
        "wire_bytes_sent": s.wire_bytes.load(Relaxed),
        "streams_opened": s.streams_opened.load(Relaxed),
        "stream_failures": s.stream_failures.load(Relaxed),
        "max_schedule_lag_seconds": round3(s.max_lag_us.load(Relaxed) as f64 / 1e6),
        "generate_seconds": round3(s.generate_us.load(Relaxed) as f64 / 1e6),
        "peak_rss_bytes": peak_rss_bytes(),
    });
    println!("{report}");
    let rejected = s.rejected.load(Relaxed);
    let unacked = s.unacked.load(Relaxed);
    if rejected > 0 || unacked > 0 {
        eprintln!("bimodal-loadgen: failed: {rejected} batches rejected, {unacked} left unacked");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn round3(x: f64) -> f64 {
    if x.is_finite() {
        (x * 1000.0).round() / 1000.0
    } else {
        0.0
    }
}

/// Peak resident memory (VmHWM), in bytes.
fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kb| kb * 1024)
}

async fn progress(shared: Arc<Shared>, nodes: u32, every: Duration) {
    let mut last = Snapshot::default();
    let mut ticker = tokio::time::interval(every.max(Duration::from_millis(100)));
    ticker.tick().await;
    loop {
        ticker.tick().await;
        print_progress(&shared, nodes, shared.schedule.start.elapsed(), &mut last, every);
    }
}

fn print_progress(shared: &Shared, nodes: u32, elapsed: Duration, last: &mut Snapshot, window: Duration) {
    let s = &shared.stats;
    let now = s.snapshot();
    let secs = window.as_secs_f64().max(1e-3);
    let rate = |a: u64, b: u64| (a.saturating_sub(b)) as f64 / secs;
    eprintln!(
        "[{:>6.1}s] streams {}/{} done {}  batches sent {}/{} acked {} (+{:.0}/s) dup {} rej {} retry {} resent {}  samples/s {:.0} rows/s {:.0}  ack p50 {:.0}ms p99 {:.0}ms  lag {:.1}s  failures {}  {:.1} MB/s  unacked {} MiB  gen {:.1}s  rss {} MB",
        elapsed.as_secs_f64(),
        s.streams_open.load(Relaxed),
        nodes,
        s.nodes_done.load(Relaxed),
        now.sent,
        s.planned.load(Relaxed),
        now.acked,
        rate(now.acked, last.acked),
        s.duplicate.load(Relaxed),
        s.rejected.load(Relaxed),
        s.retried.load(Relaxed),
        s.resent.load(Relaxed),
        rate(now.samples_acked, last.samples_acked),
        rate(now.rows_acked, last.rows_acked),
        s.latency.quantile_ms(0.5),
        s.latency.quantile_ms(0.99),
        s.max_lag_us.load(Relaxed) as f64 / 1e6,
        s.stream_failures.load(Relaxed),
        rate(now.wire_bytes, last.wire_bytes) / 1e6,
        (shared.budget_kib as usize).saturating_sub(shared.budget.available_permits()) >> 10,
        s.generate_us.load(Relaxed) as f64 / 1e6,
        rss_bytes() >> 20,
    );
    *last = now;
}

/// Generates the first intervals of the first nodes, decodes them as the server would, and
/// prints their figures: one JSON line per (node, interval, event), then the medians.
fn describe(cli: &Cli, catalog: &Catalog, options: &Options) -> anyhow::Result<ExitCode> {
    let intervals = 6u32;
    let schedule = Schedule {
        mode: Mode::RealTime(cli.interval * intervals),
        interval: cli.interval,
        start: Instant::now(),
        start_unix_ns: 1_700_000_000_000_000_000,
    };
    let mut figures: Vec<(i32, serde_json::Value)> = Vec::new();
    for i in 0..cli.nodes.min(5) {
        let node = Node::new(cli.seed, 0, cli.first_node + i, cli.node_spread);
        for k in 0..intervals {
            let window = batch::Window {
                start_ns: schedule.start_unix_ns + i64::from(k) * cli.interval.as_nanos() as i64,
                end_ns: schedule.start_unix_ns + i64::from(k + 1) * cli.interval.as_nanos() as i64,
            };
            let g = batch::generate(
                catalog,
                options,
                &node,
                k,
                window,
                batch::batch_id(0, node.index, k),
                false,
            );
            let bytes = g.request.to_vec();
            let request = v1::IngestRequest::decode(&bytes[..]).context("a generated batch does not decode")?;
            let Some(v1::ingest_request::Message::Batch(b)) = request.message else {
                bail!("a generated request carries no batch");
            };
            check(&b).with_context(|| format!("batch {k} of {} is malformed", node.name()))?;
            for p in &catalog.profiles {
                let f = figures_of(&b, p.event, bytes.len());
                println!(
                    "{}",
                    serde_json::json!({"node": node.name(), "interval": k, "factor": round3(node.factor), "figures": f})
                );
                figures.push((p.event as i32, f));
            }
        }
    }
    // What generating costs, without decoding: a loadgen core's batches per second.
    let node = Node::new(cli.seed, 0, cli.first_node, cli.node_spread);
    let began = std::time::Instant::now();
    let mut bytes = 0;
    let rounds = 50u32;
    for k in 0..rounds {
        let window = batch::Window {
            start_ns: schedule.start_unix_ns,
            end_ns: schedule.start_unix_ns + cli.interval.as_nanos() as i64,
        };
        bytes += batch::generate(
            catalog,
            options,
            &node,
            k,
            window,
            batch::batch_id(0, node.index, k),
            false,
        )
        .request
        .len();
    }
    let each = began.elapsed() / rounds;
    eprintln!(
        "bimodal-loadgen: generating takes {:.2} ms per batch ({:.0} KB): {:.0} batches/s per core",
        each.as_secs_f64() * 1e3,
        bytes as f64 / f64::from(rounds) / 1e3,
        1.0 / each.as_secs_f64()
    );
    for p in &catalog.profiles {
        let of: Vec<&serde_json::Value> = figures
            .iter()
            .filter(|(e, _)| *e == p.event as i32)
            .map(|(_, f)| f)
            .collect();
        let keys = [
            "samples",
            "rows",
            "distinct_stacks",
            "distinct_thread_stack_rows",
            "threads",
            "pids",
            "distinct_frames",
            "depth_p50",
            "depth_p90",
            "depth_p99",
            "data_samples",
            "batch_bytes",
            "batch_frames",
            "batch_stacks",
        ];
        let medians: serde_json::Map<String, serde_json::Value> = keys
            .iter()
            .map(|k| {
                let mut v: Vec<f64> = of.iter().filter_map(|f| f[k].as_f64()).collect();
                v.sort_by(f64::total_cmp);
                let m = v.get(v.len() / 2).copied().unwrap_or(0.0);
                (k.to_string(), serde_json::json!(m))
            })
            .collect();
        eprintln!(
            "bimodal-loadgen: {} medians: {}",
            p.event.name(),
            serde_json::Value::Object(medians)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Every index in range, as the server's validation demands.
fn check(b: &v1::Batch) -> anyhow::Result<()> {
    for s in &b.stacks {
        if let Some(&i) = s.frame_indices.iter().find(|&&i| i as usize >= b.frames.len()) {
            bail!("frame index {i} of {}", b.frames.len());
        }
    }
    let stack_indices = b
        .samples
        .iter()
        .map(|s| s.stack_index)
        .chain(b.data_samples.iter().map(|d| d.stack_index));
    for i in stack_indices {
        if i as usize >= b.stacks.len() {
            bail!("stack index {i} of {}", b.stacks.len());
        }
    }
    Ok(())
}

/// The per-interval figures of one event in a batch, as testdata/loadgen/README.md states
/// them for the recorded machine.
fn figures_of(b: &v1::Batch, event: v1::EventKind, bytes: usize) -> serde_json::Value {
    use std::collections::HashSet;
    let samples: Vec<&v1::Sample> = b.samples.iter().filter(|s| s.event == event as i32).collect();
    let stacks: HashSet<u32> = samples.iter().map(|s| s.stack_index).collect();
    let rows: HashSet<(u32, u32)> = samples.iter().map(|s| (s.tid, s.stack_index)).collect();
    let frames: HashSet<u32> = stacks
        .iter()
        .flat_map(|&s| b.stacks[s as usize].frame_indices.iter().copied())
        .collect();
    let mut depths: Vec<usize> = stacks
        .iter()
        .map(|&s| b.stacks[s as usize].frame_indices.len())
        .collect();
    depths.sort_unstable();
    let q = |q: f64| {
        depths
            .get(((depths.len() as f64 * q) as usize).min(depths.len().saturating_sub(1)))
            .copied()
    };
    serde_json::json!({
        "event": event.name(),
        "samples": samples.iter().map(|s| s.count).sum::<u64>(),
        "rows": samples.len(),
        "distinct_stacks": stacks.len(),
        "distinct_thread_stack_rows": rows.len(),
        "threads": samples.iter().map(|s| s.tid).collect::<HashSet<_>>().len(),
        "pids": samples.iter().map(|s| s.pid).collect::<HashSet<_>>().len(),
        "distinct_frames": frames.len(),
        "depth_p50": q(0.5),
        "depth_p90": q(0.9),
        "depth_p99": q(0.99),
        "data_samples": b.data_samples.iter().filter(|d| d.event == event as i32).count(),
        "batch_bytes": bytes,
        "batch_frames": b.frames.len(),
        "batch_stacks": b.stacks.len(),
        "processes": b.processes.len(),
    })
}
