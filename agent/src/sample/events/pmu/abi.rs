//! perf ABI numbers (include/uapi/linux/perf_event.h) and the AMD IBS and Arm SPE bits the
//! table's encodings are made of.

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
