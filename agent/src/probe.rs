//! `bimodal-agent probe`: which source samples each event kind on this machine, and why every
//! better candidate was rejected.

use std::fmt::Write;

use serde::Serialize;

use crate::events::{self, Machine, Prober, Rates, Rejected, Resolution};

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
