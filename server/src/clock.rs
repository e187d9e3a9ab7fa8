//! The server's one clock: the wall clock's Unix time in the units the server keeps, and its
//! text form in answers. Logic that depends on time is given it (a window's range and `now`, an
//! evaluation's time): only the edges read the clock (handlers, the writer, the evaluation loop),
//! so tests give the time instead of waiting for it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix milliseconds now.
pub fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Unix seconds now.
pub fn now_secs() -> u32 {
    (now_millis() / 1000) as u32
}

/// Today as a ClickHouse `Date` (days since the epoch).
pub fn today() -> u16 {
    (now_secs() / 86_400) as u16
}

/// Unix seconds as RFC 3339 in UTC.
pub fn rfc3339(secs: u32) -> String {
    time::OffsetDateTime::from_unix_timestamp(i64::from(secs))
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    /// Whole seconds in UTC, as answers and Alertmanager read them.
    #[test]
    fn rfc3339_is_utc_to_the_second() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(1_764_979_200), "2025-12-06T00:00:00Z");
    }
}
