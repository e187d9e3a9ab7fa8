//! perf encodings: what goes into `perf_event_attr`, and how an encoding is written the way
//! `perf` spells events.

use super::*;

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
