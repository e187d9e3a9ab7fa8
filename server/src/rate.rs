//! How fast one client may ask: a token bucket per key, shared by all of the key's connections
//! to this server. Ingest keys stream opens and batches by node name: an agent sends one batch per interval (10 s
//! by default) and catches up on a spool faster, and a node beyond its rate (a broken or hostile
//! client, or many agents claiming one name) is answered "retry" with the time until its next
//! batch is due, before the batch is decoded, so it costs the server a transfer and no more. The
//! HTTP API keys requests by token (or by address without tokens): a reader beyond its rate is
//! answered 429 with the time until its next request is due, before any query runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a key may do: `per_second` on average, `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: u32,
}

impl Rate {
    /// Batches a node may send: 5 a second, 50 at once. Fifty times an agent's default pace,
    /// and an hour of spooled batches (360) delivered in about a minute.
    pub const NODE_BATCHES: Rate = Rate {
        per_second: 5.0,
        burst: 50,
    };

    /// Streams a node may open: one a second, after a burst of 60 openings. An agent opens one
    /// and keeps it, reconnecting after a break with a backoff of up to 10 s; `bimodal import`
    /// opens one per directory. A client opening streams in a loop under one name (each costs a Hello, its
    /// checks and a node row to write) is told to retry instead.
    pub const NODE_STREAMS: Rate = Rate {
        per_second: 1.0,
        burst: 60,
    };

    /// Node names new to the store a token (or, without tokens, a client address) may introduce:
    /// 1,000 a minute, 20,000 at once. A fleet's agents share a token, so a rollout of 20,000
    /// nodes starts at once and one of 100,000 within 80 minutes (agents told to retry spool
    /// their batches meanwhile); a writer inventing names (each a row, a series per counter and
    /// a column of every compare) is held to that pace (issue 49).
    pub const NEW_NODES: Rate = Rate {
        per_second: 1000.0 / 60.0,
        burst: 20_000,
    };

    /// Debug-info checks and uploads a client address may send: 50 a second, 2,000 at once. An
    /// agent checks each build id it meets once (a node starting hundreds of binaries checks
    /// hundreds at once) and uploads each at most every 5 minutes; a client asking in a loop
    /// costs a ClickHouse lookup per call and is told to retry instead.
    pub const DEBUGINFO_CALLS: Rate = Rate {
        per_second: 50.0,
        burst: 2000,
    };

    /// API requests a reader may send: 20 a second, 200 at once. The UI asks about ten
    /// questions per view, so a person clicking through views stays far below it; a script in
    /// a loop does not, and cannot keep ClickHouse busy for everyone else.
    pub const API_REQUESTS: Rate = Rate {
        per_second: 20.0,
        burst: 200,
    };
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The buckets of the keys that asked lately.
#[derive(Debug)]
pub struct Buckets {
    rate: Rate,
    buckets: Mutex<Kept<Bucket>>,
}

/// Values per key of the clients that asked lately, forgotten when there are many and they no
/// longer matter. A pruning looks over every key; when most are still needed, the next one waits
/// until there are twice as many, so that its cost is spread over the keys added in between
/// rather than paid by every request.
#[derive(Debug)]
pub struct Kept<V> {
    values: HashMap<Arc<str>, V>,
    /// The fewest keys kept before a pruning.
    floor: usize,
    /// Above how many keys the next pruning runs.
    prune_above: usize,
}

impl<V> Kept<V> {
    pub fn new(floor: usize) -> Kept<V> {
        Kept {
            values: HashMap::new(),
            floor,
            prune_above: floor,
        }
    }

    /// `key`'s value (made by `make` if it has none), after forgetting the values `needed`
    /// says no longer matter when the map has grown past its bound.
    pub fn get(&mut self, key: &str, needed: impl Fn(&V) -> bool, make: impl FnOnce() -> V) -> &mut V {
        if self.values.len() > self.prune_above {
            self.values.retain(|_, v| needed(v));
            self.prune_above = self.floor.max(2 * self.values.len());
        }
        if !self.values.contains_key(key) {
            self.values.insert(Arc::from(key), make());
        }
        self.values.get_mut(key).expect("inserted above")
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// Buckets kept before full ones (keys idle long enough to have their whole burst back) are
/// forgotten: a forgotten bucket and a full one allow the same.
const PRUNE_ABOVE: usize = 50_000;

impl Buckets {
    pub fn new(rate: Rate) -> Buckets {
        Buckets {
            rate: Rate {
                per_second: rate.per_second.max(f64::MIN_POSITIVE),
                burst: rate.burst.max(1),
            },
            buckets: Mutex::new(Kept::new(PRUNE_ABOVE)),
        }
    }

    /// Takes one of `key`'s turns at `now`; when its bucket is empty, how long until it holds
    /// a turn again.
    pub fn take(&self, key: &str, now: Instant) -> Result<(), Duration> {
        let (per_second, burst) = (self.rate.per_second, f64::from(self.rate.burst));
        let refill = seconds(burst / per_second);
        let mut kept = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let bucket = kept.get(
            key,
            |b| now.saturating_duration_since(b.at) < refill,
            || Bucket { tokens: burst, at: now },
        );
        let refilled = now.saturating_duration_since(bucket.at).as_secs_f64() * per_second;
        bucket.tokens = (bucket.tokens + refilled).min(burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(seconds((1.0 - bucket.tokens) / per_second))
        }
    }

    pub fn rate(&self) -> Rate {
        self.rate
    }
}

/// The key of a client known only by its address: the address, or for IPv6 its /64 network
/// (one host is usually given a whole /64, and could otherwise ask as 2⁶⁴ clients).
pub fn address_key(ip: std::net::IpAddr) -> String {
    match ip.to_canonical() {
        std::net::IpAddr::V4(v4) => format!("address:{v4}"),
        std::net::IpAddr::V6(v6) => {
            let network = std::net::Ipv6Addr::from(v6.to_bits() & !u128::from(u64::MAX));
            format!("address:{network}/64")
        }
    }
}

/// A duration of `secs` seconds, `Duration::MAX` beyond what a duration holds (a rate set to
/// a tiny fraction of one a second).
fn seconds(secs: f64) -> Duration {
    Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_gets_its_burst_then_its_rate_and_others_are_not_held_back() {
        let rates = Buckets::new(Rate {
            per_second: 2.0,
            burst: 3,
        });
        let (a, b) = ("a", "b");
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(rates.take(a, t0), Ok(()));
        }
        let wait = rates.take(a, t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        assert_eq!(rates.take(b, t0), Ok(()), "another key has its own bucket");
        // Half a second later one batch is due again, and only one.
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(rates.take(a, t1), Ok(()));
        assert!(rates.take(a, t1).is_err());
        // After a long pause the burst is back, not more.
        let t2 = t1 + Duration::from_secs(3600);
        for _ in 0..3 {
            assert_eq!(rates.take(a, t2), Ok(()));
        }
        assert!(rates.take(a, t2).is_err());
    }

    #[test]
    fn a_tiny_rate_gives_a_long_wait_not_a_panic() {
        let rates = Buckets::new(Rate {
            per_second: 1e-300,
            burst: 1,
        });
        let t0 = Instant::now();
        assert_eq!(rates.take("a", t0), Ok(()));
        assert_eq!(rates.take("a", t0), Err(Duration::MAX));
    }

    /// A rate of one a second with no burst, and one key more than are kept before a pruning,
    /// all taken at `t0`.
    fn one_more_key_than_kept(t0: Instant) -> Buckets {
        let rates = Buckets::new(Rate {
            per_second: 1.0,
            burst: 1,
        });
        for i in 0..=PRUNE_ABOVE {
            rates.take(&format!("n{i}"), t0).unwrap();
        }
        rates
    }

    #[test]
    fn idle_keys_are_forgotten_when_there_are_many() {
        let t0 = Instant::now();
        let rates = one_more_key_than_kept(t0);
        let later = t0 + Duration::from_secs(2);
        rates.take("new", later).unwrap();
        assert_eq!(rates.buckets.lock().unwrap().len(), 1);
    }

    #[test]
    fn busy_keys_are_not_looked_over_on_every_request() {
        let t0 = Instant::now();
        let rates = one_more_key_than_kept(t0);
        // Every key is busy: the pruning keeps them all and waits for twice as many.
        rates.take("one more", t0).unwrap();
        let kept = rates.buckets.lock().unwrap();
        assert_eq!(kept.len(), PRUNE_ABOVE + 2);
        assert_eq!(kept.prune_above, 2 * (PRUNE_ABOVE + 1));
    }

    #[test]
    fn an_ipv6_client_is_its_network() {
        let key = |s: &str| address_key(s.parse().unwrap());
        assert_eq!(key("2001:db8:1:2:3:4:5:6"), key("2001:db8:1:2:ffff::1"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("2001:db8:1:2::1"), "address:2001:db8:1:2::/64");
        assert_eq!(key("::ffff:10.0.0.7"), "address:10.0.0.7");
        assert_eq!(key("10.0.0.7"), "address:10.0.0.7");
    }
}
