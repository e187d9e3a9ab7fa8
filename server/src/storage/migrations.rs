//! Numbered SQL migrations, applied in order once each and recorded in `schema_migrations`.
//!
//! One file serves every ClickHouse version: the server's version picks the dialect, which
//! fills `{{placeholders}}` and keeps `--modern:` or `--legacy:` lines.

use clickhouse::Client;

use super::StorageError;

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
];

/// What the ClickHouse server supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dialect {
    /// ClickHouse 23 or later: LowCardinality, CODEC, TTL, RowBinaryWithNamesAndTypes.
    pub modern: bool,
    /// Days samples are kept, where TTL exists.
    pub retention_days: u32,
}

impl Dialect {
    /// The dialect of a server that reports `version` (e.g. `18.16.1`, `24.8.4.13`).
    pub fn for_version(version: &str, retention_days: u32) -> Dialect {
        let major: u32 = version.split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0);
        Dialect {
            modern: major >= 23,
            retention_days,
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
        let fill = |name: &str| -> String {
            match (name, self.modern) {
                ("low_cardinality_string", true) => "LowCardinality(String)".into(),
                ("low_cardinality_string", false) => "String".into(),
                ("time_codec", true) => "CODEC(DoubleDelta, ZSTD(1))".into(),
                ("codec", true) => "CODEC(T64, ZSTD(1))".into(),
                ("time_codec" | "codec", false) => String::new(),
                ("retention_days", _) => self.retention_days.to_string(),
                (other, _) => panic!("migration uses unknown placeholder {{{{{other}}}}}"),
            }
        };
        let mut rendered = String::new();
        let mut rest = text.as_str();
        while let Some(start) = rest.find("{{") {
            let end = rest[start..].find("}}").expect("placeholder closed") + start;
            rendered.push_str(&rest[..start]);
            rendered.push_str(&fill(&rest[start + 2..end]));
            rest = &rest[end + 2..];
        }
        rendered.push_str(rest);
        rendered
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

/// Every migration's statements in `dialect`, in order.
pub fn all_statements(dialect: &Dialect) -> Vec<String> {
    MIGRATIONS.iter().flat_map(|(_, _, sql)| dialect.render(sql)).collect()
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
    let Some((table, clauses)) = split_add_columns(statement) else {
        return Ok(Some(statement.to_owned()));
    };
    let existing: Vec<String> = client
        .query("SELECT name FROM system.columns WHERE database = currentDatabase() AND table = ?")
        .bind(table)
        .fetch_all::<ColumnName>()
        .await
        .map_err(StorageError::query("read the columns of a table"))?
        .into_iter()
        .map(|c| c.name)
        .collect();
    let missing: Vec<&str> = clauses
        .into_iter()
        .filter(|c| !existing.iter().any(|e| c.split_whitespace().next() == Some(e)))
        .collect();
    if missing.is_empty() {
        return Ok(None);
    }
    let adds: Vec<String> = missing.iter().map(|c| format!("ADD COLUMN {c}")).collect();
    Ok(Some(format!("ALTER TABLE {table} {}", adds.join(", "))))
}

/// The table and the `name type` clauses of an `ALTER TABLE t ADD COLUMN a T, ADD COLUMN b U`.
fn split_add_columns(statement: &str) -> Option<(&str, Vec<&str>)> {
    let rest = statement.trim().strip_prefix("ALTER TABLE ")?;
    let (table, rest) = rest.split_once(char::is_whitespace)?;
    let clauses: Vec<&str> = rest
        .split("ADD COLUMN")
        .map(|c| c.trim().trim_end_matches(',').trim())
        .filter(|c| !c.is_empty())
        .collect();
    (rest.trim_start().starts_with("ADD COLUMN") && !clauses.is_empty()).then_some((table, clauses))
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct Applied {
    version: u32,
}

/// Applies every migration not yet recorded.
pub async fn apply(client: &Client, dialect: &Dialect) -> Result<Vec<u32>, StorageError> {
    client
        .query("CREATE TABLE IF NOT EXISTS schema_migrations (version UInt32, name String, applied DateTime) ENGINE = MergeTree ORDER BY version")
        .execute()
        .await
        .map_err(StorageError::query("create schema_migrations"))?;
    let applied: Vec<u32> = client
        .query("SELECT version FROM schema_migrations")
        .fetch_all::<Applied>()
        .await
        .map_err(StorageError::query("read schema_migrations"))?
        .into_iter()
        .map(|a| a.version)
        .collect();
    let mut now_applied = Vec::new();
    for &(version, name, sql) in MIGRATIONS {
        if applied.contains(&version) {
            continue;
        }
        for statement in dialect.render(sql) {
            let Some(statement) = without_existing_columns(client, &statement).await? else {
                continue;
            };
            client
                .query(&statement)
                .execute()
                .await
                .map_err(StorageError::query("apply a migration"))?;
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

    /// Legacy servers get plain types and no TTL; modern ones get LowCardinality, codecs and TTL.
    #[test]
    fn dialects_render_differently() {
        let legacy = Dialect::for_version("18.16.1", 30).render(MIGRATIONS[0].2).join(";\n");
        assert!(!legacy.contains("LowCardinality") && !legacy.contains("TTL") && !legacy.contains("CODEC"));
        assert!(!legacy.contains("{{"));
        let modern = Dialect::for_version("24.8.4.13", 30)
            .render(MIGRATIONS[0].2)
            .join(";\n");
        assert!(modern.contains("node LowCardinality(String)"));
        assert!(modern.contains("TTL time + INTERVAL 30 DAY"));
        assert_eq!(Dialect::for_version("24.8.4.13", 30).render(MIGRATIONS[0].2).len(), 3);
    }

    /// ADD COLUMN migrations split into their columns; other statements are not touched.
    #[test]
    fn add_column_statements_split() {
        let (table, clauses) = split_add_columns(
            "ALTER TABLE samples\n    ADD COLUMN executable String,\n    ADD COLUMN pod_uid LowCardinality(String)",
        )
        .unwrap();
        assert_eq!(table, "samples");
        assert_eq!(clauses, ["executable String", "pod_uid LowCardinality(String)"]);
        assert!(split_add_columns("CREATE TABLE x (a UInt8) ENGINE = Log").is_none());
    }

    /// Every migration renders in both dialects with no placeholder left.
    #[test]
    fn every_migration_renders() {
        for (version, name, sql) in MIGRATIONS {
            for v in ["18.16.1", "25.3.1"] {
                let statements = Dialect::for_version(v, 7).render(sql);
                assert!(!statements.is_empty(), "{version} {name}");
                assert!(
                    statements
                        .iter()
                        .all(|s| !s.contains("{{") && (s.starts_with("CREATE") || s.starts_with("ALTER"))),
                    "{version} {name}: {statements:?}"
                );
            }
        }
    }
}
