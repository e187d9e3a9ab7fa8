//! The debug-info store in ClickHouse, shared by every server: which files were uploaded for a
//! build id (`debuginfo`), the functions they name (`debuginfo_symbols`), what names a stored
//! executable's frames (`debuginfo_digests`) and the agents' copies that contradict it
//! (`debuginfo_disputes`).

use std::collections::HashMap;
use std::time::Duration;

use super::lease::Lease;
use super::{queries, StorageError, Store};
use crate::clock::now_secs;

/// One run of code addresses with one name: a function, or the part of one before or after a
/// label inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// ELF virtual address of the first byte.
    pub address: u64,
    /// Bytes from `address` that carry this name; 0 means unknown, up to the next entry.
    pub size: u64,
    /// The demangled name.
    pub name: String,
}

/// A `PT_LOAD` segment: file offsets `[offset, offset + file_size)` hold ELF addresses
/// `[address, address + file_size)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// `p_offset`.
    pub offset: u64,
    /// `p_vaddr`.
    pub address: u64,
    /// `p_filesz`.
    pub file_size: u64,
}

/// The functions of one ELF file, sorted by address, and its load segments in program-header
/// order (empty for a separate debug file).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SymbolTable {
    /// Disjoint runs of code, by address.
    pub functions: Vec<Function>,
    /// `PT_LOAD` segments with file bytes.
    pub segments: Vec<Segment>,
}

impl SymbolTable {
    /// A table from its parts (as read back from storage), sorted by address.
    pub fn from_parts(mut functions: Vec<Function>, segments: Vec<Segment>) -> SymbolTable {
        // Stable, so entries stored at one address keep their stored order.
        functions.sort_by_key(|f| f.address);
        SymbolTable { functions, segments }
    }

    /// The name of the function at an ELF virtual address, if any: a binary search for the
    /// last entry at or below it, which names it unless it is sized and ends before it.
    pub fn name_at(&self, elf_address: u64) -> Option<&str> {
        let i = self
            .functions
            .partition_point(|f| f.address <= elf_address)
            .checked_sub(1)?;
        let f = &self.functions[i];
        (f.size == 0 || elf_address - f.address < f.size).then_some(f.name.as_str())
    }

    /// The ELF virtual address a file offset of the image is loaded at (the first load segment
    /// holding it, as blazesym translates). None for a separate debug file's table.
    pub fn address_of_file_offset(&self, file_offset: u64) -> Option<u64> {
        self.segments.iter().find_map(|s| {
            let delta = file_offset.checked_sub(s.offset)?;
            (delta < s.file_size).then(|| s.address.checked_add(delta)).flatten()
        })
    }
}

/// How long a server that stopped while storing a file holds back other uploads of its build id.
const DEBUGINFO_LEASE: Duration = Duration::from_secs(60);

/// How long [`Store::clear_orphan_symbols`] waits for its deletion to be done.
const ORPHANS_GONE_WITHIN: Duration = Duration::from_secs(60);

/// A stored file of a build id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredFile {
    /// 1 executable, 2 separate debug file (bimodal.v1.DebuginfoKind).
    pub kind: u8,
    pub sha256: [u8; 32],
    pub functions: u64,
    /// As uploaded, for people.
    pub file_name: String,
}

/// What names a stored executable's frames ([`bimodal_proto::NamingDigests`]), and whether an
/// operator kept it despite disputes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredDigests {
    pub digests: bimodal_proto::NamingDigests,
    pub kept: bool,
}

/// A build id whose stored executable agents' copies contradict, and no operator kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dispute {
    /// Lower-case hex.
    pub build_id: String,
    pub reports: u64,
    /// Unix seconds of the first and the last report.
    pub first: u32,
    pub last: u32,
    /// Up to 10 of those who reported: "address (token name)".
    pub reporters: Vec<String>,
    /// What differed in the last report.
    pub reason: String,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct DigestsRow {
    exported: [u8; 32],
    local: String,
    kept: u8,
}

#[derive(clickhouse::Row, serde::Serialize)]
struct DigestsWriteRow<'a> {
    build_id: &'a str,
    kind: u8,
    exported: [u8; 32],
    local: &'a str,
    kept: u8,
    updated: u32,
}

#[derive(clickhouse::Row, serde::Serialize)]
struct DisputeWriteRow<'a> {
    build_id: &'a str,
    time: u32,
    reporter: &'a str,
    reason: &'a str,
}

#[derive(clickhouse::Row, serde::Deserialize)]
pub(super) struct BuildIdRow {
    pub(super) build_id: String,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct DisputeRow {
    build_id: String,
    reports: u64,
    first: u32,
    last: u32,
    reporters: Vec<String>,
    reason: String,
}

/// How long [`Store::drop_debuginfo`] waits for its deletions to be done.
const DROPPED_WITHIN: Duration = Duration::from_secs(60);

#[derive(clickhouse::Row, serde::Deserialize)]
struct FileRow {
    build_id: String,
    kind: u8,
    sha256: [u8; 32],
    functions: u64,
    file_name: String,
}

#[derive(clickhouse::Row, serde::Serialize)]
struct FileWriteRow<'a> {
    build_id: &'a str,
    kind: u8,
    sha256: [u8; 32],
    size: u64,
    file_name: &'a str,
    functions: u64,
    segment_offsets: Vec<u64>,
    segment_addresses: Vec<u64>,
    segment_sizes: Vec<u64>,
    uploaded: u32,
}

#[derive(clickhouse::Row, serde::Serialize, serde::Deserialize)]
struct SymbolRow {
    build_id: String,
    kind: u8,
    address: u64,
    size: u64,
    name: String,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct SegmentsRow {
    segment_offsets: Vec<u64>,
    segment_addresses: Vec<u64>,
    segment_sizes: Vec<u64>,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct FunctionRow {
    address: u64,
    size: u64,
    name: String,
}

impl Store {
    /// The files stored for each of `build_ids` (hex).
    pub async fn debuginfo_files(
        &self,
        build_ids: &[String],
    ) -> Result<HashMap<String, Vec<StoredFile>>, StorageError> {
        let mut out: HashMap<String, Vec<StoredFile>> = HashMap::new();
        for chunk in build_ids.chunks(5000) {
            let rows = queries::debuginfo_files(chunk)
                .query(&self.client)
                .fetch_all::<FileRow>()
                .await
                .map_err(StorageError::query("look up stored debug info"))?;
            for r in rows {
                out.entry(r.build_id).or_default().push(StoredFile {
                    kind: r.kind,
                    sha256: r.sha256,
                    functions: r.functions,
                    file_name: r.file_name,
                });
            }
        }
        Ok(out)
    }

    /// Whether an agent has sent frames that point into the image of `build_id` (hex).
    pub async fn frames_seen_of(&self, build_id: &str) -> Result<bool, StorageError> {
        self.any_row("frames", "build_id", build_id, "look for frames of a build id")
            .await
    }

    /// The function table of one stored file.
    pub async fn debuginfo_table(&self, build_id: &str, kind: u8) -> Result<SymbolTable, StorageError> {
        let segments = queries::debuginfo_segments(build_id, kind)
            .query(&self.client)
            .fetch_optional::<SegmentsRow>()
            .await
            .map_err(StorageError::query("read stored segments"))?;
        let functions = queries::debuginfo_functions(build_id, kind)
            .query(&self.client)
            .fetch_all::<FunctionRow>()
            .await
            .map_err(StorageError::query("read stored symbols"))?;
        let segments = segments
            .map(|s| {
                (0..s.segment_offsets.len())
                    .map(|i| Segment {
                        offset: s.segment_offsets[i],
                        address: s.segment_addresses.get(i).copied().unwrap_or(0),
                        file_size: s.segment_sizes.get(i).copied().unwrap_or(0),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(SymbolTable::from_parts(
            functions
                .into_iter()
                .map(|f| Function {
                    address: f.address,
                    size: f.size,
                    name: f.name,
                })
                .collect(),
            segments,
        ))
    }

    /// Held while a server decides whether to store a file for `build_id` (hex) and stores it:
    /// ClickHouse has no compare-and-set, so without it two uploads of different content that
    /// arrive at two servers (or two streams of one) at once could both find nothing stored and
    /// both insert, mixing their symbols. Taking it costs a little over a second.
    pub async fn debuginfo_lease(&self, build_id: &str) -> Result<Lease, StorageError> {
        Lease::acquire(self.writer_client(), &format!("debuginfo:{build_id}"), DEBUGINFO_LEASE).await
    }

    /// Deletes symbol rows of `build_id`'s file of `kind` that no file row lists: those of a
    /// store interrupted between its symbols and its file row (a crash, ClickHouse going away).
    /// Symbols are keyed by address, not by content, so a later file of other content would
    /// otherwise mix with them. To be called under the build id's lease, when no file of `kind`
    /// is stored; returns how many rows there were, and waits (up to a minute) until they are
    /// gone, as the deletion is a mutation.
    pub async fn clear_orphan_symbols(&self, build_id: &str, kind: u8) -> Result<u64, StorageError> {
        #[derive(clickhouse::Row, serde::Deserialize)]
        struct Count {
            n: u64,
        }
        let count = || async {
            queries::debuginfo_symbol_rows(build_id, kind)
                .query(&self.client)
                .fetch_one::<Count>()
                .await
                .map(|c| c.n)
                .map_err(StorageError::query("count the symbols of a build id"))
        };
        let orphans = count().await?;
        if orphans == 0 {
            return Ok(0);
        }
        let dialect = &self.dialect;
        queries::delete_debuginfo_symbols(
            &dialect.qualified("debuginfo_symbols"),
            &dialect.on_cluster_clause(),
            build_id,
            kind,
        )
        .query(&self.client)
        .execute()
        .await
        .map_err(StorageError::query("delete orphan symbols"))?;
        let deadline = std::time::Instant::now() + ORPHANS_GONE_WITHIN;
        while count().await? > 0 {
            if std::time::Instant::now() > deadline {
                return Err(StorageError::Timeout(ORPHANS_GONE_WITHIN));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tracing::warn!(
            build_id,
            kind,
            rows = orphans,
            "deleted the symbols of an interrupted store"
        );
        Ok(orphans)
    }

    /// Stores a file's function table and naming digests: the symbols and digests first, the
    /// file's row last, so a file that is listed has all of them.
    #[allow(clippy::too_many_arguments)]
    pub async fn store_debuginfo(
        &self,
        build_id: &str,
        kind: u8,
        sha256: [u8; 32],
        size: u64,
        file_name: &str,
        table: &SymbolTable,
        digests: &bimodal_proto::NamingDigests,
    ) -> Result<(), StorageError> {
        self.store_digests(build_id, kind, digests, false).await?;
        let client = self.writer_client();
        let err = StorageError::insert;
        let mut insert = client
            .insert::<SymbolRow>("debuginfo_symbols")
            .await
            .map_err(err("debuginfo_symbols"))?;
        for f in &table.functions {
            let row = SymbolRow {
                build_id: build_id.to_owned(),
                kind,
                address: f.address,
                size: f.size,
                name: f.name.clone(),
            };
            insert.write(&row).await.map_err(err("debuginfo_symbols"))?;
        }
        insert.end().await.map_err(err("debuginfo_symbols"))?;
        let row = FileWriteRow {
            build_id,
            kind,
            sha256,
            size,
            file_name,
            functions: table.functions.len() as u64,
            segment_offsets: table.segments.iter().map(|s| s.offset).collect(),
            segment_addresses: table.segments.iter().map(|s| s.address).collect(),
            segment_sizes: table.segments.iter().map(|s| s.file_size).collect(),
            uploaded: now_secs(),
        };
        self.insert_row::<FileWriteRow<'static>>("debuginfo", &row).await
    }
}

impl Store {
    /// The naming digests of `build_id`'s stored executable; `None` when none is stored, or it
    /// was stored before digests were (schema 18).
    pub async fn debuginfo_digests(&self, build_id: &str) -> Result<Option<StoredDigests>, StorageError> {
        let row = queries::debuginfo_digests(build_id)
            .query(&self.client)
            .fetch_optional::<DigestsRow>()
            .await
            .map_err(StorageError::query("read the digests of a stored executable"))?;
        Ok(row.map(|r| StoredDigests {
            digests: bimodal_proto::NamingDigests {
                exported: r.exported,
                local: bimodal_proto::unhex(&r.local).and_then(|b| <[u8; 32]>::try_from(b).ok()),
            },
            kept: r.kept > 0,
        }))
    }

    /// Writes the naming digests of `build_id`'s file of `kind` (before its `debuginfo` row), or
    /// marks them kept by an operator.
    pub async fn store_digests(
        &self,
        build_id: &str,
        kind: u8,
        digests: &bimodal_proto::NamingDigests,
        kept: bool,
    ) -> Result<(), StorageError> {
        let local = digests.local.map(|d| bimodal_proto::hex(&d)).unwrap_or_default();
        let row = DigestsWriteRow {
            build_id,
            kind,
            exported: digests.exported,
            local: &local,
            kept: u8::from(kept),
            updated: now_secs(),
        };
        self.insert_row::<DigestsWriteRow<'static>>("debuginfo_digests", &row)
            .await
    }

    /// Records that `reporter`'s copy of `build_id` contradicts its stored executable.
    pub async fn record_dispute(&self, build_id: &str, reporter: &str, reason: &str) -> Result<(), StorageError> {
        let row = DisputeWriteRow {
            build_id,
            time: now_secs(),
            reporter,
            reason,
        };
        self.insert_row::<DisputeWriteRow<'static>>("debuginfo_disputes", &row)
            .await
    }

    /// Inserts one row into `table`.
    async fn insert_row<T: clickhouse::RowWrite>(
        &self,
        table: &'static str,
        row: &T::Value<'_>,
    ) -> Result<(), StorageError> {
        let err = StorageError::insert;
        let mut insert = self.writer_client().insert::<T>(table).await.map_err(err(table))?;
        insert.write(row).await.map_err(err(table))?;
        insert.end().await.map_err(err(table))
    }

    /// Of `build_ids` (hex), those disputed and not kept: their names are withheld. (Two reads,
    /// not a subquery: on a cluster both are Distributed tables.)
    pub async fn disputed(&self, build_ids: &[String]) -> Result<std::collections::HashSet<String>, StorageError> {
        let mut out = std::collections::HashSet::new();
        for chunk in build_ids.chunks(5000) {
            let disputed: Vec<String> = queries::debuginfo_disputed(chunk)
                .query(&self.client)
                .fetch_all::<BuildIdRow>()
                .await
                .map_err(StorageError::query("look up disputed build ids"))?
                .into_iter()
                .map(|r| r.build_id)
                .collect();
            if disputed.is_empty() {
                continue;
            }
            let kept: std::collections::HashSet<String> = queries::debuginfo_kept(&disputed)
                .query(&self.client)
                .fetch_all::<BuildIdRow>()
                .await
                .map_err(StorageError::query("look up kept build ids"))?
                .into_iter()
                .map(|r| r.build_id)
                .collect();
            out.extend(disputed.into_iter().filter(|b| !kept.contains(b)));
        }
        Ok(out)
    }

    /// Every build id disputed and not kept.
    pub async fn disputes(&self) -> Result<Vec<Dispute>, StorageError> {
        let rows = queries::debuginfo_disputes()
            .query(&self.client)
            .fetch_all::<DisputeRow>()
            .await
            .map_err(StorageError::query("list disputed build ids"))?;
        let ids: Vec<String> = rows.iter().map(|r| r.build_id.clone()).collect();
        let open = self.disputed(&ids).await?;
        Ok(rows
            .into_iter()
            .filter(|r| open.contains(&r.build_id))
            .map(|r| Dispute {
                build_id: r.build_id,
                reports: r.reports,
                first: r.first,
                last: r.last,
                reporters: r.reporters,
                reason: r.reason,
            })
            .collect())
    }

    /// Deletes every file of `build_id`, its symbols, digests and disputes, and waits (up to a
    /// minute) until no file of it is listed: the next upload of it is stored as the first.
    pub async fn drop_debuginfo(&self, build_id: &str) -> Result<(), StorageError> {
        let ids = [build_id.to_owned()];
        self.delete_debuginfo(&ids).await?;
        let deadline = std::time::Instant::now() + DROPPED_WITHIN;
        while self.debuginfo_files(&ids).await?.contains_key(build_id)
            || self.debuginfo_digests(build_id).await?.is_some()
        {
            if std::time::Instant::now() > deadline {
                return Err(StorageError::Timeout(DROPPED_WITHIN));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }
}

impl Store {
    /// Deletes every row of `build_ids` from [`DEBUGINFO_TABLES`], the file rows first (a build
    /// id listed is one whose symbols are all there); mutations, done shortly after.
    pub(super) async fn delete_debuginfo(&self, build_ids: &[String]) -> Result<(), StorageError> {
        let dialect = &self.dialect;
        for table in DEBUGINFO_TABLES {
            queries::delete_build_ids(&dialect.qualified(table), &dialect.on_cluster_clause(), build_ids)
                .query(&self.client)
                .execute()
                .await
                .map_err(StorageError::query("delete debug info"))?;
        }
        Ok(())
    }
}

/// The tables holding a build id's debug info, the file rows first.
pub const DEBUGINFO_TABLES: [&str; 4] = [
    "debuginfo",
    "debuginfo_symbols",
    "debuginfo_digests",
    "debuginfo_disputes",
];
