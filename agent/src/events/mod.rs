//! Event kinds and the perf events that sample them on this machine.

pub mod perf;

pub use bimodal_proto::v1::EventKind;

use perf_event_open_sys::bindings as sys;

/// How one event kind is sampled: which perf event and with what period.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSource {
    pub event: EventKind,
    /// perf_event_attr.type
    pub perf_type: u32,
    /// perf_event_attr.config
    pub config: u64,
    /// Events between samples (nanoseconds for `cpu`).
    pub period: u64,
    /// What a person reads in `probe` and in the server's node facts.
    pub description: String,
}

/// Sampling settings chosen by the user.
#[derive(Clone, Copy, Debug)]
pub struct Rates {
    /// CPU samples per second per CPU.
    pub cpu_frequency_hz: u64,
    /// Page faults per sample.
    pub page_fault_period: u64,
    /// Cache misses per sample.
    pub cache_miss_period: u64,
}

impl Default for Rates {
    fn default() -> Self {
        Rates {
            cpu_frequency_hz: 99,
            page_fault_period: 100,
            cache_miss_period: 10_000,
        }
    }
}

/// Why an event kind cannot be sampled here.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    #[error("{0} has no sampling source in this agent version yet")]
    NoSource(&'static str),
}

/// The perf event that samples `event`, before trying to open it.
pub fn source(event: EventKind, rates: &Rates) -> Result<EventSource, Unavailable> {
    let s = match event {
        EventKind::Cpu => {
            let hz = rates.cpu_frequency_hz.max(1);
            EventSource {
                event,
                perf_type: sys::PERF_TYPE_SOFTWARE,
                config: u64::from(sys::PERF_COUNT_SW_CPU_CLOCK),
                period: 1_000_000_000 / hz,
                description: format!("software cpu-clock, {hz} Hz per CPU"),
            }
        }
        EventKind::PageFault => EventSource {
            event,
            perf_type: sys::PERF_TYPE_SOFTWARE,
            config: u64::from(sys::PERF_COUNT_SW_PAGE_FAULTS),
            period: rates.page_fault_period.max(1),
            description: format!("software page-faults, 1 in {} faults", rates.page_fault_period.max(1)),
        },
        EventKind::CacheMiss => EventSource {
            event,
            perf_type: sys::PERF_TYPE_HARDWARE,
            config: u64::from(sys::PERF_COUNT_HW_CACHE_MISSES),
            period: rates.cache_miss_period.max(1),
            description: format!(
                "hardware cache-misses (generic), 1 in {} misses",
                rates.cache_miss_period.max(1)
            ),
        },
        EventKind::RemoteAccess => return Err(Unavailable::NoSource("remote_access")),
        EventKind::NumaHintFault => return Err(Unavailable::NoSource("numa_hint_fault")),
        EventKind::PageMigration => return Err(Unavailable::NoSource("page_migration")),
        EventKind::Unspecified => return Err(Unavailable::NoSource("unspecified")),
    };
    Ok(s)
}
