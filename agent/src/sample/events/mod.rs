//! Event kinds and how each is sampled on this machine.
//!
//! For every kind the agent walks its candidate sources best first — a model-specific hardware
//! PMU event with data addresses, a generic hardware event, then a software source — and picks
//! the first that actually opens here. Every rejected candidate keeps its reason, so `probe`
//! can say plainly what the machine lacks.

pub mod counting;
pub mod perf;
pub mod pmu;

use std::fmt;

pub use bimodal_proto::v1::EventKind;

use perf_event_open_sys::bindings as sys;
use pmu::{CpuId, Delivery, PerfType, Pmus};

/// How a chosen source is attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attach {
    /// A sampling perf event on every online CPU, with the event kind's BPF program on it.
    Perf(PerfEvent),
    /// fentry on `task_numa_fault` (NUMA-balancing hinting faults).
    NumaFaultFentry,
    /// kprobe on `task_numa_fault`, where fentry cannot load.
    NumaFaultKprobe,
    /// The `mm_migrate_pages` raw tracepoint.
    MigrateTracepoint,
}

impl Attach {
    /// Short, stable name of the attach kind for reports.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Attach::Perf(_) => "perf_event",
            Attach::NumaFaultFentry => "fentry",
            Attach::NumaFaultKprobe => "kprobe",
            Attach::MigrateTracepoint => "raw_tracepoint",
        }
    }
}

/// A perf event, ready for perf_event_open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerfEvent {
    pub perf_type: u32,
    pub config: u64,
    pub config1: u64,
    pub precise_ip: u8,
    /// Ask for the data address with every sample.
    pub sample_addr: bool,
    /// Events between samples (nanoseconds for cpu-clock).
    pub period: u64,
}

/// How one event kind is sampled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSource {
    pub event: EventKind,
    pub attach: Attach,
    /// Events per sample; 1 where every event is counted (tracing sources).
    pub period: u64,
    /// What a person reads, e.g. "software page-faults, 1 in 100, with data addresses".
    pub description: String,
    /// The stable name of what is measured, the same on every node that measures it the same
    /// way (`cpu-clock`, `page-faults`, `task_numa_fault`, a PMU event's name): the server keeps
    /// samples of different sources apart.
    pub name: String,
    /// The unit of a sample's value under this source (`nanoseconds`, `faults`, `pages`, ...).
    pub unit: &'static str,
    /// The encoding in perf syntax or the attach point, e.g. `cpu/event=0xd3,umask=0x02/pp`.
    pub encoding: String,
    /// Whether samples carry the data address they touched.
    pub data_address: bool,
}

/// A candidate source that cannot be used here, and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Rejected {
    pub candidate: String,
    pub reason: String,
}

/// The outcome of choosing a source for one event kind.
#[derive(Clone, Debug)]
pub struct Resolution {
    pub event: EventKind,
    pub chosen: Option<EventSource>,
    pub rejected: Vec<Rejected>,
}

impl Resolution {
    /// The chosen source, or an error listing every rejected candidate.
    pub fn into_source(self) -> Result<EventSource, Unavailable> {
        self.chosen.ok_or(Unavailable {
            event: self.event,
            rejected: self.rejected,
        })
    }
}

/// No source for an event kind works on this machine.
#[derive(Debug, thiserror::Error)]
pub struct Unavailable {
    pub event: EventKind,
    pub rejected: Vec<Rejected>,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no source can sample `{}` on this machine", self.event.name())?;
        for r in &self.rejected {
            write!(f, "\n  - {}: {}", r.candidate, r.reason)?;
        }
        Ok(())
    }
}

/// Sampling settings chosen by the user.
#[derive(Clone, Copy, Debug)]
pub struct Rates {
    /// CPU samples per second per CPU.
    pub cpu_frequency_hz: u64,
    /// Page faults per sample.
    pub page_fault_period: u64,
    /// Hardware events (cache misses, remote accesses) per sample.
    pub hardware_period: u64,
}

impl Default for Rates {
    fn default() -> Self {
        Rates {
            cpu_frequency_hz: 99,
            page_fault_period: 100,
            hardware_period: 10_000,
        }
    }
}

/// What the machine offers, read once.
#[derive(Debug)]
pub struct Machine {
    /// None when /proc/cpuinfo could not be parsed; hardware candidates are then rejected.
    pub cpu: Result<CpuId, String>,
    pub pmus: Pmus,
}

impl Machine {
    /// Reads /proc/cpuinfo and /sys/bus/event_source/devices.
    pub fn read() -> Machine {
        Machine {
            cpu: CpuId::read().map_err(|e| e.to_string()),
            pmus: Pmus::read().unwrap_or_else(|_| Pmus::from_infos([])),
        }
    }
}

/// Checks a candidate by opening it for real: perf events on CPU 0, the BPF program that would
/// sample it by a trial load, tracing programs by a trial load and attach. `Err` carries the
/// reason in words.
pub trait Prober {
    fn open_perf(&self, event: &PerfEvent, description: &str) -> Result<(), String>;
    /// Whether the kernel takes the program that samples `event` from perf events.
    fn load_perf_program(&self, event: EventKind) -> Result<(), String>;
    fn load_tracing(&self, attach: &Attach) -> Result<(), String>;
}

fn software(config: u32, period: u64, sample_addr: bool) -> PerfEvent {
    PerfEvent {
        perf_type: sys::PERF_TYPE_SOFTWARE,
        config: u64::from(config),
        config1: 0,
        precise_ip: 0,
        sample_addr,
        period: period.max(1),
    }
}

fn numa_fault_sources(event: EventKind) -> Vec<EventSource> {
    let what = match event {
        EventKind::RemoteAccess => "NUMA-balancing hinting faults on remote memory",
        _ => "NUMA-balancing hinting faults",
    };
    [
        (Attach::NumaFaultFentry, "fentry/task_numa_fault"),
        (Attach::NumaFaultKprobe, "kprobe/task_numa_fault"),
    ]
    .into_iter()
    .map(|(attach, encoding)| EventSource {
        event,
        attach,
        period: 1,
        description: format!("{what} ({encoding}), every fault, weighted by pages"),
        encoding: encoding.into(),
        // fentry and kprobe see the same faults: one source
        name: "task_numa_fault".into(),
        unit: "pages",
        data_address: false,
    })
    .collect()
}

/// The candidate sources of `event` that do not come from the PMU table, best first.
fn software_candidates(event: EventKind, rates: &Rates) -> Vec<EventSource> {
    match event {
        EventKind::Cpu => {
            let hz = rates.cpu_frequency_hz.max(1);
            vec![EventSource {
                event,
                attach: Attach::Perf(software(sys::PERF_COUNT_SW_CPU_CLOCK, 1_000_000_000 / hz, false)),
                period: 1_000_000_000 / hz,
                description: format!("software cpu-clock, {hz} Hz per CPU"),
                encoding: "cpu-clock".into(),
                name: "cpu-clock".into(),
                unit: "nanoseconds",
                data_address: false,
            }]
        }
        EventKind::PageFault => {
            let period = rates.page_fault_period.max(1);
            vec![EventSource {
                event,
                attach: Attach::Perf(software(sys::PERF_COUNT_SW_PAGE_FAULTS, period, true)),
                period,
                description: format!("software page-faults, 1 in {period}"),
                encoding: "page-faults".into(),
                name: "page-faults".into(),
                unit: "faults",
                data_address: true,
            }]
        }
        EventKind::RemoteAccess | EventKind::NumaHintFault => numa_fault_sources(event),
        EventKind::PageMigration => vec![EventSource {
            event,
            attach: Attach::MigrateTracepoint,
            period: 1,
            description: "page migrations (raw_tp/mm_migrate_pages), weighted by pages moved".into(),
            encoding: "raw_tp/mm_migrate_pages".into(),
            name: "mm_migrate_pages".into(),
            unit: "pages",
            data_address: false,
        }],
        EventKind::CacheMiss | EventKind::Unspecified => Vec::new(),
    }
}

/// Every event kind resolved on `machine`, in [`EventKind::ALL`]'s order: what `probe` reports
/// and what `run` samples come from this one resolution.
pub fn resolve_all(rates: &Rates, machine: &Machine, prober: &dyn Prober) -> Vec<Resolution> {
    EventKind::ALL
        .into_iter()
        .map(|event| resolve(event, rates, machine, prober))
        .collect()
}

/// Chooses the best working source for `event`, recording why the others were rejected.
pub fn resolve(event: EventKind, rates: &Rates, machine: &Machine, prober: &dyn Prober) -> Resolution {
    let mut rejected = Vec::new();
    if matches!(event, EventKind::CacheMiss | EventKind::RemoteAccess) {
        match &machine.cpu {
            Err(e) => rejected.push(Rejected {
                candidate: "hardware PMU events".into(),
                reason: format!("the CPU could not be identified: {e}"),
            }),
            Ok(cpu) => {
                if !machine.pmus.has_core_pmu() {
                    rejected.push(Rejected {
                        candidate: "hardware PMU events".into(),
                        reason: format!(
                            "this machine exposes no hardware PMU (only: {}); {} hardware candidates skipped",
                            machine
                                .pmus
                                .iter()
                                .map(|p| p.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", "),
                            pmu::candidates(event, cpu, &machine.pmus).len()
                        ),
                    });
                }
                for c in pmu::candidates(event, cpu, &machine.pmus) {
                    let generic = matches!(c.encoding.type_, PerfType::Hardware | PerfType::HwCache);
                    let name = format!("{} [{}]", c.entry.name, c.encoding.describe());
                    if !c.is_usable() && !generic {
                        if machine.pmus.has_core_pmu() {
                            rejected.push(Rejected {
                                candidate: name,
                                reason: c.verdict.to_string(),
                            });
                        }
                        continue;
                    }
                    // IBS samples every op that missed: which of them were served by a remote node
                    // is in the raw IbsOpData2 record, which a BPF perf-event program cannot read.
                    if event == EventKind::RemoteAccess && c.entry.pmu == pmu::PmuReq::Named("ibs_op") {
                        rejected.push(Rejected {
                            candidate: name,
                            reason: "IBS samples all L3 misses; telling the remote ones apart needs the raw \
                                     IbsOpData2 record, which this agent version does not decode"
                                .into(),
                        });
                        continue;
                    }
                    if c.entry.delivery == Delivery::AuxTrace {
                        rejected.push(Rejected {
                            candidate: name,
                            reason: "AUX-trace sampling (SPE) is not decoded by this agent version".into(),
                        });
                        continue;
                    }
                    let perf_type = match c.encoding.perf_type(&machine.pmus) {
                        Ok(t) => t,
                        Err(e) => {
                            rejected.push(Rejected {
                                candidate: name,
                                reason: e.to_string(),
                            });
                            continue;
                        }
                    };
                    let perf_event = PerfEvent {
                        perf_type,
                        config: c.encoding.config,
                        config1: c.encoding.config1,
                        precise_ip: c.encoding.precise_ip,
                        sample_addr: c.encoding.sample_addr,
                        period: rates.hardware_period.max(1),
                    };
                    match prober
                        .open_perf(&perf_event, &name)
                        .and_then(|()| prober.load_perf_program(event))
                    {
                        Ok(()) => {
                            return Resolution {
                                event,
                                chosen: Some(EventSource {
                                    event,
                                    period: perf_event.period,
                                    description: format!("{}, 1 in {}", c.entry.name, perf_event.period),
                                    encoding: c.encoding.describe(),
                                    name: c.entry.name.to_owned(),
                                    unit: match event {
                                        EventKind::RemoteAccess => "accesses",
                                        EventKind::CacheMiss => "misses",
                                        _ => "events",
                                    },
                                    data_address: perf_event.sample_addr,
                                    attach: Attach::Perf(perf_event),
                                }),
                                rejected,
                            }
                        }
                        Err(reason) => rejected.push(Rejected {
                            candidate: name,
                            reason,
                        }),
                    }
                }
            }
        }
    }
    for source in software_candidates(event, rates) {
        let result = match &source.attach {
            Attach::Perf(p) => prober
                .open_perf(p, &source.description)
                .and_then(|()| prober.load_perf_program(event)),
            other => prober.load_tracing(other),
        };
        match result {
            Ok(()) => {
                return Resolution {
                    event,
                    chosen: Some(source),
                    rejected,
                }
            }
            Err(reason) => rejected.push(Rejected {
                candidate: source.encoding,
                reason,
            }),
        }
    }
    if event == EventKind::CacheMiss {
        rejected.push(Rejected {
            candidate: "software".into(),
            reason: "cache misses can only be counted by hardware; there is no software source".into(),
        });
    }
    Resolution {
        event,
        chosen: None,
        rejected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A machine where only what the test allows opens. The PMU is simulated here: no machine
    /// the tests run on has one (the only place a PMU may be simulated).
    struct FakeProber {
        perf_ok: fn(&PerfEvent) -> bool,
        tracing_ok: fn(&Attach) -> bool,
    }

    impl Prober for FakeProber {
        fn open_perf(&self, e: &PerfEvent, _: &str) -> Result<(), String> {
            if (self.perf_ok)(e) {
                Ok(())
            } else {
                Err("ENOENT".into())
            }
        }
        fn load_perf_program(&self, _: EventKind) -> Result<(), String> {
            Ok(())
        }
        fn load_tracing(&self, a: &Attach) -> Result<(), String> {
            if (self.tracing_ok)(a) {
                Ok(())
            } else {
                Err("EPERM".into())
            }
        }
    }

    fn machine(cpuinfo: &str, pmus: &[(&str, u32)]) -> Machine {
        let infos = pmus.iter().map(|(name, type_)| pmu::PmuInfo {
            name: (*name).into(),
            type_: *type_,
            is_core: *name == "cpu",
            formats: ["event", "umask", "cmask", "inv", "edge"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            max_precise: Some(3),
        });
        Machine {
            cpu: CpuId::parse(cpuinfo).map_err(|e| e.to_string()),
            pmus: Pmus::from_infos(infos),
        }
    }

    const SKX: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\nmodel name\t: Intel(R) Xeon(R) Gold 6148\nstepping\t: 4\n\n";

    /// No PMU (this machine): remote_access falls back to fentry, then kprobe, and every
    /// hardware candidate is reported as rejected because there is no PMU.
    #[test]
    fn remote_access_falls_back_to_numa_faults_without_a_pmu() {
        let m = machine(SKX, &[("software", 1), ("tracepoint", 2)]);
        let p = FakeProber {
            perf_ok: |_| false,
            tracing_ok: |a| *a == Attach::NumaFaultKprobe,
        };
        let r = resolve(EventKind::RemoteAccess, &Rates::default(), &m, &p);
        assert_eq!(r.chosen.unwrap().attach, Attach::NumaFaultKprobe);
        assert!(r.rejected[0].reason.contains("no hardware PMU"), "{:?}", r.rejected);
        assert!(r
            .rejected
            .iter()
            .any(|x| x.candidate == "fentry/task_numa_fault" && x.reason == "EPERM"));
    }

    /// With a (simulated) Skylake-SP core PMU, remote_access uses REMOTE_DRAM with data addresses.
    #[test]
    fn remote_access_prefers_the_model_specific_pmu_event() {
        let m = machine(SKX, &[("cpu", 4), ("software", 1)]);
        let p = FakeProber {
            perf_ok: |_| true,
            tracing_ok: |_| true,
        };
        let s = resolve(EventKind::RemoteAccess, &Rates::default(), &m, &p)
            .chosen
            .unwrap();
        let Attach::Perf(e) = &s.attach else { panic!("{s:?}") };
        assert_eq!((e.perf_type, e.config & 0xffff), (4, 0x02d3));
        assert!(s.data_address && e.precise_ip > 0);
    }

    const ZEN3: &str = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC 7763\nstepping\t: 1\n\n";

    /// On a (simulated) Zen 3 with IBS, remote_access never takes IBS (it cannot tell remote
    /// misses apart) but the core PMU's remote-fill event; cache_miss may take IBS.
    #[test]
    fn ibs_is_not_a_remote_access_source() {
        let mut m = machine(ZEN3, &[("cpu", 4), ("ibs_op", 9)]);
        m.pmus = Pmus::from_infos([
            pmu::PmuInfo {
                name: "cpu".into(),
                type_: 4,
                is_core: true,
                formats: ["event", "umask"].iter().map(|s| s.to_string()).collect(),
                max_precise: Some(0),
            },
            pmu::PmuInfo {
                name: "ibs_op".into(),
                type_: 9,
                is_core: false,
                formats: ["cnt_ctl", "l3missonly"].iter().map(|s| s.to_string()).collect(),
                max_precise: None,
            },
        ]);
        let p = FakeProber {
            perf_ok: |_| true,
            tracing_ok: |_| true,
        };
        let r = resolve(EventKind::RemoteAccess, &Rates::default(), &m, &p);
        let Attach::Perf(e) = &r.chosen.as_ref().unwrap().attach else {
            panic!("{r:?}")
        };
        assert_eq!((e.perf_type, e.config & 0xff), (4, 0x44), "{r:?}");
        assert!(
            r.rejected
                .iter()
                .any(|x| x.reason.contains("IBS samples all L3 misses")),
            "{r:?}"
        );
    }

    /// cache_miss has no software fallback: without a PMU it is unavailable, with the reason.
    #[test]
    fn cache_miss_is_unavailable_without_a_pmu() {
        let m = machine(SKX, &[("software", 1)]);
        let p = FakeProber {
            perf_ok: |e| e.perf_type == sys::PERF_TYPE_SOFTWARE,
            tracing_ok: |_| true,
        };
        let err = resolve(EventKind::CacheMiss, &Rates::default(), &m, &p)
            .into_source()
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("no hardware PMU") && text.contains("no software source"),
            "{text}"
        );
        assert!(err
            .rejected
            .iter()
            .any(|r| r.candidate.contains("cache-misses") && r.reason == "ENOENT"));
    }

    /// A kernel that refuses the program sampling cpu leaves cpu unavailable, saying so, and
    /// page_fault sampling.
    #[test]
    fn a_refused_program_makes_its_event_unavailable_and_no_other() {
        struct Refusing;
        impl Prober for Refusing {
            fn open_perf(&self, _: &PerfEvent, _: &str) -> Result<(), String> {
                Ok(())
            }
            fn load_perf_program(&self, e: EventKind) -> Result<(), String> {
                match e {
                    EventKind::Cpu => Err("sample_cpu: refused by the verifier: too large".into()),
                    _ => Ok(()),
                }
            }
            fn load_tracing(&self, _: &Attach) -> Result<(), String> {
                Ok(())
            }
        }
        let m = machine(SKX, &[]);
        let cpu = resolve(EventKind::Cpu, &Rates::default(), &m, &Refusing);
        assert!(cpu.chosen.is_none());
        assert_eq!(cpu.rejected.len(), 1);
        assert!(cpu.rejected[0].reason.contains("sample_cpu"), "{:?}", cpu.rejected);
        assert!(resolve(EventKind::PageFault, &Rates::default(), &m, &Refusing)
            .chosen
            .is_some());
    }

    /// page_fault is the software event with data addresses; cpu is cpu-clock at the given rate.
    #[test]
    fn software_sources() {
        let m = machine(SKX, &[]);
        let p = FakeProber {
            perf_ok: |_| true,
            tracing_ok: |_| true,
        };
        let pf = resolve(EventKind::PageFault, &Rates::default(), &m, &p).chosen.unwrap();
        assert!(pf.data_address);
        let cpu = resolve(EventKind::Cpu, &Rates::default(), &m, &p).chosen.unwrap();
        assert_eq!(cpu.period, 1_000_000_000 / 99);
    }
}
