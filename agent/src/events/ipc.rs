//! Cycles and instructions counted (not sampled) on every CPU, where the hardware can count
//! them: the node's CPI per interval, the first sign of a slow node in the Netflix story.

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};

use perf_event_open_sys as perf;
use perf_event_open_sys::bindings as sys;

use super::perf::{errno_meaning, online_cpus};

/// Counting cycles and instructions on every online CPU.
#[derive(Debug)]
pub struct CycleCounters {
    cycles: Vec<std::fs::File>,
    instructions: Vec<std::fs::File>,
}

/// Totals since the counters were opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleCount {
    pub cycles: u64,
    pub instructions: u64,
}

fn open_counting(config: u32, cpu: u32) -> Result<std::fs::File, String> {
    let mut attr = sys::perf_event_attr {
        type_: sys::PERF_TYPE_HARDWARE,
        size: std::mem::size_of::<sys::perf_event_attr>() as u32,
        config: u64::from(config),
        ..Default::default()
    };
    // Counting in every context the node's work runs in, including the kernel.
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

impl CycleCounters {
    /// Opens both counters on every online CPU, or says why the machine cannot count them.
    pub fn open() -> Result<CycleCounters, String> {
        let cpus = online_cpus().map_err(|e| e.to_string())?;
        let mut counters = CycleCounters {
            cycles: Vec::new(),
            instructions: Vec::new(),
        };
        for cpu in cpus {
            counters.cycles.push(open_counting(sys::PERF_COUNT_HW_CPU_CYCLES, cpu)?);
            counters
                .instructions
                .push(open_counting(sys::PERF_COUNT_HW_INSTRUCTIONS, cpu)?);
        }
        Ok(counters)
    }

    /// Current totals over all CPUs.
    pub fn read(&mut self) -> std::io::Result<CycleCount> {
        let sum = |files: &mut Vec<std::fs::File>| -> std::io::Result<u64> {
            let mut total = 0u64;
            for f in files {
                let mut buf = [0u8; 8];
                f.read_exact(&mut buf)?;
                total = total.wrapping_add(u64::from_ne_bytes(buf));
            }
            Ok(total)
        };
        Ok(CycleCount {
            cycles: sum(&mut self.cycles)?,
            instructions: sum(&mut self.instructions)?,
        })
    }
}
