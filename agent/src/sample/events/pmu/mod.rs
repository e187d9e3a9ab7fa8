//! Hardware PMU events for `remote_access` and `cache_miss`, and the CPU/PMU detection that
//! decides which of them can be opened on this machine.
//!
//! The memory-system events bimodal wants are model specific: the same "load served from
//! remote DRAM" is `MEM_LOAD_L3_MISS_RETIRED.REMOTE_DRAM` on Xeon, a data-cache-fill source
//! umask on AMD Zen, IBS op sampling on AMD, `REMOTE_ACCESS` on Arm Neoverse. A wrong raw
//! encoding does not fail: the kernel happily counts whatever the bits mean on that CPU. So
//! the encodings live in a static table ([`EVENT_TABLE`]) where every entry names the CPUs it
//! was verified for and the public document it was verified against, and [`candidates`]
//! walks that table for one event kind, telling for each entry whether it is usable here and,
//! if not, why in words a user understands (meant to be printed as is by a `probe` command).
//!
//! Detection reads two things, both as text so tests can feed fixtures:
//! * `/proc/cpuinfo` → [`CpuId`] (vendor, family/model/stepping, or Arm implementer/part);
//! * `/sys/bus/event_source/devices` → [`Pmus`] (each PMU's dynamic perf type number, whether
//!   it is a core PMU, its `format/` options and `caps/max_precise`).
//!
//! A virtual machine without PMU passthrough has no core PMU at all (only `software`,
//! `tracepoint`, `breakpoint`, `uprobe`, …); every hardware candidate is then rejected with
//! [`RejectReason::NoCorePmu`] before anything else is considered, because that is the one
//! fact the user has to fix.
//!
//! Laid out by what each part reads: `abi` (perf ABI numbers), `cpu` (`/proc/cpuinfo`), `sysfs`
//! (the kernel's PMUs), `encoding` (perf_event_attr values and their perf spelling), `table`
//! (the verified encodings); the selection, here, joins them.

use std::collections::BTreeMap;
use std::error::Error;
use std::fmt;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::EventKind;

mod abi;
mod cpu;
mod encoding;
mod sysfs;
mod table;
#[cfg(test)]
mod tests;

pub use abi::*;
pub use cpu::*;
pub use encoding::*;
pub use sysfs::*;
pub use table::*;

// ---------------------------------------------------------------------------------------------
// Selection
// ---------------------------------------------------------------------------------------------

/// Why a table entry cannot be used here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RejectReason {
    /// No core PMU at all: nothing hardware can be opened.
    NoCorePmu,
    /// The encoding is for another vendor's CPUs.
    WrongVendor {
        /// "an Intel", "an AMD", "an AMD or Hygon", "an Arm".
        needs: &'static str,
    },
    /// Right vendor, but this model is not among those the encoding was verified for.
    ModelNotListed,
    /// The PMU the event needs is not exposed (`ibs_op`, `arm_spe`).
    PmuMissing(&'static str),
    /// The PMU exists but lacks a needed `format/` option.
    FormatMissing {
        /// The PMU.
        pmu: String,
        /// The missing option.
        attr: &'static str,
    },
    /// The event needs precise sampling the PMU does not offer (`caps/max_precise`).
    PreciseUnsupported {
        /// The `precise_ip` the entry asks for.
        needed: u8,
        /// The PMU's `caps/max_precise`.
        max: u8,
    },
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejectReason::NoCorePmu => {
                f.write_str("the kernel exposes no hardware PMU (virtual machine without PMU passthrough?)")
            }
            RejectReason::WrongVendor { needs } => write!(f, "needs {needs} CPU"),
            RejectReason::ModelNotListed => f.write_str(
                "this CPU model is not one the encoding was verified for (raw encodings mean \
                 different things on other models)",
            ),
            RejectReason::PmuMissing(pmu) => write!(
                f,
                "the kernel exposes no `{pmu}` PMU (not supported by this CPU, disabled, or \
                 hidden by the hypervisor)"
            ),
            RejectReason::FormatMissing { pmu, attr } => write!(
                f,
                "the `{pmu}` PMU has no `{attr}` option (older CPU generation or kernel)"
            ),
            RejectReason::PreciseUnsupported { needed, max } => write!(
                f,
                "needs precise sampling level {needed} (PEBS) but the PMU offers at most {max} \
                 (PEBS not available, e.g. not virtualized)"
            ),
        }
    }
}

/// Whether a candidate can be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Everything the entry needs is present; opening it should work.
    Usable,
    /// It cannot work here, and why.
    Rejected(RejectReason),
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Usable => f.write_str("usable"),
            Verdict::Rejected(reason) => write!(f, "not usable: {reason}"),
        }
    }
}

/// A table entry judged against this machine.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The table entry.
    pub entry: &'static EventEntry,
    /// The PMU it would be opened on, when present.
    pub pmu: Option<String>,
    /// The encoding to open, with the PMU resolved (a nominal one when it is missing).
    pub encoding: PerfEncoding,
    /// Usable or why not.
    pub verdict: Verdict,
}

impl Candidate {
    /// Whether the candidate can be used.
    pub fn is_usable(&self) -> bool {
        self.verdict == Verdict::Usable
    }
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} [{}]: {}",
            self.entry.name,
            self.encoding.describe(),
            self.verdict
        )
    }
}

/// Every table entry for `kind`, in preference order (model-specific entries, then the
/// generic fallbacks), each with its verdict on this CPU and these PMUs. Kinds without
/// hardware sources (`cpu`, `page_fault`, the tracepoint kinds) give an empty list.
pub fn candidates(kind: EventKind, cpu: &CpuId, pmus: &Pmus) -> Vec<Candidate> {
    EVENT_TABLE
        .iter()
        .chain(GENERIC_FALLBACKS.iter())
        .filter(|e| e.kind == kind)
        .map(|e| evaluate(e, cpu, pmus))
        .collect()
}

/// The most preferred usable candidate for `kind`, if any.
pub fn first_usable(kind: EventKind, cpu: &CpuId, pmus: &Pmus) -> Option<Candidate> {
    candidates(kind, cpu, pmus).into_iter().find(Candidate::is_usable)
}

/// Judges one entry. The order of checks is the order in which a user has to fix things:
/// no PMU at all first, then the CPU, then the specific PMU and its options.
pub fn evaluate(entry: &'static EventEntry, cpu: &CpuId, pmus: &Pmus) -> Candidate {
    let core = pmus.core_pmu();
    let pmu = match entry.pmu {
        PmuReq::Core => core,
        PmuReq::Named(name) => pmus.get(name),
        PmuReq::Prefixed(prefix) => pmus.find_prefixed(prefix),
    };
    Candidate {
        entry,
        pmu: pmu.map(|p| p.name.clone()),
        encoding: encoding_for(entry, pmu),
        verdict: match check(entry, cpu, core, pmu) {
            Ok(()) => Verdict::Usable,
            Err(reason) => Verdict::Rejected(reason),
        },
    }
}

fn check(entry: &EventEntry, cpu: &CpuId, core: Option<&PmuInfo>, pmu: Option<&PmuInfo>) -> Result<(), RejectReason> {
    // Every entry here is hardware; without a core PMU (VM without vPMU) none can work,
    // and that is the one thing worth telling the user.
    if core.is_none() {
        return Err(RejectReason::NoCorePmu);
    }
    entry.cpus.check(cpu)?;
    let pmu = pmu.ok_or(match entry.pmu {
        PmuReq::Named(name) | PmuReq::Prefixed(name) => RejectReason::PmuMissing(name),
        PmuReq::Core => RejectReason::NoCorePmu,
    })?;
    if let Some(attr) = entry.requires_format.iter().find(|a| !pmu.has_format(a)) {
        return Err(RejectReason::FormatMissing {
            pmu: pmu.name.clone(),
            attr,
        });
    }
    if entry.precise_ip > 0 {
        // Only x86 publishes max_precise; elsewhere the open itself will tell.
        if let Some(max) = pmu.max_precise.filter(|max| *max < entry.precise_ip) {
            return Err(RejectReason::PreciseUnsupported {
                needed: entry.precise_ip,
                max,
            });
        }
    }
    Ok(())
}

/// The entry's encoding on `pmu`. Raw events go to `PERF_TYPE_RAW` when the core PMU is the
/// x86 `cpu` PMU (type 4) and to the core PMU's own type otherwise (`cpu_core`, `armv8_*`),
/// which also targets the right core type on heterogeneous systems. When the PMU is missing,
/// a nominal name keeps `describe` meaningful for the `probe` output.
fn encoding_for(entry: &EventEntry, pmu: Option<&PmuInfo>) -> PerfEncoding {
    let type_ = match entry.space {
        ConfigSpace::Hardware => PerfType::Hardware,
        ConfigSpace::HwCache => PerfType::HwCache,
        ConfigSpace::CoreRaw => match pmu {
            Some(p) if p.name == "cpu" => PerfType::Raw,
            Some(p) => PerfType::Dynamic(p.name.clone()),
            None if entry.cpus.is_arm() => PerfType::Dynamic("armv8_pmuv3_0".to_string()),
            None => PerfType::Raw,
        },
        ConfigSpace::PmuSpecific => PerfType::Dynamic(match (pmu, entry.pmu) {
            (Some(p), _) => p.name.clone(),
            (None, PmuReq::Prefixed(prefix)) => format!("{prefix}_0"),
            (None, PmuReq::Named(name)) => name.to_string(),
            (None, PmuReq::Core) => "cpu".to_string(),
        }),
    };
    PerfEncoding {
        type_,
        config: entry.config,
        config1: entry.config1,
        precise_ip: entry.precise_ip,
        sample_addr: entry.sample_addr,
    }
}
