//! `bimodal-agent record`: profile this machine for a while and write one file, no server.

use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use bimodal_profile::Profile;

use crate::sample::bpf::{MapSizes, Sampler, SamplerOptions, UnwindMode};
use crate::sample::events::{self, EventKind, Machine, Rates};
use crate::sample::probe::LiveProber;
use crate::ship::batch::{self, Interval};
use crate::symbolize::Frames;

/// Output format of `record`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// `comm;root;…;leaf count` lines.
    Folded,
    /// gzip-compressed pprof protobuf.
    Pprof,
}

/// Settings of one `record` run.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub event: EventKind,
    /// How long to sample at most.
    pub duration: Duration,
    /// Stop as soon as this many samples are recorded (a test waits for the events it checks,
    /// not for a fixed window); `None`: sample for the whole `duration`.
    pub until_samples: Option<u64>,
    pub pid: Option<u32>,
    pub format: Format,
    pub output: PathBuf,
    pub rates: Rates,
    pub map_sizes: MapSizes,
    pub unwind: UnwindMode,
    /// Profile the data objects the samples touched (each stack topped by `[bss] table`)
    /// instead of the code alone; needs a source with data addresses.
    pub data_objects: bool,
    /// Where separate debug files are looked for (`/usr/lib/debug`, `/lib/debug` by default).
    pub debug_dirs: Vec<std::path::PathBuf>,
    /// Images kept parsed for naming and unwinding.
    pub cached_images: usize,
    /// Tests only: programs the kernel is made to refuse.
    pub test_refusals: crate::sample::bpf::TestRefusals,
}

/// What a `record` run sampled.
#[derive(Clone, Debug, Default)]
pub struct RecordSummary {
    pub samples: u64,
    pub dropped: u64,
    /// Bytes the drains' batches take encoded as `run` would send them (names included: `record`
    /// names frames itself).
    pub wire_bytes: u64,
    /// Samples unwound with .eh_frame (in the kernel from tables, or in the agent from stack
    /// copies), how many of them in the kernel, and how many chains ended before their root.
    pub unwound: u64,
    pub unwound_in_kernel: u64,
    pub unwound_truncated: u64,
    /// What the unwind tables held at the end.
    pub tables: crate::sample::bpf::TableStats,
    /// How the stacks were unwound, when it was less than asked for: the method and why.
    pub reduced_unwinding: Option<(&'static str, String)>,
}

/// How often `record` empties the kernel maps: often enough that short-lived processes are
/// still there to be symbolized.
pub const DRAIN_INTERVAL: Duration = Duration::from_secs(1);

/// Samples `opts.event` for `opts.duration` (or until `opts.until_samples`) and writes the
/// profile to `opts.output`.
pub fn record(opts: &RecordOptions) -> anyhow::Result<RecordSummary> {
    let prober = LiveProber::new(opts.test_refusals);
    let source = events::resolve(opts.event, &opts.rates, &Machine::read(), &prober).into_source()?;
    if opts.data_objects && !source.data_address {
        anyhow::bail!(
            "`{}` is sampled by {} here, which carries no data addresses: --data-objects needs one that does",
            opts.event.name(),
            source.description
        );
    }
    let mut sampler = Sampler::start(SamplerOptions {
        sources: vec![source.clone()],
        pid: opts.pid,
        map_sizes: opts.map_sizes,
        unwind: opts.unwind,
        data_addresses: opts.data_objects,
        work_uprobe: None,
        cached_images: opts.cached_images,
        test_refusals: opts.test_refusals,
    })?;
    let frames = Frames::default()
        .with_debug_dirs(opts.debug_dirs.clone())
        .with_processes(sampler.processes())
        .with_cached_images(opts.cached_images);
    let mut profile = Profile::new(opts.event.name(), opts.event.unit());
    profile.period = source.period;
    let started = SystemTime::now();
    let deadline = Instant::now() + opts.duration;
    let mut summary = RecordSummary::default();
    let mut interval_start = started;
    loop {
        let now = Instant::now();
        let last = now >= deadline;
        if !last {
            std::thread::sleep(DRAIN_INTERVAL.min(deadline - now));
        }
        let drained = sampler.drain()?;
        let end = SystemTime::now();
        let b = batch::build(
            &drained,
            sampler.sources(),
            &frames,
            Interval {
                start: interval_start,
                end,
            },
        );
        interval_start = end;
        summary.samples += b.samples.iter().map(|s| s.count).sum::<u64>();
        summary.dropped += b.sources.iter().map(|s| s.dropped).sum::<u64>();
        summary.wire_bytes += prost::Message::encoded_len(&b) as u64;
        if opts.data_objects {
            profile.add_data_samples(&b, opts.event);
        } else {
            profile.add_batch(&b, opts.event);
        }
        if last || opts.until_samples.is_some_and(|n| summary.samples >= n) {
            break;
        }
    }
    let stats = sampler.unwind_stats();
    summary.unwound = stats.snapshots;
    summary.unwound_in_kernel = sampler.kernel_unwound().snapshots;
    summary.tables = sampler.table_stats();
    summary.unwound_truncated = stats.truncated;
    summary.reduced_unwinding = sampler
        .unwinding(opts.event)
        .and_then(|u| u.reduced.clone().map(|why| (u.method.name(), why)));
    profile.start_unix_nanos = started
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0);
    profile.duration_nanos = started.elapsed().unwrap_or(opts.duration).as_nanos() as i64;
    let bytes = match opts.format {
        Format::Folded => profile.to_folded().into_bytes(),
        Format::Pprof => profile.to_pprof(),
    };
    fs::write(&opts.output, bytes).with_context(|| format!("failed to write `{}`", opts.output.display()))?;
    Ok(summary)
}
