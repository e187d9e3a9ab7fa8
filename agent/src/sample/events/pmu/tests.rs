//! The table's entries and the selection against fixture machines.

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
