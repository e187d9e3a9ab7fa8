//! The programs of `profile.bpf.c` one by one: which ones a run needs, loading exactly those
//! with the verifier's figures for each, and trying one alone to learn whether this kernel takes
//! it (docs/design/030).
//!
//! A kernel may refuse one program and take the others (a verifier that gives up earlier, a
//! helper it lacks): loading is by program, so a refusal costs only what depends on it.

use std::collections::BTreeMap;
use std::ffi::c_char;
use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{AsRawLibbpf, OpenObject};
use serde::Serialize;

use super::profile::{OpenProfileSkel, ProfileSkel, ProfileSkelBuilder};
use super::{kernel, MapSizes, SamplerError};
use crate::sample::events::{Attach, EventKind};

/// The verifier's limit on instructions processed per program (`BPF_COMPLEXITY_LIMIT_INSNS`,
/// the same since Linux 5.2).
pub const VERIFIER_INSNS_LIMIT: u64 = 1_000_000;
/// States the verifier keeps per instruction for pruning (`BPF_COMPLEXITY_LIMIT_STATES`): past
/// it, it stops remembering and explores again what it would have pruned.
pub const VERIFIER_STATES_PER_INSN_LIMIT: u64 = 64;

/// One program of `profile.bpf.c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Program {
    SampleCpu,
    SamplePageFault,
    SampleCacheMiss,
    SampleRemoteAccess,
    NumaFaultFentry,
    NumaFaultKprobe,
    PageMigration,
    UnwindPerfEvent,
    UnwindFentry,
    UnwindKprobe,
    UnwindRawTp,
    ProcessExec,
    ProcessExit,
    CountWork,
}

impl Program {
    pub const ALL: [Program; 14] = [
        Program::SampleCpu,
        Program::SamplePageFault,
        Program::SampleCacheMiss,
        Program::SampleRemoteAccess,
        Program::NumaFaultFentry,
        Program::NumaFaultKprobe,
        Program::PageMigration,
        Program::UnwindPerfEvent,
        Program::UnwindFentry,
        Program::UnwindKprobe,
        Program::UnwindRawTp,
        Program::ProcessExec,
        Program::ProcessExit,
        Program::CountWork,
    ];

    /// The program's name in `profile.bpf.c`.
    pub fn name(self) -> &'static str {
        match self {
            Program::SampleCpu => "sample_cpu",
            Program::SamplePageFault => "sample_page_fault",
            Program::SampleCacheMiss => "sample_cache_miss",
            Program::SampleRemoteAccess => "sample_remote_access",
            Program::NumaFaultFentry => "numa_fault_fentry",
            Program::NumaFaultKprobe => "numa_fault_kprobe",
            Program::PageMigration => "page_migration",
            Program::UnwindPerfEvent => "unwind_perf_event",
            Program::UnwindFentry => "unwind_fentry",
            Program::UnwindKprobe => "unwind_kprobe",
            Program::UnwindRawTp => "unwind_raw_tp",
            Program::ProcessExec => "process_exec",
            Program::ProcessExit => "process_exit",
            Program::CountWork => "count_work",
        }
    }

    /// The program that samples `event` through `attach`; `None` for a perf event of a kind no
    /// perf-event program counts.
    pub fn sampling(event: EventKind, attach: &Attach) -> Option<Program> {
        match attach {
            Attach::Perf(_) => Program::sampling_perf(event),
            Attach::NumaFaultFentry => Some(Program::NumaFaultFentry),
            Attach::NumaFaultKprobe => Some(Program::NumaFaultKprobe),
            Attach::MigrateTracepoint => Some(Program::PageMigration),
        }
    }

    /// The program that samples `event` from perf events; `None` for kinds no perf event counts
    /// (their sources are tracing ones).
    pub fn sampling_perf(event: EventKind) -> Option<Program> {
        match event {
            EventKind::Cpu => Some(Program::SampleCpu),
            EventKind::PageFault => Some(Program::SamplePageFault),
            EventKind::CacheMiss => Some(Program::SampleCacheMiss),
            EventKind::RemoteAccess => Some(Program::SampleRemoteAccess),
            EventKind::NumaHintFault | EventKind::PageMigration | EventKind::Unspecified => None,
        }
    }

    /// The unwinder a sampling program hands its walks to (a tail call stays within a type).
    pub fn unwinder(self) -> Option<Program> {
        match self {
            Program::SampleCpu | Program::SamplePageFault | Program::SampleCacheMiss | Program::SampleRemoteAccess => {
                Some(Program::UnwindPerfEvent)
            }
            Program::NumaFaultFentry => Some(Program::UnwindFentry),
            Program::NumaFaultKprobe => Some(Program::UnwindKprobe),
            Program::PageMigration => Some(Program::UnwindRawTp),
            Program::UnwindPerfEvent
            | Program::UnwindFentry
            | Program::UnwindKprobe
            | Program::UnwindRawTp
            | Program::ProcessExec
            | Program::ProcessExit
            | Program::CountWork => None,
        }
    }

    /// This program in a loaded skeleton.
    pub(super) fn of<'a>(self, skel: &'a ProfileSkel<'static>) -> &'a libbpf_rs::ProgramMut<'static> {
        let progs = &skel.progs;
        match self {
            Program::SampleCpu => &progs.sample_cpu,
            Program::SamplePageFault => &progs.sample_page_fault,
            Program::SampleCacheMiss => &progs.sample_cache_miss,
            Program::SampleRemoteAccess => &progs.sample_remote_access,
            Program::NumaFaultFentry => &progs.numa_fault_fentry,
            Program::NumaFaultKprobe => &progs.numa_fault_kprobe,
            Program::PageMigration => &progs.page_migration,
            Program::UnwindPerfEvent => &progs.unwind_perf_event,
            Program::UnwindFentry => &progs.unwind_fentry,
            Program::UnwindKprobe => &progs.unwind_kprobe,
            Program::UnwindRawTp => &progs.unwind_raw_tp,
            Program::ProcessExec => &progs.process_exec,
            Program::ProcessExit => &progs.process_exit,
            Program::CountWork => &progs.count_work,
        }
    }

    /// Whether this is one of the unwinder programs.
    pub fn is_unwinder(self) -> bool {
        matches!(
            self,
            Program::UnwindPerfEvent | Program::UnwindFentry | Program::UnwindKprobe | Program::UnwindRawTp
        )
    }
}

impl std::fmt::Display for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The settings written into the programs before they load (`const volatile` in
/// `profile.bpf.c`): the verifier checks the code they leave reachable, so a trial load takes
/// the settings of the run it stands for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    pub filter_tgid: u32,
    /// Event kinds recorded, one bit per `EventKind` number.
    pub enabled_events: u32,
    pub send_data_addresses: bool,
    pub unwind_all: bool,
    pub unwind_auto: bool,
    /// Tests only: programs made to be refused by the verifier ([`TestRefusals`]).
    pub refuse_for_test: u32,
}

impl Settings {
    /// The settings under which a program does the most: every event kind, data addresses,
    /// `auto` unwinding. What `probe` tries programs with.
    pub fn widest(refuse_for_test: u32) -> Settings {
        Settings {
            filter_tgid: 0,
            enabled_events: EventKind::ALL.iter().fold(0, |m, e| m | 1 << super::bpf_event(*e)),
            send_data_addresses: true,
            unwind_all: false,
            unwind_auto: true,
            refuse_for_test,
        }
    }
}

/// Programs a test asks the kernel to refuse (`--test-refuse`, never for production): each is
/// built so that the verifier rejects it, so what the agent does about a refusal runs for real.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TestRefusals(pub u32);

/// The bit `profile.bpf.c` reads for the unwinder programs (`TEST_REFUSE_UNWINDER`).
const TEST_REFUSE_UNWINDER: u32 = 1 << 31;

impl std::str::FromStr for TestRefusals {
    type Err = String;

    /// A comma-separated list of `unwinder` and event kind names.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut bits = 0;
        for word in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            bits |= match word {
                "unwinder" => TEST_REFUSE_UNWINDER,
                other => match EventKind::ALL.into_iter().find(|e| e.name() == other) {
                    Some(e) => 1 << super::bpf_event(e),
                    None => return Err(format!("`{other}` is neither `unwinder` nor an event kind")),
                },
            };
        }
        Ok(TestRefusals(bits))
    }
}

/// What the verifier reported of one program it checked (`BPF_LOG_STATS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VerifierFigures {
    /// Instructions processed, of [`VERIFIER_INSNS_LIMIT`].
    pub insns_processed: u64,
    /// The most states kept for one instruction, of [`VERIFIER_STATES_PER_INSN_LIMIT`].
    pub max_states_per_insn: u64,
    pub total_states: u64,
    pub peak_states: u64,
    /// Microseconds the verifier took (kernels that say).
    pub verification_usec: Option<u64>,
}

impl VerifierFigures {
    /// The figures in a verifier log, from its `processed … insns` line; `None` without one.
    pub fn parse(log: &str) -> Option<VerifierFigures> {
        let line = log.lines().rev().find(|l| l.starts_with("processed "))?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let after = |key: &str| {
            words
                .iter()
                .position(|w| *w == key)
                .and_then(|i| words.get(i + 1))
                .and_then(|v| v.parse::<u64>().ok())
        };
        let usec = log
            .lines()
            .find_map(|l| l.strip_prefix("verification time "))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok());
        Some(VerifierFigures {
            insns_processed: after("processed")?,
            max_states_per_insn: after("max_states_per_insn").unwrap_or(0),
            total_states: after("total_states").unwrap_or(0),
            peak_states: after("peak_states").unwrap_or(0),
            verification_usec: usec,
        })
    }

    /// How many times over the program would fit in the verifier's limits: the smaller of the
    /// two ratios (instructions, states per instruction).
    pub fn margin(&self) -> f64 {
        let insns = VERIFIER_INSNS_LIMIT as f64 / self.insns_processed.max(1) as f64;
        let states = VERIFIER_STATES_PER_INSN_LIMIT as f64 / self.max_states_per_insn.max(1) as f64;
        insns.min(states)
    }
}

/// How loading one program went.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProgramLoad {
    pub program: Program,
    /// `None`: loaded. Otherwise why the kernel refused it, in words.
    pub refused: Option<String>,
    /// The verifier's figures, when it got as far as giving them.
    pub figures: Option<VerifierFigures>,
}

impl ProgramLoad {
    pub fn loaded(&self) -> bool {
        self.refused.is_none()
    }
}

/// Bytes of verifier log kept per program: the figures and, for a refused program, the lines
/// that say why. With only `BPF_LOG_STATS` asked for, the kernel writes no per-instruction
/// lines, so this is never filled (a full log would fail the load on kernels before 6.4).
const LOG_BYTES: usize = 64 << 10;

/// The log level asking for the figures and the errors only.
const LOG_STATS: u32 = 4;

/// The verifier logs of the programs of one load, one buffer each, handed to libbpf before the
/// load and read after it.
struct Logs {
    buffers: BTreeMap<Program, Box<[u8]>>,
}

impl Logs {
    fn attach(open: &mut OpenProfileSkel<'static>, programs: &[Program]) -> Logs {
        let mut buffers = BTreeMap::new();
        for mut prog in open.open_object_mut().progs_mut() {
            let Some(program) = Program::ALL.into_iter().find(|p| prog.name() == p.name()) else {
                continue;
            };
            if !programs.contains(&program) {
                continue;
            }
            let mut buffer = vec![0u8; LOG_BYTES].into_boxed_slice();
            prog.set_log_level(LOG_STATS);
            // SAFETY: the program pointer is live (the open object owns it); the buffer is
            // kept in `buffers`, which outlives the load that writes into it, and its length is
            // the size passed.
            unsafe {
                libbpf_rs::libbpf_sys::bpf_program__set_log_buf(
                    prog.as_libbpf_object().as_ptr(),
                    buffer.as_mut_ptr().cast::<c_char>(),
                    buffer.len() as libbpf_rs::libbpf_sys::size_t,
                );
            }
            buffers.insert(program, buffer);
        }
        Logs { buffers }
    }

    /// The text the verifier wrote for `program`.
    fn text(&self, program: Program) -> String {
        let Some(b) = self.buffers.get(&program) else {
            return String::new();
        };
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    }
}

/// Why a log says the program was refused: its last lines before the figures, or the error.
fn refusal(log: &str, error: &libbpf_rs::Error) -> String {
    let said: Vec<&str> = log
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty()
                && !l.starts_with("processed ")
                && !l.starts_with("verification time")
                && !l.starts_with("stack depth")
        })
        .collect();
    let tail = said[said.len().saturating_sub(2)..].join("; ");
    if tail.is_empty() {
        format!("refused by the kernel: {error}")
    } else {
        format!("refused by the verifier: {tail} ({error})")
    }
}

/// Opens the skeleton with `programs` marked for loading and nothing else, `settings` written
/// and maps sized by `sizes`: the one place the skeleton is opened.
pub(super) fn open(
    programs: &[Program],
    settings: &Settings,
    sizes: &MapSizes,
) -> Result<OpenProfileSkel<'static>, SamplerError> {
    super::route_libbpf_logs();
    // The skeleton borrows its object storage for its whole life; a sampler lives for the
    // whole process, so the few bytes are leaked deliberately rather than self-referenced.
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = ProfileSkelBuilder::default().open(storage).map_err(super::load_error)?;
    if let Some(rodata) = open.maps.rodata_data.as_deref_mut() {
        rodata.filter_tgid = settings.filter_tgid;
        rodata.skip_tgid = std::process::id();
        rodata.send_data_addresses = settings.send_data_addresses;
        rodata.enabled_events = settings.enabled_events;
        rodata.unwind_all = settings.unwind_all;
        rodata.unwind_auto = settings.unwind_auto;
        rodata.refuse_for_test = settings.refuse_for_test;
    }
    let maps = &mut open.maps;
    maps.stack_snapshots
        .set_max_entries(sizes.snapshot_ring)
        .map_err(super::load_error)?;
    for map in [&mut maps.samples_0, &mut maps.samples_1] {
        map.set_max_entries(sizes.samples).map_err(super::load_error)?;
    }
    maps.stacks.set_max_entries(sizes.stacks).map_err(super::load_error)?;
    maps.user_chains
        .set_max_entries(sizes.stacks)
        .map_err(super::load_error)?;
    maps.unwind_rows
        .set_max_entries(sizes.unwind_rows.max(1))
        .map_err(super::load_error)?;
    // Before Linux 6.1 programs of perf events may only use preallocated hash maps.
    if !kernel::features().unpreallocated_maps_in_nmi {
        maps.unwind_processes.set_map_flags(0).map_err(super::load_error)?;
    }
    maps.unwind_processes
        .set_max_entries(sizes.processes.max(1))
        .map_err(super::load_error)?;
    for mut prog in open.open_object_mut().progs_mut() {
        let wanted = programs.iter().any(|p| prog.name() == p.name());
        prog.set_autoload(wanted);
    }
    Ok(open)
}

/// Maps of a trial load: as small as the kernel takes, since nothing runs.
pub(super) const TRIAL_SIZES: MapSizes = MapSizes {
    samples: 16,
    stacks: 16,
    snapshot_ring: 64 << 10,
    unwind_rows: 1,
    processes: 1,
};

/// Loads `programs` under `settings` with maps of `sizes`: the loaded skeleton and each
/// program's figures, or the error and whatever figures the kernel gave before it.
pub(super) fn load(
    programs: &[Program],
    settings: &Settings,
    sizes: &MapSizes,
) -> Result<(ProfileSkel<'static>, Vec<ProgramLoad>), (SamplerError, Vec<ProgramLoad>)> {
    let mut open = open(programs, settings, sizes).map_err(|e| (e, Vec::new()))?;
    let logs = Logs::attach(&mut open, programs);
    let loaded = open.load();
    let loads = |refused: Option<&libbpf_rs::Error>| {
        programs
            .iter()
            .map(|&program| {
                let log = logs.text(program);
                ProgramLoad {
                    program,
                    refused: refused.map(|e| refusal(&log, e)),
                    figures: VerifierFigures::parse(&log),
                }
            })
            .collect::<Vec<_>>()
    };
    match loaded {
        Ok(skel) => Ok((skel, loads(None))),
        Err(e) => {
            let report = loads(Some(&e));
            Err((super::load_error(e), report))
        }
    }
}

/// Loads `program` alone under `settings` (small maps, nothing attached) and unloads it: whether
/// this kernel takes it, and the verifier's figures.
pub fn trial(program: Program, settings: &Settings) -> ProgramLoad {
    match load(&[program], settings, &TRIAL_SIZES) {
        Ok((_skel, mut loads)) => loads.pop().unwrap_or(ProgramLoad {
            program,
            refused: None,
            figures: None,
        }),
        Err((error, loads)) => {
            let figures = loads.first().and_then(|l| l.figures);
            let refused = loads
                .into_iter()
                .next()
                .and_then(|l| l.refused)
                .unwrap_or_else(|| error.to_string());
            ProgramLoad {
                program,
                refused: Some(refused),
                figures,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures line of a 6.x kernel and of 5.10 (no `mark_read` there) both parse.
    #[test]
    fn verifier_figures_are_read_from_the_log() {
        let log = "func#0 @0\nverification time 1234 usec\nstack depth 64\n\
                   processed 7021 insns (limit 1000000) max_states_per_insn 4 total_states 312 peak_states 280 mark_read 31\n";
        let f = VerifierFigures::parse(log).unwrap();
        assert_eq!(
            f,
            VerifierFigures {
                insns_processed: 7021,
                max_states_per_insn: 4,
                total_states: 312,
                peak_states: 280,
                verification_usec: Some(1234),
            }
        );
        assert!(
            (f.margin() - 16.0).abs() < 1e-9,
            "states per insn bound it: {}",
            f.margin()
        );
        let old = "processed 120 insns (limit 1000000) max_states_per_insn 0 total_states 9 peak_states 9 mark_read 2";
        assert_eq!(VerifierFigures::parse(old).unwrap().insns_processed, 120);
        assert_eq!(VerifierFigures::parse("R1 invalid mem access 'scalar'"), None);
    }

    /// A refused program's reason is the verifier's last words, not the figures after them.
    #[test]
    fn a_refusal_quotes_the_verifier() {
        let log = "0: R1=ctx() R10=fp0\n; return *(volatile int *)(long)bpf_get_prandom_u32();\n\
                   R0 invalid mem access 'scalar'\nprocessed 9 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0 mark_read 0\n";
        let e = libbpf_rs::Error::from(std::io::Error::from_raw_os_error(13));
        let why = refusal(log, &e);
        assert!(why.contains("R0 invalid mem access 'scalar'"), "{why}");
        assert!(!why.contains("processed"), "{why}");
    }

    /// Names in the list are `unwinder` and event kinds; anything else is an error.
    #[test]
    fn test_refusals_parse() {
        let r: TestRefusals = "unwinder, cpu".parse().unwrap();
        assert_eq!(r.0, TEST_REFUSE_UNWINDER | 1 << super::super::bpf_event(EventKind::Cpu));
        assert!("unwinders".parse::<TestRefusals>().is_err());
        assert_eq!("".parse::<TestRefusals>().unwrap().0, 0);
    }

    /// Every sampling program has an unwinder of its own type, and every name is a program of
    /// the object (the skeleton would not have compiled otherwise; this checks the list).
    #[test]
    fn every_sampling_program_has_an_unwinder() {
        for p in Program::ALL {
            if p.is_unwinder() || matches!(p, Program::ProcessExec | Program::ProcessExit | Program::CountWork) {
                assert_eq!(p.unwinder(), None, "{p}");
            } else {
                assert!(p.unwinder().is_some_and(Program::is_unwinder), "{p}");
            }
        }
    }
}
