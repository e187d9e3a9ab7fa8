//! The table of model-specific encodings, each naming the CPUs it was verified for and the
//! document it was verified against.

use super::*;

/// Which PMU an entry's event is opened on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PmuReq {
    /// The core PMU ([`Pmus::core_pmu`]): `cpu` on x86, `armv8_pmuv3*` and the like on Arm.
    Core,
    /// A PMU with exactly this name (`ibs_op`).
    Named(&'static str),
    /// The first PMU named `<prefix>_<n>` (`arm_spe` → `arm_spe_0`).
    Prefixed(&'static str),
}

impl fmt::Display for PmuReq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PmuReq::Core => f.write_str("core PMU (cpu, cpu_core or armv8_pmuv3*)"),
            PmuReq::Named(name) => f.write_str(name),
            PmuReq::Prefixed(prefix) => write!(f, "{prefix}_*"),
        }
    }
}

/// How an entry's `config` is interpreted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigSpace {
    /// A raw event of the core PMU (x86 event/umask, Arm event number).
    CoreRaw,
    /// A `PERF_TYPE_HARDWARE` event id; the kernel picks the model-specific event.
    Hardware,
    /// A `PERF_TYPE_HW_CACHE` id; the kernel picks the model-specific event.
    HwCache,
    /// The options of the named PMU itself (`ibs_op`, `arm_spe_*`).
    PmuSpecific,
}

/// How samples reach the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Ordinary perf samples on counter overflow: a BPF program attached to the event runs
    /// per sample and can take the stack there.
    Sample,
    /// Records written to the perf AUX buffer (Arm SPE): there is no per-sample overflow, so
    /// no BPF stack; the agent must decode the buffer and gets PC + data address only.
    AuxTrace,
}

/// One Intel CPUID model (family 6), optionally restricted to a stepping range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntelModel {
    /// CPUID display model (`model` in cpuinfo).
    pub model: u32,
    /// Lowest stepping included.
    pub min_stepping: u32,
    /// Highest stepping included.
    pub max_stepping: u32,
}

/// A model range of one AMD family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AmdModels {
    /// `cpu family` (0x17 Zen 1/2, 0x19 Zen 3/4, 0x1a Zen 5).
    pub family: u32,
    /// First model included.
    pub first_model: u32,
    /// Last model included.
    pub last_model: u32,
}

/// One Arm core type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArmPart {
    /// `CPU implementer`.
    pub implementer: u32,
    /// `CPU part`.
    pub part: u32,
}

/// Which CPUs an entry applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuMatch {
    /// Any CPU (generic events; the kernel maps them per model or refuses them).
    Any,
    /// Intel family 6, these models.
    Intel(&'static [IntelModel]),
    /// AMD (`AuthenticAMD`), these family/model ranges.
    Amd(&'static [AmdModels]),
    /// AMD or Hygon, any model (the PMU's presence is the real test, as for IBS).
    AmdOrHygon,
    /// Arm, these implementer/part pairs.
    Arm(&'static [ArmPart]),
    /// Any Arm CPU (the PMU's presence is the real test, as for SPE).
    AnyArm,
}

impl CpuMatch {
    /// Whether `cpu` is one of the CPUs this matcher lists.
    ///
    /// # Errors
    /// [`RejectReason::WrongVendor`] or [`RejectReason::ModelNotListed`].
    pub fn check(&self, cpu: &CpuId) -> Result<(), RejectReason> {
        let listed = match self {
            CpuMatch::Any => true,
            CpuMatch::Intel(models) => {
                if cpu.vendor != Vendor::Intel {
                    return Err(RejectReason::WrongVendor { needs: "an Intel" });
                }
                cpu.family == 6
                    && models.iter().any(|m| {
                        m.model == cpu.model
                            && match cpu.stepping {
                                Some(s) => (m.min_stepping..=m.max_stepping).contains(&s),
                                // Unknown stepping: only entries that do not care match.
                                None => m.min_stepping == 0 && m.max_stepping == u32::MAX,
                            }
                    })
            }
            CpuMatch::Amd(ranges) => {
                if cpu.vendor != Vendor::Amd {
                    return Err(RejectReason::WrongVendor { needs: "an AMD" });
                }
                ranges
                    .iter()
                    .any(|r| r.family == cpu.family && (r.first_model..=r.last_model).contains(&cpu.model))
            }
            CpuMatch::AmdOrHygon => {
                if !matches!(cpu.vendor, Vendor::Amd | Vendor::Hygon) {
                    return Err(RejectReason::WrongVendor {
                        needs: "an AMD or Hygon",
                    });
                }
                true
            }
            CpuMatch::Arm(parts) => {
                let Some(arm) = cpu.arm.filter(|_| cpu.vendor.is_arm()) else {
                    return Err(RejectReason::WrongVendor { needs: "an Arm" });
                };
                parts
                    .iter()
                    .any(|p| p.implementer == arm.implementer && p.part == arm.part)
            }
            CpuMatch::AnyArm => {
                if !cpu.vendor.is_arm() {
                    return Err(RejectReason::WrongVendor { needs: "an Arm" });
                }
                true
            }
        };
        if listed {
            Ok(())
        } else {
            Err(RejectReason::ModelNotListed)
        }
    }

    pub(super) fn is_arm(&self) -> bool {
        matches!(self, CpuMatch::Arm(_) | CpuMatch::AnyArm)
    }
}

/// One verified hardware event encoding.
#[derive(Debug, PartialEq)]
pub struct EventEntry {
    /// Stable identifier (`intel.mem_load_l3_miss_retired.remote_dram`), unique in the table.
    pub id: &'static str,
    /// The bimodal event kind it samples (`RemoteAccess` or `CacheMiss`).
    pub kind: EventKind,
    /// The event's name as in the vendor's documentation.
    pub name: &'static str,
    /// The PMU it is opened on.
    pub pmu: PmuReq,
    /// How `config` is interpreted.
    pub space: ConfigSpace,
    /// `perf_event_attr.config`.
    pub config: u64,
    /// `perf_event_attr.config1`.
    pub config1: u64,
    /// `perf_event_attr.precise_ip` to request (2 = PEBS with zero-skid IP).
    pub precise_ip: u8,
    /// Whether samples carry the data address.
    pub sample_addr: bool,
    /// How samples reach the agent.
    pub delivery: Delivery,
    /// `format/` options the PMU must expose (the kernel rejects the bits otherwise).
    pub requires_format: &'static [&'static str],
    /// The CPUs the encoding was verified for.
    pub cpus: CpuMatch,
    /// Where the encoding was verified.
    pub source: &'static str,
    /// What a user or the sample decoder should know (post-filtering, caveats).
    pub note: &'static str,
}

const fn any_stepping(model: u32) -> IntelModel {
    IntelModel {
        model,
        min_stepping: 0,
        max_stepping: u32::MAX,
    }
}

const fn steppings(model: u32, min_stepping: u32, max_stepping: u32) -> IntelModel {
    IntelModel {
        model,
        min_stepping,
        max_stepping,
    }
}

// Intel models, from intel/perfmon mapfile.csv (core event files):
// 0x55 SKX (stepping 0-4) / CLX (5-F), 0x6A/0x6C ICX, 0x8F SPR, 0xCF EMR, 0xAD/0xAE GNR;
// clients 0x4E/0x5E/0x8E/0x9E/0xA5/0xA6 SKL, 0x7D/0x7E ICL, 0xA7 RKL, 0x8C/0x8D TGL;
// 0x3F HSX, 0x4F BDX.

/// Xeon with MEM_LOAD_L3_MISS_RETIRED.REMOTE_DRAM/REMOTE_HITM (all steppings of 0x55).
const INTEL_XEON_REMOTE: &[IntelModel] = &[
    any_stepping(0x55), // Skylake-SP, Cascade Lake, Cooper Lake
    any_stepping(0x6A), // Ice Lake-SP
    any_stepping(0x6C), // Ice Lake-D
    any_stepping(0x8F), // Sapphire Rapids
    any_stepping(0xCF), // Emerald Rapids
    any_stepping(0xAD), // Granite Rapids
    any_stepping(0xAE), // Granite Rapids-D
];

/// Xeon where REMOTE_FWD is PEBS-capable: SKX's file says PEBS 1, CLX's says 0.
const INTEL_XEON_REMOTE_FWD_PEBS: &[IntelModel] = &[
    steppings(0x55, 0, 4), // Skylake-SP (SKX/events/skylakex_core.json)
    any_stepping(0x6A),
    any_stepping(0x6C),
    any_stepping(0x8F),
    any_stepping(0xCF),
    any_stepping(0xAD),
    any_stepping(0xAE),
];

/// Cascade Lake / Cooper Lake (0x55 stepping 5-15, CLX/events/cascadelakex_core.json).
const INTEL_CLX: &[IntelModel] = &[steppings(0x55, 5, 15)];

/// Models with MEM_LOAD_RETIRED.L3_MISS 0xD1/0x20 (PEBS, data-LA).
const INTEL_L3_MISS: &[IntelModel] = &[
    any_stepping(0x4E), // Skylake client
    any_stepping(0x5E),
    any_stepping(0x8E),
    any_stepping(0x9E),
    any_stepping(0xA5),
    any_stepping(0xA6),
    any_stepping(0x55), // Skylake-SP / Cascade Lake
    any_stepping(0x7D), // Ice Lake client
    any_stepping(0x7E),
    any_stepping(0x6A), // Ice Lake-SP
    any_stepping(0x6C),
    any_stepping(0xA7), // Rocket Lake
    any_stepping(0x8C), // Tiger Lake
    any_stepping(0x8D),
    any_stepping(0x8F), // Sapphire Rapids
    any_stepping(0xCF), // Emerald Rapids
    any_stepping(0xAD), // Granite Rapids
    any_stepping(0xAE),
];

/// Models with LONGEST_LAT_CACHE.MISS 0x2E/0x41 checked in their perfmon file.
const INTEL_LONGEST_LAT: &[IntelModel] = &[
    any_stepping(0x3F), // Haswell-EP
    any_stepping(0x4F), // Broadwell-EP
    any_stepping(0x4E),
    any_stepping(0x5E),
    any_stepping(0x8E),
    any_stepping(0x9E),
    any_stepping(0xA5),
    any_stepping(0xA6),
    any_stepping(0x55),
    any_stepping(0x7D),
    any_stepping(0x7E),
    any_stepping(0x6A),
    any_stepping(0x6C),
    any_stepping(0xA7),
    any_stepping(0x8C),
    any_stepping(0x8D),
    any_stepping(0x8F),
    any_stepping(0xCF),
    any_stepping(0xAD),
    any_stepping(0xAE),
];

/// Models whose perfmon file names 0xD2/0x04 MEM_LOAD_L3_HIT_RETIRED.XSNP_HITM.
const INTEL_XSNP_HITM: &[IntelModel] = &[
    any_stepping(0x4E),
    any_stepping(0x5E),
    any_stepping(0x8E),
    any_stepping(0x9E),
    any_stepping(0xA5),
    any_stepping(0xA6),
    any_stepping(0x55),
    any_stepping(0x7D),
    any_stepping(0x7E),
    any_stepping(0xA7),
];

/// Models whose perfmon file names 0xD2/0x04 MEM_LOAD_L3_HIT_RETIRED.XSNP_FWD (ICX lists
/// XSNP_HITM too, marked deprecated in favour of XSNP_FWD).
const INTEL_XSNP_FWD: &[IntelModel] = &[
    any_stepping(0x6A),
    any_stepping(0x6C),
    any_stepping(0x8C),
    any_stepping(0x8D),
    any_stepping(0x8F),
    any_stepping(0xCF),
    any_stepping(0xAD),
    any_stepping(0xAE),
];

// AMD families/models, from linux tools/perf/pmu-events/arch/x86/mapfile.csv:
// amdzen1 = AuthenticAMD-23-([12][0-9A-F]|[0-9A-F]), amdzen2 = the rest of family 23,
// amdzen3 = AuthenticAMD-25-([245][[:xdigit:]]|[[:xdigit:]]), amdzen4 = the rest of family 25,
// amdzen5 = AuthenticAMD-26-*.

/// Zen 2 (family 0x17, models 0x30 and up).
const AMD_ZEN2: &[AmdModels] = &[AmdModels {
    family: 0x17,
    first_model: 0x30,
    last_model: 0xff,
}];

/// Zen 3 (family 0x19, models 0x00-0x0F, 0x20-0x2F, 0x40-0x5F).
const AMD_ZEN3: &[AmdModels] = &[
    AmdModels {
        family: 0x19,
        first_model: 0x00,
        last_model: 0x0f,
    },
    AmdModels {
        family: 0x19,
        first_model: 0x20,
        last_model: 0x2f,
    },
    AmdModels {
        family: 0x19,
        first_model: 0x40,
        last_model: 0x5f,
    },
];

/// Zen 4 (the other family 0x19 models) and Zen 5 (family 0x1a).
const AMD_ZEN4_ZEN5: &[AmdModels] = &[
    AmdModels {
        family: 0x19,
        first_model: 0x10,
        last_model: 0x1f,
    },
    AmdModels {
        family: 0x19,
        first_model: 0x30,
        last_model: 0x3f,
    },
    AmdModels {
        family: 0x19,
        first_model: 0x60,
        last_model: 0xff,
    },
    AmdModels {
        family: 0x1a,
        first_model: 0x00,
        last_model: 0xff,
    },
];

/// Neoverse cores whose linux pmu-events files list the event (N1, V1, N2, V2).
const NEOVERSE_N1_V1_N2_V2: &[ArmPart] = &[
    ArmPart {
        implementer: ARM_IMPLEMENTER_ARM,
        part: ARM_PART_NEOVERSE_N1,
    },
    ArmPart {
        implementer: ARM_IMPLEMENTER_ARM,
        part: ARM_PART_NEOVERSE_V1,
    },
    ArmPart {
        implementer: ARM_IMPLEMENTER_ARM,
        part: ARM_PART_NEOVERSE_N2,
    },
    ArmPart {
        implementer: ARM_IMPLEMENTER_ARM,
        part: ARM_PART_NEOVERSE_V2,
    },
];

const SPE_LOADS: u64 = SPE_TS_ENABLE | SPE_JITTER | SPE_LOAD_FILTER;

/// The model-specific events, in preference order within each event kind: precise events
/// with a data address first, then counting events, then sources that need the most work.
pub static EVENT_TABLE: &[EventEntry] = &[
    // ---- remote_access ----------------------------------------------------------------
    EventEntry {
        id: "intel.mem_load_l3_miss_retired.remote_dram",
        kind: EventKind::RemoteAccess,
        name: "MEM_LOAD_L3_MISS_RETIRED.REMOTE_DRAM",
        pmu: PmuReq::Core,
        space: ConfigSpace::CoreRaw,
        config: x86_raw(0xd3, 0x02),
        config1: 0,
        precise_ip: 2,
        sample_addr: true,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Intel(INTEL_XEON_REMOTE),
        source: "intel/perfmon SKX/events/skylakex_core.json, CLX/events/cascadelakex_core.json, \
                 ICX/events/icelakex_core.json, SPR/events/sapphirerapids_core.json, \
                 EMR/events/emeraldrapids_core.json, GNR/events/graniterapids_core.json: \
                 EventCode 0xD3 UMask 0x02, PEBS/Precise 1, Data_LA 1",
        note: "retired loads that missed L3 and were served by another socket's DRAM",
    },
    EventEntry {
        id: "intel.mem_load_l3_miss_retired.remote_hitm",
        kind: EventKind::RemoteAccess,
        name: "MEM_LOAD_L3_MISS_RETIRED.REMOTE_HITM",
        pmu: PmuReq::Core,
        space: ConfigSpace::CoreRaw,
        config: x86_raw(0xd3, 0x04),
        config1: 0,
        precise_ip: 2,
        sample_addr: true,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Intel(INTEL_XEON_REMOTE),
        source: "intel/perfmon SKX, CLX, ICX, SPR, EMR, GNR *_core.json: EventCode 0xD3 \
                 UMask 0x04, PEBS/Precise 1, Data_LA 1",
        note: "retired loads served by a modified line in another socket's cache \
               (cross-socket sharing)",
    },
    EventEntry {
        id: "intel.mem_load_l3_miss_retired.remote_fwd",
        kind: EventKind::RemoteAccess,
        name: "MEM_LOAD_L3_MISS_RETIRED.REMOTE_FWD",
        pmu: PmuReq::Core,
        space: ConfigSpace::CoreRaw,
        config: x86_raw(0xd3, 0x08),
        config1: 0,
        precise_ip: 2,
        sample_addr: true,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Intel(INTEL_XEON_REMOTE_FWD_PEBS),
        source: "intel/perfmon SKX/events/skylakex_core.json (PEBS 1), ICX, SPR, EMR, GNR \
                 *_core.json (Precise 1): EventCode 0xD3 UMask 0x08, Data_LA 1",
        note: "retired loads whose data was forwarded from another socket's cache",
    },
    EventEntry {
        id: "intel.mem_load_l3_miss_retired.remote_fwd.clx",
        kind: EventKind::RemoteAccess,
        name: "MEM_LOAD_L3_MISS_RETIRED.REMOTE_FWD",
        pmu: PmuReq::Core,
        space: ConfigSpace::CoreRaw,
        config: x86_raw(0xd3, 0x08),
        config1: 0,
        precise_ip: 0,
        sample_addr: false,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Intel(INTEL_CLX),
        source: "intel/perfmon CLX/events/cascadelakex_core.json: EventCode 0xD3 UMask 0x08, \
                 PEBS 0",
        note: "Cascade Lake's event file marks REMOTE_FWD as not PEBS-capable, so it is \
               sampled imprecisely (skid, no data address)",
    },
    EventEntry {
        id: "amd.ibs_op.l3missonly.remote",
        kind: EventKind::RemoteAccess,
        name: "IBS op sampling, L3 misses only (IbsOpCntCtl + IbsOpL3MissOnly)",
        pmu: PmuReq::Named("ibs_op"),
        space: ConfigSpace::PmuSpecific,
        config: IBS_OP_CNT_CTL | IBS_OP_L3_MISS_ONLY,
        config1: 0,
        precise_ip: 0,
        sample_addr: true,
        delivery: Delivery::Sample,
        requires_format: &["cnt_ctl", "l3missonly"],
        cpus: CpuMatch::AmdOrHygon,
        source: "linux arch/x86/events/amd/ibs.c (formats cnt_ctl = config:19, l3missonly = \
                 config:16; PERF_SAMPLE_ADDR from IbsDcLinAd, PERF_SAMPLE_DATA_SRC), \
                 arch/x86/include/asm/amd-ibs.h (IbsOpData2 RmtNode bit 4, DataSrc)",
        note: "samples every op that missed L3; keep those with IbsOpData3.LdOp and \
               (DataSrc DRAM with IbsOpData2.RmtNode, or DataSrc far-CCX cache) — \
               PERF_SAMPLE_DATA_SRC with mem_remote set. IBS cannot filter user/kernel in \
               hardware: do not set exclude_* (kernel returns EINVAL unless config2 swfilt)",
    },
    EventEntry {
        id: "amd.ls_any_fills_from_sys.far_all",
        kind: EventKind::RemoteAccess,
        name: "ls_any_fills_from_sys.far_all",
        pmu: PmuReq::Core,
        space: ConfigSpace::CoreRaw,
        config: x86_raw(0x44, 0x50),
        config1: 0,
        precise_ip: 0,
        sample_addr: false,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Amd(AMD_ZEN4_ZEN5),
        source: "linux tools/perf/pmu-events/arch/x86/amdzen4/cache.json, \
                 amdzen5/load-store.json: EventCode 0x44 UMask 0x50",
        note: "data cache fills from another CCX's cache, DRAM or MMIO of a different NUMA \
               node; counting event, the sampled IP has skid",
    },
    EventEntry {
        id: "amd.ls_any_fills_from_sys.dram_io_far",
        kind: EventKind::RemoteAccess,
        name: "ls_any_fills_from_sys.dram_io_far",
        pmu: PmuReq::Core,
        space: ConfigSpace::CoreRaw,
        config: x86_raw(0x44, 0x40),
        config1: 0,
        precise_ip: 0,
        sample_addr: false,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Amd(AMD_ZEN4_ZEN5),
        source: "linux tools/perf/pmu-events/arch/x86/amdzen4/cache.json, \
                 amdzen5/load-store.json: EventCode 0x44 UMask 0x40",
        note: "data cache fills from DRAM or MMIO of a different NUMA node",
    },
    EventEntry {
        id: "amd.ls_any_fills_from_sys.far_cache",
        kind: EventKind::RemoteAccess,
        name: "ls_any_fills_from_sys.far_cache",
        pmu: PmuReq::Core,
        space: ConfigSpace::CoreRaw,
        config: x86_raw(0x44, 0x10),
        config1: 0,
        precise_ip: 0,
        sample_addr: false,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Amd(AMD_ZEN4_ZEN5),
        source: "linux tools/perf/pmu-events/arch/x86/amdzen4/cache.json, \
                 amdzen5/load-store.json: EventCode 0x44 UMask 0x10",
        note: "data cache fills from another CCX's cache when the address is on a different \
               NUMA node",
    },
    EventEntry {
        id: "amd.zen3.ls_any_fills_from_sys.mem_io_remote",
        kind: EventKind::RemoteAccess,
        name: "ls_any_fills_from_sys.mem_io_remote",
        pmu: PmuReq::Core,
        space: ConfigSpace::CoreRaw,
        config: x86_raw(0x44, 0x40),
        config1: 0,
        precise_ip: 0,
        sample_addr: false,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Amd(AMD_ZEN3),
        source: "linux tools/perf/pmu-events/arch/x86/amdzen3/memory.json: EventCode 0x44 \
                 UMask 0x40",
        note: "data cache fills from DRAM or IO connected to a different node (Zen 3 name of \
               Zen 4's dram_io_far)",
    },
    EventEntry {
        id: "amd.zen3.ls_any_fills_from_sys.ext_cache_remote",
        kind: EventKind::RemoteAccess,
        name: "ls_any_fills_from_sys.ext_cache_remote",
        pmu: PmuReq::Core,
        space: ConfigSpace::CoreRaw,
        config: x86_raw(0x44, 0x10),
        config1: 0,
        precise_ip: 0,
        sample_addr: false,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Amd(AMD_ZEN3),
        source: "linux tools/perf/pmu-events/arch/x86/amdzen3/memory.json: EventCode 0x44 \
                 UMask 0x10",
        note: "data cache fills from a CCX cache in a different node (Zen 3 name of Zen 4's \
               far_cache)",
    },
    EventEntry {
        id: "amd.zen2.ls_refills_from_sys.ls_mabresp_rmt_dram",
        kind: EventKind::RemoteAccess,
        name: "ls_refills_from_sys.ls_mabresp_rmt_dram",
        pmu: PmuReq::Core,
        space: ConfigSpace::CoreRaw,
        config: x86_raw(0x43, 0x40),
        config1: 0,
        precise_ip: 0,
        sample_addr: false,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Amd(AMD_ZEN2),
        source: "linux tools/perf/pmu-events/arch/x86/amdzen2/memory.json: EventCode 0x43 \
                 UMask 0x40",
        note: "demand data cache fills from DRAM or IO of a different die (Zen 2 has no \
               any-fill event 0x44; \"die\" is the NUMA node in NPS1/NPS4 layouts)",
    },
    EventEntry {
        id: "amd.zen2.ls_refills_from_sys.ls_mabresp_rmt_cache",
        kind: EventKind::RemoteAccess,
        name: "ls_refills_from_sys.ls_mabresp_rmt_cache",
        pmu: PmuReq::Core,
        space: ConfigSpace::CoreRaw,
        config: x86_raw(0x43, 0x10),
        config1: 0,
        precise_ip: 0,
        sample_addr: false,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Amd(AMD_ZEN2),
        source: "linux tools/perf/pmu-events/arch/x86/amdzen2/memory.json: EventCode 0x43 \
                 UMask 0x10",
        note: "demand data cache fills from a remote CCX cache whose home node is on a \
               different die",
    },
    EventEntry {
        id: "amd.ibs_op.remote",
        kind: EventKind::RemoteAccess,
        name: "IBS op sampling (IbsOpCntCtl)",
        pmu: PmuReq::Named("ibs_op"),
        space: ConfigSpace::PmuSpecific,
        config: IBS_OP_CNT_CTL,
        config1: 0,
        precise_ip: 0,
        sample_addr: true,
        delivery: Delivery::Sample,
        requires_format: &["cnt_ctl"],
        cpus: CpuMatch::AmdOrHygon,
        source: "linux arch/x86/events/amd/ibs.c (format cnt_ctl = config:19, \
                 PERF_SAMPLE_ADDR/DATA_SRC since 6.1), arch/x86/include/asm/amd-ibs.h",
        note: "samples all ops, so only a small share are remote loads: needs a short period \
               and post-filtering as for the l3missonly variant; after the counting events \
               because most samples are discarded",
    },
    EventEntry {
        id: "arm.remote_access",
        kind: EventKind::RemoteAccess,
        name: "REMOTE_ACCESS",
        pmu: PmuReq::Core,
        space: ConfigSpace::CoreRaw,
        config: 0x31,
        config1: 0,
        precise_ip: 0,
        sample_addr: false,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Arm(NEOVERSE_N1_V1_N2_V2),
        source: "Arm common event 0x31 (linux tools/perf/pmu-events/arch/arm64/\
                 common-and-microarch.json); listed for the core in arm/neoverse-n1/memory.json, \
                 arm/neoverse-v1/memory.json, arm/neoverse-n2-v2/memory.json",
        note: "accesses answered by another chip (socket); counting event with skid",
    },
    EventEntry {
        id: "arm.spe.remote",
        kind: EventKind::RemoteAccess,
        name: "SPE load sampling (remote-access records)",
        pmu: PmuReq::Prefixed("arm_spe"),
        space: ConfigSpace::PmuSpecific,
        config: SPE_LOADS,
        config1: 0,
        precise_ip: 0,
        sample_addr: true,
        delivery: Delivery::AuxTrace,
        requires_format: &["ts_enable", "jitter", "load_filter"],
        cpus: CpuMatch::AnyArm,
        source: "linux drivers/perf/arm_spe_pmu.c (ts_enable config:0, jitter config:16, \
                 load_filter config:33), tools/perf/util/arm-spe-decoder/arm-spe-pkt-decoder.h \
                 (events packet bit 10 = remote access)",
        note: "records go to the AUX buffer (no BPF stack); keep records with events bit 10. \
               SPEv1 cannot filter on that bit in hardware (PMSEVFR_EL1 bits 8-11 are RES0)",
    },
    // ---- cache_miss --------------------------------------------------------------------
    EventEntry {
        id: "intel.mem_load_retired.l3_miss",
        kind: EventKind::CacheMiss,
        name: "MEM_LOAD_RETIRED.L3_MISS",
        pmu: PmuReq::Core,
        space: ConfigSpace::CoreRaw,
        config: x86_raw(0xd1, 0x20),
        config1: 0,
        precise_ip: 2,
        sample_addr: true,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Intel(INTEL_L3_MISS),
        source: "intel/perfmon SKL/events/skylake_core.json, SKX, CLX, ICL, ICX, RKL, TGL, SPR, \
                 EMR, GNR *_core.json: EventCode 0xD1 UMask 0x20, PEBS/Precise 1, Data_LA 1",
        note: "retired loads that missed L3 (local or remote memory)",
    },
    EventEntry {
        id: "intel.longest_lat_cache.miss",
        kind: EventKind::CacheMiss,
        name: "LONGEST_LAT_CACHE.MISS",
        pmu: PmuReq::Core,
        space: ConfigSpace::CoreRaw,
        config: x86_raw(0x2e, 0x41),
        config1: 0,
        precise_ip: 0,
        sample_addr: false,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Intel(INTEL_LONGEST_LAT),
        source: "intel/perfmon HSX, BDX, SKL, SKX, CLX, ICL, ICX, RKL, TGL, SPR, EMR, GNR \
                 *_core.json: EventCode 0x2E UMask 0x41, not PEBS",
        note: "core requests that missed L3, including prefetches; no PEBS, so it works where \
               a VM offers counters but not PEBS",
    },
    EventEntry {
        id: "intel.mem_load_l3_hit_retired.xsnp_hitm",
        kind: EventKind::CacheMiss,
        name: "MEM_LOAD_L3_HIT_RETIRED.XSNP_HITM",
        pmu: PmuReq::Core,
        space: ConfigSpace::CoreRaw,
        config: x86_raw(0xd2, 0x04),
        config1: 0,
        precise_ip: 2,
        sample_addr: true,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Intel(INTEL_XSNP_HITM),
        source: "intel/perfmon SKL, SKX, CLX, ICL, RKL *_core.json: EventCode 0xD2 UMask 0x04, \
                 PEBS/Precise 1, Data_LA 1",
        note: "L3 hits that needed a modified line from another core of the same socket \
               (sharing/false sharing), not L3 misses: last among the Intel events",
    },
    EventEntry {
        id: "intel.mem_load_l3_hit_retired.xsnp_fwd",
        kind: EventKind::CacheMiss,
        name: "MEM_LOAD_L3_HIT_RETIRED.XSNP_FWD",
        pmu: PmuReq::Core,
        space: ConfigSpace::CoreRaw,
        config: x86_raw(0xd2, 0x04),
        config1: 0,
        precise_ip: 2,
        sample_addr: true,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Intel(INTEL_XSNP_FWD),
        source: "intel/perfmon ICX/events/icelakex_core.json (XSNP_HITM deprecated for it), \
                 TGL, SPR, EMR, GNR *_core.json: EventCode 0xD2 UMask 0x04, Precise 1, \
                 Data_LA 1",
        note: "the newer name of XSNP_HITM, same encoding and meaning",
    },
    EventEntry {
        id: "amd.ibs_op.l3missonly.cache",
        kind: EventKind::CacheMiss,
        name: "IBS op sampling, L3 misses only (IbsOpCntCtl + IbsOpL3MissOnly)",
        pmu: PmuReq::Named("ibs_op"),
        space: ConfigSpace::PmuSpecific,
        config: IBS_OP_CNT_CTL | IBS_OP_L3_MISS_ONLY,
        config1: 0,
        precise_ip: 0,
        sample_addr: true,
        delivery: Delivery::Sample,
        requires_format: &["cnt_ctl", "l3missonly"],
        cpus: CpuMatch::AmdOrHygon,
        source: "linux arch/x86/events/amd/ibs.c (formats cnt_ctl = config:19, l3missonly = \
                 config:16)",
        note: "every sample is an op that missed L3; keep loads (IbsOpData3.LdOp)",
    },
    EventEntry {
        id: "arm.ll_cache_miss_rd",
        kind: EventKind::CacheMiss,
        name: "LL_CACHE_MISS_RD",
        pmu: PmuReq::Core,
        space: ConfigSpace::CoreRaw,
        config: 0x37,
        config1: 0,
        precise_ip: 0,
        sample_addr: false,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Arm(NEOVERSE_N1_V1_N2_V2),
        source: "Arm common event 0x37 (linux tools/perf/pmu-events/arch/arm64/\
                 common-and-microarch.json); listed for the core in arm/cortex-a76-n1/cache.json \
                 (EventCode 0x37), arm/neoverse-v1/ll_cache.json, arm/neoverse-n2-v2/ll_cache.json",
        note: "reads that missed the system-level cache; counts only when firmware sets \
               CPUECTLR.EXTLLC, so a zero count means the SoC does not report it",
    },
    EventEntry {
        id: "arm.spe.llc_miss",
        kind: EventKind::CacheMiss,
        name: "SPE load sampling (LLC-miss records)",
        pmu: PmuReq::Prefixed("arm_spe"),
        space: ConfigSpace::PmuSpecific,
        config: SPE_LOADS,
        config1: 0,
        precise_ip: 0,
        sample_addr: true,
        delivery: Delivery::AuxTrace,
        requires_format: &["ts_enable", "jitter", "load_filter"],
        cpus: CpuMatch::AnyArm,
        source: "linux drivers/perf/arm_spe_pmu.c (ts_enable config:0, jitter config:16, \
                 load_filter config:33), tools/perf/util/arm-spe-decoder/arm-spe-pkt-decoder.h \
                 (events packet bit 9 = LLC miss)",
        note: "records go to the AUX buffer (no BPF stack); keep records with events bit 9",
    },
];

/// Kernel-generalized events, tried after every model-specific entry of the same kind: the
/// kernel maps them to some event of the CPU (or refuses them), so their meaning varies by
/// model and they never give a data address.
pub static GENERIC_FALLBACKS: &[EventEntry] = &[
    EventEntry {
        id: "generic.cache_misses",
        kind: EventKind::CacheMiss,
        name: "PERF_COUNT_HW_CACHE_MISSES",
        pmu: PmuReq::Core,
        space: ConfigSpace::Hardware,
        config: PERF_COUNT_HW_CACHE_MISSES,
        config1: 0,
        precise_ip: 0,
        sample_addr: false,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Any,
        source: "linux include/uapi/linux/perf_event.h: PERF_TYPE_HARDWARE, \
                 PERF_COUNT_HW_CACHE_MISSES = 3",
        note: "whatever the kernel calls cache misses on this CPU (usually last-level)",
    },
    EventEntry {
        id: "generic.llc_load_misses",
        kind: EventKind::CacheMiss,
        name: "PERF_COUNT_HW_CACHE_LL read miss",
        pmu: PmuReq::Core,
        space: ConfigSpace::HwCache,
        config: hw_cache_config(
            PERF_COUNT_HW_CACHE_LL,
            PERF_COUNT_HW_CACHE_OP_READ,
            PERF_COUNT_HW_CACHE_RESULT_MISS,
        ),
        config1: 0,
        precise_ip: 0,
        sample_addr: false,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Any,
        source: "linux include/uapi/linux/perf_event.h: PERF_TYPE_HW_CACHE, \
                 PERF_COUNT_HW_CACHE_LL = 2 | OP_READ = 0 << 8 | RESULT_MISS = 1 << 16",
        note: "last-level cache load misses as the kernel maps them (unsupported on some CPUs)",
    },
    EventEntry {
        id: "generic.node_load_misses",
        kind: EventKind::RemoteAccess,
        name: "PERF_COUNT_HW_CACHE_NODE read miss",
        pmu: PmuReq::Core,
        space: ConfigSpace::HwCache,
        config: hw_cache_config(
            PERF_COUNT_HW_CACHE_NODE,
            PERF_COUNT_HW_CACHE_OP_READ,
            PERF_COUNT_HW_CACHE_RESULT_MISS,
        ),
        config1: 0,
        precise_ip: 0,
        sample_addr: false,
        delivery: Delivery::Sample,
        requires_format: &[],
        cpus: CpuMatch::Any,
        source: "linux include/uapi/linux/perf_event.h: PERF_TYPE_HW_CACHE, \
                 PERF_COUNT_HW_CACHE_NODE = 6 | OP_READ = 0 << 8 | RESULT_MISS = 1 << 16",
        note: "loads served by another node's memory as the kernel maps them; many CPUs \
               have no mapping and the open fails with ENOENT",
    },
];
