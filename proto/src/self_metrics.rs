//! What the agent and the server report of themselves on `/metrics`, in Prometheus's standard
//! process metric names (`process_cpu_seconds_total`, `process_resident_memory_bytes`, ...), and
//! the one way both encode a registry.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// The content type of [`encode`]'s text (OpenMetrics, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `registry` in the OpenMetrics text format.
pub fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, registry);
    text
}

/// This process's CPU time, resident memory and open files, read from /proc/self at each scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// (CPU seconds, resident bytes, open file descriptors, threads) of this process.
fn usage() -> Option<(f64, i64, i64, i64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command (which may hold spaces), from field 3 (state) on.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
    // utime and stime are fields 14 and 15 of stat(5); num_threads 20; rss (pages) 24.
    let (utime, stime, threads, rss) = (ticks(11)?, ticks(12)?, ticks(17)?, ticks(21)?);
    // SAFETY: sysconf only reads configuration values.
    let (hz, page) = unsafe { (libc::sysconf(libc::_SC_CLK_TCK), libc::sysconf(libc::_SC_PAGESIZE)) };
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as i64);
    Some((
        (utime + stime) as f64 / hz.max(1) as f64,
        (rss as i64).saturating_mul(page),
        fds,
        threads as i64,
    ))
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some((cpu, rss, fds, threads)) = usage() else {
            return Ok(());
        };
        let counter = ConstCounter::new(cpu);
        counter.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "User and system CPU time spent, in seconds.",
            None,
            counter.metric_type(),
        )?)?;
        for (name, help, value) in [
            ("process_resident_memory_bytes", "Resident memory size in bytes.", rss),
            ("process_open_fds", "Open file descriptors.", fds),
            ("process_threads", "Threads of the process.", threads),
        ] {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_reports_itself() {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let text = encode(&registry);
        assert!(text.contains("# TYPE process_cpu_seconds counter"), "{text}");
        let rss: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{text}"));
        assert!(rss > 1e6, "{text}");
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
    }
}
