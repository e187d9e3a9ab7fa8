//! Numbered SQL migrations, applied in order once each and recorded in `schema_migrations`,
//! by one server at a time (a [`lease`](super::lease) guards them).
//!
//! One file serves every ClickHouse version and both layouts: the server's version and
//! `--clickhouse-cluster` pick a [`Dialect`], which fills `{{placeholders}}` and keeps `--modern:`
//! or `--legacy:` lines. A new database starts at the newest schema; one holding schema v1
//! (migrations 1–5) moves it aside (6) and gets schema v2 (7); the server then copies its rows
//! over (`migrate_v1`).

use std::time::Duration;

use clickhouse::Client;

use super::{lease, StorageError};

/// Migrations in order: (version, name, SQL).
const MIGRATIONS: &[(u32, &str, &str)] = &[
    (1, "init", include_str!("../../migrations/001_init.sql")),
    (
        2,
        "node_facts_counters_placement",
        include_str!("../../migrations/002_node_facts_counters_placement.sql"),
    ),
    (
        3,
        "process_identity",
        include_str!("../../migrations/003_process_identity.sql"),
    ),
    (
        4,
        "elf_addresses",
        include_str!("../../migrations/004_elf_addresses.sql"),
    ),
    (
        5,
        "kubernetes_names",
        include_str!("../../migrations/005_kubernetes_names.sql"),
    ),
    (6, "set_aside_v1", include_str!("../../migrations/006_set_aside_v1.sql")),
    (7, "fleet_schema", include_str!("../../migrations/007_fleet_schema.sql")),
    (
        8,
        "fleet_rollups",
        include_str!("../../migrations/008_fleet_rollups.sql"),
    ),
    (
        9,
        "ledger_per_state",
        include_str!("../../migrations/009_ledger_per_state.sql"),
    ),
    (
        10,
        "function_nodes",
        include_str!("../../migrations/010_function_nodes.sql"),
    ),
    (11, "alerts", include_str!("../../migrations/011_alerts.sql")),
    (
        12,
        "data_objects",
        include_str!("../../migrations/012_data_objects.sql"),
    ),
    (
        13,
        "node_counters",
        include_str!("../../migrations/013_node_counters.sql"),
    ),
    (
        14,
        "node_sources",
        include_str!("../../migrations/014_node_sources.sql"),
    ),
    (
        15,
        "node_totals_by_hour",
        include_str!("../../migrations/015_node_totals_by_hour.sql"),
    ),
    (
        16,
        "function_nodes_by_id",
        include_str!("../../migrations/016_function_nodes_by_id.sql"),
    ),
    (
        17,
        "counter_reports",
        include_str!("../../migrations/017_counter_reports.sql"),
    ),
    (
        18,
        "debuginfo_disputes",
        include_str!("../../migrations/018_debuginfo_disputes.sql"),
    ),
    (
        19,
        "alert_node_wide",
        include_str!("../../migrations/019_alert_node_wide.sql"),
    ),
];

/// The first migration of the current schema: a new database starts here.
const CURRENT_SCHEMA_FROM: u32 = 7;
/// Migrations that only make sense on a database holding schema v1.
const V1_ONLY: std::ops::RangeInclusive<u32> = 1..=6;

/// How long a server may hold the migration lease before others may take over.
const MIGRATION_LEASE: Duration = Duration::from_secs(120);

/// What the ClickHouse server supports, and how tables are laid out on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dialect {
    /// ClickHouse 23 or later: LowCardinality, CODEC, TTL, RowBinaryWithNamesAndTypes.
    pub modern: bool,
    /// Days samples are kept (by TTL where it exists, else by dropping partitions).
    pub retention_days: u32,
    /// Days the ledger of batch ids is kept: resends come within hours.
    pub ledger_days: u32,
    /// The cluster (from `remote_servers`) to create tables on: each table is a `Replicated*`
    /// table `T_local` on every shard with a `Distributed` table `T` over them.
    pub cluster: Option<String>,
    /// The database the tables live in (Distributed tables and replication paths name it).
    pub database: String,
}

impl Dialect {
    /// The dialect of a server that reports `version` (e.g. `18.16.1`, `24.8.4.13`).
    pub fn for_version(version: &str, retention_days: u32) -> Dialect {
        let major: u32 = version.split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0);
        Dialect {
            modern: major >= 23,
            retention_days,
            ledger_days: 2,
            cluster: None,
            database: "bimodal".into(),
        }
    }

    /// The same, on a cluster.
    pub fn on_cluster(mut self, cluster: Option<String>, database: &str) -> Dialect {
        self.cluster = cluster;
        self.database = database.to_owned();
        self
    }

    /// `ON CLUSTER c`, or nothing.
    pub fn on_cluster_clause(&self) -> String {
        match &self.cluster {
            Some(c) => format!("ON CLUSTER {}", quote_ident(c)),
            None => String::new(),
        }
    }

    /// The name of table `t` as stored on one server.
    pub fn local(&self, table: &str) -> String {
        match self.cluster {
            Some(_) => format!("{table}_local"),
            None => table.to_owned(),
        }
    }

    /// The same, as DDL must name it: ClickHouse 18.16 resolves every table other than the one
    /// an ON CLUSTER statement creates in the `default` database, so on a cluster the database
    /// is always named.
    pub fn qualified(&self, table: &str) -> String {
        match self.cluster {
            Some(_) => format!("{}.{}", quote_ident(&self.database), self.local(table)),
            None => table.to_owned(),
        }
    }

    /// The statements of one migration file in this dialect.
    pub fn render(&self, sql: &str) -> Vec<String> {
        let (keep, drop) = if self.modern {
            ("--modern:", "--legacy:")
        } else {
            ("--legacy:", "--modern:")
        };
        let mut text = String::new();
        for line in sql.lines() {
            let trimmed = line.trim_start();
            if trimmed.starts_with(drop) {
                continue;
            }
            let line = trimmed.strip_prefix(keep).unwrap_or(line);
            if line.trim_start().starts_with("--") {
                continue;
            }
            text.push_str(line);
            text.push('\n');
        }
        text.split(';')
            .map(|statement| self.fill(statement))
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// Fills the placeholders of one statement.
    fn fill(&self, statement: &str) -> String {
        // `{{engine}}` names the statement's first table.
        let mut table: Option<String> = None;
        let mut rendered = String::new();
        let mut rest = statement;
        while let Some(start) = rest.find("{{") {
            let end = rest[start..].find("}}").expect("placeholder closed") + start;
            rendered.push_str(&rest[..start]);
            let inner = rest[start + 2..end].trim();
            let (name, args) = match inner.split_once([':', ' ']) {
                Some((n, a)) => (n, a.trim()),
                None => (inner, ""),
            };
            let value = match (name, self.modern) {
                ("local", _) => {
                    table.get_or_insert_with(|| args.to_owned());
                    self.qualified(args)
                }
                ("on_cluster", _) => self.on_cluster_clause(),
                ("engine", _) => self.engine(table.as_deref().expect("{{engine}} after {{local:T}}"), args),
                ("distributed", _) => self.distributed(args),
                ("drop_distributed", _) => self.drop_distributed(args),
                ("ttl", true) => {
                    let (expr, class) = args.rsplit_once(' ').expect("{{ttl EXPR retention|ledger}}");
                    let days = match class {
                        "retention" => self.retention_days,
                        "ledger" => self.ledger_days,
                        other => panic!("unknown TTL class `{other}`"),
                    };
                    format!("TTL {expr} + INTERVAL {days} DAY")
                }
                ("ttl", false) => String::new(),
                ("low_cardinality_string", true) => "LowCardinality(String)".into(),
                ("low_cardinality_string", false) => "String".into(),
                ("time_codec", true) => "CODEC(DoubleDelta, ZSTD(1))".into(),
                ("codec", true) => "CODEC(T64, ZSTD(1))".into(),
                ("id_codec", true) => "CODEC(ZSTD(1))".into(),
                ("time_codec" | "codec" | "id_codec", false) => String::new(),
                ("retention_days", _) => self.retention_days.to_string(),
                (other, _) => panic!("migration uses unknown placeholder {{{{{other}}}}}"),
            };
            rendered.push_str(&value);
            rest = &rest[end + 2..];
        }
        rendered.push_str(rest);
        rendered
    }

    /// `E(args)`, or on a cluster `ReplicatedE('<path>', '{replica}', args)`.
    fn engine(&self, table: &str, spec: &str) -> String {
        let (engine, args) = match spec.split_once(' ') {
            Some((e, a)) => (e, a.trim()),
            None => (spec, ""),
        };
        match &self.cluster {
            None if args.is_empty() => engine.to_owned(),
            None => format!("{engine}({args})"),
            Some(_) => {
                let path = format!(
                    "'/clickhouse/tables/{{shard}}/{}/{}', '{{replica}}'",
                    self.database,
                    self.local(table)
                );
                if args.is_empty() {
                    format!("Replicated{engine}({path})")
                } else {
                    format!("Replicated{engine}({path}, {args})")
                }
            }
        }
    }

    /// On a cluster, the Distributed table `T` over `T_local`, sharded by `KEY`.
    fn distributed(&self, spec: &str) -> String {
        let Some(cluster) = &self.cluster else {
            return String::new();
        };
        let (table, key) = spec.split_once(' ').expect("{{distributed T KEY}}");
        format!(
            "CREATE TABLE IF NOT EXISTS {}.{table} {} AS {} ENGINE = Distributed({}, {}, {}, {})",
            quote_ident(&self.database),
            self.on_cluster_clause(),
            self.qualified(table),
            quote_ident(cluster),
            quote_ident(&self.database),
            self.local(table),
            key.trim(),
        )
    }

    /// On a cluster, drops the Distributed table `T` on every server, for `{{distributed T
    /// KEY}}` to create it again over its altered local tables (ClickHouse 18.16 refuses `ALTER
    /// ... ON CLUSTER` of a Distributed table over replicated shards; it holds no rows); nothing
    /// on one server, where `T` is the table itself.
    fn drop_distributed(&self, table: &str) -> String {
        if self.cluster.is_none() {
            return String::new();
        }
        format!(
            "DROP TABLE IF EXISTS {}.{table} {}",
            quote_ident(&self.database),
            self.on_cluster_clause()
        )
    }
}

/// A ClickHouse identifier in backquotes.
pub fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('\\', "\\\\").replace('`', "\\`"))
}

/// Every statement of the current schema in `dialect`, in order (what a new database gets).
pub fn all_statements(dialect: &Dialect) -> Vec<String> {
    bootstrap_statements(dialect)
        .into_iter()
        .chain(
            MIGRATIONS
                .iter()
                .filter(|(v, _, _)| *v >= CURRENT_SCHEMA_FROM)
                .flat_map(|(_, _, sql)| dialect.render(sql)),
        )
        .collect()
}

/// The tables every server needs before it can take the migration lease.
fn bootstrap_statements(dialect: &Dialect) -> Vec<String> {
    let cluster = dialect.on_cluster_clause();
    // Recorded per shard in a cluster: migrations are idempotent, so a shard that lacks a record
    // only runs `IF NOT EXISTS` statements again.
    let table = match dialect.cluster {
        Some(_) => format!("{}.schema_migrations", quote_ident(&dialect.database)),
        None => "schema_migrations".to_owned(),
    };
    let mut statements = vec![format!(
        "CREATE TABLE IF NOT EXISTS {table} {cluster} (version UInt32, name String, applied DateTime) \
         ENGINE = MergeTree ORDER BY version"
    )];
    statements.extend(lease::schema(dialect));
    statements
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct ColumnName {
    name: String,
}

/// `ALTER TABLE t ADD COLUMN …` without the columns `t` has already, or `None` when it has them
/// all. ClickHouse before 19 has no `ADD COLUMN IF NOT EXISTS`, and DDL is not transactional: a
/// migration that added its columns but was not recorded (a crash in between) must not fail
/// on the next start.
async fn without_existing_columns(client: &Client, statement: &str) -> Result<Option<String>, StorageError> {
    let Some(alter) = split_add_columns(statement) else {
        return Ok(Some(statement.to_owned()));
    };
    let existing: Vec<String> = client
        .query("SELECT name FROM system.columns WHERE database = currentDatabase() AND table = ?")
        .bind(alter.name)
        .fetch_all::<ColumnName>()
        .await
        .map_err(StorageError::query("read the columns of a table"))?
        .into_iter()
        .map(|c| c.name)
        .collect();
    let missing: Vec<&str> = alter
        .clauses
        .into_iter()
        .filter(|c| !existing.iter().any(|e| c.split_whitespace().next() == Some(e)))
        .collect();
    if missing.is_empty() {
        return Ok(None);
    }
    let adds: Vec<String> = missing.iter().map(|c| format!("ADD COLUMN {c}")).collect();
    Ok(Some(format!(
        "ALTER TABLE {} {}{}",
        alter.table,
        alter.on_cluster,
        adds.join(", ")
    )))
}

/// An `ALTER TABLE t [ON CLUSTER c] ADD COLUMN a T, ADD COLUMN b U`, in parts.
#[derive(Debug, PartialEq)]
struct AddColumns<'a> {
    /// The table as written (`t`, or `` `db`.t `` on a cluster).
    table: &'a str,
    /// Its name without database or quotes, as `system.columns` has it.
    name: &'a str,
    /// `ON CLUSTER c ` (with its trailing space), or empty.
    on_cluster: String,
    /// The `name type` clauses.
    clauses: Vec<&'a str>,
}

fn split_add_columns(statement: &str) -> Option<AddColumns<'_>> {
    let rest = statement.trim().strip_prefix("ALTER TABLE ")?;
    let (table, mut rest) = rest.split_once(char::is_whitespace)?;
    let mut on_cluster = String::new();
    if let Some(after) = rest.trim_start().strip_prefix("ON CLUSTER ") {
        let (cluster, after) = after.trim_start().split_once(char::is_whitespace)?;
        on_cluster = format!("ON CLUSTER {cluster} ");
        rest = after;
    }
    let clauses: Vec<&str> = rest
        .split("ADD COLUMN")
        .map(|c| c.trim().trim_end_matches(',').trim())
        .filter(|c| !c.is_empty())
        .collect();
    let name = table.rsplit('.').next()?.trim_matches('`');
    (rest.trim_start().starts_with("ADD COLUMN") && !clauses.is_empty()).then_some(AddColumns {
        table,
        name,
        on_cluster,
        clauses,
    })
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct Applied {
    version: u32,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct Count {
    n: u64,
}

/// Whether `table` exists in the client's database.
pub(super) async fn table_exists(client: &Client, table: &str) -> Result<bool, StorageError> {
    Ok(client
        .query("SELECT count() AS n FROM system.tables WHERE database = currentDatabase() AND name = ?")
        .bind(table)
        .fetch_one::<Count>()
        .await
        .map_err(StorageError::query("look up a table"))?
        .n
        > 0)
}

/// Runs a statement; on a cluster, DDL waits for every shard.
async fn execute(client: &Client, statement: &str) -> Result<(), StorageError> {
    client
        .query(statement)
        .with_setting("distributed_ddl_task_timeout", "300")
        .execute()
        .await
        .map_err(|source| StorageError::Statement {
            statement: statement.chars().take(200).collect(),
            source,
        })
}

async fn bootstrap(client: &Client, dialect: &Dialect) -> Result<(), StorageError> {
    for statement in bootstrap_statements(dialect) {
        execute(client, &statement).await?;
    }
    Ok(())
}

/// Applies every migration not yet recorded, holding the migration lease so that servers
/// starting together apply each once; returns the versions applied now.
pub async fn apply(client: &Client, dialect: &Dialect) -> Result<Vec<u32>, StorageError> {
    bootstrap(client, dialect).await?;
    let lease = lease::Lease::acquire(client.clone(), "schema_migrations", MIGRATION_LEASE).await?;
    let result = apply_held(client, dialect).await;
    lease.release().await;
    result
}

async fn apply_held(client: &Client, dialect: &Dialect) -> Result<Vec<u32>, StorageError> {
    let applied: Vec<u32> = client
        .query("SELECT DISTINCT version FROM schema_migrations")
        .fetch_all::<Applied>()
        .await
        .map_err(StorageError::query("read schema_migrations"))?
        .into_iter()
        .map(|a| a.version)
        .collect();
    // A database without schema v1 starts at the current schema.
    let fresh = !applied.iter().any(|v| V1_ONLY.contains(v)) && !table_exists(client, "v1_samples").await?;
    let mut now_applied = Vec::new();
    for &(version, name, sql) in MIGRATIONS {
        if applied.contains(&version) || (fresh && V1_ONLY.contains(&version)) {
            continue;
        }
        if version == 6 && !table_exists(client, "samples").await? {
            // Moved aside by a server that stopped before recording it.
        } else {
            for statement in dialect.render(sql) {
                let Some(statement) = without_existing_columns(client, &statement).await? else {
                    continue;
                };
                execute(client, &statement).await?;
            }
        }
        client
            .query("INSERT INTO schema_migrations (version, name, applied) SELECT ?, ?, now()")
            .bind(version)
            .bind(name)
            .execute()
            .await
            .map_err(StorageError::query("record a migration"))?;
        tracing::info!(version, name, "applied migration");
        now_applied.push(version);
    }
    Ok(now_applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(dialect: &Dialect) -> Vec<String> {
        dialect.render(MIGRATIONS[6].2)
    }

    /// Legacy servers get plain types and no TTL; modern ones get LowCardinality, codecs and TTL.
    #[test]
    fn dialects_render_differently() {
        let legacy = v2(&Dialect::for_version("18.16.1", 30)).join(";\n");
        assert!(!legacy.contains("LowCardinality") && !legacy.contains("TTL") && !legacy.contains("CODEC"));
        assert!(!legacy.contains("{{") && !legacy.contains("Distributed") && !legacy.contains("Replicated"));
        let modern = v2(&Dialect::for_version("24.8.4.13", 30)).join(";\n");
        assert!(modern.contains("node LowCardinality(String)"));
        assert!(modern.contains("TTL time + INTERVAL 30 DAY"));
        assert!(modern.contains("TTL start_time + INTERVAL 2 DAY"));
    }

    /// On a cluster every table is a Replicated `_local` table with a Distributed one over it,
    /// created ON CLUSTER; views read and write the local tables.
    #[test]
    fn cluster_layout() {
        let d = Dialect::for_version("18.16.1", 30).on_cluster(Some("two".into()), "prof");
        let statements = v2(&d);
        let samples = statements
            .iter()
            .find(|s| s.starts_with("CREATE TABLE IF NOT EXISTS `prof`.samples_local"))
            .unwrap();
        assert!(samples.contains("ON CLUSTER `two`"), "{samples}");
        assert!(
            samples.contains("ReplicatedSummingMergeTree('/clickhouse/tables/{shard}/prof/samples_local', '{replica}', (count, value))"),
            "{samples}"
        );
        assert!(statements.iter().any(|s| s
            == "CREATE TABLE IF NOT EXISTS `prof`.samples ON CLUSTER `two` AS `prof`.samples_local ENGINE = Distributed(`two`, `prof`, samples_local, cityHash64(node))"));
        let view = statements.iter().find(|s| s.contains("samples_mv_local")).unwrap();
        assert!(
            view.contains("TO `prof`.samples_local") && view.contains("FROM `prof`.samples_input_local"),
            "{view}"
        );
        let input = statements
            .iter()
            .find(|s| s.starts_with("CREATE TABLE IF NOT EXISTS `prof`.samples_input_local"))
            .unwrap();
        assert!(input.contains("ENGINE = Null"), "{input}");
    }

    /// ADD COLUMN migrations split into their columns, on one server and on a cluster (where a
    /// shard without the migration's record runs it again, and must skip columns the first
    /// server's `ON CLUSTER` added); other statements are not touched.
    #[test]
    fn add_column_statements_split() {
        let alter = split_add_columns(
            "ALTER TABLE samples\n    ADD COLUMN executable String,\n    ADD COLUMN pod_uid LowCardinality(String)",
        )
        .unwrap();
        assert_eq!(
            (alter.table, alter.name, alter.on_cluster.as_str()),
            ("samples", "samples", "")
        );
        assert_eq!(alter.clauses, ["executable String", "pod_uid LowCardinality(String)"]);
        let on_cluster = Dialect::for_version("18.16.1", 30).on_cluster(Some("c".to_owned()), "prof");
        let rendered = on_cluster.render("ALTER TABLE {{local:alerts}} {{on_cluster}} ADD COLUMN node_wide String");
        let alter = split_add_columns(&rendered[0]).unwrap();
        assert_eq!(
            (alter.table, alter.name, alter.on_cluster.as_str()),
            ("`prof`.alerts_local", "alerts_local", "ON CLUSTER `c` ")
        );
        assert_eq!(alter.clauses, ["node_wide String"]);
        assert!(split_add_columns("CREATE TABLE x (a UInt8) ENGINE = Log").is_none());
    }

    /// Every migration renders in every dialect with no placeholder left.
    #[test]
    fn every_migration_renders() {
        for (version, name, sql) in MIGRATIONS {
            for v in ["18.16.1", "25.3.1"] {
                for cluster in [None, Some("c".to_owned())] {
                    let statements = Dialect::for_version(v, 7).on_cluster(cluster, "db").render(sql);
                    assert!(!statements.is_empty(), "{version} {name}");
                    assert!(
                        statements.iter().all(|s| !s.contains("{{")
                            && (s.starts_with("CREATE")
                                || s.starts_with("ALTER")
                                || s.starts_with("RENAME")
                                || s.starts_with("DROP TABLE IF EXISTS")
                                || s.starts_with("INSERT"))),
                        "{version} {name}: {statements:?}"
                    );
                }
            }
        }
    }
}
