//! A lease held in ClickHouse: one server at a time does a job that must not run twice at once
//! (schema migrations; later, sending alert notifications).
//!
//! ClickHouse has no compare-and-set, so a lease is decided by order: each contender inserts a
//! claim stamped with ClickHouse's own clock (`now()`, whole seconds, so server clocks do not
//! matter), waits a little over a second, and reads every live claim. The claim with the smallest
//! (stamp, holder) wins. Why that is safe: a claim inserted after a contender's read carries a
//! stamp at least one second later than the contender's own (the read happens over a second after
//! the contender's insert), so it cannot sort first; a claim inserted before the read is seen by
//! it. So every contender sees every claim that could beat it and all agree on the winner. The
//! winner renews its claim while it works (a renewal keeps the original stamp) and releases it;
//! a claim that is not renewed expires, so a crashed holder blocks the others for one period.
//!
//! On a cluster the lease rows all live on one shard (the Distributed table shards by a
//! constant), so every reader sees one clock and one set of claims.

use std::time::Duration;

use clickhouse::Client;
use tokio::sync::oneshot;

use super::migrations::Dialect;
use super::StorageError;

/// How long after its claim a contender reads the claims (over a second: see the module doc).
const SETTLE: Duration = Duration::from_millis(1200);
/// How often a losing contender looks again.
const RETRY: Duration = Duration::from_millis(500);

/// The lease table's statements for `dialect`.
pub(super) fn schema(dialect: &Dialect) -> Vec<String> {
    let cluster = dialect.on_cluster_clause();
    let local = dialect.local("leases");
    let qualified = dialect.qualified("leases");
    let engine = match &dialect.cluster {
        None => "MergeTree".to_owned(),
        Some(_) => format!(
            "ReplicatedMergeTree('/clickhouse/tables/{{shard}}/{}/{local}', '{{replica}}')",
            dialect.database
        ),
    };
    let mut statements = vec![format!(
        "CREATE TABLE IF NOT EXISTS {qualified} {cluster} (name String, holder FixedString(16), \
         stamp UInt64, expires UInt64, released UInt8) ENGINE = {engine} ORDER BY (name, stamp)"
    )];
    if let Some(c) = &dialect.cluster {
        let db = super::migrations::quote_ident(&dialect.database);
        // A constant sharding key: every lease row on one shard, read with one clock.
        statements.push(format!(
            "CREATE TABLE IF NOT EXISTS {db}.leases {cluster} AS {qualified} ENGINE = Distributed({}, {db}, {local}, 0)",
            super::migrations::quote_ident(c),
        ));
    }
    statements
}

/// How long the rows of a claim are kept after it expired (or was released): far longer than
/// any period, so that no live claim loses a row.
pub const KEPT_AFTER_EXPIRY: Duration = Duration::from_secs(86_400);

/// Deletes the rows of claims that expired more than `after` ago: every lease taken (each
/// upload stored, each alert evaluation, each renewal) writes rows, and the table has no TTL on
/// any server version (a mutation: ClickHouse deletes the rows shortly after).
pub(super) async fn expire(client: &Client, dialect: &Dialect, after: Duration) -> Result<(), StorageError> {
    let statement = format!(
        "ALTER TABLE {} {} DELETE WHERE expires < toUInt64(now()) - {}",
        dialect.qualified("leases"),
        dialect.on_cluster_clause(),
        after.as_secs()
    );
    client
        .query(&statement)
        .execute()
        .await
        .map_err(|source| StorageError::Statement { statement, source })
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct Claim {
    holder: [u8; 16],
    first_stamp: u64,
}

/// A held lease; renewed in the background until released or dropped.
#[derive(Debug)]
pub struct Lease {
    client: Client,
    name: String,
    holder: [u8; 16],
    stamp: u64,
    stop_renewing: Option<oneshot::Sender<()>>,
    /// Its release is written (else dropping it releases it in the background).
    released: bool,
}

impl Lease {
    /// Waits until this server holds lease `name`; a holder that stops renewing loses it after
    /// `period`. Cancel-safe: a claim made by a call that is dropped while it waits is released.
    pub async fn acquire(client: Client, name: &str, period: Duration) -> Result<Lease, StorageError> {
        let mut logged = false;
        loop {
            // A fresh holder per attempt: a withdrawn claim stays withdrawn.
            let holder = *uuid::Uuid::new_v4().as_bytes();
            // Released if this call is dropped from here on (the claim may be in ClickHouse
            // even if the insert did not return).
            let mut claimed = Claimed {
                client: client.clone(),
                name: name.to_owned(),
                holder,
                stamp: 0,
                armed: true,
            };
            claim(&client, name, &holder, None, period).await?;
            tokio::time::sleep(SETTLE).await;
            let claims = live_claims(&client, name).await?;
            let stamp = claims.iter().find(|c| c.holder == holder).map_or(0, |c| c.first_stamp);
            claimed.stamp = stamp;
            let first = claims.iter().min_by_key(|c| (c.first_stamp, c.holder));
            if first.is_some_and(|c| c.holder == holder) {
                claimed.armed = false;
                let (stop, stopped) = oneshot::channel();
                tokio::spawn(renew(client.clone(), name.to_owned(), holder, stamp, period, stopped));
                return Ok(Lease {
                    client,
                    name: name.to_owned(),
                    holder,
                    stamp,
                    stop_renewing: Some(stop),
                    released: false,
                });
            }
            // Someone else holds it (or claimed first): withdraw, wait for it to be released.
            // (Disarmed once the withdrawal is written: a call dropped or failing before that
            // leaves it to the guard.)
            release(&client, name, &holder, stamp).await?;
            claimed.armed = false;
            if !logged {
                tracing::info!(lease = name, "waiting for another server to finish");
                logged = true;
            }
            loop {
                let claims = live_claims(&client, name).await?;
                tracing::debug!(lease = name, live = claims.len(), "lease held by another server");
                if !claims.iter().any(|c| c.holder != holder) {
                    break;
                }
                tokio::time::sleep(RETRY).await;
            }
        }
    }

    /// Whether this server still holds the lease: one whose renewals failed for a whole period
    /// may have lost it to another server, and must stop the job.
    pub async fn still_held(&self) -> Result<bool, StorageError> {
        let claims = live_claims(&self.client, &self.name).await?;
        Ok(claims
            .iter()
            .min_by_key(|c| (c.first_stamp, c.holder))
            .is_some_and(|c| c.holder == self.holder))
    }

    /// Gives the lease up now (on error too: the others take over at once, not after expiry).
    pub async fn release(mut self) {
        if let Some(stop) = self.stop_renewing.take() {
            let _ = stop.send(());
        }
        match release(&self.client, &self.name, &self.holder, self.stamp).await {
            Ok(()) => self.released = true,
            // Dropped below unreleased: tried once more in the background.
            Err(e) => tracing::warn!(lease = %self.name, error = %e, "failed to release a lease; trying again"),
        }
    }
}

/// A lease dropped without [`Lease::release`] (its holder's task was cancelled: a client that
/// went away, a timeout) is released in the background, so that the others need not wait for it
/// to expire.
impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(stop) = self.stop_renewing.take() {
            let _ = stop.send(());
        }
        if !self.released {
            release_later(&self.client, &self.name, self.holder, self.stamp);
        }
    }
}

/// A claim inserted by [`Lease::acquire`] and not yet won or withdrawn.
struct Claimed {
    client: Client,
    name: String,
    holder: [u8; 16],
    stamp: u64,
    armed: bool,
}

impl Drop for Claimed {
    fn drop(&mut self) {
        if self.armed {
            release_later(&self.client, &self.name, self.holder, self.stamp);
        }
    }
}

/// Releases a claim from a task of its own (where there is a runtime to run it; without one the
/// claim expires by itself).
fn release_later(client: &Client, name: &str, holder: [u8; 16], stamp: u64) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let (client, name) = (client.clone(), name.to_owned());
    runtime.spawn(async move {
        if let Err(e) = release(&client, &name, &holder, stamp).await {
            tracing::warn!(lease = %name, error = %e, "failed to release a lease; it expires by itself");
        }
    });
}

/// Inserts a claim: a new one stamped by the INSERT itself with ClickHouse's clock, so the stamp
/// is never older than the row (the safety argument needs that), or a renewal keeping `stamp`.
async fn claim(
    client: &Client,
    name: &str,
    holder: &[u8; 16],
    stamp: Option<u64>,
    period: Duration,
) -> Result<(), StorageError> {
    client
        .query(CLAIM)
        .bind(name)
        .bind(bimodal_profile::hex(holder))
        .bind(stamp.unwrap_or(0))
        .bind(stamp.unwrap_or(0))
        .bind(period.as_secs())
        .execute()
        .await
        .map_err(StorageError::query("claim a lease"))
}

async fn release(client: &Client, name: &str, holder: &[u8; 16], stamp: u64) -> Result<(), StorageError> {
    client
        .query(RELEASE)
        .bind(name)
        .bind(bimodal_profile::hex(holder))
        .bind(stamp)
        .execute()
        .await
        .map_err(StorageError::query("release a lease"))
}

const LIVE_CLAIMS: &str = "SELECT holder, min(stamp) AS first_stamp FROM leases WHERE name = ? GROUP BY holder \
     HAVING max(released) = 0 AND max(expires) > toUInt64(now())";
const CLAIM: &str = "INSERT INTO leases (name, holder, stamp, expires, released) \
     SELECT ?, unhex(?), if(? = 0, toUInt64(now()), ?), toUInt64(now()) + ?, 0";
const RELEASE: &str =
    "INSERT INTO leases (name, holder, stamp, expires, released) SELECT ?, unhex(?), ?, toUInt64(now()), 1";

/// The lease's statements with example values (for `bimodal-server sql`).
pub(super) fn examples(client: &Client) -> Vec<String> {
    let holder = bimodal_profile::hex(&[7; 16]);
    [
        client.query(LIVE_CLAIMS).bind("schema_migrations"),
        client
            .query(CLAIM)
            .bind("schema_migrations")
            .bind(&holder)
            .bind(0u64)
            .bind(0u64)
            .bind(120u64),
        client.query(RELEASE).bind("schema_migrations").bind(&holder).bind(5u64),
    ]
    .iter()
    .map(|q| q.sql_display().to_string())
    .collect()
}

/// Claims of `name` that have not expired and were not released.
async fn live_claims(client: &Client, name: &str) -> Result<Vec<Claim>, StorageError> {
    client
        .query(LIVE_CLAIMS)
        .bind(name)
        .fetch_all::<Claim>()
        .await
        .map_err(StorageError::query("read a lease"))
}

async fn renew(
    client: Client,
    name: String,
    holder: [u8; 16],
    stamp: u64,
    period: Duration,
    mut stopped: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            _ = tokio::time::sleep(period / 3) => {}
        }
        if let Err(e) = claim(&client, &name, &holder, Some(stamp), period).await {
            tracing::warn!(lease = %name, error = %e, "failed to renew a lease");
        }
    }
}
