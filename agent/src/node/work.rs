//! Units of work scraped from a local Prometheus endpoint (`--work-metric URL#NAME`): the
//! increase of a counter the workload already exports (requests served, queries run), summed
//! over its series, per batch interval. The other source of work is a uprobe on a function
//! (`--work-uprobe`, in [`crate::sample::bpf`]); both are sent as the counter
//! [`bimodal_proto::WORK_COUNTER`].

use std::str::FromStr;
use std::time::Duration;

/// A counter on a Prometheus endpoint: `http://127.0.0.1:9100/metrics#http_requests_total`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkMetric {
    pub url: String,
    pub name: String,
}

impl FromStr for WorkMetric {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let usage = || format!("`{s}` is not URL#NAME (e.g. http://127.0.0.1:9100/metrics#http_requests_total)");
        let (url, name) = s.rsplit_once('#').ok_or_else(usage)?;
        if !(url.starts_with("http://") || url.starts_with("https://")) || name.is_empty() {
            return Err(usage());
        }
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            return Err(format!("`{name}` is not a Prometheus metric name"));
        }
        Ok(WorkMetric {
            url: url.into(),
            name: name.into(),
        })
    }
}

/// Scrapes one counter and reports its increase.
#[derive(Debug)]
pub struct WorkScraper {
    metric: WorkMetric,
    http: ureq::Agent,
    /// The counter's total at the previous scrape that succeeded.
    last: Option<f64>,
}

impl WorkScraper {
    pub fn new(metric: WorkMetric) -> WorkScraper {
        WorkScraper {
            metric,
            http: ureq::AgentBuilder::new().timeout(Duration::from_secs(2)).build(),
            last: None,
        }
    }

    /// Units of work since the previous scrape: `Ok(None)` at the first one (the baseline); a
    /// total that went down was a restart of the workload, counted from zero.
    pub fn work_done(&mut self) -> Result<Option<u64>, String> {
        let text = self
            .http
            .get(&self.metric.url)
            .call()
            .map_err(|e| format!("cannot scrape {}: {e}", self.metric.url))?
            .into_string()
            .map_err(|e| format!("cannot read {}: {e}", self.metric.url))?;
        let now = total(&text, &self.metric.name)?;
        let done = self.last.map(|before| if now >= before { now - before } else { now });
        self.last = Some(now);
        Ok(done.map(|d| d.round() as u64))
    }
}

/// The sum of every series of counter `name` in Prometheus text.
fn total(text: &str, name: &str) -> Result<f64, String> {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .map_err(|e| format!("not the Prometheus text format: {e}"))?;
    let mut found = false;
    let mut sum = 0.0;
    for sample in scrape.samples.iter().filter(|s| s.metric == name) {
        match sample.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => {
                found = true;
                sum += v;
            }
            _ => return Err(format!("`{name}` is not a counter")),
        }
    }
    if !found {
        return Err(format!("the endpoint has no counter named `{name}`"));
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    const PAGE: &str = "# HELP http_requests_total Requests.\n# TYPE http_requests_total counter\n\
        http_requests_total{code=\"200\"} 1000\nhttp_requests_total{code=\"500\"} 27\n\
        # TYPE temperature gauge\ntemperature 21.5\n";

    #[test]
    fn parses_urls_and_totals() {
        let m: WorkMetric = "http://127.0.0.1:9100/metrics#http_requests_total".parse().unwrap();
        assert_eq!(m.url, "http://127.0.0.1:9100/metrics");
        assert!("127.0.0.1:9100#x".parse::<WorkMetric>().is_err());
        assert!("http://h/metrics#".parse::<WorkMetric>().is_err());
        assert!("http://h/metrics#a b".parse::<WorkMetric>().is_err());
        assert_eq!(total(PAGE, "http_requests_total"), Ok(1027.0));
        assert!(total(PAGE, "temperature").unwrap_err().contains("not a counter"));
        assert!(total(PAGE, "missing").unwrap_err().contains("no counter named"));
    }

    /// A real endpoint on loopback: the first scrape is the baseline, then increases, and a
    /// restart counts from zero.
    #[test]
    fn scrapes_increases() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let totals = [100u64, 130, 180, 20];
        let server = std::thread::spawn(move || {
            for total in totals {
                let (mut conn, _) = listener.accept().unwrap();
                let mut request = [0u8; 1024];
                let _ = conn.read(&mut request);
                let body = format!("# TYPE served_total counter\nserved_total {total}\n");
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        let mut scraper = WorkScraper::new(format!("http://{addr}/metrics#served_total").parse().unwrap());
        let got: Vec<Option<u64>> = (0..4).map(|_| scraper.work_done().unwrap()).collect();
        assert_eq!(got, [None, Some(30), Some(50), Some(20)]);
        server.join().unwrap();
        // The endpoint is gone: a clear error, not a zero.
        assert!(scraper.work_done().unwrap_err().contains("cannot scrape"));
    }
}
