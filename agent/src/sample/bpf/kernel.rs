//! What the running kernel does differently for the maps, read before they are made: whether
//! programs run from NMIs may use hash maps that are not preallocated, and whether map memory is
//! charged to RLIMIT_MEMLOCK (kernels before 5.11) and how much of it there is.

use std::ffi::CString;

use libbpf_rs::libbpf_sys;

use super::MapSizes;

/// What the running kernel does with the agent's maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelFeatures {
    /// Programs of perf events (which may run in NMIs) may use hash maps allocated as they
    /// fill (Linux 6.1, with the BPF memory allocator); before, `unwind_processes` must be
    /// preallocated.
    pub unpreallocated_maps_in_nmi: bool,
    /// Map memory is charged to the memory cgroup (Linux 5.11); before, to the user's
    /// RLIMIT_MEMLOCK, summed over all of the user's processes.
    pub memcg_accounting: bool,
    /// RLIMIT_MEMLOCK in bytes (`None`: unlimited), after trying to lift it where it counts.
    pub memlock_limit: Option<u64>,
}

/// The running kernel's features, probed once per process.
pub fn features() -> KernelFeatures {
    static FEATURES: std::sync::OnceLock<KernelFeatures> = std::sync::OnceLock::new();
    *FEATURES.get_or_init(KernelFeatures::probe)
}

impl KernelFeatures {
    /// The map sizes to ask this kernel for, from `sizes`: `unwind_processes` no larger than
    /// [`PREALLOCATED_PROCESSES`] where it must be preallocated, and every map shrunk to fit
    /// three quarters of RLIMIT_MEMLOCK where it counts (the rest left to the user's other
    /// processes).
    pub fn sizes(&self, sizes: &MapSizes, cpus: u64) -> MapSizes {
        let mut sizes = *sizes;
        if !self.unpreallocated_maps_in_nmi {
            sizes.processes = sizes.processes.min(PREALLOCATED_PROCESSES);
        }
        match self.memlock_limit {
            Some(limit) => fit(&sizes, limit / 4 * 3, cpus),
            None => sizes,
        }
    }

    /// Reads the running kernel's BTF and probes a helper, as libbpf does. Where map memory is
    /// charged to RLIMIT_MEMLOCK, tries to lift it (allowed with CAP_SYS_RESOURCE, and nothing
    /// is asked of anyone when it is refused).
    pub fn probe() -> KernelFeatures {
        let memcg_accounting = has_helper(libbpf_sys::BPF_FUNC_ktime_get_coarse_ns);
        let memlock_limit = if memcg_accounting {
            None
        } else {
            lift_memlock();
            memlock()
        };
        KernelFeatures {
            unpreallocated_maps_in_nmi: btf_has_struct("bpf_mem_alloc"),
            memcg_accounting,
            memlock_limit,
        }
    }

    /// What this kernel makes the agent do without, in words: one line per feature it lacks
    /// and what the agent does instead (empty on a kernel that has them all).
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if !self.unpreallocated_maps_in_nmi {
            notes.push(format!(
                "hash maps of perf-event programs must be preallocated (the BPF memory allocator came in Linux 6.1): unwind tables are kept for at most {PREALLOCATED_PROCESSES} processes at once, the others are unwound from stack copies"
            ));
        }
        if let Some(note) = self.memlock_note() {
            notes.push(format!(
                "{note}: maps are made small enough to fit in three quarters of it"
            ));
        } else if !self.memcg_accounting {
            notes.push(
                "this kernel charges BPF maps to RLIMIT_MEMLOCK (before Linux 5.11); it is unlimited for the agent"
                    .into(),
            );
        }
        notes
    }

    /// What counts against the agent's maps here, in words, when something does.
    pub fn memlock_note(&self) -> Option<String> {
        let limit = self.memlock_limit?;
        Some(format!(
            "this kernel charges BPF maps to RLIMIT_MEMLOCK ({} KiB, shared by the user's processes) and the agent may not raise it (no CAP_SYS_RESOURCE)",
            limit >> 10
        ))
    }
}

/// Whether the kernel has helper `id` (probed with a socket filter program, as libbpf does).
fn has_helper(id: libbpf_sys::bpf_func_id) -> bool {
    // SAFETY: a plain function call; a null options pointer is allowed.
    let r =
        unsafe { libbpf_sys::libbpf_probe_bpf_helper(libbpf_sys::BPF_PROG_TYPE_SOCKET_FILTER, id, std::ptr::null()) };
    r > 0
}

/// Whether the kernel's BTF has a struct named `name`.
fn btf_has_struct(name: &str) -> bool {
    let Ok(name) = CString::new(name) else { return false };
    // SAFETY: libbpf returns an owned BTF object or an error pointer (checked by
    // libbpf_get_error), freed below; the name is a NUL-terminated string that outlives the call.
    unsafe {
        let btf = libbpf_sys::btf__load_vmlinux_btf();
        if btf.is_null() || libbpf_sys::libbpf_get_error(btf.cast()) != 0 {
            return false;
        }
        let found = libbpf_sys::btf__find_by_name_kind(btf, name.as_ptr(), libbpf_sys::BTF_KIND_STRUCT) > 0;
        libbpf_sys::btf__free(btf);
        found
    }
}

/// RLIMIT_MEMLOCK's soft limit in bytes; `None` when unlimited.
fn memlock() -> Option<u64> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) } != 0 || rl.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(rl.rlim_cur)
}

/// Lifts RLIMIT_MEMLOCK to unlimited where the process may (libbpf tries the same).
fn lift_memlock() {
    let rl = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct it is given; a refusal changes nothing.
    let _ = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rl) };
}

/// Entries of `unwind_processes` when it must be preallocated: each takes 4 KiB of kernel
/// memory from the start (128 mappings), so 2,048 processes with unwind tables take 8 MiB.
pub const PREALLOCATED_PROCESSES: u32 = 2048;

/// Bytes of kernel memory the maps of `sizes` take on `cpus` CPUs, as the kernel charges them
/// (near enough: element sizes with the kernel's per-element header, hash buckets, pages).
pub fn charged_bytes(sizes: &MapSizes, cpus: u64) -> u64 {
    use std::mem::size_of;

    use super::profile::types::{sample_key, sample_value, unwind_process, unwind_row, user_chain};
    // struct htab_elem's header, and a bucket (a list head and a lock)
    const ELEM: u64 = 48;
    const BUCKET: u64 = 16;
    let hash = |entries: u32, key: usize, value: usize| {
        let n = u64::from(entries);
        n.next_power_of_two() * BUCKET
            + n * (ELEM + (key as u64).next_multiple_of(8) + (value as u64).next_multiple_of(8))
    };
    let stack = 8 + 127 * 8;
    let samples = 2 * hash(sizes.samples, size_of::<sample_key>(), size_of::<sample_value>());
    let stacks = u64::from(sizes.stacks).next_power_of_two() * (8 + 32 + stack);
    let chains = hash(sizes.stacks, 8, size_of::<user_chain>());
    let rows = u64::from(sizes.unwind_rows) * size_of::<unwind_row>() as u64;
    let processes = hash(sizes.processes, 4, size_of::<unwind_process>());
    let rings = u64::from(sizes.snapshot_ring) + (1 << 20) + (64 << 10);
    // sampled_processes, unwind_misses, the per-CPU walks and losses
    let small = hash(16384, 4, 1) + hash(4096, 4, 8) + cpus * 2 * (size_of::<user_chain>() as u64 + 256);
    samples + stacks + chains + rows + processes + rings + small
}

/// `sizes` made to take at most `budget` bytes ([`charged_bytes`]): the tables, stacks,
/// samples and ring shrunk in the same proportion, each kept a power of two (rows excepted) and
/// never below what a small node needs to sample at all.
pub fn fit(sizes: &MapSizes, budget: u64, cpus: u64) -> MapSizes {
    let mut fitted = *sizes;
    for _ in 0..16 {
        if charged_bytes(&fitted, cpus) <= budget {
            break;
        }
        let halve = |n: u32, floor: u32| (n / 2).max(floor);
        fitted = MapSizes {
            samples: halve(fitted.samples, 512),
            stacks: halve(fitted.stacks, 256),
            snapshot_ring: halve(fitted.snapshot_ring, 256 << 10).next_power_of_two(),
            unwind_rows: halve(fitted.unwind_rows, 16384),
            processes: halve(fitted.processes, 64),
        };
    }
    fitted
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default maps take tens of MiB; fitted to 6 MiB they take at most that, every size
    /// stays at least its floor, and a budget they already fit leaves them as they are.
    #[test]
    fn maps_fit_a_memlock_budget() {
        let sizes = MapSizes {
            processes: PREALLOCATED_PROCESSES,
            ..MapSizes::default()
        };
        let full = charged_bytes(&sizes, 2);
        assert!(full > 40 << 20, "{full}");
        let fitted = fit(&sizes, 6 << 20, 2);
        assert!(charged_bytes(&fitted, 2) <= 6 << 20, "{fitted:?}");
        assert!(
            fitted.samples >= 512 && fitted.stacks >= 256 && fitted.processes >= 64,
            "{fitted:?}"
        );
        assert!(fitted.snapshot_ring.is_power_of_two());
        assert_eq!(fit(&sizes, full, 2), sizes);
    }
}
