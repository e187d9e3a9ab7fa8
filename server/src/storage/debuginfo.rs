//! The debug-info store in ClickHouse, shared by every server: which files were uploaded for a
//! build id (`debuginfo`) and the functions they name (`debuginfo_symbols`).

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
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct FileRow {
    build_id: String,
    kind: u8,
    sha256: [u8; 32],
    functions: u64,
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

    /// Stores a file's function table: the symbols first, the file's row last, so a file that
    /// is listed has all its symbols.
    pub async fn store_debuginfo(
        &self,
        build_id: &str,
        kind: u8,
        sha256: [u8; 32],
        size: u64,
        file_name: &str,
        table: &SymbolTable,
    ) -> Result<(), StorageError> {
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
        let mut insert = client
            .insert::<FileWriteRow<'static>>("debuginfo")
            .await
            .map_err(err("debuginfo"))?;
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
        insert.write(&row).await.map_err(err("debuginfo"))?;
        insert.end().await.map_err(err("debuginfo"))
    }
}
