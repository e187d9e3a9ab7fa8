//! The agent's own figures, served on `GET /metrics` for Prometheus when `run --metrics-listen`
//! is given: samples and losses per event and source, drain time, spool depth, batches dropped,
//! the agent's CPU and memory, and what the kernel took of its BPF programs (which loaded, the
//! verifier's work on each, how each event kind's stacks are unwound and why not better). One
//! registry per process.

use std::net::SocketAddr;
use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use bimodal_proto::v1;

type Labels = [(&'static str, String); 2];

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Samples taken, by `event` and `source`.
    pub samples: Family<Labels, Counter>,
    /// Samples lost whole or in part (kernel map full, stack missing), by `event` and `source`.
    pub samples_lost: Family<Labels, Counter>,
    /// Batches built.
    pub batches: Counter,
    /// Time to drain the maps and build a batch, in seconds.
    pub drain_seconds: Histogram,
    /// 1 for each BPF program the kernel took, 0 for each it refused, by `program`.
    pub program_loaded: Family<[(&'static str, String); 1], Gauge>,
    /// Instructions the verifier processed for each loaded program, by `program`.
    pub program_verifier_insns: Family<[(&'static str, String); 1], Gauge>,
    /// 1 per sampled event kind, by `event`, the unwinding `method` and, when it is less than
    /// asked for, why (`reduced`, empty otherwise).
    pub unwinding: Family<[(&'static str, String); 3], Gauge>,
    /// 1 per event kind asked for whose program the kernel refused, by `event` and `reason`.
    pub event_refused: Family<[(&'static str, String); 2], Gauge>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let m = Metrics {
        registry: Registry::default(),
        samples: Family::default(),
        samples_lost: Family::default(),
        batches: Counter::default(),
        // 100 µs to about 6.5 s.
        drain_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
        program_loaded: Family::default(),
        program_verifier_insns: Family::default(),
        unwinding: Family::default(),
        event_refused: Family::default(),
    };
    let mut registry = Registry::default();
    registry.register(
        "bimodal_agent_samples",
        "Samples taken, by event and source",
        m.samples.clone(),
    );
    registry.register(
        "bimodal_agent_samples_lost",
        "Samples lost whole or in part (kernel map full, stack missing), by event and source",
        m.samples_lost.clone(),
    );
    registry.register("bimodal_agent_batches", "Batches built", m.batches.clone());
    registry.register(
        "bimodal_agent_drain_duration_seconds",
        "Time to drain the kernel maps and build a batch",
        m.drain_seconds.clone(),
    );
    registry.register(
        "bimodal_agent_bpf_program_loaded",
        "1 for each BPF program the kernel took, 0 for each it refused",
        m.program_loaded.clone(),
    );
    registry.register(
        "bimodal_agent_bpf_verifier_instructions",
        "Instructions the kernel's verifier processed for each loaded BPF program (its limit: 1,000,000)",
        m.program_verifier_insns.clone(),
    );
    registry.register(
        "bimodal_agent_unwinding",
        "1 per sampled event kind: how its user stacks are unwound (method), and why not as asked (reduced)",
        m.unwinding.clone(),
    );
    registry.register(
        "bimodal_agent_event_refused",
        "1 per event kind asked for that is not sampled because the kernel refused its program",
        m.event_refused.clone(),
    );
    // Spool depth, batches dropped and acknowledged: the stream's own.
    bimodal_proto::stream::metrics().register(&mut registry, "bimodal_agent_");
    registry.register_collector(Box::new(bimodal_proto::self_metrics::ProcessCollector));
    Metrics { registry, ..m }
});

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

/// Counts a built batch: its samples and losses per source, and how long it took.
pub fn count_batch(b: &v1::Batch, took: Duration) {
    let m = metrics();
    m.batches.inc();
    m.drain_seconds.observe(took.as_secs_f64());
    for source in &b.sources {
        let event = v1::EventKind::try_from(source.event).unwrap_or(v1::EventKind::Unspecified);
        let labels = [("event", event.name().to_owned()), ("source", source.name.clone())];
        let samples: u64 = b
            .samples
            .iter()
            .filter(|s| s.event == source.event)
            .map(|s| s.count)
            .sum();
        m.samples.get_or_create(&labels).inc_by(samples);
        m.samples_lost.get_or_create(&labels).inc_by(source.dropped);
    }
}

/// Records what the kernel took of the programs (`loads`) and how each event kind of `report`
/// is sampled: its unwinding, or the refusal of its program.
pub fn programs(loads: &[crate::sample::bpf::ProgramLoad], report: &crate::sample::probe::ProbeReport) {
    let m = metrics();
    for l in loads {
        let program = [("program", l.program.name().to_owned())];
        m.program_loaded.get_or_create(&program).set(i64::from(l.loaded()));
        if let (true, Some(f)) = (l.loaded(), &l.figures) {
            m.program_verifier_insns
                .get_or_create(&program)
                .set(i64::try_from(f.insns_processed).unwrap_or(i64::MAX));
        }
    }
    for e in &report.events {
        if let Some(u) = &e.unwinding {
            m.unwinding
                .get_or_create(&[
                    ("event", e.event.to_owned()),
                    ("method", u.method.name().to_owned()),
                    ("reduced", u.reduced.clone().unwrap_or_default()),
                ])
                .set(1);
        }
        if e.chosen.is_none() {
            for r in e.rejected.iter().filter(|r| r.reason.contains("refused")) {
                m.event_refused
                    .get_or_create(&[("event", e.event.to_owned()), ("reason", r.reason.clone())])
                    .set(1);
            }
        }
    }
}

/// Serves `GET /metrics` on `listen` until the process ends; the bound address.
pub async fn serve(listen: SocketAddr) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen} for metrics: {e}"))?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                // One request per connection; a client that sends no request head in 10 s is
                // dropped.
                let mut head = Vec::with_capacity(1024);
                let read = tokio::time::timeout(Duration::from_secs(10), async {
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
                        let n = stream.read(&mut buf).await?;
                        if n == 0 {
                            break;
                        }
                        head.extend_from_slice(&buf[..n]);
                    }
                    Ok::<_, std::io::Error>(())
                })
                .await;
                if !matches!(read, Ok(Ok(()))) {
                    return;
                }
                let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
                let reply = match line.starts_with(b"GET /metrics ") || line.starts_with(b"GET /metrics?") {
                    true => {
                        let body = bimodal_proto::self_metrics::encode(&METRICS.registry);
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            bimodal_proto::self_metrics::CONTENT_TYPE,
                            body.len()
                        )
                    }
                    false => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_owned(),
                };
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `GET /metrics` lists the agent's own figures and the stream's (spool depth, batches
    /// acknowledged), which the shared stream module counts; a scrape sees its counts. (Batches
    /// dropped, a family by reason, are listed once one is.)
    #[tokio::test]
    async fn a_scrape_lists_the_samples_and_the_streams_figures() {
        bimodal_proto::stream::metrics().batches_acked.inc();
        let bound = serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let mut stream = tokio::net::TcpStream::connect(bound).await.unwrap();
        stream.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").await.unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
        for name in [
            "bimodal_agent_batches_total",
            "bimodal_agent_spool_batches",
            "bimodal_agent_spool_bytes",
            "process_resident_memory_bytes",
        ] {
            assert!(reply.contains(name), "{name} missing from {reply}");
        }
        let acked = reply
            .lines()
            .find_map(|l| l.strip_prefix("bimodal_agent_batches_acked_total "))
            .and_then(|v| v.trim().parse::<u64>().ok());
        assert!(acked.is_some_and(|n| n >= 1), "{reply}");
    }
}
