//! `bimodal-agent probe`: which source samples each event kind on this machine, and why every
//! better candidate was rejected. [`LiveProber`] tries each candidate for real: it opens perf
//! events and loads BPF programs, so it lives above both `events` (which only ranks candidates)
//! and `bpf`.

use std::fmt::Write;

use serde::Serialize;

use crate::sample::bpf;
use crate::sample::events::{self, Attach, Machine, PerfEvent, Prober, Rates, Rejected, Resolution};

/// Opens perf events and loads BPF programs on this machine; each tracing source is tried once.
#[derive(Debug, Default)]
pub struct LiveProber {
    tried: std::sync::Mutex<Vec<(Attach, Result<(), String>)>>,
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

    fn load_tracing(&self, attach: &Attach) -> Result<(), String> {
        let mut tried = self.tried.lock().expect("not poisoned");
        if let Some((_, r)) = tried.iter().find(|(a, _)| a == attach) {
            return r.clone();
        }
        let r = bpf::try_attach(attach);
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
}

/// Resolves every event kind on `machine`.
pub fn probe(machine: &Machine, rates: &Rates, prober: &dyn Prober) -> ProbeReport {
    report(machine, &events::resolve_all(rates, machine, prober))
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
    }
}

impl ProbeReport {
    /// The report as a person reads it.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "cpu: {}", self.cpu);
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
                }
                None => {
                    let _ = writeln!(out, "{}: UNAVAILABLE", e.event);
                }
            }
            for r in &e.rejected {
                let _ = writeln!(out, "  rejected {}: {}", r.candidate, r.reason);
            }
        }
        out
    }
}
