//! `bimodal-agent probe`: which source samples each event kind on this machine, how its stacks
//! are unwound, and why every better candidate was rejected. [`LiveProber`] tries each candidate
//! for real: it opens perf events and loads BPF programs, so it lives above both `events` (which
//! only ranks candidates) and `bpf`.

use std::fmt::Write;

use serde::Serialize;

use crate::sample::bpf::{self, Program, ProgramLoad, Settings, TestRefusals, UnwindMode, Unwinding};
use crate::sample::events::{self, Attach, EventKind, Machine, PerfEvent, Prober, Rates, Rejected, Resolution};

/// Opens perf events and loads BPF programs on this machine; each program and tracing source is
/// tried once.
#[derive(Debug, Default)]
pub struct LiveProber {
    refusals: TestRefusals,
    tried: std::sync::Mutex<Vec<(Attach, Result<(), String>)>>,
    loads: std::sync::Mutex<Vec<ProgramLoad>>,
}

impl LiveProber {
    /// A prober whose trial loads make the kernel refuse what `refusals` names (tests only).
    pub fn new(refusals: TestRefusals) -> LiveProber {
        LiveProber {
            refusals,
            ..LiveProber::default()
        }
    }

    /// Loads `program` alone under the widest settings, once: whether this kernel takes it.
    pub fn trial(&self, program: Program) -> ProgramLoad {
        let mut loads = self.loads.lock().expect("not poisoned");
        if let Some(l) = loads.iter().find(|l| l.program == program) {
            return l.clone();
        }
        let l = bpf::trial(program, &Settings::widest(self.refusals.0));
        loads.push(l.clone());
        l
    }

    /// How a run asking for `mode` would unwind the stacks of `source`'s samples here.
    pub fn unwinding(&self, mode: UnwindMode, source: &events::EventSource) -> Unwinding {
        let unwinder = Program::sampling(source.event, &source.attach).and_then(Program::unwinder);
        let load = match mode {
            UnwindMode::Auto => unwinder.map(|u| self.trial(u)),
            UnwindMode::FramePointer | UnwindMode::EhFrame => None,
        };
        // Alone, a source whose unwinder is refused has its processes walk frame pointers.
        let tables = load.as_ref().is_some_and(ProgramLoad::loaded);
        Unwinding::of_run(mode, load.as_ref(), tables)
    }
}

impl Prober for LiveProber {
    fn open_perf(&self, event: &PerfEvent, description: &str) -> Result<(), String> {
        events::perf::open_sampling_event(event, description, 0)
            .map(drop)
            .map_err(|e| match e {
                events::perf::OpenError::Open { meaning, source, .. } => format!("{meaning} ({source})"),
                other => other.to_string(),
            })
    }

    fn load_perf_program(&self, event: EventKind) -> Result<(), String> {
        let Some(program) = Program::sampling_perf(event) else {
            return Err(format!("no BPF program samples {} from perf events", event.name()));
        };
        let load = self.trial(program);
        match load.refused {
            None => Ok(()),
            Some(why) => Err(format!("its BPF program {program} cannot load here: {why}")),
        }
    }

    fn load_tracing(&self, attach: &Attach) -> Result<(), String> {
        let mut tried = self.tried.lock().expect("not poisoned");
        if let Some((_, r)) = tried.iter().find(|(a, _)| a == attach) {
            return r.clone();
        }
        let r = bpf::try_attach(attach, self.refusals);
        tried.push((attach.clone(), r.clone()));
        r
    }
}

/// The chosen source of one event kind.
#[derive(Clone, Debug, Serialize)]
pub struct Chosen {
    pub source: String,
    pub encoding: String,
    pub attach: &'static str,
    pub data_address: bool,
}

/// What `probe` found for one event kind.
#[derive(Clone, Debug, Serialize)]
pub struct EventReport {
    pub event: &'static str,
    pub chosen: Option<Chosen>,
    /// How the chosen source's stacks are unwound (absent when nothing was chosen or the
    /// unwinding was not resolved).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unwinding: Option<Unwinding>,
    pub rejected: Vec<Rejected>,
}

/// The whole machine.
#[derive(Clone, Debug, Serialize)]
pub struct ProbeReport {
    pub cpu: String,
    /// The PMUs the kernel exposes (`/sys/bus/event_source/devices`).
    pub pmus: Vec<String>,
    /// The core (hardware) PMU, if any.
    pub hardware_pmu: Option<String>,
    pub events: Vec<EventReport>,
    /// The running kernel's release, and what it makes the agent do without.
    pub kernel: String,
    pub kernel_notes: Vec<String>,
    /// Every program of the agent loaded alone on this kernel, with the verifier's figures
    /// (`probe --verifier`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<ProgramLoad>,
}

/// Resolves every event kind on `machine`, and how a run asking for `unwind` would unwind each
/// one's stacks.
pub fn probe(machine: &Machine, rates: &Rates, unwind: UnwindMode, prober: &LiveProber) -> ProbeReport {
    let resolutions = events::resolve_all(rates, machine, prober);
    let mut report = report(machine, &resolutions);
    for (e, r) in report.events.iter_mut().zip(&resolutions) {
        e.unwinding = r.chosen.as_ref().map(|s| prober.unwinding(unwind, s));
    }
    report
}

impl ProbeReport {
    /// The report as a started sampler left it: how each sampled event kind's stacks are
    /// unwound, and the event kinds whose programs the kernel refused at the load, unavailable
    /// with that reason.
    pub fn with_sampler(mut self, sampler: &bpf::Sampler) -> ProbeReport {
        for e in &mut self.events {
            let Some(event) = EventKind::from_name(e.event) else {
                continue;
            };
            if let Some((source, why)) = sampler.refused_sources().iter().find(|(s, _)| s.event == event) {
                e.chosen = None;
                e.unwinding = None;
                e.rejected.push(Rejected {
                    candidate: source.encoding.clone(),
                    reason: why.clone(),
                });
            } else if let Some(u) = sampler.unwinding(event) {
                e.unwinding = Some(u.clone());
            }
        }
        self
    }
}

/// Loads every program of the agent alone under the widest settings: whether this kernel takes
/// each, and the verifier's figures for it.
pub fn verifier(prober: &LiveProber) -> Vec<ProgramLoad> {
    Program::ALL.into_iter().map(|p| prober.trial(p)).collect()
}

/// The report of `resolutions` ([`events::resolve_all`]) on `machine`.
pub fn report(machine: &Machine, resolutions: &[Resolution]) -> ProbeReport {
    let events = resolutions
        .iter()
        .map(|r| EventReport {
            event: r.event.name(),
            chosen: r.chosen.as_ref().map(|s| Chosen {
                attach: s.attach.kind_name(),
                source: s.description.clone(),
                encoding: s.encoding.clone(),
                data_address: s.data_address,
            }),
            unwinding: None,
            rejected: r.rejected.clone(),
        })
        .collect();
    ProbeReport {
        cpu: match &machine.cpu {
            Ok(c) => c.to_string(),
            Err(e) => format!("unknown ({e})"),
        },
        pmus: machine.pmus.iter().map(|p| p.name.clone()).collect(),
        hardware_pmu: machine.pmus.core_pmu().map(|p| p.name.clone()),
        events,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|r| r.trim().to_owned())
            .unwrap_or_default(),
        kernel_notes: bpf::kernel::features().notes(),
        programs: Vec::new(),
    }
}

impl ProbeReport {
    /// The report as a person reads it.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "cpu: {}", self.cpu);
        let _ = writeln!(out, "kernel: {}", self.kernel);
        for note in &self.kernel_notes {
            let _ = writeln!(out, "  without: {note}");
        }
        match &self.hardware_pmu {
            Some(p) => {
                let _ = writeln!(out, "hardware PMU: {p}");
            }
            None => {
                let _ = writeln!(
                    out,
                    "hardware PMU: none — the kernel exposes only {}; cache_miss cannot be counted and \
                     remote_access falls back to NUMA-balancing hinting faults",
                    self.pmus.join(", ")
                );
            }
        }
        for e in &self.events {
            let _ = writeln!(out);
            match &e.chosen {
                Some(c) => {
                    let addr = if c.data_address { ", with data addresses" } else { "" };
                    let _ = writeln!(out, "{}: {} [{} via {}]{addr}", e.event, c.source, c.encoding, c.attach);
                    if let Some(u) = &e.unwinding {
                        let _ = match &u.reduced {
                            None => writeln!(out, "  stacks: {}", describe_method(u.method)),
                            Some(why) => writeln!(out, "  stacks: {} — REDUCED: {why}", describe_method(u.method)),
                        };
                    }
                }
                None => {
                    let _ = writeln!(out, "{}: UNAVAILABLE", e.event);
                }
            }
            for r in &e.rejected {
                let _ = writeln!(out, "  rejected {}: {}", r.candidate, r.reason);
            }
        }
        if !self.programs.is_empty() {
            let _ = writeln!(out);
            let _ = write!(out, "{}", verifier_table(&self.programs));
        }
        out
    }
}

/// A method of unwinding in words.
fn describe_method(m: bpf::UnwindMethod) -> &'static str {
    match m {
        bpf::UnwindMethod::KernelTables => "unwound in the kernel from .eh_frame tables",
        bpf::UnwindMethod::StackCopies => "unwound by the agent from stack copies",
        bpf::UnwindMethod::FramePointers => "frame pointers only (callers of code without them are lost)",
    }
}

/// The verifier's figures per program, as a table: instructions processed and states per
/// instruction against the verifier's limits, and the margin (how many times over the program
/// would fit).
pub fn verifier_table(loads: &[ProgramLoad]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "verifier, per program (limits: {} instructions processed, {} states per instruction):",
        bpf::VERIFIER_INSNS_LIMIT,
        bpf::VERIFIER_STATES_PER_INSN_LIMIT
    );
    let _ = writeln!(
        out,
        "  {:<22} {:>9} {:>12} {:>7} {:>8} {:>8} {:>9}  verdict",
        "program", "insns", "states/insn", "total", "peak", "margin", "time"
    );
    for l in loads {
        let verdict = match &l.refused {
            None => "loaded".to_owned(),
            Some(why) => format!("REFUSED: {why}"),
        };
        match &l.figures {
            Some(f) => {
                let time = f.verification_usec.map_or("-".to_owned(), |us| format!("{us} us"));
                let _ = writeln!(
                    out,
                    "  {:<22} {:>9} {:>12} {:>7} {:>8} {:>7.0}x {:>9}  {verdict}",
                    l.program.name(),
                    f.insns_processed,
                    f.max_states_per_insn,
                    f.total_states,
                    f.peak_states,
                    f.margin(),
                    time
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "  {:<22} {:>9} {:>12} {:>7} {:>8} {:>8} {:>9}  {verdict}",
                    l.program.name(),
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    "-"
                );
            }
        }
    }
    out
}
