//! Events counted (not sampled) on every CPU, sent as node counters per interval: task
//! migrations between CPUs (software, everywhere), and cycles and instructions where the
//! hardware counts them — the node's CPI, the first sign of a slow node in the Netflix story.

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};

use perf_event_open_sys as perf;
use perf_event_open_sys::bindings as sys;

use super::perf::{errno_meaning, online_cpus};

/// One event counted on every online CPU.
#[derive(Debug)]
pub struct Counted {
    /// The counter's one name (`cycles`, `instructions`, `cache_miss`, `cpu_migrations`).
    pub name: &'static str,
    per_cpu: Vec<std::fs::File>,
    last: Option<u64>,
}

/// The counted events this machine offers.
#[derive(Debug)]
pub struct CountingEvents {
    pub counted: Vec<Counted>,
    /// Events that cannot be counted here, with the reason.
    pub unavailable: Vec<(&'static str, String)>,
}

const EVENTS: &[(&str, u32, u32)] = &[
    ("cycles", sys::PERF_TYPE_HARDWARE, sys::PERF_COUNT_HW_CPU_CYCLES),
    ("instructions", sys::PERF_TYPE_HARDWARE, sys::PERF_COUNT_HW_INSTRUCTIONS),
    // Last-level cache misses, as the generic hardware event names them: with instructions,
    // the server's misses per thousand instructions.
    ("cache_miss", sys::PERF_TYPE_HARDWARE, sys::PERF_COUNT_HW_CACHE_MISSES),
    (
        "cpu_migrations",
        sys::PERF_TYPE_SOFTWARE,
        sys::PERF_COUNT_SW_CPU_MIGRATIONS,
    ),
];

fn open_counting(perf_type: u32, config: u32, cpu: u32) -> Result<std::fs::File, String> {
    let mut attr = sys::perf_event_attr {
        type_: perf_type,
        size: std::mem::size_of::<sys::perf_event_attr>() as u32,
        config: u64::from(config),
        ..Default::default()
    };
    attr.set_exclude_hv(1);
    // SAFETY: `attr` is fully initialized and sized; pid -1 with a valid cpu counts that CPU.
    let fd = unsafe { perf::perf_event_open(&mut attr, -1, cpu as i32, -1, sys::PERF_FLAG_FD_CLOEXEC as _) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!("{} ({e})", errno_meaning(e.raw_os_error().unwrap_or(0))));
    }
    // SAFETY: perf_event_open returned a new descriptor that nothing else owns.
    Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

impl CountingEvents {
    /// Opens every counted event on every online CPU; an event that fails on any CPU is
    /// unavailable, with the reason (no PMU for cycles and instructions in most VMs).
    pub fn open() -> CountingEvents {
        let mut out = CountingEvents {
            counted: Vec::new(),
            unavailable: Vec::new(),
        };
        let cpus = match online_cpus() {
            Ok(c) => c,
            Err(e) => {
                out.unavailable = EVENTS.iter().map(|(n, _, _)| (*n, e.to_string())).collect();
                return out;
            }
        };
        for &(name, perf_type, config) in EVENTS {
            match cpus.iter().map(|&cpu| open_counting(perf_type, config, cpu)).collect() {
                Ok(per_cpu) => out.counted.push(Counted {
                    name,
                    per_cpu,
                    last: None,
                }),
                Err(reason) => out.unavailable.push((name, reason)),
            }
        }
        out
    }

    /// The increase of every counted event since the previous call (nothing on the first).
    pub fn deltas(&mut self) -> Vec<(&'static str, u64)> {
        let mut out = Vec::new();
        for c in &mut self.counted {
            let mut total = 0u64;
            for f in &mut c.per_cpu {
                let mut buf = [0u8; 8];
                if f.read_exact(&mut buf).is_err() {
                    return out;
                }
                total = total.wrapping_add(u64::from_ne_bytes(buf));
            }
            if let Some(last) = c.last.replace(total) {
                out.push((c.name, total.wrapping_sub(last)));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CPU migrations are a software event, countable on every Linux machine, and give a delta
    /// from the second reading on; cycles and instructions are counted or come with a reason.
    #[test]
    fn software_counters_open_everywhere_hardware_ones_say_why_not() {
        let mut c = CountingEvents::open();
        assert!(
            c.counted.iter().any(|c| c.name == "cpu_migrations"),
            "{:?}",
            c.unavailable
        );
        for (name, reason) in &c.unavailable {
            assert!(["cycles", "instructions", "cache_miss"].contains(name) && !reason.is_empty());
        }
        assert!(c.deltas().is_empty(), "no delta before a first reading");
        let names: Vec<_> = c.deltas().into_iter().map(|(n, _)| n).collect();
        assert!(names.contains(&"cpu_migrations"));
    }
}
