//! CPU identification from `/proc/cpuinfo`: vendor, family/model/stepping, Arm
//! implementer/part.

use super::*;
use crate::host::cpuinfo::{self, first_block, parse_number};

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
    pub const PROC_CPUINFO: &'static str = cpuinfo::PROC_CPUINFO;

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
