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

use std::collections::BTreeMap;
use std::error::Error;
use std::fmt;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::EventKind;

// ---------------------------------------------------------------------------------------------
// perf ABI numbers (include/uapi/linux/perf_event.h)
// ---------------------------------------------------------------------------------------------

/// `perf_event_attr.type` of the kernel-generalized hardware events (`PERF_TYPE_HARDWARE`).
pub const PERF_TYPE_HARDWARE: u32 = 0;
/// `perf_event_attr.type` of the generalized cache events (`PERF_TYPE_HW_CACHE`).
pub const PERF_TYPE_HW_CACHE: u32 = 3;
/// `perf_event_attr.type` for a raw event of the CPU's core PMU (`PERF_TYPE_RAW`); the x86
/// `cpu` PMU reports exactly this number in its sysfs `type` file.
pub const PERF_TYPE_RAW: u32 = 4;
/// `PERF_COUNT_HW_CACHE_MISSES` in `enum perf_hw_id`.
pub const PERF_COUNT_HW_CACHE_MISSES: u64 = 3;
/// `PERF_COUNT_HW_CACHE_LL` (last-level cache) in `enum perf_hw_cache_id`.
pub const PERF_COUNT_HW_CACHE_LL: u64 = 2;
/// `PERF_COUNT_HW_CACHE_NODE` (memory of another NUMA node) in `enum perf_hw_cache_id`.
pub const PERF_COUNT_HW_CACHE_NODE: u64 = 6;
/// `PERF_COUNT_HW_CACHE_OP_READ` in `enum perf_hw_cache_op_id`.
pub const PERF_COUNT_HW_CACHE_OP_READ: u64 = 0;
/// `PERF_COUNT_HW_CACHE_RESULT_MISS` in `enum perf_hw_cache_op_result_id`.
pub const PERF_COUNT_HW_CACHE_RESULT_MISS: u64 = 1;

/// The `config` of a `PERF_TYPE_HW_CACHE` event: `cache | op << 8 | result << 16`.
pub const fn hw_cache_config(cache: u64, op: u64, result: u64) -> u64 {
    cache | (op << 8) | (result << 16)
}

/// The `config` of an x86 core-PMU raw event: event select bits 7:0 go to config bits 7:0,
/// the unit mask to bits 15:8, and AMD's extended event select bits 11:8 to config bits 35:32
/// (the AMD `cpu` PMU's `event` format is `config:0-7,32-35`, its `umask` is `config:8-15`;
/// Intel uses the same low 16 bits, and none of its events here need more).
pub const fn x86_raw(event: u64, umask: u64) -> u64 {
    (event & 0xff) | ((umask & 0xff) << 8) | (((event >> 8) & 0xf) << 32)
}

// AMD IBS op (arch/x86/include/asm/amd-ibs.h, arch/x86/events/amd/ibs.c).

/// IbsOpCtl bit 19, IbsOpCntCtl: count dispatched ops rather than cycles between samples, so
/// samples are spread over instructions the way memory accesses are. sysfs format `cnt_ctl`
/// (`config:19`), visible only when the CPU has IBS op counting.
pub const IBS_OP_CNT_CTL: u64 = 1 << 19;
/// IbsOpCtl bit 16, IbsOpL3MissOnly (Zen 4 and later): only ops that miss the L3 are tagged,
/// so nearly every sample is a memory-system event. sysfs format `l3missonly` (`config:16`).
pub const IBS_OP_L3_MISS_ONLY: u64 = 1 << 16;
/// IbsOpData2 bit 4, RmtNode: the access was served by another NUMA node. Only meaningful
/// for loads whose data source is DRAM (and, on Zen 4, PMEM or extension memory).
pub const IBS_OP_DATA2_RMT_NODE: u64 = 1 << 4;
/// IbsOpData2 bits 2:0, DataSrc (low bits); Zen 4 adds bits 7:6 as the high bits.
pub const IBS_OP_DATA2_DATA_SRC_LO_MASK: u64 = 0x7;
/// IbsOpData2 bits 7:6, DataSrc high bits (Zen 4 "DataSrc extension").
pub const IBS_OP_DATA2_DATA_SRC_HI_SHIFT: u32 = 6;
/// IbsOpData2 DataSrc before Zen 4: data came from a cache of another CCX on another node.
pub const IBS_DATA_SRC_REM_CACHE: u64 = 4;
/// IbsOpData2 DataSrc (both encodings): data came from DRAM; RmtNode tells local or remote.
pub const IBS_DATA_SRC_DRAM: u64 = 3;
/// IbsOpData2 DataSrc on Zen 4+: data came from a cache of a CCX on another node.
pub const IBS_DATA_SRC_EXT_FAR_CCX_CACHE: u64 = 5;
/// IbsOpData3 bit 0, LdOp: the sampled op is a load (IbsOpData2 is only valid for loads).
pub const IBS_OP_DATA3_LD_OP: u64 = 1 << 0;
/// IbsOpData3 bit 7, DcMiss: the load missed the L1 data cache.
pub const IBS_OP_DATA3_DC_MISS: u64 = 1 << 7;
/// IbsOpData3 bit 17, DcLinAddrValid: IbsDcLinAd holds the data's virtual address (the
/// kernel only fills `PERF_SAMPLE_ADDR` when this is set).
pub const IBS_OP_DATA3_DC_LIN_ADDR_VALID: u64 = 1 << 17;

// Arm SPE (drivers/perf/arm_spe_pmu.c, tools/perf/util/arm-spe-decoder/arm-spe-pkt-decoder.h).

/// SPE format `ts_enable` (`config:0`): timestamp each record so it can be ordered with
/// the rest of the profile.
pub const SPE_TS_ENABLE: u64 = 1 << 0;
/// SPE format `jitter` (`config:16`): randomize the sampling interval to avoid aliasing
/// with loops whose length divides the interval.
pub const SPE_JITTER: u64 = 1 << 16;
/// SPE format `load_filter` (`config:33`): record only loads.
pub const SPE_LOAD_FILTER: u64 = 1 << 33;
/// SPE record events packet bit 9, LLC miss (set by hardware in the record; the kernel does
/// not let `event_filter` select it on SPEv1, bits 8-11 are RES0 in PMSEVFR_EL1 there).
pub const SPE_EVENT_LLC_MISS: u64 = 1 << 9;
/// SPE record events packet bit 10, remote access (same filtering caveat as above).
pub const SPE_EVENT_REMOTE_ACCESS: u64 = 1 << 10;

// ---------------------------------------------------------------------------------------------
// CPU identification
// ---------------------------------------------------------------------------------------------

/// Arm `CPU implementer` code of Arm Ltd. (Neoverse cores, also inside Ampere Altra).
pub const ARM_IMPLEMENTER_ARM: u32 = 0x41;
/// Arm `CPU implementer` code of Ampere Computing (AmpereOne's own cores).
pub const ARM_IMPLEMENTER_AMPERE: u32 = 0xc0;
/// `CPU part` of Neoverse N1 (Ampere Altra / Altra Max, AWS Graviton2).
pub const ARM_PART_NEOVERSE_N1: u32 = 0xd0c;
/// `CPU part` of Neoverse V1.
pub const ARM_PART_NEOVERSE_V1: u32 = 0xd40;
/// `CPU part` of Neoverse N2.
pub const ARM_PART_NEOVERSE_N2: u32 = 0xd49;
/// `CPU part` of Neoverse V2.
pub const ARM_PART_NEOVERSE_V2: u32 = 0xd4f;
/// `CPU part` of AmpereOne (implementer 0xc0).
pub const ARM_PART_AMPEREONE: u32 = 0xac3;
/// `CPU part` of AmpereOneX (implementer 0xc0).
pub const ARM_PART_AMPEREONEX: u32 = 0xac4;

/// A human name for an Arm implementer/part pair, for cores this module knows about
/// (part numbers as in linux `tools/perf/pmu-events/arch/arm64/mapfile.csv`).
pub fn arm_part_name(implementer: u32, part: u32) -> Option<&'static str> {
    match (implementer, part) {
        (ARM_IMPLEMENTER_ARM, ARM_PART_NEOVERSE_N1) => Some("Arm Neoverse N1"),
        (ARM_IMPLEMENTER_ARM, ARM_PART_NEOVERSE_V1) => Some("Arm Neoverse V1"),
        (ARM_IMPLEMENTER_ARM, ARM_PART_NEOVERSE_N2) => Some("Arm Neoverse N2"),
        (ARM_IMPLEMENTER_ARM, ARM_PART_NEOVERSE_V2) => Some("Arm Neoverse V2"),
        (ARM_IMPLEMENTER_AMPERE, ARM_PART_AMPEREONE) => Some("AmpereOne"),
        (ARM_IMPLEMENTER_AMPERE, ARM_PART_AMPEREONEX) => Some("AmpereOneX"),
        _ => None,
    }
}

/// Who designed the CPU, as far as PMU encodings care.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Vendor {
    /// `vendor_id : GenuineIntel`.
    Intel,
    /// `vendor_id : AuthenticAMD`.
    Amd,
    /// `vendor_id : HygonGenuine` (Zen-derived; has IBS, but its core event encodings are
    /// not verified here).
    Hygon,
    /// Arm `CPU implementer : 0x41` (Arm Ltd. designs such as Neoverse).
    Arm,
    /// Arm `CPU implementer : 0xc0` (Ampere's own cores).
    Ampere,
    /// Any other Arm `CPU implementer` code.
    OtherArm(u32),
    /// Any other `vendor_id` (or an architecture this module has no events for).
    Other(String),
}

impl Vendor {
    /// Whether this is an x86 vendor (events go to the `cpu` PMU as raw x86 encodings).
    pub fn is_x86(&self) -> bool {
        matches!(self, Vendor::Intel | Vendor::Amd | Vendor::Hygon)
    }

    /// Whether this is an Arm implementer (events go to an `armv8_*`/`armv9_*` PMU).
    pub fn is_arm(&self) -> bool {
        matches!(self, Vendor::Arm | Vendor::Ampere | Vendor::OtherArm(_))
    }
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Vendor::Intel => f.write_str("Intel"),
            Vendor::Amd => f.write_str("AMD"),
            Vendor::Hygon => f.write_str("Hygon"),
            Vendor::Arm => f.write_str("Arm"),
            Vendor::Ampere => f.write_str("Ampere"),
            Vendor::OtherArm(code) => write!(f, "Arm implementer {code:#04x}"),
            Vendor::Other(name) => f.write_str(name),
        }
    }
}

/// The Arm identification registers as `/proc/cpuinfo` shows them (MIDR_EL1 fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArmId {
    /// `CPU implementer` (0x41 Arm, 0xc0 Ampere, …).
    pub implementer: u32,
    /// `CPU variant` (the major revision, `r` in `rNpM`).
    pub variant: u32,
    /// `CPU part` (0xd0c Neoverse N1, …).
    pub part: u32,
    /// `CPU revision` (the minor revision, `p` in `rNpM`).
    pub revision: u32,
}

/// The CPU as identified from `/proc/cpuinfo` (first processor only: a server's cores are
/// all alike, and on hybrid parts the PMU encodings here do not apply anyway).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuId {
    /// Who designed it.
    pub vendor: Vendor,
    /// x86 `cpu family` (decimal in cpuinfo; 6 for Intel Core/Xeon, 0x17/0x19/0x1a for Zen).
    /// 0 on Arm.
    pub family: u32,
    /// x86 `model` (decimal in cpuinfo, usually written in hex: 0x55 is Skylake-SP).
    /// 0 on Arm.
    pub model: u32,
    /// x86 `stepping`; `None` if cpuinfo says `unknown` or has none (and on Arm). It matters
    /// for model 0x55, where intel/perfmon tells Skylake-SP (0-4) from Cascade Lake (5-15).
    pub stepping: Option<u32>,
    /// `model name`, or on Arm a name derived from implementer/part when known.
    pub model_name: String,
    /// The Arm identification, `None` on x86.
    pub arm: Option<ArmId>,
}

/// Why `/proc/cpuinfo` did not yield a [`CpuId`].
#[derive(Debug)]
pub enum CpuInfoError {
    /// `/proc/cpuinfo` could not be read.
    Io(io::Error),
    /// The text has no `key : value` lines.
    Empty,
    /// Neither an x86 `vendor_id` nor an Arm `CPU implementer` line.
    Unrecognized,
    /// An x86 vendor without this field.
    MissingField(&'static str),
    /// A numeric field that does not parse.
    BadNumber {
        /// The cpuinfo key.
        field: &'static str,
        /// Its text.
        value: String,
    },
}

impl fmt::Display for CpuInfoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuInfoError::Io(e) => write!(f, "cannot read {}: {e}", CpuId::PROC_CPUINFO),
            CpuInfoError::Empty => f.write_str("cpuinfo is empty"),
            CpuInfoError::Unrecognized => {
                f.write_str("cpuinfo has neither `vendor_id` (x86) nor `CPU implementer` (Arm)")
            }
            CpuInfoError::MissingField(key) => write!(f, "cpuinfo has no `{key}` line"),
            CpuInfoError::BadNumber { field, value } => {
                write!(f, "cpuinfo `{field}` is not a number: {value:?}")
            }
        }
    }
}

impl Error for CpuInfoError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            CpuInfoError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl CpuId {
    /// Where the kernel describes the CPUs.
    pub const PROC_CPUINFO: &'static str = "/proc/cpuinfo";

    /// Reads and parses [`CpuId::PROC_CPUINFO`].
    ///
    /// # Errors
    /// [`CpuInfoError::Io`] if the file cannot be read, else as [`CpuId::parse`].
    pub fn read() -> Result<CpuId, CpuInfoError> {
        let text = fs::read_to_string(Self::PROC_CPUINFO).map_err(CpuInfoError::Io)?;
        Self::parse(&text)
    }

    /// Parses `/proc/cpuinfo` text. Only the first processor block is read.
    ///
    /// # Errors
    /// If the text is empty, belongs to neither x86 nor Arm, or an x86 vendor's family or
    /// model (an Arm CPU's part) is missing or not a number.
    pub fn parse(cpuinfo: &str) -> Result<CpuId, CpuInfoError> {
        let fields = first_block(cpuinfo);
        if fields.is_empty() {
            return Err(CpuInfoError::Empty);
        }
        let get = |key: &str| fields.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        let number = |key: &'static str| -> Result<Option<u32>, CpuInfoError> {
            match get(key) {
                None => Ok(None),
                Some(v) => parse_number(v).map(Some).ok_or(CpuInfoError::BadNumber {
                    field: key,
                    value: v.to_string(),
                }),
            }
        };

        if let Some(vendor_id) = get("vendor_id") {
            let vendor = match vendor_id {
                "GenuineIntel" => Vendor::Intel,
                "AuthenticAMD" => Vendor::Amd,
                "HygonGenuine" => Vendor::Hygon,
                other => Vendor::Other(other.to_string()),
            };
            // Family and model select every x86 encoding, so an x86 vendor without them is
            // an error rather than a CPU that silently matches nothing.
            let (family, model) = if vendor.is_x86() {
                (
                    number("cpu family")?.ok_or(CpuInfoError::MissingField("cpu family"))?,
                    number("model")?.ok_or(CpuInfoError::MissingField("model"))?,
                )
            } else {
                (number("cpu family")?.unwrap_or(0), number("model")?.unwrap_or(0))
            };
            // Some hypervisors print `stepping : unknown`; that is not worth failing over.
            let stepping = get("stepping").and_then(parse_number);
            return Ok(CpuId {
                vendor,
                family,
                model,
                stepping,
                model_name: get("model name").unwrap_or("").to_string(),
                arm: None,
            });
        }

        if get("CPU implementer").is_some() {
            let implementer = number("CPU implementer")?.unwrap_or(0);
            let part = number("CPU part")?.ok_or(CpuInfoError::MissingField("CPU part"))?;
            let arm = ArmId {
                implementer,
                variant: number("CPU variant")?.unwrap_or(0),
                part,
                revision: number("CPU revision")?.unwrap_or(0),
            };
            let vendor = match implementer {
                ARM_IMPLEMENTER_ARM => Vendor::Arm,
                ARM_IMPLEMENTER_AMPERE => Vendor::Ampere,
                other => Vendor::OtherArm(other),
            };
            // arm64 cpuinfo has no `model name`; a known core name reads better in `probe`.
            let model_name = get("model name")
                .or_else(|| arm_part_name(implementer, part))
                .map_or_else(
                    || format!("implementer {implementer:#04x} part {part:#05x}"),
                    str::to_string,
                );
            return Ok(CpuId {
                vendor,
                family: 0,
                model: 0,
                stepping: None,
                model_name,
                arm: Some(arm),
            });
        }

        Err(CpuInfoError::Unrecognized)
    }
}

impl fmt::Display for CpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.arm {
            Some(arm) => write!(
                f,
                "{} part {:#05x} r{}p{}",
                self.vendor, arm.part, arm.variant, arm.revision
            )?,
            None => {
                write!(f, "{} family {:#x} model {:#x}", self.vendor, self.family, self.model)?;
                if let Some(stepping) = self.stepping {
                    write!(f, " stepping {stepping}")?;
                }
            }
        }
        if !self.model_name.is_empty() {
            write!(f, " ({})", self.model_name)?;
        }
        Ok(())
    }
}

/// The `key : value` pairs of the first processor block (up to the first blank line).
fn first_block(cpuinfo: &str) -> Vec<(&str, &str)> {
    let mut fields = Vec::new();
    for line in cpuinfo.lines() {
        if line.trim().is_empty() {
            if fields.is_empty() {
                continue;
            }
            break;
        }
        if let Some((key, value)) = line.split_once(':') {
            fields.push((key.trim(), value.trim()));
        }
    }
    fields
}

/// Parses cpuinfo numbers: x86 prints decimal, Arm prints `0x`-prefixed hex.
fn parse_number(text: &str) -> Option<u32> {
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

// ---------------------------------------------------------------------------------------------
// PMUs the kernel exposes
// ---------------------------------------------------------------------------------------------

/// One PMU from `/sys/bus/event_source/devices/<name>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmuInfo {
    /// Directory name, which is also the PMU name in perf event syntax.
    pub name: String,
    /// The `type` file: the number to put in `perf_event_attr.type`.
    pub type_: u32,
    /// Whether it counts events of the CPU cores: `cpu`, or any PMU with a `cpus` file
    /// (`cpu_core`/`cpu_atom` on hybrid Intel, `armv8_pmuv3_0`, `armv8_neoverse_n1`, …), the
    /// same test `perf` uses.
    pub is_core: bool,
    /// The option names in `format/` (e.g. `event`, `umask`, `cnt_ctl`, `l3missonly`), sorted.
    pub formats: Vec<String>,
    /// `caps/max_precise` (x86 only): the highest `precise_ip` the PMU accepts; 0 means no
    /// PEBS, as in many virtual machines.
    pub max_precise: Option<u8>,
}

impl PmuInfo {
    /// Whether `format/<attr>` exists, i.e. the kernel accepts that option for this PMU.
    pub fn has_format(&self, attr: &str) -> bool {
        self.formats.iter().any(|f| f == attr)
    }
}

/// The PMUs the kernel exposes, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pmus {
    by_name: BTreeMap<String, PmuInfo>,
    skipped: Vec<String>,
}

/// The PMU directory could not be listed.
#[derive(Debug)]
pub struct PmuError {
    /// The directory.
    pub path: PathBuf,
    /// What went wrong.
    pub source: io::Error,
}

impl fmt::Display for PmuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot list PMUs in {}: {}", self.path.display(), self.source)
    }
}

impl Error for PmuError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.source)
    }
}

impl Pmus {
    /// Where the kernel lists its PMUs.
    pub const SYSFS_DIR: &'static str = "/sys/bus/event_source/devices";

    /// Reads the PMUs of this machine from [`Pmus::SYSFS_DIR`].
    ///
    /// # Errors
    /// If the directory cannot be listed (no sysfs, or a kernel without perf events).
    pub fn read() -> Result<Pmus, PmuError> {
        Self::from_dir(Path::new(Self::SYSFS_DIR))
    }

    /// Reads PMUs from a directory laid out like [`Pmus::SYSFS_DIR`] (one subdirectory per
    /// PMU, each with a `type` file). Entries whose `type` is missing or not a number are
    /// skipped and listed in [`Pmus::skipped`]: one odd entry must not hide the others.
    ///
    /// # Errors
    /// If `root` cannot be listed.
    pub fn from_dir(root: &Path) -> Result<Pmus, PmuError> {
        let entries = fs::read_dir(root).map_err(|source| PmuError {
            path: root.to_path_buf(),
            source,
        })?;
        let mut pmus = Pmus::default();
        for entry in entries {
            let entry = entry.map_err(|source| PmuError {
                path: root.to_path_buf(),
                source,
            })?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            // Entries are symlinks into /sys/devices; joining follows them.
            let dir = entry.path();
            let type_ = fs::read_to_string(dir.join("type"))
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok());
            let Some(type_) = type_ else {
                pmus.skipped.push(name);
                continue;
            };
            let is_core = name == "cpu" || dir.join("cpus").exists();
            let mut formats: Vec<String> = fs::read_dir(dir.join("format"))
                .map(|rd| rd.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
                .unwrap_or_default();
            formats.sort();
            let max_precise = fs::read_to_string(dir.join("caps").join("max_precise"))
                .ok()
                .and_then(|t| t.trim().parse::<u8>().ok());
            pmus.by_name.insert(
                name.clone(),
                PmuInfo {
                    name,
                    type_,
                    is_core,
                    formats,
                    max_precise,
                },
            );
        }
        pmus.skipped.sort();
        Ok(pmus)
    }

    /// Builds the set from already known PMUs (for callers that learned them elsewhere).
    pub fn from_infos(infos: impl IntoIterator<Item = PmuInfo>) -> Pmus {
        Pmus {
            by_name: infos.into_iter().map(|p| (p.name.clone(), p)).collect(),
            skipped: Vec::new(),
        }
    }

    /// The PMU with this exact name.
    pub fn get(&self, name: &str) -> Option<&PmuInfo> {
        self.by_name.get(name)
    }

    /// The perf type number of the PMU with this exact name.
    pub fn type_of(&self, name: &str) -> Option<u32> {
        self.get(name).map(|p| p.type_)
    }

    /// All PMUs, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &PmuInfo> {
        self.by_name.values()
    }

    /// How many PMUs were found.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether no PMU was found.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Directory entries that were not PMUs (no readable numeric `type`).
    pub fn skipped(&self) -> &[String] {
        &self.skipped
    }

    /// Whether the kernel exposes any hardware PMU for the CPU cores.
    pub fn has_core_pmu(&self) -> bool {
        self.by_name.values().any(|p| p.is_core)
    }

    /// The core PMU events of this module are opened on: `cpu` (x86), else `cpu_core`
    /// (hybrid Intel: the P-cores, whose encodings match the server parts), else an
    /// `armv8*`/`armv9*` PMU, else any core PMU. Heterogeneous Arm systems have one PMU per
    /// core type; the first by name is taken, which is right for servers (one core type).
    pub fn core_pmu(&self) -> Option<&PmuInfo> {
        let core = || self.by_name.values().filter(|p| p.is_core);
        self.get("cpu")
            .or_else(|| self.get("cpu_core"))
            .filter(|p| p.is_core)
            .or_else(|| core().find(|p| p.name.starts_with("armv")))
            .or_else(|| core().next())
    }

    /// The first PMU (by name) called `prefix` or `prefix_<n>`, e.g. `arm_spe` → `arm_spe_0`.
    pub fn find_prefixed(&self, prefix: &str) -> Option<&PmuInfo> {
        self.by_name.values().find(|p| {
            p.name == prefix
                || p.name
                    .strip_prefix(prefix)
                    .and_then(|rest| rest.strip_prefix('_'))
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    }
}

// ---------------------------------------------------------------------------------------------
// perf encodings
// ---------------------------------------------------------------------------------------------

/// What goes into `perf_event_attr.type`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PerfType {
    /// `PERF_TYPE_RAW`: a raw event of the core PMU (x86 `cpu`, type 4).
    Raw,
    /// `PERF_TYPE_HARDWARE`: a kernel-generalized event.
    Hardware,
    /// `PERF_TYPE_HW_CACHE`: a kernel-generalized cache event.
    HwCache,
    /// A PMU registered with a dynamic type number (`ibs_op`, `arm_spe_0`, `armv8_pmuv3_0`,
    /// `cpu_core`); the number comes from its sysfs `type` file when the event is opened.
    Dynamic(String),
}

/// A dynamic PMU named in an encoding is not (or no longer) exposed by the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownPmu(pub String);

impl fmt::Display for UnknownPmu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the kernel exposes no `{}` PMU", self.0)
    }
}

impl Error for UnknownPmu {}

impl PerfType {
    /// The `perf_event_attr.type` number; dynamic PMUs are looked up in `pmus`.
    ///
    /// # Errors
    /// [`UnknownPmu`] if a dynamic PMU is not in `pmus`.
    pub fn resolve(&self, pmus: &Pmus) -> Result<u32, UnknownPmu> {
        match self {
            PerfType::Raw => Ok(PERF_TYPE_RAW),
            PerfType::Hardware => Ok(PERF_TYPE_HARDWARE),
            PerfType::HwCache => Ok(PERF_TYPE_HW_CACHE),
            PerfType::Dynamic(name) => pmus.type_of(name).ok_or_else(|| UnknownPmu(name.clone())),
        }
    }
}

/// Everything of `perf_event_attr` that selects and shapes the event.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PerfEncoding {
    /// `perf_event_attr.type`.
    pub type_: PerfType,
    /// `perf_event_attr.config`.
    pub config: u64,
    /// `perf_event_attr.config1` (SPE `event_filter`; unused by the other entries).
    pub config1: u64,
    /// `perf_event_attr.precise_ip`: 0 arbitrary skid, 2 (`pp`) zero-skid IP via PEBS.
    pub precise_ip: u8,
    /// Whether samples carry the data address, so `PERF_SAMPLE_ADDR` is worth requesting
    /// (PEBS data-LA, IBS IbsDcLinAd; for SPE the address is in the AUX records instead).
    pub sample_addr: bool,
}

impl PerfEncoding {
    /// The `perf_event_attr.type` number at open time (dynamic PMUs resolved from `pmus`).
    ///
    /// # Errors
    /// [`UnknownPmu`] if the encoding's dynamic PMU is not in `pmus`.
    pub fn perf_type(&self, pmus: &Pmus) -> Result<u32, UnknownPmu> {
        self.type_.resolve(pmus)
    }

    /// The event in `perf` command-line syntax, for `probe` output and copy-paste into
    /// `perf record -e`: `cpu/event=0xd3,umask=0x02/pp`, `ibs_op/cnt_ctl=1/`,
    /// `armv8_pmuv3_0/event=0x31/`, `cache-misses`, `LLC-load-misses`.
    pub fn describe(&self) -> String {
        let modifier = "p".repeat(usize::from(self.precise_ip));
        match &self.type_ {
            PerfType::Hardware => with_modifier(hardware_name(self.config), &modifier),
            PerfType::HwCache => with_modifier(hw_cache_name(self.config), &modifier),
            PerfType::Raw => format!("cpu/{}/{modifier}", x86_terms(self.config, self.config1)),
            PerfType::Dynamic(pmu) => {
                let terms = if pmu == "cpu" || pmu.starts_with("cpu_") {
                    x86_terms(self.config, self.config1)
                } else if pmu.starts_with("ibs_op") {
                    ibs_op_terms(self.config, self.config1)
                } else if pmu.starts_with("arm_spe") {
                    spe_terms(self.config, self.config1)
                } else if pmu.starts_with("armv") {
                    arm_core_terms(self.config, self.config1)
                } else {
                    raw_terms(self.config, self.config1)
                };
                format!("{pmu}/{terms}/{modifier}")
            }
        }
    }
}

fn with_modifier(name: String, modifier: &str) -> String {
    if modifier.is_empty() {
        name
    } else {
        format!("{name}:{modifier}")
    }
}

/// perf's names for the `PERF_TYPE_HARDWARE` events.
fn hardware_name(config: u64) -> String {
    const NAMES: [&str; 10] = [
        "cycles",
        "instructions",
        "cache-references",
        "cache-misses",
        "branches",
        "branch-misses",
        "bus-cycles",
        "stalled-cycles-frontend",
        "stalled-cycles-backend",
        "ref-cycles",
    ];
    usize::try_from(config)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map_or_else(|| format!("hardware/config={config:#x}/"), |n| (*n).to_string())
}

/// perf's names for `PERF_TYPE_HW_CACHE` events (`LLC-load-misses`, `node-load-misses`).
fn hw_cache_name(config: u64) -> String {
    const CACHES: [&str; 7] = ["L1-dcache", "L1-icache", "LLC", "dTLB", "iTLB", "branch", "node"];
    const OPS: [&str; 3] = ["load", "store", "prefetch"];
    let cache = usize::try_from(config & 0xff).ok().and_then(|i| CACHES.get(i));
    let op = usize::try_from((config >> 8) & 0xff).ok().and_then(|i| OPS.get(i));
    match (cache, op, config >> 16) {
        (Some(cache), Some(op), 0) => format!("{cache}-{op}s"),
        (Some(cache), Some(op), 1) => format!("{cache}-{op}-misses"),
        _ => format!("hw_cache/config={config:#x}/"),
    }
}

/// Fallback for bits no named option covers.
fn raw_terms(config: u64, config1: u64) -> String {
    if config1 == 0 {
        format!("config={config:#x}")
    } else {
        format!("config={config:#x},config1={config1:#x}")
    }
}

/// x86 core PMU options: `event` (0-7, AMD also 32-35), `umask` (8-15), `edge` (18),
/// `inv` (23), `cmask` (24-31).
fn x86_terms(config: u64, config1: u64) -> String {
    const KNOWN: u64 = 0xff | (0xff << 8) | (1 << 18) | (1 << 23) | (0xff << 24) | (0xf << 32);
    if config & !KNOWN != 0 || config1 != 0 {
        return raw_terms(config, config1);
    }
    let event = (config & 0xff) | (((config >> 32) & 0xf) << 8);
    let mut terms = format!("event={event:#04x},umask={:#04x}", (config >> 8) & 0xff);
    if config & (1 << 18) != 0 {
        terms.push_str(",edge=1");
    }
    if config & (1 << 23) != 0 {
        terms.push_str(",inv=1");
    }
    let cmask = (config >> 24) & 0xff;
    if cmask != 0 {
        // Writing to a String cannot fail.
        let _ = write!(terms, ",cmask={cmask:#04x}");
    }
    terms
}

/// Arm core PMU option `event` (the architectural event number).
fn arm_core_terms(config: u64, config1: u64) -> String {
    if config > 0xffff || config1 != 0 {
        return raw_terms(config, config1);
    }
    format!("event={config:#04x}")
}

/// `ibs_op` options `l3missonly` (config:16) and `cnt_ctl` (config:19).
fn ibs_op_terms(config: u64, config1: u64) -> String {
    if config & !(IBS_OP_CNT_CTL | IBS_OP_L3_MISS_ONLY) != 0 || config1 != 0 {
        return raw_terms(config, config1);
    }
    let mut terms = Vec::new();
    if config & IBS_OP_CNT_CTL != 0 {
        terms.push("cnt_ctl=1");
    }
    if config & IBS_OP_L3_MISS_ONLY != 0 {
        terms.push("l3missonly=1");
    }
    terms.join(",")
}

/// `arm_spe_*` options (drivers/perf/arm_spe_pmu.c): single-bit flags in `config`, the
/// event filter in `config1`.
fn spe_terms(config: u64, config1: u64) -> String {
    const FLAGS: [(u64, &str); 7] = [
        (1 << 0, "ts_enable"),
        (1 << 1, "pa_enable"),
        (1 << 2, "pct_enable"),
        (1 << 16, "jitter"),
        (1 << 32, "branch_filter"),
        (1 << 33, "load_filter"),
        (1 << 34, "store_filter"),
    ];
    let known = FLAGS.iter().fold(0, |acc, (bit, _)| acc | bit);
    if config & !known != 0 {
        return raw_terms(config, config1);
    }
    let mut terms: Vec<String> = FLAGS
        .iter()
        .filter(|(bit, _)| config & bit != 0)
        .map(|(_, name)| format!("{name}=1"))
        .collect();
    if config1 != 0 {
        terms.push(format!("event_filter={config1:#x}"));
    }
    terms.join(",")
}

// ---------------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------------

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

    fn is_arm(&self) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicUsize, Ordering};

    // ---- fixtures ---------------------------------------------------------------------

    /// Xeon Gold 6148 (Skylake-SP), first block of /proc/cpuinfo.
    const SKYLAKE_SP: &str = "processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
model name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz
stepping\t: 4
microcode\t: 0x2006e05
cpu MHz\t\t: 2400.000
cache size\t: 28160 KB
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 pdcm pcid dca sse4_1 sse4_2 avx512f

processor\t: 1
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
";

    /// Xeon Platinum 8260 (Cascade Lake): same model 0x55, stepping 7.
    const CASCADE_LAKE: &str = "processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
model name\t: Intel(R) Xeon(R) Platinum 8260 CPU @ 2.40GHz
stepping\t: 7
microcode\t: 0x5003604
";

    /// Xeon Platinum 8380 (Ice Lake-SP).
    const ICELAKE_SP: &str = "processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 106
model name\t: Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz
stepping\t: 6
microcode\t: 0xd000389
";

    /// Xeon Platinum 8480+ (Sapphire Rapids).
    const SAPPHIRE_RAPIDS: &str = "processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
stepping\t: 8
microcode\t: 0x2b0004b1
";

    /// Core i7-6700 (client Skylake, model 0x5E).
    const SKYLAKE_CLIENT: &str = "processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 94
model name\t: Intel(R) Core(TM) i7-6700 CPU @ 3.40GHz
stepping\t: 3
";

    /// The machine this module was written on: Emerald Rapids (model 207 = 0xCF) in a VM
    /// that masks the model name and exposes no core PMU.
    const THIS_MACHINE: &str = "processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 207
model name\t: Intel(R) Xeon(R) Processor
stepping\t: 2
microcode\t: 0x1
cpu MHz\t\t: 2299.998
cache size\t: 266240 KB
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep hypervisor
";

    /// EPYC 7742 (Zen 2, Rome).
    const ZEN2_ROME: &str = "processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 23
model\t\t: 49
model name\t: AMD EPYC 7742 64-Core Processor
stepping\t: 0
microcode\t: 0x830104d
";

    /// EPYC 7763 (Zen 3, Milan).
    const ZEN3_MILAN: &str = "processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC 7763 64-Core Processor
stepping\t: 1
microcode\t: 0xa0011d1
";

    /// EPYC 9654 (Zen 4, Genoa).
    const ZEN4_GENOA: &str = "processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9654 96-Core Processor
stepping\t: 1
microcode\t: 0xa10113e
";

    /// Hygon Dhyana.
    const HYGON: &str = "processor\t: 0
vendor_id\t: HygonGenuine
cpu family\t: 24
model\t\t: 1
model name\t: Hygon C86 7185 32-core Processor
stepping\t: 1
";

    /// Ampere Altra (Neoverse N1 cores): arm64 cpuinfo has no vendor_id or model name.
    const AMPERE_ALTRA: &str = "processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1

processor\t: 1
BogoMIPS\t: 50.00
";

    /// AmpereOne (Ampere's own cores, implementer 0xc0).
    const AMPEREONE: &str = "processor\t: 0
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics
CPU implementer\t: 0xc0
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xac3
CPU revision\t: 1
";

    /// QEMU `-cpu qemu64` since QEMU 6.1 (target/i386/cpu.c: AuthenticAMD family 15
    /// model 107 stepping 1).
    const QEMU64: &str = "processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 15
model\t\t: 107
model name\t: QEMU Virtual CPU version 2.5+
stepping\t: 1
microcode\t: 0x1000065
";

    /// `-cpu qemu64` with machine types up to pc-*-6.0 (family 6 model 6 stepping 3); under
    /// KVM QEMU replaces the vendor with the host's, hence GenuineIntel here.
    const QEMU_OLD_KVM_INTEL: &str = "processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 6
model name\t: QEMU Virtual CPU version 2.5+
stepping\t: 3
microcode\t: 0x1
";

    fn cpu(text: &str) -> CpuId {
        CpuId::parse(text).expect("fixture parses")
    }

    /// A PMU directory tree under the system temp dir, removed on drop.
    struct FakeSysfs {
        root: PathBuf,
    }

    impl FakeSysfs {
        fn new(tag: &str) -> FakeSysfs {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let root = std::env::temp_dir().join(format!(
                "bimodal-pmu-test-{tag}-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            fs::create_dir_all(&root).unwrap();
            FakeSysfs { root }
        }

        fn write(&self, rel: &str, text: &str) -> &FakeSysfs {
            let path = self.root.join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
            self
        }

        fn pmu(&self, name: &str, type_: u32) -> &FakeSysfs {
            self.write(&format!("{name}/type"), &format!("{type_}\n"))
        }

        /// A core PMU that perf recognizes by its `cpus` file.
        fn core(&self, name: &str, type_: u32) -> &FakeSysfs {
            self.pmu(name, type_).write(&format!("{name}/cpus"), "0-3\n")
        }

        fn format(&self, pmu: &str, attr: &str, spec: &str) -> &FakeSysfs {
            self.write(&format!("{pmu}/format/{attr}"), &format!("{spec}\n"))
        }

        fn pmus(&self) -> Pmus {
            Pmus::from_dir(&self.root).unwrap()
        }

        /// The PMUs of the machine this module was written on (a VM without vPMU).
        fn this_machine() -> FakeSysfs {
            let s = FakeSysfs::new("vm");
            s.pmu("breakpoint", 5)
                .pmu("msr", 10)
                .format("msr", "event", "config:0-63")
                .pmu("power", 9)
                .write("power/cpumask", "0\n")
                .pmu("software", 1)
                .pmu("tracepoint", 2)
                .pmu("uprobe", 8)
                .format("uprobe", "retprobe", "config:0");
            s
        }

        /// x86 `cpu` PMU (type 4) as on bare metal or a VM with a vPMU.
        fn x86_cpu(tag: &str) -> FakeSysfs {
            let s = FakeSysfs::this_machine_named(tag);
            s.pmu("cpu", 4)
                .format("cpu", "event", "config:0-7")
                .format("cpu", "umask", "config:8-15")
                .write("cpu/caps/max_precise", "3\n");
            s
        }

        fn this_machine_named(tag: &str) -> FakeSysfs {
            let s = FakeSysfs::new(tag);
            s.pmu("software", 1).pmu("tracepoint", 2).pmu("breakpoint", 5);
            s
        }
    }

    impl Drop for FakeSysfs {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.root);
        }
    }

    fn by_id(id: &str) -> &'static EventEntry {
        EVENT_TABLE
            .iter()
            .chain(GENERIC_FALLBACKS.iter())
            .find(|e| e.id == id)
            .unwrap_or_else(|| panic!("no table entry {id}"))
    }

    /// The x86 layout, written independently of the module's `x86_raw`.
    fn x86(event: u64, umask: u64) -> u64 {
        (event & 0xff) + (umask << 8) + ((event >> 8) << 32)
    }

    fn verdict_of(cands: &[Candidate], id: &str) -> Verdict {
        cands
            .iter()
            .find(|c| c.entry.id == id)
            .unwrap_or_else(|| panic!("{id} not among candidates"))
            .verdict
            .clone()
    }

    fn ids(cands: &[Candidate]) -> Vec<&'static str> {
        cands.iter().map(|c| c.entry.id).collect()
    }

    // ---- cpuinfo ----------------------------------------------------------------------

    /// Skylake-SP: vendor, decimal family/model, stepping and name from the first block.
    #[test]
    fn parses_skylake_sp() {
        let c = cpu(SKYLAKE_SP);
        assert_eq!(c.vendor, Vendor::Intel);
        assert_eq!((c.family, c.model, c.stepping), (6, 0x55, Some(4)));
        assert_eq!(c.model_name, "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz");
        assert_eq!(c.arm, None);
        assert_eq!(
            c.to_string(),
            "Intel family 0x6 model 0x55 stepping 4 (Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz)"
        );
    }

    /// Cascade Lake, Ice Lake-SP, Sapphire Rapids and client Skylake models.
    #[test]
    fn parses_other_intel() {
        assert_eq!(cpu(CASCADE_LAKE).model, 0x55);
        assert_eq!(cpu(CASCADE_LAKE).stepping, Some(7));
        assert_eq!(cpu(ICELAKE_SP).model, 0x6a);
        assert_eq!(cpu(SAPPHIRE_RAPIDS).model, 0x8f);
        assert_eq!(cpu(SAPPHIRE_RAPIDS).model_name, "Intel(R) Xeon(R) Platinum 8480+");
        assert_eq!(cpu(SKYLAKE_CLIENT).model, 0x5e);
        assert_eq!(cpu(THIS_MACHINE).model, 0xcf);
    }

    /// AMD Zen 2/3/4 and Hygon families and models.
    #[test]
    fn parses_amd_and_hygon() {
        let rome = cpu(ZEN2_ROME);
        assert_eq!(
            (rome.vendor.clone(), rome.family, rome.model),
            (Vendor::Amd, 0x17, 0x31)
        );
        let milan = cpu(ZEN3_MILAN);
        assert_eq!((milan.family, milan.model), (0x19, 0x01));
        let genoa = cpu(ZEN4_GENOA);
        assert_eq!((genoa.family, genoa.model), (0x19, 0x11));
        let hygon = cpu(HYGON);
        assert_eq!((hygon.vendor, hygon.family), (Vendor::Hygon, 0x18));
    }

    /// Ampere Altra: hex implementer/part, name derived from the part.
    #[test]
    fn parses_ampere_altra() {
        let c = cpu(AMPERE_ALTRA);
        assert_eq!(c.vendor, Vendor::Arm);
        assert_eq!(
            c.arm,
            Some(ArmId {
                implementer: 0x41,
                variant: 3,
                part: 0xd0c,
                revision: 1
            })
        );
        assert_eq!(c.model_name, "Arm Neoverse N1");
        assert_eq!((c.family, c.model, c.stepping), (0, 0, None));
        assert_eq!(c.to_string(), "Arm part 0xd0c r3p1 (Arm Neoverse N1)");
        let one = cpu(AMPEREONE);
        assert_eq!(one.vendor, Vendor::Ampere);
        assert_eq!(one.model_name, "AmpereOne");
    }

    /// QEMU's default CPU as it reports itself (current and pre-6.1 machine types).
    #[test]
    fn parses_qemu() {
        let c = cpu(QEMU64);
        assert_eq!((c.vendor.clone(), c.family, c.model), (Vendor::Amd, 15, 107));
        assert_eq!(c.model_name, "QEMU Virtual CPU version 2.5+");
        let old = cpu(QEMU_OLD_KVM_INTEL);
        assert_eq!(
            (old.vendor, old.family, old.model, old.stepping),
            (Vendor::Intel, 6, 6, Some(3))
        );
    }

    /// Broken or foreign cpuinfo gives an error that names the problem.
    #[test]
    fn cpuinfo_errors() {
        assert!(matches!(CpuId::parse(""), Err(CpuInfoError::Empty)));
        assert!(matches!(CpuId::parse("\n\n"), Err(CpuInfoError::Empty)));
        assert!(matches!(
            CpuId::parse("processor : 0\nBogoMIPS : 1\n"),
            Err(CpuInfoError::Unrecognized)
        ));
        assert!(matches!(
            CpuId::parse("vendor_id : GenuineIntel\nmodel : 85\n"),
            Err(CpuInfoError::MissingField("cpu family"))
        ));
        let err = CpuId::parse("vendor_id : GenuineIntel\ncpu family : six\nmodel : 85\n").unwrap_err();
        assert_eq!(err.to_string(), "cpuinfo `cpu family` is not a number: \"six\"");
        // A hypervisor's `stepping : unknown` is not an error.
        let c = CpuId::parse("vendor_id : GenuineIntel\ncpu family : 6\nmodel : 85\nstepping : unknown\n").unwrap();
        assert_eq!(c.stepping, None);
        // Other architectures parse as `Other` and match nothing.
        let s390 = CpuId::parse("vendor_id : IBM/S390\n# processors : 4\n").unwrap();
        assert_eq!(s390.vendor, Vendor::Other("IBM/S390".into()));
    }

    /// This machine's real /proc/cpuinfo parses (skipped where there is none).
    #[test]
    fn reads_real_cpuinfo() {
        if !Path::new(CpuId::PROC_CPUINFO).exists() {
            return;
        }
        let c = CpuId::read().expect("this machine's cpuinfo parses");
        assert!(c.vendor.is_x86() || c.vendor.is_arm() || matches!(c.vendor, Vendor::Other(_)));
    }

    // ---- sysfs PMUs -------------------------------------------------------------------

    /// The PMUs of this machine (a VM): no core PMU, types and formats read.
    #[test]
    fn pmus_of_a_vm_without_vpmu() {
        let fake = FakeSysfs::this_machine();
        let pmus = fake.pmus();
        assert_eq!(pmus.len(), 6);
        assert_eq!(pmus.type_of("software"), Some(1));
        assert_eq!(pmus.type_of("uprobe"), Some(8));
        assert_eq!(pmus.get("uprobe").unwrap().formats, vec!["retprobe".to_string()]);
        assert!(!pmus.get("power").unwrap().is_core, "cpumask marks uncore, not core");
        assert!(!pmus.has_core_pmu());
        assert_eq!(pmus.core_pmu(), None);
    }

    /// A simulated x86 `cpu` PMU (temp dir with cpu/type) is the core PMU, with caps.
    #[test]
    fn pmus_with_x86_cpu() {
        let fake = FakeSysfs::x86_cpu("x86");
        let pmus = fake.pmus();
        let core = pmus.core_pmu().unwrap();
        assert_eq!((core.name.as_str(), core.type_), ("cpu", 4));
        assert_eq!(core.max_precise, Some(3));
        assert!(core.has_format("umask"));
    }

    /// Simulated hybrid Intel: `cpu_core` is preferred over `cpu_atom`.
    #[test]
    fn pmus_hybrid_intel() {
        let fake = FakeSysfs::new("hybrid");
        fake.core("cpu_atom", 10).core("cpu_core", 4).pmu("software", 1);
        let pmus = fake.pmus();
        assert_eq!(pmus.core_pmu().unwrap().name, "cpu_core");
    }

    /// Simulated Arm server: `armv8_pmuv3_0` is the core PMU, `arm_spe_0` found by prefix.
    #[test]
    fn pmus_arm() {
        let fake = FakeSysfs::new("arm");
        fake.core("armv8_pmuv3_0", 8).pmu("arm_spe_0", 9).pmu("arm_cmn_0", 10);
        let pmus = fake.pmus();
        assert_eq!(pmus.core_pmu().unwrap().name, "armv8_pmuv3_0");
        assert_eq!(pmus.find_prefixed("arm_spe").unwrap().type_, 9);
        assert_eq!(pmus.find_prefixed("arm"), None, "prefix must be followed by _<n>");
    }

    /// Entries without a numeric type are skipped, not fatal; a missing root is an error.
    #[test]
    fn pmus_odd_entries() {
        let fake = FakeSysfs::new("odd");
        fake.pmu("software", 1)
            .write("notype/uevent", "")
            .write("badtype/type", "four\n");
        let pmus = fake.pmus();
        assert_eq!(pmus.len(), 1);
        assert_eq!(pmus.skipped(), ["badtype".to_string(), "notype".to_string()]);
        let err = Pmus::from_dir(&fake.root.join("absent")).unwrap_err();
        assert!(err.to_string().starts_with("cannot list PMUs in "));
    }

    // ---- one test per table entry -------------------------------------------------------
    // Expected (event, umask) pairs are copied from the cited file, not from the table.

    /// intel/perfmon *_core.json: MEM_LOAD_L3_MISS_RETIRED.REMOTE_DRAM = 0xD3 / 0x02, PEBS.
    #[test]
    fn entry_intel_remote_dram() {
        let e = by_id("intel.mem_load_l3_miss_retired.remote_dram");
        assert_eq!(e.name, "MEM_LOAD_L3_MISS_RETIRED.REMOTE_DRAM");
        assert_eq!(e.kind, EventKind::RemoteAccess);
        assert_eq!(e.config, x86(0xD3, 0x02));
        assert_eq!(e.config, 0x02d3);
        assert_eq!((e.precise_ip, e.sample_addr), (2, true));
    }

    /// intel/perfmon *_core.json: MEM_LOAD_L3_MISS_RETIRED.REMOTE_HITM = 0xD3 / 0x04.
    #[test]
    fn entry_intel_remote_hitm() {
        let e = by_id("intel.mem_load_l3_miss_retired.remote_hitm");
        assert_eq!(e.name, "MEM_LOAD_L3_MISS_RETIRED.REMOTE_HITM");
        assert_eq!(e.config, x86(0xD3, 0x04));
        assert_eq!(e.config, 0x04d3);
        assert_eq!(e.precise_ip, 2);
    }

    /// intel/perfmon SKX/ICX/SPR/EMR/GNR: MEM_LOAD_L3_MISS_RETIRED.REMOTE_FWD = 0xD3 / 0x08.
    #[test]
    fn entry_intel_remote_fwd() {
        let e = by_id("intel.mem_load_l3_miss_retired.remote_fwd");
        assert_eq!(e.name, "MEM_LOAD_L3_MISS_RETIRED.REMOTE_FWD");
        assert_eq!(e.config, x86(0xD3, 0x08));
        assert_eq!(e.config, 0x08d3);
        assert_eq!(e.precise_ip, 2);
    }

    /// intel/perfmon CLX: REMOTE_FWD = 0xD3 / 0x08 with PEBS 0, so sampled imprecisely.
    #[test]
    fn entry_intel_remote_fwd_clx() {
        let e = by_id("intel.mem_load_l3_miss_retired.remote_fwd.clx");
        assert_eq!(e.config, x86(0xD3, 0x08));
        assert_eq!((e.precise_ip, e.sample_addr), (0, false));
    }

    /// intel/perfmon *_core.json: MEM_LOAD_RETIRED.L3_MISS = 0xD1 / 0x20, PEBS.
    #[test]
    fn entry_intel_l3_miss() {
        let e = by_id("intel.mem_load_retired.l3_miss");
        assert_eq!(e.name, "MEM_LOAD_RETIRED.L3_MISS");
        assert_eq!(e.kind, EventKind::CacheMiss);
        assert_eq!(e.config, x86(0xD1, 0x20));
        assert_eq!(e.config, 0x20d1);
        assert_eq!((e.precise_ip, e.sample_addr), (2, true));
    }

    /// intel/perfmon *_core.json: LONGEST_LAT_CACHE.MISS = 0x2E / 0x41, not PEBS.
    #[test]
    fn entry_intel_longest_lat_cache_miss() {
        let e = by_id("intel.longest_lat_cache.miss");
        assert_eq!(e.name, "LONGEST_LAT_CACHE.MISS");
        assert_eq!(e.config, x86(0x2E, 0x41));
        assert_eq!(e.config, 0x412e);
        assert_eq!(e.precise_ip, 0);
    }

    /// intel/perfmon SKL/SKX/CLX/ICL/RKL: MEM_LOAD_L3_HIT_RETIRED.XSNP_HITM = 0xD2 / 0x04.
    #[test]
    fn entry_intel_xsnp_hitm() {
        let e = by_id("intel.mem_load_l3_hit_retired.xsnp_hitm");
        assert_eq!(e.name, "MEM_LOAD_L3_HIT_RETIRED.XSNP_HITM");
        assert_eq!(e.config, x86(0xD2, 0x04));
        assert_eq!(e.config, 0x04d2);
    }

    /// intel/perfmon ICX/TGL/SPR/EMR/GNR: MEM_LOAD_L3_HIT_RETIRED.XSNP_FWD = 0xD2 / 0x04.
    #[test]
    fn entry_intel_xsnp_fwd() {
        let e = by_id("intel.mem_load_l3_hit_retired.xsnp_fwd");
        assert_eq!(e.name, "MEM_LOAD_L3_HIT_RETIRED.XSNP_FWD");
        assert_eq!(e.config, x86(0xD2, 0x04));
    }

    /// linux amdzen4/cache.json + amdzen5/load-store.json: far_all = 0x44 / 0x50.
    #[test]
    fn entry_amd_far_all() {
        let e = by_id("amd.ls_any_fills_from_sys.far_all");
        assert_eq!(e.name, "ls_any_fills_from_sys.far_all");
        assert_eq!(e.config, x86(0x44, 0x50));
        assert_eq!(e.config, 0x5044);
        assert_eq!(e.precise_ip, 0);
    }

    /// linux amdzen4/cache.json + amdzen5/load-store.json: dram_io_far = 0x44 / 0x40.
    #[test]
    fn entry_amd_dram_io_far() {
        let e = by_id("amd.ls_any_fills_from_sys.dram_io_far");
        assert_eq!(e.config, x86(0x44, 0x40));
        assert_eq!(e.config, 0x4044);
    }

    /// linux amdzen4/cache.json + amdzen5/load-store.json: far_cache = 0x44 / 0x10.
    #[test]
    fn entry_amd_far_cache() {
        let e = by_id("amd.ls_any_fills_from_sys.far_cache");
        assert_eq!(e.config, x86(0x44, 0x10));
        assert_eq!(e.config, 0x1044);
    }

    /// linux amdzen3/memory.json: ls_any_fills_from_sys.mem_io_remote = 0x44 / 0x40.
    #[test]
    fn entry_amd_zen3_mem_io_remote() {
        let e = by_id("amd.zen3.ls_any_fills_from_sys.mem_io_remote");
        assert_eq!(e.name, "ls_any_fills_from_sys.mem_io_remote");
        assert_eq!(e.config, x86(0x44, 0x40));
    }

    /// linux amdzen3/memory.json: ls_any_fills_from_sys.ext_cache_remote = 0x44 / 0x10.
    #[test]
    fn entry_amd_zen3_ext_cache_remote() {
        let e = by_id("amd.zen3.ls_any_fills_from_sys.ext_cache_remote");
        assert_eq!(e.name, "ls_any_fills_from_sys.ext_cache_remote");
        assert_eq!(e.config, x86(0x44, 0x10));
    }

    /// linux amdzen2/memory.json: ls_refills_from_sys.ls_mabresp_rmt_dram = 0x43 / 0x40.
    #[test]
    fn entry_amd_zen2_rmt_dram() {
        let e = by_id("amd.zen2.ls_refills_from_sys.ls_mabresp_rmt_dram");
        assert_eq!(e.name, "ls_refills_from_sys.ls_mabresp_rmt_dram");
        assert_eq!(e.config, x86(0x43, 0x40));
        assert_eq!(e.config, 0x4043);
    }

    /// linux amdzen2/memory.json: ls_refills_from_sys.ls_mabresp_rmt_cache = 0x43 / 0x10.
    #[test]
    fn entry_amd_zen2_rmt_cache() {
        let e = by_id("amd.zen2.ls_refills_from_sys.ls_mabresp_rmt_cache");
        assert_eq!(e.config, x86(0x43, 0x10));
    }

    /// linux ibs.c: cnt_ctl = config:19, l3missonly = config:16; both needed as formats.
    #[test]
    fn entry_amd_ibs_op_l3missonly() {
        for id in ["amd.ibs_op.l3missonly.remote", "amd.ibs_op.l3missonly.cache"] {
            let e = by_id(id);
            assert_eq!(e.config, (1 << 19) | (1 << 16));
            assert_eq!(e.config, 0x9_0000);
            assert_eq!(e.pmu, PmuReq::Named("ibs_op"));
            assert_eq!(e.requires_format, ["cnt_ctl", "l3missonly"]);
            assert!(e.sample_addr);
        }
        assert_eq!(by_id("amd.ibs_op.l3missonly.remote").kind, EventKind::RemoteAccess);
        assert_eq!(by_id("amd.ibs_op.l3missonly.cache").kind, EventKind::CacheMiss);
    }

    /// linux ibs.c: cnt_ctl = config:19.
    #[test]
    fn entry_amd_ibs_op() {
        let e = by_id("amd.ibs_op.remote");
        assert_eq!(e.config, 0x8_0000);
        assert_eq!(e.requires_format, ["cnt_ctl"]);
    }

    /// Arm common events: REMOTE_ACCESS = 0x31.
    #[test]
    fn entry_arm_remote_access() {
        let e = by_id("arm.remote_access");
        assert_eq!(e.name, "REMOTE_ACCESS");
        assert_eq!(e.config, 0x31);
    }

    /// Arm common events: LL_CACHE_MISS_RD = 0x37.
    #[test]
    fn entry_arm_ll_cache_miss_rd() {
        let e = by_id("arm.ll_cache_miss_rd");
        assert_eq!(e.name, "LL_CACHE_MISS_RD");
        assert_eq!(e.config, 0x37);
    }

    /// arm_spe_pmu.c: ts_enable = config:0, jitter = config:16, load_filter = config:33.
    #[test]
    fn entry_arm_spe() {
        for id in ["arm.spe.remote", "arm.spe.llc_miss"] {
            let e = by_id(id);
            assert_eq!(e.config, 1 | (1 << 16) | (1 << 33));
            assert_eq!(e.config1, 0);
            assert_eq!(e.delivery, Delivery::AuxTrace);
            assert_eq!(e.pmu, PmuReq::Prefixed("arm_spe"));
        }
        // Record bits the decoder filters on (arm-spe-pkt-decoder.h EV_LLC_MISS/EV_REMOTE_ACCESS).
        assert_eq!((SPE_EVENT_LLC_MISS, SPE_EVENT_REMOTE_ACCESS), (0x200, 0x400));
    }

    /// perf_event.h: PERF_COUNT_HW_CACHE_MISSES = 3 (type PERF_TYPE_HARDWARE = 0).
    #[test]
    fn entry_generic_cache_misses() {
        let e = by_id("generic.cache_misses");
        assert_eq!((e.space, e.config), (ConfigSpace::Hardware, 3));
    }

    /// perf_event.h: LL = 2, OP_READ = 0, RESULT_MISS = 1 → 2 | 0 << 8 | 1 << 16.
    #[test]
    fn entry_generic_llc_load_misses() {
        let e = by_id("generic.llc_load_misses");
        assert_eq!((e.space, e.config), (ConfigSpace::HwCache, 0x1_0002));
    }

    /// perf_event.h: NODE = 6, OP_READ = 0, RESULT_MISS = 1.
    #[test]
    fn entry_generic_node_load_misses() {
        let e = by_id("generic.node_load_misses");
        assert_eq!(
            (e.space, e.config, e.kind),
            (ConfigSpace::HwCache, 0x1_0006, EventKind::RemoteAccess)
        );
    }

    /// Every entry above has its own test; a new entry must add one here and above.
    #[test]
    fn every_entry_is_tested() {
        let tested: BTreeSet<&str> = [
            "intel.mem_load_l3_miss_retired.remote_dram",
            "intel.mem_load_l3_miss_retired.remote_hitm",
            "intel.mem_load_l3_miss_retired.remote_fwd",
            "intel.mem_load_l3_miss_retired.remote_fwd.clx",
            "intel.mem_load_retired.l3_miss",
            "intel.longest_lat_cache.miss",
            "intel.mem_load_l3_hit_retired.xsnp_hitm",
            "intel.mem_load_l3_hit_retired.xsnp_fwd",
            "amd.ls_any_fills_from_sys.far_all",
            "amd.ls_any_fills_from_sys.dram_io_far",
            "amd.ls_any_fills_from_sys.far_cache",
            "amd.zen3.ls_any_fills_from_sys.mem_io_remote",
            "amd.zen3.ls_any_fills_from_sys.ext_cache_remote",
            "amd.zen2.ls_refills_from_sys.ls_mabresp_rmt_dram",
            "amd.zen2.ls_refills_from_sys.ls_mabresp_rmt_cache",
            "amd.ibs_op.l3missonly.remote",
            "amd.ibs_op.l3missonly.cache",
            "amd.ibs_op.remote",
            "arm.remote_access",
            "arm.ll_cache_miss_rd",
            "arm.spe.remote",
            "arm.spe.llc_miss",
            "generic.cache_misses",
            "generic.llc_load_misses",
            "generic.node_load_misses",
        ]
        .into_iter()
        .collect();
        let all: Vec<&str> = EVENT_TABLE.iter().chain(GENERIC_FALLBACKS).map(|e| e.id).collect();
        let unique: BTreeSet<&str> = all.iter().copied().collect();
        assert_eq!(unique.len(), all.len(), "ids are unique");
        assert_eq!(unique, tested);
        for e in EVENT_TABLE.iter().chain(GENERIC_FALLBACKS) {
            assert!(
                e.kind == EventKind::RemoteAccess || e.kind == EventKind::CacheMiss,
                "{}",
                e.id
            );
            assert!(!e.source.is_empty() && !e.note.is_empty(), "{}", e.id);
        }
    }

    /// The x86 helper puts AMD's extended event bits at config 32-35: amdzen3/cache.json
    /// ic_tag_hit_miss.instruction_cache_miss is EventCode 0x18e UMask 0x18.
    #[test]
    fn x86_raw_extended_event_bits() {
        assert_eq!(x86_raw(0x18e, 0x18), 0x1_0000_188e);
        let enc = PerfEncoding {
            type_: PerfType::Raw,
            config: x86_raw(0x18e, 0x18),
            config1: 0,
            precise_ip: 0,
            sample_addr: false,
        };
        assert_eq!(enc.describe(), "cpu/event=0x18e,umask=0x18/");
    }

    // ---- matching ------------------------------------------------------------------------

    /// Skylake-SP (0x55) gets REMOTE_DRAM; client Skylake (0x5E) does not. Simulated `cpu`
    /// PMU (temp dir with cpu/type).
    #[test]
    fn skylake_sp_vs_client() {
        let fake = FakeSysfs::x86_cpu("skx");
        let pmus = fake.pmus();
        let remote_dram = "intel.mem_load_l3_miss_retired.remote_dram";
        let skx = candidates(EventKind::RemoteAccess, &cpu(SKYLAKE_SP), &pmus);
        assert_eq!(verdict_of(&skx, remote_dram), Verdict::Usable);
        let first = first_usable(EventKind::RemoteAccess, &cpu(SKYLAKE_SP), &pmus).unwrap();
        assert_eq!(first.entry.id, remote_dram);
        assert_eq!(first.encoding.describe(), "cpu/event=0xd3,umask=0x02/pp");
        assert_eq!(first.encoding.perf_type(&pmus), Ok(PERF_TYPE_RAW));

        let client = candidates(EventKind::RemoteAccess, &cpu(SKYLAKE_CLIENT), &pmus);
        assert_eq!(
            verdict_of(&client, remote_dram),
            Verdict::Rejected(RejectReason::ModelNotListed)
        );
        // The client still has the L3-miss event for cache_miss.
        let cache = first_usable(EventKind::CacheMiss, &cpu(SKYLAKE_CLIENT), &pmus).unwrap();
        assert_eq!(cache.entry.id, "intel.mem_load_retired.l3_miss");
    }

    /// Model 0x55 stepping decides REMOTE_FWD's precision (SKX PEBS, CLX not). Simulated
    /// `cpu` PMU.
    #[test]
    fn skylake_sp_vs_cascade_lake_stepping() {
        let fake = FakeSysfs::x86_cpu("clx");
        let pmus = fake.pmus();
        let fwd = "intel.mem_load_l3_miss_retired.remote_fwd";
        let fwd_clx = "intel.mem_load_l3_miss_retired.remote_fwd.clx";
        let skx = candidates(EventKind::RemoteAccess, &cpu(SKYLAKE_SP), &pmus);
        assert_eq!(verdict_of(&skx, fwd), Verdict::Usable);
        assert_eq!(
            verdict_of(&skx, fwd_clx),
            Verdict::Rejected(RejectReason::ModelNotListed)
        );
        let clx = candidates(EventKind::RemoteAccess, &cpu(CASCADE_LAKE), &pmus);
        assert_eq!(verdict_of(&clx, fwd), Verdict::Rejected(RejectReason::ModelNotListed));
        assert_eq!(verdict_of(&clx, fwd_clx), Verdict::Usable);
        assert_eq!(
            verdict_of(&clx, "intel.mem_load_l3_miss_retired.remote_dram"),
            Verdict::Usable
        );
    }

    /// Ice Lake-SP and Sapphire Rapids: remote events usable, the XSNP_FWD name applies and
    /// XSNP_HITM (SKX-era name) does not. Simulated `cpu` PMU.
    #[test]
    fn icelake_and_sapphire_rapids() {
        let fake = FakeSysfs::x86_cpu("icx");
        let pmus = fake.pmus();
        for text in [ICELAKE_SP, SAPPHIRE_RAPIDS, THIS_MACHINE] {
            let c = cpu(text);
            let remote = candidates(EventKind::RemoteAccess, &c, &pmus);
            assert_eq!(
                verdict_of(&remote, "intel.mem_load_l3_miss_retired.remote_dram"),
                Verdict::Usable,
                "{c}"
            );
            let cache = candidates(EventKind::CacheMiss, &c, &pmus);
            assert_eq!(
                verdict_of(&cache, "intel.mem_load_l3_hit_retired.xsnp_fwd"),
                Verdict::Usable
            );
            assert_eq!(
                verdict_of(&cache, "intel.mem_load_l3_hit_retired.xsnp_hitm"),
                Verdict::Rejected(RejectReason::ModelNotListed)
            );
        }
    }

    /// AMD entries on Intel and Intel entries on AMD say which vendor they need. Simulated
    /// `cpu` PMU.
    #[test]
    fn wrong_vendor() {
        let fake = FakeSysfs::x86_cpu("vendor");
        let pmus = fake.pmus();
        let on_intel = candidates(EventKind::RemoteAccess, &cpu(SAPPHIRE_RAPIDS), &pmus);
        assert_eq!(
            verdict_of(&on_intel, "amd.ls_any_fills_from_sys.far_all"),
            Verdict::Rejected(RejectReason::WrongVendor { needs: "an AMD" })
        );
        assert_eq!(
            verdict_of(&on_intel, "arm.remote_access"),
            Verdict::Rejected(RejectReason::WrongVendor { needs: "an Arm" })
        );
        let on_amd = candidates(EventKind::RemoteAccess, &cpu(ZEN3_MILAN), &pmus);
        assert_eq!(
            verdict_of(&on_amd, "intel.mem_load_l3_miss_retired.remote_dram"),
            Verdict::Rejected(RejectReason::WrongVendor { needs: "an Intel" })
        );
        assert_eq!(
            RejectReason::WrongVendor { needs: "an Intel" }.to_string(),
            "needs an Intel CPU"
        );
        // Hygon may use IBS but not the AMD core encodings.
        let hygon = candidates(EventKind::RemoteAccess, &cpu(HYGON), &pmus);
        assert_eq!(
            verdict_of(&hygon, "amd.ls_any_fills_from_sys.far_all"),
            Verdict::Rejected(RejectReason::WrongVendor { needs: "an AMD" })
        );
        assert_eq!(
            verdict_of(&hygon, "amd.ibs_op.remote"),
            Verdict::Rejected(RejectReason::PmuMissing("ibs_op"))
        );
    }

    /// Zen 3 (family 0x19 model 0x01) gets the Zen 3 names, not Zen 4's or Zen 2's; without
    /// `ibs_op` the IBS entries say so. Simulated `cpu` PMU.
    #[test]
    fn zen3_gets_zen3_encodings() {
        let fake = FakeSysfs::x86_cpu("zen3");
        let pmus = fake.pmus();
        let c = candidates(EventKind::RemoteAccess, &cpu(ZEN3_MILAN), &pmus);
        assert_eq!(
            verdict_of(&c, "amd.zen3.ls_any_fills_from_sys.mem_io_remote"),
            Verdict::Usable
        );
        assert_eq!(
            verdict_of(&c, "amd.zen3.ls_any_fills_from_sys.ext_cache_remote"),
            Verdict::Usable
        );
        assert_eq!(
            verdict_of(&c, "amd.ls_any_fills_from_sys.far_all"),
            Verdict::Rejected(RejectReason::ModelNotListed)
        );
        assert_eq!(
            verdict_of(&c, "amd.zen2.ls_refills_from_sys.ls_mabresp_rmt_dram"),
            Verdict::Rejected(RejectReason::ModelNotListed)
        );
        assert_eq!(
            verdict_of(&c, "amd.ibs_op.l3missonly.remote"),
            Verdict::Rejected(RejectReason::PmuMissing("ibs_op"))
        );
        let first = first_usable(EventKind::RemoteAccess, &cpu(ZEN3_MILAN), &pmus).unwrap();
        assert_eq!(first.entry.id, "amd.zen3.ls_any_fills_from_sys.mem_io_remote");
        assert_eq!(first.encoding.describe(), "cpu/event=0x44,umask=0x40/");
    }

    /// Zen 2 gets the 0x43 refill events; Zen 4 gets far_all. Simulated `cpu` PMU.
    #[test]
    fn zen2_and_zen4() {
        let fake = FakeSysfs::x86_cpu("zen24");
        let pmus = fake.pmus();
        let rome = first_usable(EventKind::RemoteAccess, &cpu(ZEN2_ROME), &pmus).unwrap();
        assert_eq!(rome.entry.id, "amd.zen2.ls_refills_from_sys.ls_mabresp_rmt_dram");
        let genoa = first_usable(EventKind::RemoteAccess, &cpu(ZEN4_GENOA), &pmus).unwrap();
        assert_eq!(genoa.entry.id, "amd.ls_any_fills_from_sys.far_all");
        assert_eq!(genoa.encoding.describe(), "cpu/event=0x44,umask=0x50/");
    }

    /// Zen 4 with a simulated `ibs_op` PMU exposing `l3missonly`: IBS is preferred, on its
    /// own dynamic type. On Zen 3's `ibs_op` (no `l3missonly`) the plain variant remains.
    #[test]
    fn ibs_op_selection() {
        let fake = FakeSysfs::x86_cpu("ibs4");
        fake.pmu("ibs_op", 11)
            .format("ibs_op", "cnt_ctl", "config:19")
            .format("ibs_op", "l3missonly", "config:16")
            .format("ibs_op", "swfilt", "config2:0");
        let pmus = fake.pmus();
        let first = first_usable(EventKind::RemoteAccess, &cpu(ZEN4_GENOA), &pmus).unwrap();
        assert_eq!(first.entry.id, "amd.ibs_op.l3missonly.remote");
        assert_eq!(first.pmu.as_deref(), Some("ibs_op"));
        assert_eq!(first.encoding.type_, PerfType::Dynamic("ibs_op".into()));
        assert_eq!(first.encoding.perf_type(&pmus), Ok(11));
        assert_eq!(first.encoding.describe(), "ibs_op/cnt_ctl=1,l3missonly=1/");
        let cache = first_usable(EventKind::CacheMiss, &cpu(ZEN4_GENOA), &pmus).unwrap();
        assert_eq!(cache.entry.id, "amd.ibs_op.l3missonly.cache");

        let zen3 = FakeSysfs::x86_cpu("ibs3");
        zen3.pmu("ibs_op", 11).format("ibs_op", "cnt_ctl", "config:19");
        let pmus = zen3.pmus();
        let c = candidates(EventKind::RemoteAccess, &cpu(ZEN3_MILAN), &pmus);
        assert_eq!(
            verdict_of(&c, "amd.ibs_op.l3missonly.remote"),
            Verdict::Rejected(RejectReason::FormatMissing {
                pmu: "ibs_op".into(),
                attr: "l3missonly"
            })
        );
        assert_eq!(verdict_of(&c, "amd.ibs_op.remote"), Verdict::Usable);
        // The counting event still comes before plain IBS.
        assert_eq!(
            first_usable(EventKind::RemoteAccess, &cpu(ZEN3_MILAN), &pmus)
                .unwrap()
                .entry
                .id,
            "amd.zen3.ls_any_fills_from_sys.mem_io_remote"
        );
    }

    /// Ampere Altra (Neoverse N1) gets REMOTE_ACCESS 0x31 on its own PMU type, then SPE;
    /// AmpereOne is not listed for it. Simulated `armv8_pmuv3_0` and `arm_spe_0` PMUs.
    #[test]
    fn ampere_altra_remote_access() {
        let fake = FakeSysfs::new("altra");
        fake.core("armv8_pmuv3_0", 8)
            .format("armv8_pmuv3_0", "event", "config:0-15")
            .pmu("arm_spe_0", 9)
            .format("arm_spe_0", "ts_enable", "config:0")
            .format("arm_spe_0", "jitter", "config:16")
            .format("arm_spe_0", "load_filter", "config:33")
            .pmu("software", 1);
        let pmus = fake.pmus();
        let altra = candidates(EventKind::RemoteAccess, &cpu(AMPERE_ALTRA), &pmus);
        let first = altra.iter().find(|c| c.is_usable()).unwrap();
        assert_eq!(first.entry.id, "arm.remote_access");
        assert_eq!(first.encoding.config, 0x31);
        assert_eq!(first.encoding.describe(), "armv8_pmuv3_0/event=0x31/");
        assert_eq!(first.encoding.perf_type(&pmus), Ok(8));
        let spe = altra.iter().find(|c| c.entry.id == "arm.spe.remote").unwrap();
        assert!(spe.is_usable());
        assert_eq!(spe.encoding.describe(), "arm_spe_0/ts_enable=1,jitter=1,load_filter=1/");
        assert_eq!(
            verdict_of(&altra, "intel.mem_load_l3_miss_retired.remote_dram"),
            Verdict::Rejected(RejectReason::WrongVendor { needs: "an Intel" })
        );
        let cache = first_usable(EventKind::CacheMiss, &cpu(AMPERE_ALTRA), &pmus).unwrap();
        assert_eq!(cache.entry.id, "arm.ll_cache_miss_rd");

        let one = candidates(EventKind::RemoteAccess, &cpu(AMPEREONE), &pmus);
        assert_eq!(
            verdict_of(&one, "arm.remote_access"),
            Verdict::Rejected(RejectReason::ModelNotListed)
        );
        assert_eq!(verdict_of(&one, "arm.spe.remote"), Verdict::Usable);
    }

    /// With a simulated `cpu` PMU whose caps/max_precise is 0 (a VM without PEBS), the PEBS
    /// events are rejected and the non-precise LONGEST_LAT_CACHE.MISS is chosen.
    #[test]
    fn no_pebs_falls_back_to_counting_event() {
        let fake = FakeSysfs::x86_cpu("nopebs");
        fake.write("cpu/caps/max_precise", "0\n");
        let pmus = fake.pmus();
        let c = candidates(EventKind::CacheMiss, &cpu(SAPPHIRE_RAPIDS), &pmus);
        let reason = RejectReason::PreciseUnsupported { needed: 2, max: 0 };
        assert_eq!(
            verdict_of(&c, "intel.mem_load_retired.l3_miss"),
            Verdict::Rejected(reason)
        );
        let first = c.iter().find(|c| c.is_usable()).unwrap();
        assert_eq!(first.entry.id, "intel.longest_lat_cache.miss");
        assert_eq!(first.encoding.describe(), "cpu/event=0x2e,umask=0x41/");
    }

    /// Fallback order for cache_miss: model-specific entries first, then `cache-misses`,
    /// then `LLC-load-misses`; on a CPU no entry lists (QEMU's qemu64 with a simulated
    /// `cpu` PMU) only the generic ones are usable, in that order.
    #[test]
    fn fallback_order() {
        let fake = FakeSysfs::x86_cpu("fallback");
        let pmus = fake.pmus();
        let spr = candidates(EventKind::CacheMiss, &cpu(SAPPHIRE_RAPIDS), &pmus);
        let order = ids(&spr);
        let n = order.len();
        assert_eq!(&order[n - 2..], ["generic.cache_misses", "generic.llc_load_misses"]);
        assert_eq!(order[0], "intel.mem_load_retired.l3_miss");
        assert!(order[..n - 2].iter().all(|id| !id.starts_with("generic.")));

        for text in [QEMU64, QEMU_OLD_KVM_INTEL] {
            let c = candidates(EventKind::CacheMiss, &cpu(text), &pmus);
            let usable: Vec<&str> = c.iter().filter(|c| c.is_usable()).map(|c| c.entry.id).collect();
            assert_eq!(usable, ["generic.cache_misses", "generic.llc_load_misses"]);
            let first = c.iter().find(|c| c.is_usable()).unwrap();
            assert_eq!(first.encoding.describe(), "cache-misses");
            assert_eq!(first.encoding.perf_type(&pmus), Ok(PERF_TYPE_HARDWARE));
            let last = c.last().unwrap();
            assert_eq!(last.encoding.describe(), "LLC-load-misses");
            assert_eq!(last.encoding.perf_type(&pmus), Ok(PERF_TYPE_HW_CACHE));
        }
        let remote = candidates(EventKind::RemoteAccess, &cpu(QEMU64), &pmus);
        let last = remote.last().unwrap();
        assert_eq!(last.entry.id, "generic.node_load_misses");
        assert_eq!(last.encoding.describe(), "node-load-misses");
        assert!(last.is_usable());
    }

    /// Kinds with no hardware source give no candidates (their sources live elsewhere).
    #[test]
    fn software_kinds_have_no_candidates() {
        let fake = FakeSysfs::x86_cpu("sw");
        let pmus = fake.pmus();
        for kind in [
            EventKind::Cpu,
            EventKind::PageFault,
            EventKind::NumaHintFault,
            EventKind::PageMigration,
        ] {
            assert!(candidates(kind, &cpu(SAPPHIRE_RAPIDS), &pmus).is_empty(), "{kind:?}");
        }
    }

    /// This machine (Emerald Rapids in a VM with only software/tracepoint/breakpoint/uprobe/
    /// msr/power PMUs): every hardware candidate is rejected with NoCorePmu, even the ones
    /// whose CPU list includes it, and even for other vendors' CPUs.
    #[test]
    fn no_core_pmu_rejects_everything() {
        let fake = FakeSysfs::this_machine();
        let pmus = fake.pmus();
        for text in [THIS_MACHINE, ZEN4_GENOA, AMPERE_ALTRA, QEMU64] {
            for kind in [EventKind::RemoteAccess, EventKind::CacheMiss] {
                let c = candidates(kind, &cpu(text), &pmus);
                assert!(!c.is_empty());
                for cand in &c {
                    assert_eq!(
                        cand.verdict,
                        Verdict::Rejected(RejectReason::NoCorePmu),
                        "{}",
                        cand.entry.id
                    );
                }
            }
        }
        let c = candidates(EventKind::RemoteAccess, &cpu(THIS_MACHINE), &pmus);
        assert_eq!(
            c[0].to_string(),
            "MEM_LOAD_L3_MISS_RETIRED.REMOTE_DRAM [cpu/event=0xd3,umask=0x02/pp]: not usable: \
             the kernel exposes no hardware PMU (virtual machine without PMU passthrough?)"
        );
        assert_eq!(
            RejectReason::NoCorePmu.to_string(),
            "the kernel exposes no hardware PMU (virtual machine without PMU passthrough?)"
        );
    }

    /// The real machine: whatever it has, a machine without a core PMU must reject every
    /// candidate with NoCorePmu (this is the case where the module was written).
    #[test]
    fn real_machine_consistency() {
        let (Ok(pmus), Ok(c)) = (Pmus::read(), CpuId::read()) else {
            return;
        };
        for kind in [EventKind::RemoteAccess, EventKind::CacheMiss] {
            let cands = candidates(kind, &c, &pmus);
            if !pmus.has_core_pmu() {
                assert!(cands
                    .iter()
                    .all(|x| x.verdict == Verdict::Rejected(RejectReason::NoCorePmu)));
            }
        }
    }

    // ---- encodings -----------------------------------------------------------------------

    /// Dynamic types resolve from sysfs; a vanished PMU is an error naming it.
    #[test]
    fn perf_type_resolution() {
        let fake = FakeSysfs::new("resolve");
        fake.core("cpu_core", 4).core("cpu_atom", 10).pmu("ibs_op", 11);
        let pmus = fake.pmus();
        assert_eq!(PerfType::Dynamic("cpu_atom".into()).resolve(&pmus), Ok(10));
        assert_eq!(PerfType::Raw.resolve(&pmus), Ok(4));
        assert_eq!(
            PerfType::Dynamic("arm_spe_0".into()).resolve(&pmus),
            Err(UnknownPmu("arm_spe_0".into()))
        );
        assert_eq!(
            UnknownPmu("arm_spe_0".into()).to_string(),
            "the kernel exposes no `arm_spe_0` PMU"
        );
        // On hybrid Intel the raw events go to cpu_core's own type, not PERF_TYPE_RAW.
        let c = evaluate(by_id("intel.longest_lat_cache.miss"), &cpu(SAPPHIRE_RAPIDS), &pmus);
        assert_eq!(c.encoding.describe(), "cpu_core/event=0x2e,umask=0x41/");
    }

    /// `describe` prints perf syntax for each PMU family, modifiers included.
    #[test]
    fn describe_syntax() {
        let enc = |type_: PerfType, config: u64, config1: u64, precise_ip: u8| PerfEncoding {
            type_,
            config,
            config1,
            precise_ip,
            sample_addr: false,
        };
        assert_eq!(
            enc(PerfType::Raw, 0x02d3, 0, 2).describe(),
            "cpu/event=0xd3,umask=0x02/pp"
        );
        assert_eq!(
            enc(PerfType::Raw, 0x0100_00a3 | (1 << 23), 0, 0).describe(),
            "cpu/event=0xa3,umask=0x00,inv=1,cmask=0x01/"
        );
        assert_eq!(enc(PerfType::Hardware, 3, 0, 1).describe(), "cache-misses:p");
        assert_eq!(enc(PerfType::HwCache, 0x1_0002, 0, 0).describe(), "LLC-load-misses");
        assert_eq!(enc(PerfType::HwCache, 0x0_0002, 0, 0).describe(), "LLC-loads");
        assert_eq!(
            enc(PerfType::Dynamic("ibs_op".into()), 1 << 19, 0, 0).describe(),
            "ibs_op/cnt_ctl=1/"
        );
        assert_eq!(
            enc(PerfType::Dynamic("arm_spe_0".into()), 1 << 33, 0x8, 0).describe(),
            "arm_spe_0/load_filter=1,event_filter=0x8/"
        );
        assert_eq!(
            enc(PerfType::Dynamic("armv8_pmuv3_0".into()), 0x37, 0, 0).describe(),
            "armv8_pmuv3_0/event=0x37/"
        );
        assert_eq!(
            enc(PerfType::Dynamic("mystery".into()), 0x1234, 0x5, 0).describe(),
            "mystery/config=0x1234,config1=0x5/"
        );
    }
}
