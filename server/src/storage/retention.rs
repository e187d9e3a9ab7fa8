//! Expiry where ClickHouse has no TTL (before 19.6, e.g. Debian's 18.16): once an hour the server
//! drops the partitions of every table that lie wholly before the table's retention. Dropping a
//! partition is idempotent, so several servers doing it is harmless. On modern servers the
//! tables' TTL clauses do this.
//!
//! The debug-info store has no time of its own to expire by (a build id's symbols are needed as
//! long as any kept frame is of that build id, however old the upload): on every server version,
//! once a day, the files and symbols of build ids no kept frame refers to are deleted, once
//! their upload is a day old (an upload comes before the batches whose frames need it). So are
//! the rows of lease claims a day past their expiry.

use std::time::Duration;

use super::{StorageError, Store};
use crate::clock::now_secs;

/// How a table is partitioned, so its partition ids can be turned into dates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Partition {
    /// `toYYYYMMDD(...)`: one day.
    Day,
    /// `toMonday(...)` of a Date: one week from that Monday.
    Week,
    /// `toYYYYMM(...)`: one month.
    Month,
}

/// Which retention a table keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keep {
    Retention,
    Ledger,
}

/// Every partitioned table of schema v2 (a test checks this against the migrations).
const TABLES: &[(&str, Partition, Keep)] = &[
    ("batches", Partition::Day, Keep::Ledger),
    ("ledger", Partition::Day, Keep::Ledger),
    ("batch_progress", Partition::Day, Keep::Ledger),
    ("nodes", Partition::Month, Keep::Retention),
    ("node_facts", Partition::Month, Keep::Retention),
    ("event_sources", Partition::Month, Keep::Retention),
    ("stacks", Partition::Week, Keep::Retention),
    ("frames", Partition::Week, Keep::Retention),
    ("processes", Partition::Week, Keep::Retention),
    ("functions", Partition::Week, Keep::Retention),
    ("samples", Partition::Day, Keep::Retention),
    ("samples_10m", Partition::Day, Keep::Retention),
    ("node_totals", Partition::Day, Keep::Retention),
    ("node_totals_by_hour", Partition::Day, Keep::Retention),
    ("function_samples", Partition::Day, Keep::Retention),
    ("function_samples_10m", Partition::Day, Keep::Retention),
    ("function_nodes_10m", Partition::Day, Keep::Retention),
    ("function_nodes_by_id_10m", Partition::Day, Keep::Retention),
    ("fleet_samples", Partition::Day, Keep::Retention),
    ("fleet_samples_10m", Partition::Day, Keep::Retention),
    ("fleet_function_samples", Partition::Day, Keep::Retention),
    ("fleet_function_samples_10m", Partition::Day, Keep::Retention),
    ("data_samples", Partition::Day, Keep::Retention),
    ("data_objects_10m", Partition::Day, Keep::Retention),
    ("counters", Partition::Day, Keep::Retention),
    ("counters_1m", Partition::Day, Keep::Retention),
    ("counters_10m", Partition::Day, Keep::Retention),
    ("counter_reports", Partition::Day, Keep::Retention),
    ("counter_reports_1m", Partition::Day, Keep::Retention),
    ("counter_reports_10m", Partition::Day, Keep::Retention),
    ("node_sources", Partition::Day, Keep::Retention),
    ("placements", Partition::Day, Keep::Retention),
    ("alerts", Partition::Month, Keep::Retention),
];

/// Unix seconds at which a partition's data ends (exclusive), from its id; `None` if unreadable.
fn partition_end(partition: Partition, id: &str) -> Option<u32> {
    let n: u32 = id.parse().ok()?;
    let (y, m, d) = match partition {
        Partition::Day | Partition::Week => (n / 10_000, n / 100 % 100, n % 100),
        Partition::Month => (n / 100, n % 100, 1),
    };
    let month = time::Month::try_from(u8::try_from(m).ok()?).ok()?;
    let start = time::Date::from_calendar_date(i32::try_from(y).ok()?, month, u8::try_from(d).ok()?).ok()?;
    let end = match partition {
        Partition::Day => start.next_day()?,
        Partition::Week => start.checked_add(time::Duration::days(7))?,
        Partition::Month => {
            let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
            time::Date::from_calendar_date(i32::try_from(ny).ok()?, time::Month::try_from(nm as u8).ok()?, 1).ok()?
        }
    };
    u32::try_from(end.midnight().assume_utc().unix_timestamp()).ok()
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct Part {
    table: String,
    partition_id: String,
}

impl Store {
    /// Drops partitions past retention; returns how many were dropped.
    pub async fn expire_partitions(&self) -> Result<usize, StorageError> {
        let dialect = &self.dialect;
        let locals: Vec<String> = TABLES.iter().map(|(t, _, _)| dialect.local(t)).collect();
        let parts = self
            .client
            .query(
                "SELECT DISTINCT table, partition_id FROM system.parts \
                 WHERE database = currentDatabase() AND active AND has(?, table)",
            )
            .bind(locals)
            .fetch_all::<Part>()
            .await
            .map_err(StorageError::query("list partitions"))?;
        let now = now_secs();
        let mut dropped = 0;
        for part in parts {
            let Some(&(table, partition, keep)) = TABLES.iter().find(|(t, _, _)| dialect.local(t) == part.table) else {
                continue;
            };
            let days = match keep {
                Keep::Retention => dialect.retention_days,
                Keep::Ledger => dialect.ledger_days,
            };
            let Some(end) = partition_end(partition, &part.partition_id) else {
                continue;
            };
            if end + days * 86_400 > now {
                continue;
            }
            let statement = format!(
                "ALTER TABLE {} {} DROP PARTITION ID '{}'",
                dialect.qualified(table),
                dialect.on_cluster_clause(),
                part.partition_id.replace('\'', "")
            );
            self.client
                .query(&statement)
                .execute()
                .await
                .map_err(|source| StorageError::Statement { statement, source })?;
            tracing::info!(table, partition = %part.partition_id, "dropped a partition past retention");
            dropped += 1;
        }
        Ok(dropped)
    }
}

/// How old an upload must be before its build id's symbols may be deleted for want of frames.
pub const DEBUGINFO_GRACE: Duration = Duration::from_secs(86_400);

impl Store {
    /// Deletes the debug info of build ids no kept frame refers to, uploaded more than `grace`
    /// ago; returns how many build ids. (A mutation: ClickHouse deletes the rows shortly after.)
    pub async fn expire_debuginfo(&self, grace: Duration) -> Result<usize, StorageError> {
        // Two reads rather than a NOT IN subquery: on a cluster both are Distributed tables.
        let build_ids = |query: clickhouse::query::Query, what: &'static str| async move {
            query
                .fetch_all::<super::debuginfo::BuildIdRow>()
                .await
                .map(|rows| rows.into_iter().map(|r| r.build_id))
                .map_err(StorageError::query(what))
        };
        let referenced: std::collections::HashSet<String> = build_ids(
            self.client
                .query("SELECT DISTINCT build_id FROM frames WHERE build_id != ''"),
            "list the build ids of kept frames",
        )
        .await?
        .collect();
        let cutoff = now_secs().saturating_sub(grace.as_secs() as u32);
        let mut unused: Vec<String> = build_ids(
            self.client
                .query("SELECT DISTINCT build_id FROM debuginfo WHERE uploaded <= toDateTime(?)")
                .bind(cutoff),
            "list stored debug info",
        )
        .await?
        .filter(|b| !referenced.contains(b))
        .collect();
        // Listed distinct; sorted so that the deletions go in a stable order.
        unused.sort();
        for chunk in unused.chunks(1000) {
            self.delete_debuginfo(chunk).await?;
        }
        if !unused.is_empty() {
            tracing::info!(
                build_ids = unused.len(),
                "deleted the debug info no kept frame refers to"
            );
        }
        Ok(unused.len())
    }
}

impl Store {
    /// Deletes the rows of lease claims that expired more than `after` ago.
    pub async fn expire_leases(&self, after: Duration) -> Result<(), StorageError> {
        super::lease::expire(&self.client, &self.dialect, after).await
    }
}

/// Runs [`Store::expire_partitions`] every hour where the server has no TTL, and
/// [`Store::expire_debuginfo`] and [`Store::expire_leases`] every day on every server.
pub fn spawn(store: std::sync::Arc<Store>) {
    if !store.dialect.modern {
        let store = store.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = store.expire_partitions().await {
                    tracing::warn!(error = %e, "failed to drop expired partitions; trying again in an hour");
                }
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        });
    }
    tokio::spawn(async move {
        loop {
            if let Err(e) = store.expire_debuginfo(DEBUGINFO_GRACE).await {
                tracing::warn!(error = %e, "failed to delete unused debug info; trying again in a day");
            }
            if let Err(e) = store.expire_leases(super::lease::KEPT_AFTER_EXPIRY).await {
                tracing::warn!(error = %e, "failed to delete expired lease claims; trying again in a day");
            }
            tokio::time::sleep(DEBUGINFO_GRACE).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Partition ids turn into the end of the span they hold.
    #[test]
    fn partition_ids_end_where_their_span_ends() {
        let day = |s: &str| {
            time::Date::parse(s, time::macros::format_description!("[year]-[month]-[day]"))
                .unwrap()
                .midnight()
                .assume_utc()
                .unix_timestamp() as u32
        };
        assert_eq!(partition_end(Partition::Day, "20261123"), Some(day("2026-11-24")));
        assert_eq!(partition_end(Partition::Week, "20261123"), Some(day("2026-11-30")));
        assert_eq!(partition_end(Partition::Month, "202612"), Some(day("2027-01-01")));
        assert_eq!(partition_end(Partition::Day, "all"), None);
    }

    /// Every partitioned table of the schema is expired by this task.
    #[test]
    fn every_partitioned_table_is_listed() {
        use super::super::migrations::{all_statements, Dialect};
        let statements = all_statements(&Dialect::for_version("18.16.1", 30));
        for s in statements.iter().filter(|s| s.contains("PARTITION BY")) {
            let table = s
                .trim_start_matches("CREATE TABLE IF NOT EXISTS ")
                .split_whitespace()
                .next()
                .unwrap();
            assert!(TABLES.iter().any(|(t, _, _)| *t == table), "{table} has no retention");
        }
    }
}
