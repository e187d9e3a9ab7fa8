//! perf_event_open for sampling events, one per online CPU.

use std::fs;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use perf_event_open_sys as perf;
use perf_event_open_sys::bindings as sys;

use super::PerfEvent;

/// Why a perf event could not be opened, with what the errno means here.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("failed to open {what} on CPU {cpu}: {meaning} ({source})")]
    Open {
        what: String,
        cpu: u32,
        meaning: &'static str,
        source: io::Error,
    },
    #[error("failed to read the online CPUs from `{path}`: {source}")]
    OnlineCpus { path: String, source: io::Error },
}

impl OpenError {
    /// The raw errno, when the kernel refused the event.
    pub fn errno(&self) -> Option<i32> {
        match self {
            OpenError::Open { source, .. } => source.raw_os_error(),
            OpenError::OnlineCpus { .. } => None,
        }
    }
}

/// What an errno from perf_event_open means for a sampling event.
pub fn errno_meaning(errno: i32) -> &'static str {
    match errno {
        libc::EACCES | libc::EPERM => {
            "not permitted: needs CAP_PERFMON (or CAP_SYS_ADMIN), or kernel.perf_event_paranoid <= -1"
        }
        libc::ENOENT => "the CPU or kernel has no such event (no hardware PMU exposed?)",
        libc::EOPNOTSUPP => "the event exists but cannot sample (no PMU interrupt in this VM?)",
        libc::ENODEV => "no such PMU on this CPU",
        libc::EINVAL => "the kernel rejected the event encoding",
        libc::EMFILE => "too many open files (raise the open-file limit)",
        _ => "unexpected error",
    }
}

/// The online CPUs, parsed from a list such as `0-3,8,10-11`.
pub fn online_cpus() -> Result<Vec<u32>, OpenError> {
    let path = "/sys/devices/system/cpu/online";
    let text = fs::read_to_string(path).map_err(|source| OpenError::OnlineCpus {
        path: path.into(),
        source,
    })?;
    crate::host::files::parse_cpu_list(&text).ok_or_else(|| OpenError::OnlineCpus {
        path: path.into(),
        source: io::Error::new(io::ErrorKind::InvalidData, format!("bad list {text:?}")),
    })
}

/// Opens `event` as a sampling event on `cpu` for every process (BPF filters by pid).
/// The event starts disabled; attaching the BPF program enables it.
pub fn open_sampling_event(event: &PerfEvent, description: &str, cpu: u32) -> Result<OwnedFd, OpenError> {
    let mut attr = sys::perf_event_attr {
        type_: event.perf_type,
        size: std::mem::size_of::<sys::perf_event_attr>() as u32,
        config: event.config,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = event.period;
    attr.__bindgen_anon_3.config1 = event.config1;
    if event.sample_addr {
        attr.sample_type |= u64::from(sys::PERF_SAMPLE_ADDR);
    }
    attr.set_precise_ip(u64::from(event.precise_ip));
    attr.set_disabled(1);
    // SAFETY: `attr` is a fully initialized perf_event_attr whose `size` matches its type;
    // pid -1 with a valid cpu and no group is a documented combination.
    let fd = unsafe { perf::perf_event_open(&mut attr, -1, cpu as i32, -1, sys::PERF_FLAG_FD_CLOEXEC as _) };
    if fd < 0 {
        let source = io::Error::last_os_error();
        return Err(OpenError::Open {
            what: description.to_owned(),
            cpu,
            meaning: errno_meaning(source.raw_os_error().unwrap_or(0)),
            source,
        });
    }
    // SAFETY: perf_event_open returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
