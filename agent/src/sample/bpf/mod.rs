//! Loads the BPF sampling programs, attaches them to their sources and drains their maps.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, IntoRawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, RingBuffer, RingBufferBuilder};

use crate::host::maps;
use crate::sample::events::{perf, Attach, EventKind, EventSource};
use crate::sample::processes::ProcessMaps;
use crate::sample::unwind::{Snapshot, UnwindStats, Unwinder};

mod profile {
    #![allow(
        clippy::all,
        clippy::undocumented_unsafe_blocks,
        missing_debug_implementations,
        non_camel_case_types,
        unsafe_op_in_unsafe_fn
    )]
    include!(concat!(env!("OUT_DIR"), "/profile.skel.rs"));
}

use profile::types::{
    data_sample, new_process, process_state, sample_key, sample_value, stack_snapshot, unwind_process, unwind_row,
    user_chain,
};
use profile::ProfileSkel;

// SAFETY: these are plain C structs of integers and byte arrays: every bit pattern of their
// size is a valid value, which is what `plain` requires.
unsafe impl plain::Plain for sample_key {}
// SAFETY: as above.
unsafe impl plain::Plain for sample_value {}
// SAFETY: as above.
unsafe impl plain::Plain for data_sample {}
// SAFETY: as above.
unsafe impl plain::Plain for stack_snapshot {}
// SAFETY: as above.
unsafe impl plain::Plain for unwind_row {}
// SAFETY: as above.
unsafe impl plain::Plain for unwind_process {}
// SAFETY: as above.
unsafe impl plain::Plain for user_chain {}
// SAFETY: as above.
unsafe impl plain::Plain for new_process {}

pub mod kernel;
mod programs;
mod tables;
pub use programs::{
    trial, Program, ProgramLoad, Settings, TestRefusals, VerifierFigures, VERIFIER_INSNS_LIMIT,
    VERIFIER_STATES_PER_INSN_LIMIT,
};
use tables::TableLoader;
pub use tables::TableStats;

/// Stack ids given to user stacks unwound from snapshots: above any id of the `stacks` map.
pub const UNWOUND_STACK_ID_BASE: i32 = 1 << 30;

/// How user call chains are recovered (docs/design/006).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum UnwindMode {
    /// In the kernel, from tables compiled from each image's `.eh_frame`, frame pointers where
    /// no table covers the code (JIT); a process's first milliseconds, before its tables are
    /// written, from copies of its stack.
    #[default]
    Auto,
    /// Frame pointers only (chains of code without them lose callers).
    FramePointer,
    /// In the agent, from a copy of the stack per sample and `.eh_frame` (the reference the
    /// tables are checked against; costs a copy of up to 12 KiB per sample).
    EhFrame,
}

/// Why sampling could not start.
#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    #[error("the kernel has no BTF (`/sys/kernel/btf/vmlinux` is missing): bimodal needs a kernel built with CONFIG_DEBUG_INFO_BTF=y")]
    NoBtf,
    #[error("failed to load the BPF programs: {meaning} ({source})")]
    Load {
        meaning: &'static str,
        source: libbpf_rs::Error,
    },
    #[error(transparent)]
    Perf(#[from] perf::OpenError),
    #[error("failed to attach the BPF program for {event} ({attach}): {source}")]
    Attach {
        event: &'static str,
        attach: &'static str,
        source: libbpf_rs::Error,
    },
    #[error("failed to read BPF map `{map}`: {source}")]
    Map {
        map: &'static str,
        source: libbpf_rs::Error,
    },
    #[error("no BPF program samples `{event}` from perf events")]
    NoProgram { event: &'static str },
    #[error("the kernel refused every program asked for: {reasons}")]
    AllRefused { reasons: String },
    #[error(
        "cannot count units of work at `{binary}:{symbol}` (is the path an ELF file with that function?): {source}"
    )]
    WorkUprobe {
        binary: String,
        symbol: String,
        source: libbpf_rs::Error,
    },
}

/// Sizes of the BPF maps, in entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapSizes {
    /// Distinct (thread, event, stacks) keys per drain interval, per buffer.
    pub samples: u32,
    /// Distinct stacks alive at once.
    pub stacks: u32,
    /// Bytes of the ring that carries stack snapshots to be unwound (a power of two).
    pub snapshot_ring: u32,
    /// Rows of unwind tables, of every image loaded (12 bytes each, in kernel memory).
    pub unwind_rows: u32,
    /// Processes with unwind tables (4 KiB each once used; from the start where the kernel
    /// needs the map preallocated, [`kernel::PREALLOCATED_PROCESSES`]).
    pub processes: u32,
}

/// Processes with unwind tables by default, where the map fills as they come.
pub const DEFAULT_PROCESSES: u32 = 16384;

/// Unwind table rows by default: 12 MiB of kernel memory, the tables of about 50 images the size
/// of libc (BENCHMARKS.md, "Unwinding in the kernel").
pub const DEFAULT_UNWIND_ROWS: u32 = 1 << 20;

/// Seconds of stack copies from every CPU the snapshot ring holds by default: how far the
/// unwinding thread may fall behind before samples fall back to frame pointers (counted).
const SNAPSHOT_RING_SECONDS: f64 = 0.5;

/// Bounds of the sample and stack maps sized from the machine: the floor is what a small node
/// needs with room to spare; the ceilings cap kernel memory on the largest nodes (a sample key
/// takes ~120 bytes in each of two buffers, a stack ~1 KiB in `stacks` and in `user_chains`).
const MIN_MAP_SAMPLES: u32 = 16384;
const MAX_MAP_SAMPLES: u32 = 262_144;
const MIN_MAP_STACKS: u32 = 16384;
const MAX_MAP_STACKS: u32 = 65536;

impl MapSizes {
    /// Sample keys and stacks for `cpus` CPUs sampled at `hz` and drained every `interval`.
    /// Sample keys: one per CPU sample of an interval, the case where every sample has a thread
    /// and stack of its own (each kind's samples beyond are few or share keys, and what does
    /// not fit is counted as lost). Stacks: half as many, since samples share them (threads
    /// running the same code, user chains unwound from tables are not kept in `stacks`). Both
    /// powers of two, between the floors and ceilings above: 2 CPUs at 99 Hz every 10 s get the
    /// floors (16,384), 96 CPUs 131,072 keys and 65,536 stacks, 200 CPUs the ceilings.
    pub fn for_machine(cpus: usize, hz: u64, interval: std::time::Duration) -> MapSizes {
        let samples = (cpus as f64 * hz as f64 * interval.as_secs_f64()).ceil() as u64;
        let sized = |n: u64, min: u32, max: u32| {
            n.clamp(u64::from(min), u64::from(max))
                .next_power_of_two()
                .min(u64::from(max)) as u32
        };
        MapSizes {
            samples: sized(samples, MIN_MAP_SAMPLES, MAX_MAP_SAMPLES),
            stacks: sized(samples / 2, MIN_MAP_STACKS, MAX_MAP_STACKS),
            snapshot_ring: MapSizes::snapshot_ring_for(cpus, hz),
            unwind_rows: DEFAULT_UNWIND_ROWS,
            processes: DEFAULT_PROCESSES,
        }
    }

    /// The snapshot ring for `cpus` CPUs sampled at `hz`: [`SNAPSHOT_RING_SECONDS`] of copies,
    /// a power of two from 1 to 64 MiB. The kernel maps its pages into the agent twice (so a
    /// record can wrap), and all of them count in the agent's RSS.
    pub fn snapshot_ring_for(cpus: usize, hz: u64) -> u32 {
        let copies = cpus as f64 * hz as f64 * SNAPSHOT_RING_SECONDS;
        let bytes = (copies * std::mem::size_of::<stack_snapshot>() as f64).ceil() as u64;
        bytes.clamp(1 << 20, 64 << 20).next_power_of_two() as u32
    }
}

impl Default for MapSizes {
    fn default() -> Self {
        MapSizes {
            samples: MIN_MAP_SAMPLES,
            stacks: MIN_MAP_STACKS,
            snapshot_ring: 8 << 20,
            unwind_rows: DEFAULT_UNWIND_ROWS,
            processes: DEFAULT_PROCESSES,
        }
    }
}

/// What one drain read: sample counts per key and the stacks they reference.
#[derive(Debug, Default)]
pub struct Drained {
    pub samples: Vec<(SampleKey, SampleValue)>,
    /// Samples with the data address they touched, in arrival order.
    pub data: Vec<DataSample>,
    /// Instruction pointers, leaf first, by stack id.
    pub stacks: HashMap<i32, Vec<u64>>,
    /// Losses since the previous drain, per event kind.
    pub dropped: HashMap<EventKind, Dropped>,
}

/// Lost samples and stacks, by reason (the BPF `drop_reason` enum).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    pub sample_map_full: u64,
    pub user_stack: u64,
    pub kernel_stack: u64,
    /// Data addresses lost because the ring buffer was full (the samples are still counted).
    pub data_ring_full: u64,
    /// Samples whose stack id was gone from the stack map when read.
    pub stack_missing: u64,
    /// Samples of `.eh_frame`-unwound processes that got a frame-pointer stack instead, because
    /// the snapshot ring was full.
    pub snapshot_ring_full: u64,
}

impl Dropped {
    /// Samples lost whole or in part.
    pub fn total(&self) -> u64 {
        self.sample_map_full
            + self.user_stack
            + self.kernel_stack
            + self.data_ring_full
            + self.stack_missing
            + self.snapshot_ring_full
    }
}

/// A sample key as Rust reads it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SampleKey {
    pub tgid: u32,
    pub pid: u32,
    pub event: EventKind,
    pub user_stack_id: i32,
    pub kernel_stack_id: i32,
    pub comm: String,
}

/// What the samples of one key add up to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleValue {
    /// Samples taken.
    pub count: u64,
    /// Events they stand for (sum of periods, or of pages).
    pub value: u64,
}

/// One sample with its data address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSample {
    pub tgid: u32,
    pub pid: u32,
    pub event: EventKind,
    pub user_stack_id: i32,
    pub address: u64,
    pub weight: u64,
}

/// Settings for [`Sampler::start`].
#[derive(Clone, Debug)]
pub struct SamplerOptions {
    pub sources: Vec<EventSource>,
    /// Only sample this process; `None` samples all (but the agent itself).
    pub pid: Option<u32>,
    pub map_sizes: MapSizes,
    /// Send the data address of samples that carry one (costs a ring-buffer record each).
    pub data_addresses: bool,
    pub unwind: UnwindMode,
    /// Calls of this function count units of work.
    pub work_uprobe: Option<WorkUprobe>,
    /// Images the unwinder keeps parsed ([`crate::symbolize::DEFAULT_CACHED_IMAGES`]).
    pub cached_images: usize,
    /// Tests only: programs the kernel is made to refuse.
    pub test_refusals: TestRefusals,
}

/// The program that samples `source`; an error for a perf source of a kind no perf-event
/// program counts.
fn program_of(source: &EventSource) -> Result<Program, SamplerError> {
    Program::sampling(source.event, &source.attach).ok_or(SamplerError::NoProgram {
        event: source.event.name(),
    })
}

/// The programs a run of `opts` loads: the sampling program of each source, its unwinder when
/// unwinding is `auto`, exec and exit of processes, and the work uprobe when there is one.
fn wanted_programs(opts: &SamplerOptions) -> Vec<Program> {
    let mut wanted: Vec<Program> = Vec::new();
    for program in opts.sources.iter().filter_map(|s| program_of(s).ok()) {
        wanted.push(program);
        if opts.unwind == UnwindMode::Auto {
            wanted.extend(program.unwinder());
        }
    }
    wanted.extend([Program::ProcessExec, Program::ProcessExit]);
    if opts.work_uprobe.is_some() {
        wanted.push(Program::CountWork);
    }
    wanted.sort();
    wanted.dedup();
    wanted
}

/// How user stacks are actually unwound (what [`UnwindMode`] asked for, or less): the name the
/// facts carry to the server, defined once in the proto crate.
pub use bimodal_proto::UnwindMethod;

/// How one source's user stacks are unwound, and why not as asked when they are not.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Unwinding {
    #[serde(serialize_with = "method_name")]
    pub method: UnwindMethod,
    /// Why the method is less than `--unwind` asked for; `None` when it is what was asked.
    pub reduced: Option<String>,
}

fn method_name<S: serde::Serializer>(m: &UnwindMethod, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(m.name())
}

impl Unwinding {
    /// The unwinding of a run asking for `mode`, whose source's unwinder loaded as `load` says
    /// (`None`: not tried), and where tables are written (`tables`) when another source's
    /// unwinder loaded. A source without an unwinder gets stack copies where processes are
    /// marked for tables (its programs find no unwinder to hand them to), and frame pointers
    /// where no unwinder loaded at all (processes are marked for them once read: stack copies
    /// for every sample would cost a copy of up to 12 KiB each, `--unwind eh-frame`'s price).
    pub fn of_run(mode: UnwindMode, load: Option<&ProgramLoad>, tables: bool) -> Unwinding {
        let without = if tables {
            UnwindMethod::StackCopies
        } else {
            UnwindMethod::FramePointers
        };
        match mode {
            UnwindMode::FramePointer => Unwinding {
                method: UnwindMethod::FramePointers,
                reduced: None,
            },
            UnwindMode::EhFrame => Unwinding {
                method: UnwindMethod::StackCopies,
                reduced: None,
            },
            UnwindMode::Auto => match load {
                Some(l) if l.loaded() => Unwinding {
                    method: UnwindMethod::KernelTables,
                    reduced: None,
                },
                Some(l) => Unwinding {
                    method: without,
                    reduced: Some(format!(
                        "the kernel refused the unwinder {}: {}",
                        l.program,
                        l.refused.as_deref().unwrap_or_default()
                    )),
                },
                None => Unwinding {
                    method: without,
                    reduced: Some("no unwinder program was loaded".into()),
                },
            },
        }
    }
}

/// A function whose calls are the node's units of work (`--work-uprobe BINARY:SYMBOL`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkUprobe {
    pub binary: std::path::PathBuf,
    pub symbol: String,
}

impl std::str::FromStr for WorkUprobe {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.rsplit_once(':') {
            Some((binary, symbol)) if !binary.is_empty() && !symbol.is_empty() => Ok(WorkUprobe {
                binary: binary.into(),
                symbol: symbol.into(),
            }),
            _ => Err(format!(
                "`{s}` is not BINARY:SYMBOL (e.g. /usr/bin/server:handle_request)"
            )),
        }
    }
}

/// The loaded programs and their attachments. Dropping it detaches everything.
pub struct Sampler {
    skel: ProfileSkel<'static>,
    sources: Vec<EventSource>,
    /// Sources asked for whose programs the kernel refused, and why.
    refused_sources: Vec<(EventSource, String)>,
    /// How each program's load went, with the verifier's figures.
    loads: Vec<ProgramLoad>,
    /// How each source's user stacks are unwound.
    unwinding: Vec<(EventKind, Unwinding)>,
    ring: RingBuffer<'static>,
    /// Data samples read from the ring, with the key of their user chain (0: none).
    ring_out: Arc<Mutex<Vec<(DataSample, u64)>>>,
    _links: Vec<Link>,
    /// Cumulative loss counters at the previous drain, by `drops` map index.
    drops_seen: HashMap<u32, u64>,
    /// Samples unwound from stack snapshots since the last drain, by the unwinding thread.
    unwound: Arc<Mutex<Unwound>>,
    _unwind_thread: Option<Worker>,
    /// What the unwind tables hold, as the thread writing them last said.
    table_stats: Arc<Mutex<TableStats>>,
    /// Chains unwound in the kernel from tables, as the drains found them.
    kernel_unwound: UnwindStats,
    /// The file mappings of sampled processes, read by `_process_thread` at their first sample.
    processes: ProcessMaps,
    _process_thread: Worker,
    /// Units of work counted up to the previous drain, when a work uprobe is attached.
    work_seen: Option<u64>,
}

/// What the unwinding thread accumulated between two drains.
#[derive(Debug, Default)]
struct Unwound {
    /// Counts per sample key (its user stack id unset) and unwound user chain.
    samples: HashMap<(SampleKey, Vec<u64>), SampleValue>,
    /// Data samples with their unwound chains.
    data: Vec<(DataSample, Vec<u64>)>,
    stats: UnwindStats,
}

/// A thread that reads what the programs send until it is dropped.
struct Worker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Runs `work` on a thread named `name`; `work` returns once the flag it is given is set.
    fn spawn(name: &str, work: impl FnOnce(Arc<AtomicBool>) + Send + 'static) -> Worker {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || work(flag))
            .expect("spawning a thread");
        Worker {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A process's mappings are read again this long after its first sample: a program's first
/// samples often come while the dynamic loader is still mapping its libraries.
const READ_AGAIN_AFTER: [Duration; 2] = [Duration::from_millis(50), Duration::from_millis(500)];

/// Reads the mappings of every process the programs tell of at its first sample
/// (`new_processes`), until `stop`: at once, while the process still runs, and again
/// [`READ_AGAIN_AFTER`]. In `auto` mode, a thread of its own writes each one's unwind tables
/// (compiling a new image's `.eh_frame` can take long, and must not hold up the next mappings).
fn watch_processes(
    ring_map: MapHandle,
    processes: ProcessMaps,
    loader: Option<(TableLoader, Arc<Mutex<TableStats>>)>,
    frame_pointers: Option<MapHandle>,
    stop: Arc<AtomicBool>,
) {
    let tables = loader.map(|(mut loader, stats)| {
        let (tx, rx) = std::sync::mpsc::channel::<(u32, u64, Vec<maps::Mapping>)>();
        std::thread::Builder::new()
            .name("bimodal-tables".into())
            .spawn(move || {
                let mut swept = Instant::now();
                // Ends when the sender is dropped, with the watching thread.
                for (tgid, mm, mappings) in rx {
                    loader.load(tgid, mm, &mappings);
                    if swept.elapsed() >= Duration::from_secs(5) {
                        loader.sweep(|tgid| Path::new(&format!("/proc/{tgid}")).exists());
                        swept = Instant::now();
                    }
                    *stats.lock().expect("not poisoned") = loader.stats;
                }
            })
            .expect("spawning a thread");
        tx
    });
    // (tgid, the address space the programs saw it in)
    let noticed: Arc<Mutex<Vec<(u32, u64)>>> = Arc::default();
    let sink = noticed.clone();
    let mut builder = RingBufferBuilder::new();
    let built = builder
        .add(&ring_map, move |raw: &[u8]| {
            if let Ok(p) = plain::from_bytes::<new_process>(raw) {
                sink.lock().expect("not poisoned").push((p.tgid, p.mm));
            }
            0
        })
        .map(drop);
    let ring = match built.and_then(|()| builder.build()) {
        Ok(ring) => ring,
        Err(e) => {
            tracing::warn!("new processes cannot be read, their mappings are read at drains only: {e}");
            return;
        }
    };
    // Processes to read again, and when: what the dynamic loader maps after the first sample.
    let mut again: std::collections::VecDeque<(Instant, u32, u64)> = Default::default();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let wait = poll_wait(again.front().map(|(due, _, _)| *due), now);
        if let Err(e) = ring.poll(wait) {
            tracing::warn!("reading new processes: {e}");
            std::thread::sleep(Duration::from_millis(100));
        }
        let tgids = std::mem::take(&mut *noticed.lock().expect("not poisoned"));
        // Without an unwinder, a process's samples walk frame pointers once it is read: stack
        // copies only until then, as with tables.
        if let Some(sampled) = &frame_pointers {
            for &(tgid, _) in &tgids {
                let _ = sampled.update(
                    &tgid.to_ne_bytes(),
                    &[process_state::PROCESS_FRAME_POINTERS.0 as u8],
                    MapFlags::EXIST,
                );
            }
        }
        // Mappings first: they are what a process that is about to exit takes with it.
        let mut read = Vec::new();
        for &(tgid, mm) in &tgids {
            match processes.read_now(tgid) {
                None => tracing::debug!(tgid, "process gone before its mappings were read"),
                Some(executable) => {
                    let now = Instant::now();
                    for after in READ_AGAIN_AFTER {
                        again.push_back((now + after, tgid, mm));
                    }
                    read.push((tgid, mm, executable));
                }
            }
        }
        again.make_contiguous().sort_unstable();
        let now = Instant::now();
        while again.front().is_some_and(|(due, _, _)| *due <= now) {
            let (_, tgid, mm) = again.pop_front().expect("not empty");
            if let Some(executable) = processes.read_now(tgid) {
                read.push((tgid, mm, executable));
            }
        }
        if let Some(tables) = &tables {
            for noticed in read {
                let _ = tables.send(noticed);
            }
        }
    }
}

/// How long to wait for new processes before the next read `due` (at most 100 ms), in whole
/// milliseconds rounded up: the ring is polled in milliseconds, and a wait of less than one
/// would return at once, again and again, until the read is due (on a node of ~100 new
/// processes a second, about an eighth of a core).
fn poll_wait(due: Option<Instant>, now: Instant) -> Duration {
    const MAX: Duration = Duration::from_millis(100);
    let Some(due) = due else { return MAX };
    let millis = due.saturating_duration_since(now).as_nanos().div_ceil(1_000_000);
    Duration::from_millis(u64::try_from(millis).unwrap_or(u64::MAX)).min(MAX)
}

/// Unwinds every snapshot the programs send, until `stop`: consumed continuously, since one
/// copy is kilobytes and the ring holds only hundreds.
fn unwind_snapshots(
    ring_map: MapHandle,
    out: Arc<Mutex<Unwound>>,
    processes: ProcessMaps,
    cached_images: usize,
    stop: Arc<AtomicBool>,
) {
    let mut unwinder = Unwinder::new(processes, cached_images);
    let mut swept = Instant::now();
    let sink = out.clone();
    let mut builder = RingBufferBuilder::new();
    let added = builder.add(&ring_map, move |raw: &[u8]| {
        let Ok(snap) = plain::from_bytes::<stack_snapshot>(raw) else {
            return 0;
        };
        let stack = &snap.stack[..(snap.stack_len as usize).min(snap.stack.len())];
        let chain = unwinder.unwind(&Snapshot {
            tgid: snap.tgid,
            ip: snap.ip,
            sp: snap.sp,
            bp: snap.bp,
            stack,
        });
        let key = SampleKey {
            tgid: snap.tgid,
            pid: snap.pid,
            event: event_of(snap.event),
            user_stack_id: -1,
            kernel_stack_id: snap.kernel_stack_id,
            comm: comm_string(&snap.comm),
        };
        let mut out = sink.lock().expect("not poisoned");
        out.stats = unwinder.stats;
        if snap.address != 0 {
            out.data.push((
                DataSample {
                    tgid: key.tgid,
                    pid: key.pid,
                    event: key.event,
                    user_stack_id: -1,
                    address: snap.address,
                    weight: snap.weight,
                },
                chain.clone(),
            ));
        }
        let value = out.samples.entry((key, chain)).or_default();
        value.count += 1;
        value.value += snap.weight;
        drop(out);
        // Processes that exited leave their unwinders behind: swept every few seconds, not
        // every so many snapshots (a node of short processes meets hundreds in between).
        if swept.elapsed() >= Duration::from_secs(5) {
            unwinder.retain(|tgid| Path::new(&format!("/proc/{tgid}")).exists());
            swept = Instant::now();
        }
        0
    });
    if let Err(e) = added {
        tracing::error!("stack snapshots cannot be read, .eh_frame unwinding is off: {e}");
        return;
    }
    let ring = match builder.build() {
        Ok(ring) => ring,
        Err(e) => {
            tracing::error!("stack snapshots cannot be read, .eh_frame unwinding is off: {e}");
            return;
        }
    };
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = ring.poll(Duration::from_millis(100)) {
            tracing::warn!("reading stack snapshots: {e}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler").field("sources", &self.sources).finish()
    }
}

fn load_error_meaning(e: &libbpf_rs::Error) -> &'static str {
    match e.kind() {
        libbpf_rs::ErrorKind::PermissionDenied => {
            "not permitted: needs CAP_BPF and CAP_PERFMON (or root); fentry and kprobes are also refused under kernel lockdown"
        }
        libbpf_rs::ErrorKind::NotFound => "the kernel lacks the function, tracepoint or BTF the program attaches to",
        _ => "the kernel rejected the programs",
    }
}

fn load_error(e: libbpf_rs::Error) -> SamplerError {
    SamplerError::Load {
        meaning: load_error_meaning(&e),
        source: e,
    }
}

/// libbpf explains every refused program on stderr; those lines belong in the debug log, and
/// the agent reports the refusal itself (probe, errors).
fn route_libbpf_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, |level, msg| match level {
            libbpf_rs::PrintLevel::Warn => tracing::debug!(target: "libbpf", "{}", msg.trim_end()),
            _ => tracing::trace!(target: "libbpf", "{}", msg.trim_end()),
        })));
    });
}

fn attach_tracing(
    skel: &ProfileSkel<'static>,
    event: EventKind,
    attach: &Attach,
) -> Result<Option<Link>, SamplerError> {
    let (Attach::NumaFaultFentry | Attach::NumaFaultKprobe | Attach::MigrateTracepoint, Some(program)) =
        (attach, Program::sampling(event, attach))
    else {
        return Ok(None);
    };
    program
        .of(skel)
        .attach()
        .map(Some)
        .map_err(|source| SamplerError::Attach {
            event: event.name(),
            attach: attach.kind_name(),
            source,
        })
}

/// Loads and attaches one tracing source, then detaches it: whether it works here, in words.
/// The program is loaded under the widest settings ([`Settings::widest`]), so a verifier that
/// would refuse it in a run refuses it here.
pub fn try_attach(attach: &Attach, refusals: TestRefusals) -> Result<(), String> {
    let Some(program) = Program::sampling(EventKind::Unspecified, attach) else {
        return Err(format!("{} is not a tracing source", attach.kind_name()));
    };
    let settings = Settings::widest(refusals.0);
    let skel = match programs::load(&[program], &settings, &programs::TRIAL_SIZES) {
        Ok((skel, _)) => skel,
        Err((e, loads)) => {
            // The verifier said why itself; other refusals (lockdown, a missing function) are
            // explained from the machine.
            if let Some(ProgramLoad {
                refused: Some(why),
                figures: Some(_),
                ..
            }) = loads.first()
            {
                return Err(format!("{program}: {why}"));
            }
            let source = match &e {
                SamplerError::Load { source, .. } => source.to_string(),
                other => other.to_string(),
            };
            return Err(match diagnose(attach) {
                Some(why) => format!("{why} ({source})"),
                None => e.to_string(),
            });
        }
    };
    attach_tracing(&skel, EventKind::Unspecified, attach)
        .map(drop)
        .map_err(|e| {
            let source = match &e {
                SamplerError::Attach { source, .. } => source.to_string(),
                other => other.to_string(),
            };
            match diagnose(attach) {
                Some(why) => format!("{why} ({source})"),
                None => e.to_string(),
            }
        })
}

/// The machine fact that explains why a tracing source fails, where one can be read.
fn diagnose(attach: &Attach) -> Option<String> {
    let lockdown = std::fs::read_to_string("/sys/kernel/security/lockdown").ok();
    let locked = lockdown
        .as_deref()
        .and_then(|l| l.split_whitespace().find(|w| w.starts_with('[')))
        .map(|w| w.trim_matches(['[', ']']).to_owned())
        .filter(|mode| mode != "none");
    let in_kallsyms = |f: &str| {
        std::fs::read_to_string("/proc/kallsyms")
            .map(|k| k.lines().any(|l| l.split_whitespace().nth(2) == Some(f)))
            .unwrap_or(false)
    };
    match attach {
        Attach::NumaFaultFentry if !in_kallsyms("task_numa_fault") => {
            Some("task_numa_fault is not in /proc/kallsyms (kernel without NUMA balancing?)".into())
        }
        Attach::NumaFaultFentry => match locked {
            Some(mode) => Some(format!(
                "kernel lockdown is `{mode}`: the kernel refuses fentry programs"
            )),
            None => Some(
                "the kernel refused the fentry program (no BTF for task_numa_fault, or missing CAP_BPF/CAP_PERFMON)"
                    .into(),
            ),
        },
        Attach::NumaFaultKprobe if !Path::new("/sys/bus/event_source/devices/kprobe").exists() => {
            Some("the kernel has no kprobe support (no `kprobe` PMU: CONFIG_KPROBES unset)".into())
        }
        Attach::NumaFaultKprobe if !in_kallsyms("task_numa_fault") => {
            Some("task_numa_fault is not in /proc/kallsyms (kernel without NUMA balancing?)".into())
        }
        _ => None,
    }
}

impl Sampler {
    /// Loads the programs and starts every source (perf events on every online CPU). A program
    /// the kernel refuses costs only what depends on it: an event kind whose program is refused
    /// is not sampled (the others are), and where an unwinder is refused the samples are unwound
    /// from stack copies, or walk frame pointers ([`Sampler::unwinding`]).
    pub fn start(mut opts: SamplerOptions) -> Result<Sampler, SamplerError> {
        if !Path::new("/sys/kernel/btf/vmlinux").exists() {
            return Err(SamplerError::NoBtf);
        }
        let cpus = perf::online_cpus()?;
        for source in &opts.sources {
            program_of(source)?;
        }
        let settings = Settings {
            filter_tgid: opts.pid.unwrap_or(0),
            enabled_events: opts.sources.iter().fold(0u32, |m, s| m | 1 << bpf_event(s.event)),
            send_data_addresses: opts.data_addresses,
            unwind_all: opts.unwind == UnwindMode::EhFrame,
            unwind_auto: opts.unwind == UnwindMode::Auto,
            refuse_for_test: opts.test_refusals.0,
        };
        let features = kernel::features();
        let mut sizes = features.sizes(&opts.map_sizes, cpus.len() as u64);
        if sizes != opts.map_sizes {
            tracing::warn!(
                asked = ?opts.map_sizes,
                given = ?sizes,
                "maps smaller than asked for: {}",
                features.memlock_note().unwrap_or_else(|| "this kernel needs unwind_processes preallocated".into())
            );
        }
        let mut wanted = wanted_programs(&opts);
        let mut first = programs::load(&wanted, &settings, &sizes);
        // Where maps count against RLIMIT_MEMLOCK, other processes of the user may hold part of
        // it: smaller maps, a few times.
        for _ in 0..3 {
            match &first {
                Err((SamplerError::Load { source, .. }, _))
                    if features.memlock_limit.is_some() && source.kind() == libbpf_rs::ErrorKind::PermissionDenied =>
                {
                    let budget = kernel::charged_bytes(&sizes, cpus.len() as u64) / 2;
                    sizes = kernel::fit(&sizes, budget, cpus.len() as u64);
                    tracing::warn!(given = ?sizes, "maps refused for RLIMIT_MEMLOCK, trying smaller ones");
                    first = programs::load(&wanted, &settings, &sizes);
                }
                _ => break,
            }
        }
        let (skel, loads, refused_sources) = match first {
            Ok((skel, loads)) => (skel, loads, Vec::new()),
            Err((error, _)) => {
                // Which programs does this kernel refuse? Each alone, then the rest together.
                let trials: Vec<ProgramLoad> = wanted.iter().map(|&p| programs::trial(p, &settings)).collect();
                let refused: Vec<&ProgramLoad> = trials.iter().filter(|t| !t.loaded()).collect();
                if refused.is_empty() {
                    return Err(error);
                }
                for t in &refused {
                    tracing::warn!(
                        program = %t.program,
                        "the kernel refuses this program, what depends on it is off: {}",
                        t.refused.as_deref().unwrap_or_default()
                    );
                }
                let refused_programs: Vec<Program> = refused.iter().map(|t| t.program).collect();
                let (kept, dropped): (Vec<EventSource>, Vec<EventSource>) = std::mem::take(&mut opts.sources)
                    .into_iter()
                    .partition(|s| !program_of(s).is_ok_and(|p| refused_programs.contains(&p)));
                if kept.is_empty() {
                    return Err(SamplerError::AllRefused {
                        reasons: refused
                            .iter()
                            .map(|t| format!("{}: {}", t.program, t.refused.as_deref().unwrap_or_default()))
                            .collect::<Vec<_>>()
                            .join("; "),
                    });
                }
                let refused_sources = dropped
                    .into_iter()
                    .map(|s| {
                        let refusal = program_of(&s)
                            .ok()
                            .and_then(|p| trials.iter().find(|t| t.program == p))
                            .map(|t| format!("{}: {}", t.program, t.refused.as_deref().unwrap_or_default()))
                            .unwrap_or_default();
                        (s, refusal)
                    })
                    .collect::<Vec<_>>();
                opts.sources = kept;
                wanted = wanted_programs(&opts);
                wanted.retain(|p| !refused_programs.contains(p));
                let (skel, mut loads) = programs::load(&wanted, &settings, &sizes).map_err(|(e, _)| e)?;
                loads.extend(refused.into_iter().cloned());
                (skel, loads, refused_sources)
            }
        };
        for load in &loads {
            if let Some(f) = &load.figures {
                tracing::debug!(
                    program = %load.program,
                    insns = f.insns_processed,
                    max_states_per_insn = f.max_states_per_insn,
                    peak_states = f.peak_states,
                    "verified"
                );
            }
        }
        // Each loaded unwinder goes into its array, where the sampling programs of its type find
        // it by a tail call.
        let loaded = |p: Program| loads.iter().any(|l| l.program == p && l.loaded());
        for (unwinder, array) in [
            (Program::UnwindPerfEvent, &skel.maps.unwinder_perf_event),
            (Program::UnwindFentry, &skel.maps.unwinder_fentry),
            (Program::UnwindKprobe, &skel.maps.unwinder_kprobe),
            (Program::UnwindRawTp, &skel.maps.unwinder_raw_tp),
        ] {
            if !loaded(unwinder) {
                continue;
            }
            let fd = unwinder.of(&skel).as_fd().as_raw_fd() as u32;
            array
                .update(&0u32.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
                .map_err(|source| SamplerError::Map {
                    map: "unwinder arrays",
                    source,
                })?;
        }
        // Tables are written when some source's unwinder loaded.
        let any_tables = opts.unwind == UnwindMode::Auto
            && opts
                .sources
                .iter()
                .any(|s| program_of(s).ok().and_then(Program::unwinder).is_some_and(loaded));
        let unwinding: Vec<(EventKind, Unwinding)> = opts
            .sources
            .iter()
            .map(|s| {
                let unwinder = program_of(s).ok().and_then(Program::unwinder);
                let load = unwinder.and_then(|u| loads.iter().find(|l| l.program == u));
                (s.event, Unwinding::of_run(opts.unwind, load, any_tables))
            })
            .collect();

        // The threads that read what the programs send start before any program is attached:
        // the first samples of a process that lives a few milliseconds find them running.
        let unwound: Arc<Mutex<Unwound>> = Arc::default();
        let processes = ProcessMaps::default();
        let unwind_thread = if opts.unwind == UnwindMode::FramePointer {
            None
        } else {
            let map = MapHandle::try_from(&skel.maps.stack_snapshots).map_err(|source| SamplerError::Map {
                map: "stack_snapshots",
                source,
            })?;
            let (out, maps, cached) = (unwound.clone(), processes.clone(), opts.cached_images);
            Some(Worker::spawn("bimodal-unwind", move |stop| {
                unwind_snapshots(map, out, maps, cached, stop)
            }))
        };
        let table_stats: Arc<Mutex<TableStats>> = Arc::default();
        // Tables are written only for an unwinder that loaded.
        let loader = if any_tables {
            let handle = |map: &'static str, m: &libbpf_rs::Map<'_>| {
                MapHandle::try_from(m).map_err(|source| SamplerError::Map { map, source })
            };
            let loader = TableLoader::new(
                handle("unwind_rows", &skel.maps.unwind_rows)?,
                handle("unwind_processes", &skel.maps.unwind_processes)?,
                handle("sampled_processes", &skel.maps.sampled_processes)?,
                sizes.unwind_rows.max(1),
            );
            Some((loader, table_stats.clone()))
        } else {
            None
        };
        // `auto` without any unwinder: frame pointers, once a process is read.
        let frame_pointers = if opts.unwind == UnwindMode::Auto && !any_tables {
            Some(
                MapHandle::try_from(&skel.maps.sampled_processes).map_err(|source| SamplerError::Map {
                    map: "sampled_processes",
                    source,
                })?,
            )
        } else {
            None
        };
        let process_thread = {
            let map = MapHandle::try_from(&skel.maps.new_processes).map_err(|source| SamplerError::Map {
                map: "new_processes",
                source,
            })?;
            let maps = processes.clone();
            Worker::spawn("bimodal-procs", move |stop| {
                watch_processes(map, maps, loader, frame_pointers, stop)
            })
        };

        // Open every perf event first: a refusal then leaves nothing half attached.
        let mut fds = Vec::new();
        for source in &opts.sources {
            if let Attach::Perf(event) = &source.attach {
                for &cpu in &cpus {
                    fds.push((
                        source.event,
                        program_of(source)?,
                        perf::open_sampling_event(event, &source.description, cpu)?,
                    ));
                }
            }
        }
        let mut links = Vec::new();
        for (event, program, fd) in fds {
            let link = program
                .of(&skel)
                .attach_perf_event(fd.as_raw_fd())
                .map_err(|source| SamplerError::Attach {
                    event: event.name(),
                    attach: "perf_event",
                    source,
                })?;
            // The link owns the perf event from here on and closes it when dropped.
            let _ = fd.into_raw_fd();
            links.push(link);
        }
        let mut attached: Vec<&Attach> = Vec::new();
        for source in &opts.sources {
            // remote_access and numa_hint_fault can share one task_numa_fault program.
            if attached.contains(&&source.attach) {
                continue;
            }
            if let Some(link) = attach_tracing(&skel, source.event, &source.attach)? {
                links.push(link);
            }
            attached.push(&source.attach);
        }

        if let Some(work) = &opts.work_uprobe {
            let pid = opts.pid.map_or(-1, |p| p as i32);
            let link = skel
                .progs
                .count_work
                .attach_uprobe_with_opts(
                    pid,
                    &work.binary,
                    0,
                    libbpf_rs::UprobeOpts {
                        func_name: Some(work.symbol.clone()),
                        ..Default::default()
                    },
                )
                .map_err(|source| SamplerError::WorkUprobe {
                    binary: work.binary.display().to_string(),
                    symbol: work.symbol.clone(),
                    source,
                })?;
            links.push(link);
        }

        let ring_out: Arc<Mutex<Vec<(DataSample, u64)>>> = Arc::default();
        let sink = ring_out.clone();
        let mut builder = RingBufferBuilder::new();
        builder
            .add(&skel.maps.data_samples, move |raw: &[u8]| {
                let mut d = data_sample::default();
                if plain::copy_from_bytes(&mut d, raw).is_ok() {
                    let sample = DataSample {
                        tgid: d.tgid,
                        pid: d.pid,
                        event: event_of(d.event),
                        user_stack_id: d.user_stack_id,
                        address: d.address,
                        weight: d.weight,
                    };
                    sink.lock().expect("not poisoned").push((sample, d.user_chain));
                }
                0
            })
            .map_err(|source| SamplerError::Map {
                map: "data_samples",
                source,
            })?;
        let ring = builder.build().map_err(|source| SamplerError::Map {
            map: "data_samples",
            source,
        })?;
        // Exec and exit keep `sampled_processes` true; without them a process is noticed once.
        for (prog, name) in [
            (&skel.progs.process_exec, "sched_process_exec"),
            (&skel.progs.process_exit, "sched_process_exit"),
        ] {
            match prog.attach() {
                Ok(link) => links.push(link),
                Err(e) => tracing::warn!("{name} cannot be traced, a process that execs is noticed once: {e}"),
            }
        }
        Ok(Sampler {
            skel,
            sources: opts.sources,
            refused_sources,
            loads,
            unwinding,
            ring,
            ring_out,
            _links: links,
            drops_seen: HashMap::new(),
            unwound,
            _unwind_thread: unwind_thread,
            table_stats,
            kernel_unwound: UnwindStats::default(),
            processes,
            _process_thread: process_thread,
            work_seen: opts.work_uprobe.as_ref().map(|_| 0),
        })
    }

    /// Units of work since the previous call, when a work uprobe is attached.
    pub fn work_done(&mut self) -> Option<u64> {
        let seen = self.work_seen?;
        let total: u64 = match self
            .skel
            .maps
            .work_calls
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        {
            Ok(Some(per_cpu)) => per_cpu
                .iter()
                .map(|v| v.get(..8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_ne_bytes))
                .sum(),
            Ok(None) => seen,
            Err(e) => {
                tracing::warn!("cannot read the units of work: {e}");
                seen
            }
        };
        self.work_seen = Some(total);
        Some(total.saturating_sub(seen))
    }

    /// The file mappings of the processes sampled, read at their first sample: for
    /// [`crate::symbolize::Frames::with_processes`].
    pub fn processes(&self) -> ProcessMaps {
        self.processes.clone()
    }

    /// Unwinding figures since the sampler started: chains unwound in the kernel from tables and
    /// in the agent from stack copies, together.
    pub fn unwind_stats(&self) -> UnwindStats {
        let copies = self.unwound.lock().expect("not poisoned").stats;
        let kernel = self.kernel_unwound;
        UnwindStats {
            snapshots: copies.snapshots + kernel.snapshots,
            truncated: copies.truncated + kernel.truncated,
            frames: copies.frames + kernel.frames,
        }
    }

    /// Chains unwound in the kernel from tables since the sampler started.
    pub fn kernel_unwound(&self) -> UnwindStats {
        self.kernel_unwound
    }

    /// What the unwind tables hold now.
    pub fn table_stats(&self) -> TableStats {
        *self.table_stats.lock().expect("not poisoned")
    }

    /// The sources being sampled.
    pub fn sources(&self) -> &[EventSource] {
        &self.sources
    }

    /// Sources that were asked for but are not sampled, since the kernel refused their
    /// programs, each with the refusal.
    pub fn refused_sources(&self) -> &[(EventSource, String)] {
        &self.refused_sources
    }

    /// How the load of each program went, with the verifier's figures.
    pub fn program_loads(&self) -> &[ProgramLoad] {
        &self.loads
    }

    /// How the user stacks of `event`'s samples are unwound.
    pub fn unwinding(&self, event: EventKind) -> Option<&Unwinding> {
        self.unwinding.iter().find(|(e, _)| *e == event).map(|(_, u)| u)
    }

    /// Reads the data samples the programs sent so far (they are kept until the next drain): call
    /// it between drains when they are seconds apart, since the ring holds about 20,000.
    pub fn read_data(&mut self) -> Result<(), SamplerError> {
        self.ring.consume().map_err(|source| SamplerError::Map {
            map: "data_samples",
            source,
        })?;
        Ok(())
    }

    /// Flips the sample buffers and reads (and empties) the one programs stopped counting into.
    pub fn drain(&mut self) -> Result<Drained, SamplerError> {
        let bss = self
            .skel
            .maps
            .bss_data
            .as_deref_mut()
            .expect("profile.bpf.c has a .bss section");
        let draining = bss.active_buffer;
        // .bss is memory-mapped and shared with the programs, which read it on every sample.
        bss.active_buffer = 1 - draining;
        // Programs that read the old value just before the flip finish within microseconds.
        std::thread::sleep(Duration::from_millis(2));

        let map_err = |map: &'static str| move |source| SamplerError::Map { map, source };
        let mut drained = Drained::default();
        // Samples unwound from snapshots so far; their kernel stacks are read with the others.
        let unwound = {
            let mut shared = self.unwound.lock().expect("not poisoned");
            Unwound {
                samples: std::mem::take(&mut shared.samples),
                data: std::mem::take(&mut shared.data),
                stats: shared.stats,
            }
        };
        // Data samples reference stacks of both buffers; read them before any stack is deleted.
        self.ring.consume().map_err(map_err("data_samples"))?;
        // Samples whose user chain was unwound in the kernel: (index in samples or data, key).
        let mut chained_samples: Vec<(usize, u64)> = Vec::new();
        let mut chained_data: Vec<(usize, u64)> = Vec::new();
        for (sample, chain) in std::mem::take(&mut *self.ring_out.lock().expect("not poisoned")) {
            if chain != 0 {
                chained_data.push((drained.data.len(), chain));
            }
            drained.data.push(sample);
        }

        let (inactive, active) = if draining == 0 {
            (&self.skel.maps.samples_0, &self.skel.maps.samples_1)
        } else {
            (&self.skel.maps.samples_1, &self.skel.maps.samples_0)
        };
        let mut keys = Vec::new();
        for raw in inactive.keys() {
            let Some(bytes) = inactive.lookup(&raw, MapFlags::ANY).map_err(map_err("samples"))? else {
                continue;
            };
            let mut v = sample_value::default();
            plain::copy_from_bytes(&mut v, &bytes).expect("map value has the size of sample_value");
            let (key, chain) = decode_key(&raw);
            if chain != 0 {
                chained_samples.push((drained.samples.len(), chain));
            }
            drained.samples.push((
                key,
                SampleValue {
                    count: v.count,
                    value: v.value,
                },
            ));
            keys.push(raw);
        }
        for raw in &keys {
            // A key deleted meanwhile is no error: it was counted once already.
            let _ = inactive.delete(raw);
        }

        // Stacks referenced by the active buffer must survive this drain.
        let mut keep: HashSet<i32> = HashSet::new();
        for raw in active.keys() {
            let (k, _) = decode_key(&raw);
            keep.insert(k.user_stack_id);
            keep.insert(k.kernel_stack_id);
        }
        let wanted: HashSet<i32> = drained
            .samples
            .iter()
            .flat_map(|(k, _)| [k.user_stack_id, k.kernel_stack_id])
            .chain(drained.data.iter().map(|d| d.user_stack_id))
            .chain(unwound.samples.keys().map(|(k, _)| k.kernel_stack_id))
            .filter(|&id| id >= 0)
            .collect();
        let stacks = &self.skel.maps.stacks;
        for id in wanted {
            let key = (id as u32).to_ne_bytes();
            if let Some(raw) = stacks.lookup(&key, MapFlags::ANY).map_err(map_err("stacks"))? {
                let ips: Vec<u64> = raw
                    .chunks_exact(8)
                    .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
                    .take_while(|&ip| ip != 0)
                    .collect();
                drained.stacks.insert(id, ips);
            }
            if !keep.contains(&id) {
                let _ = stacks.delete(&key);
            }
        }
        // Unwound chains get stack ids of their own, above those of the stack map.
        let mut chain_ids: HashMap<Vec<u64>, i32> = HashMap::new();
        let mut chain_id = |stacks: &mut HashMap<i32, Vec<u64>>, chain: Vec<u64>| {
            let next = UNWOUND_STACK_ID_BASE + chain_ids.len() as i32;
            *chain_ids.entry(chain).or_insert_with_key(|chain| {
                stacks.insert(next, chain.clone());
                next
            })
        };
        for ((mut key, chain), value) in unwound.samples {
            key.user_stack_id = chain_id(&mut drained.stacks, chain);
            drained.samples.push((key, value));
        }
        for (mut data, chain) in unwound.data {
            data.user_stack_id = chain_id(&mut drained.stacks, chain);
            drained.data.push(data);
        }
        // Chains unwound in the kernel, read once each; the map keeps the recently used.
        // By key: (stack id, reached its outermost frame, frames).
        let mut chains: HashMap<u64, Option<(i32, bool, u64)>> = HashMap::new();
        for &(_, key) in chained_samples.iter().chain(&chained_data) {
            if chains.contains_key(&key) {
                continue;
            }
            let read = self
                .skel
                .maps
                .user_chains
                .lookup(&key.to_ne_bytes(), MapFlags::ANY)
                .map_err(map_err("user_chains"))?;
            let chain = read.map(|raw| {
                let mut c = user_chain::default();
                plain::copy_from_bytes(&mut c, &raw).expect("map value has the size of user_chain");
                let len = (c.len as usize).min(c.pcs.len());
                let id = chain_id(&mut drained.stacks, c.pcs[..len].to_vec());
                (id, c.complete != 0, len as u64)
            });
            chains.insert(key, chain);
        }
        for (index, key) in chained_samples {
            let (k, v) = &mut drained.samples[index];
            match chains.get(&key).copied().flatten() {
                Some((id, complete, frames)) => {
                    k.user_stack_id = id;
                    self.kernel_unwound.snapshots += v.count;
                    self.kernel_unwound.frames += frames * v.count;
                    if !complete {
                        self.kernel_unwound.truncated += v.count;
                    }
                }
                None => drained.dropped.entry(k.event).or_default().stack_missing += v.count,
            }
        }
        for (index, key) in chained_data {
            if let Some((id, _, _)) = chains.get(&key).copied().flatten() {
                drained.data[index].user_stack_id = id;
            }
        }
        for (k, v) in &drained.samples {
            for id in [k.user_stack_id, k.kernel_stack_id] {
                if id >= 0 && !drained.stacks.contains_key(&id) {
                    drained.dropped.entry(k.event).or_default().stack_missing += v.count;
                }
            }
        }

        // Loss counters only grow in BPF; report what was added since the last drain.
        let reasons = profile::types::drop_reason::DROP_REASON_COUNT.0;
        for source in &self.sources {
            let entry = drained.dropped.entry(source.event).or_default();
            for reason in 0..reasons {
                let index = bpf_event(source.event) * reasons + reason;
                let per_cpu = self
                    .skel
                    .maps
                    .drops
                    .lookup_percpu(&index.to_ne_bytes(), MapFlags::ANY)
                    .map_err(map_err("drops"))?
                    .unwrap_or_default();
                let total: u64 = per_cpu
                    .iter()
                    .map(|v| u64::from_ne_bytes(v[..8].try_into().expect("8 bytes")))
                    .sum();
                let seen = self.drops_seen.insert(index, total).unwrap_or(0);
                let added = total.saturating_sub(seen);
                match reason {
                    0 => entry.sample_map_full += added,
                    1 => entry.user_stack += added,
                    2 => entry.kernel_stack += added,
                    3 => entry.data_ring_full += added,
                    _ => entry.snapshot_ring_full += added,
                }
            }
        }
        Ok(drained)
    }
}

/// The number BPF gives an event kind (`enum event_kind` in sample.h), kind by kind: a kind added
/// to the wire does not compile here until BPF numbers it.
pub fn bpf_event(kind: EventKind) -> u32 {
    use profile::types::event_kind as n;
    match kind {
        EventKind::Unspecified => 0,
        EventKind::Cpu => n::EVENT_KIND_CPU.0,
        EventKind::PageFault => n::EVENT_KIND_PAGE_FAULT.0,
        EventKind::CacheMiss => n::EVENT_KIND_CACHE_MISS.0,
        EventKind::RemoteAccess => n::EVENT_KIND_REMOTE_ACCESS.0,
        EventKind::NumaHintFault => n::EVENT_KIND_NUMA_HINT_FAULT.0,
        EventKind::PageMigration => n::EVENT_KIND_PAGE_MIGRATION.0,
    }
}

// The wire's numbers are BPF's (sample.h says so, and the agent's maps are indexed by them):
// checked when the agent compiles, so renumbering either side fails the build.
const _: () = {
    use profile::types::event_kind as n;
    assert!(n::EVENT_KIND_CPU.0 == EventKind::Cpu as u32);
    assert!(n::EVENT_KIND_PAGE_FAULT.0 == EventKind::PageFault as u32);
    assert!(n::EVENT_KIND_CACHE_MISS.0 == EventKind::CacheMiss as u32);
    assert!(n::EVENT_KIND_REMOTE_ACCESS.0 == EventKind::RemoteAccess as u32);
    assert!(n::EVENT_KIND_NUMA_HINT_FAULT.0 == EventKind::NumaHintFault as u32);
    assert!(n::EVENT_KIND_PAGE_MIGRATION.0 == EventKind::PageMigration as u32);
    assert!(n::EVENT_KIND_COUNT.0 as usize == EventKind::ALL.len() + 1);
};

/// The event kind of a number BPF wrote (`Unspecified` for one it has no kind for).
fn event_of(number: u32) -> EventKind {
    EventKind::ALL
        .into_iter()
        .find(|&k| bpf_event(k) == number)
        .unwrap_or(EventKind::Unspecified)
}

/// A task name from BPF: the bytes of a C `char[16]` up to its NUL.
fn comm_string(comm: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = comm.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A sample key, and the key of its user chain in `user_chains` (0: none).
fn decode_key(raw: &[u8]) -> (SampleKey, u64) {
    let mut k = sample_key::default();
    plain::copy_from_bytes(&mut k, raw).expect("map key has the size of sample_key");
    let key = SampleKey {
        tgid: k.tgid,
        pid: k.pid,
        event: event_of(k.event),
        user_stack_id: k.user_stack_id,
        kernel_stack_id: k.kernel_stack_id,
        comm: comm_string(&k.comm),
    };
    (key, k.user_chain)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of the wire has a BPF number, each its own, read back as that kind, and BPF
    /// counts exactly those kinds (`EVENT_KIND_COUNT`). The numbers are the wire's too, as
    /// sample.h says (conversions go through [`bpf_event`] all the same).
    #[test]
    fn every_event_kind_has_its_own_bpf_number() {
        let numbers: std::collections::BTreeSet<u32> = EventKind::ALL.into_iter().map(bpf_event).collect();
        assert_eq!(numbers.len(), EventKind::ALL.len());
        for kind in EventKind::ALL {
            assert_eq!(event_of(bpf_event(kind)), kind);
            assert_eq!(bpf_event(kind), kind as u32, "{}", kind.name());
        }
        assert_eq!(
            profile::types::event_kind::EVENT_KIND_COUNT.0 as usize,
            EventKind::ALL.len() + 1
        );
    }

    /// The wait never truncates to 0 ms before a read is due (the ring would return at once).
    #[test]
    fn a_read_due_in_less_than_a_millisecond_is_waited_for_a_whole_one() {
        let now = Instant::now();
        let wait = |micros| poll_wait(Some(now + Duration::from_micros(micros)), now);
        assert_eq!(wait(300), Duration::from_millis(1));
        assert_eq!(wait(1_000), Duration::from_millis(1));
        assert_eq!(wait(4_200), Duration::from_millis(5));
        assert_eq!(wait(0), Duration::ZERO, "due now: read at once");
        assert_eq!(wait(5_000_000), Duration::from_millis(100));
        assert_eq!(poll_wait(None, now), Duration::from_millis(100));
        assert_eq!(
            poll_wait(Some(now), now + Duration::from_secs(1)),
            Duration::ZERO,
            "overdue"
        );
    }

    /// Half a second of copies from every CPU, in a power of two from 1 to 64 MiB.
    #[test]
    fn the_snapshot_ring_is_sized_from_the_cpus_and_the_rate() {
        let copy = std::mem::size_of::<stack_snapshot>() as u32;
        assert!((12 << 10..13 << 10).contains(&copy), "a copy is {copy} bytes");
        assert_eq!(MapSizes::snapshot_ring_for(1, 1), 1 << 20, "never below 1 MiB");
        // 2 CPUs at 99 Hz: 99 copies, 1.2 MB.
        assert_eq!(MapSizes::snapshot_ring_for(2, 99), 2 << 20);
        // 96 CPUs at 99 Hz: 4,752 copies, 59 MB.
        assert_eq!(MapSizes::snapshot_ring_for(96, 99), 64 << 20);
        assert_eq!(MapSizes::snapshot_ring_for(192, 999), 64 << 20, "never above 64 MiB");
        for (cpus, hz) in [(2, 99), (8, 499), (64, 99)] {
            let bytes = MapSizes::snapshot_ring_for(cpus, hz);
            assert!(bytes.is_power_of_two());
            assert!(f64::from(bytes) >= cpus as f64 * hz as f64 * SNAPSHOT_RING_SECONDS * f64::from(copy));
        }
    }

    /// A key per CPU sample of an interval and half as many stacks, powers of two between the
    /// floors and the ceilings.
    #[test]
    fn sample_and_stack_maps_are_sized_from_the_machine() {
        let ten = std::time::Duration::from_secs(10);
        let small = MapSizes::for_machine(2, 99, ten);
        assert_eq!((small.samples, small.stacks), (16384, 16384), "the floors");
        assert_eq!(small.snapshot_ring, MapSizes::snapshot_ring_for(2, 99));
        // 96 CPUs × 99 Hz × 10 s = 95,040 samples.
        let large = MapSizes::for_machine(96, 99, ten);
        assert_eq!((large.samples, large.stacks), (131_072, 65536));
        let huge = MapSizes::for_machine(200, 999, ten);
        assert_eq!(
            (huge.samples, huge.stacks),
            (MAX_MAP_SAMPLES, MAX_MAP_STACKS),
            "the ceilings"
        );
        // `record` drains every second.
        let record = MapSizes::for_machine(96, 99, std::time::Duration::from_secs(1));
        assert_eq!((record.samples, record.stacks), (16384, 16384));
        for (cpus, hz, secs) in [(4, 99, 10), (32, 99, 10), (48, 199, 5), (128, 99, 30)] {
            let m = MapSizes::for_machine(cpus, hz, std::time::Duration::from_secs(secs));
            assert!(m.samples.is_power_of_two() && m.stacks.is_power_of_two());
            let wanted = cpus as u64 * hz * secs;
            assert!(
                u64::from(m.samples) >= wanted.min(u64::from(MAX_MAP_SAMPLES)),
                "{cpus} {hz} {secs}"
            );
            assert!(
                u64::from(m.stacks) >= (wanted / 2).min(u64::from(MAX_MAP_STACKS)),
                "{cpus} {hz} {secs}"
            );
        }
    }
}
