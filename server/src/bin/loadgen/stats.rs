//! What the run did, counted by every node task at once: atomic counters and an atomic
//! log-linear histogram of ack latencies, read by the progress line and the final report.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Sub-buckets per power of two: percentiles within about 3%.
const SUB: u64 = 16;
const SUB_BITS: u32 = 4;
/// Microsecond powers of two covered: up to 2^40 µs, about 12 days.
const BUCKETS: usize = (SUB + (40 - SUB_BITS as u64) * SUB) as usize;

/// A lock-free histogram of durations in microseconds.
#[derive(Debug)]
pub struct Histogram {
    buckets: Box<[AtomicU64]>,
    max: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max: AtomicU64::new(0),
        }
    }
}

fn bucket(us: u64) -> usize {
    if us < SUB {
        return us as usize;
    }
    let e = 63 - us.leading_zeros();
    let sub = (us >> (e - SUB_BITS)) & (SUB - 1);
    ((SUB + u64::from(e - SUB_BITS) * SUB + sub) as usize).min(BUCKETS - 1)
}

/// The middle of bucket `i`, in microseconds.
fn value(i: usize) -> f64 {
    let i = i as u64;
    if i < SUB {
        return i as f64;
    }
    let e = (i - SUB) / SUB + u64::from(SUB_BITS);
    let sub = (i - SUB) % SUB;
    let low = (SUB + sub) << (e - u64::from(SUB_BITS));
    let width = 1u64 << (e - u64::from(SUB_BITS));
    low as f64 + width as f64 / 2.0
}

impl Histogram {
    /// Counts one duration.
    pub fn record(&self, d: Duration) {
        let us = d.as_micros().min(u128::from(u64::MAX)) as u64;
        self.buckets[bucket(us)].fetch_add(1, Relaxed);
        self.max.fetch_max(us, Relaxed);
    }

    /// The `q` quantile in milliseconds; 0 when nothing was recorded.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0.0;
        }
        let rank = (q * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let max = self.max.load(Relaxed) as f64;
                return value(i).min(max) / 1000.0;
            }
        }
        self.max.load(Relaxed) as f64 / 1000.0
    }

    /// The longest duration recorded, in milliseconds.
    pub fn max_ms(&self) -> f64 {
        self.max.load(Relaxed) as f64 / 1000.0
    }
}

/// Counters of the whole run.
#[derive(Debug, Default)]
pub struct Stats {
    /// Batches the run is to send in all.
    pub planned: AtomicU64,
    /// Batches sent for the first time.
    pub sent: AtomicU64,
    /// Sends of a batch sent before (after a retry answer or a broken stream).
    pub resent: AtomicU64,
    pub stored: AtomicU64,
    pub duplicate: AtomicU64,
    pub rejected: AtomicU64,
    /// "Retry" answers.
    pub retried: AtomicU64,
    /// Sums of counts and sample rows of the batches sent (first sends) and acked.
    pub samples_sent: AtomicU64,
    pub rows_sent: AtomicU64,
    pub samples_acked: AtomicU64,
    pub rows_acked: AtomicU64,
    /// Bytes of gRPC messages sent (5-byte prefix included, HTTP/2 framing not).
    pub wire_bytes: AtomicU64,
    pub streams_opened: AtomicU64,
    /// Streams that could not be opened or broke.
    pub stream_failures: AtomicU64,
    /// Streams open now.
    pub streams_open: AtomicU64,
    /// Nodes that have acks for all their batches (or gave up).
    pub nodes_done: AtomicU64,
    /// Batches left unacked when a node stopped.
    pub unacked: AtomicU64,
    /// Largest delay between a batch falling due and being sent, in µs (real time only).
    pub max_lag_us: AtomicU64,
    /// Time from sending a batch to its ack (stored or duplicate).
    pub latency: Histogram,
    /// Microseconds spent generating batches (wall time: on a busy machine it includes waiting
    /// for a CPU).
    pub generate_us: AtomicU64,
}

/// A snapshot of [`Stats`] for rates between two progress lines.
#[derive(Clone, Copy, Debug, Default)]
pub struct Snapshot {
    pub sent: u64,
    pub acked: u64,
    pub samples_acked: u64,
    pub rows_acked: u64,
    pub wire_bytes: u64,
}

impl Stats {
    /// The counters the progress line shows rates of.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            sent: self.sent.load(Relaxed),
            acked: self.stored.load(Relaxed) + self.duplicate.load(Relaxed),
            samples_acked: self.samples_acked.load(Relaxed),
            rows_acked: self.rows_acked.load(Relaxed),
            wire_bytes: self.wire_bytes.load(Relaxed),
        }
    }
}

/// This process's resident memory in bytes (0 where /proc is missing).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_a_few_percent() {
        let h = Histogram::default();
        for ms in 1..=1000u64 {
            h.record(Duration::from_millis(ms));
        }
        for (q, want) in [(0.5, 500.0), (0.95, 950.0), (0.99, 990.0)] {
            let got = h.quantile_ms(q);
            assert!((got - want).abs() / want < 0.04, "q{q}: {got} vs {want}");
        }
    }
}
