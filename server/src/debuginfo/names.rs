//! Names for frames agents sent as (build id, address): function tables loaded from the shared
//! store in ClickHouse on first use and kept in a cache bounded in bytes.
//!
//! Every server reads the same tables, so a debug file uploaded to one names frames on all of
//! them: a build id with nothing stored is asked again after [`RECHECK_MISSING`], a named one
//! after [`RECHECK_NAMED`] (a debug file may have come since, or an agent disputed the
//! executable at another server). A disputed build id names nothing until an operator resolves
//! it, and is asked again after [`RECHECK_MISSING`].
//! Names are looked up when frames are read, never written with stacks, so an upload names
//! frames stored before it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bimodal_proto::v1;

use super::symtab::SymbolTable;
use crate::storage::{StorageError, Store};

/// Build ids of one batch whose tables are loaded at most.
pub const MAX_TABLES_PER_BATCH: usize = 2048;

/// How soon a build id with no symbols stored is looked up again.
pub const RECHECK_MISSING: Duration = Duration::from_secs(30);
/// How soon a named build id is looked up again: one named by its executable's symbols may have
/// a debug file since, and either may have been disputed at another server.
pub const RECHECK_NAMED: Duration = Duration::from_secs(300);

/// A build id's best table (the debug file's, else the executable's), or none.
struct Entry {
    kind: u8,
    table: Option<Arc<SymbolTable>>,
    loaded: Instant,
    /// Read while a file was stored here for some build id: maybe from before it, so looked up
    /// again on the next use.
    unsettled: bool,
}

impl Entry {
    fn fresh(&self) -> bool {
        if self.unsettled {
            return false;
        }
        let age = self.loaded.elapsed();
        match self.table {
            None => age < RECHECK_MISSING,
            Some(_) => age < RECHECK_NAMED,
        }
    }

    fn bytes(&self) -> u64 {
        self.table.as_ref().map_or(64, |t| {
            t.functions.iter().map(|f| f.name.len() as u64 + 48).sum::<u64>() + 64
        })
    }
}

#[derive(Clone)]
struct ByBytes;

impl quick_cache::Weighter<String, Arc<Entry>> for ByBytes {
    fn weight(&self, key: &String, value: &Arc<Entry>) -> u64 {
        key.len() as u64 + value.bytes()
    }
}

/// The function tables of build ids, loaded on demand.
pub struct Names {
    store: Arc<Store>,
    cache: quick_cache::sync::Cache<String, Arc<Entry>, ByBytes>,
    /// Files stored here so far ([`Names::invalidate`]). A load that read the store while one
    /// was stored may have missed it, and its entries would have outlived the invalidation: a
    /// batch read "nothing stored" for the workload while its agent's upload landed, and every
    /// batch of the next 30 s ([`RECHECK_MISSING`]) was written unnamed.
    stored: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Names {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Names").field("cached", &self.cache.len()).finish()
    }
}

impl Names {
    /// A cache holding at most `max_bytes` of function tables.
    pub fn new(store: Arc<Store>, max_bytes: u64) -> Names {
        Names {
            store,
            cache: quick_cache::sync::Cache::with_weighter(1024, max_bytes.max(1 << 20), ByBytes),
            stored: Default::default(),
        }
    }

    /// Loads the tables of build ids (hex) that are not cached or are due a recheck.
    pub async fn load(&self, build_ids: &[String]) -> Result<(), StorageError> {
        let mut due: Vec<String> = build_ids
            .iter()
            .filter(|b| !self.cache.get(*b).is_some_and(|e| e.fresh()))
            .cloned()
            .collect();
        due.sort_unstable();
        due.dedup();
        if due.is_empty() {
            return Ok(());
        }
        let stored_before = self.stored.load(std::sync::atomic::Ordering::Acquire);
        let files = self.store.debuginfo_files(&due).await?;
        let stored: Vec<String> = due.iter().filter(|b| files.contains_key(*b)).cloned().collect();
        let disputed = match stored.is_empty() {
            true => Default::default(),
            false => self.store.disputed(&stored).await?,
        };
        for build_id in due {
            // The debug file names more (local functions) than the executable's symbols. A
            // disputed build id names nothing, as if nothing were stored, until it is resolved.
            let best = files
                .get(&build_id)
                .filter(|_| !disputed.contains(&build_id))
                .and_then(|f| f.iter().map(|f| f.kind).max_by_key(|&k| (k == 2, k)));
            let cached = self.cache.get(&build_id);
            let entry = match best {
                Some(kind) if cached.as_ref().is_some_and(|e| e.kind == kind && e.table.is_some()) => Entry {
                    kind,
                    table: cached.and_then(|e| e.table.clone()),
                    loaded: Instant::now(),
                    unsettled: false,
                },
                Some(kind) => Entry {
                    kind,
                    table: Some(Arc::new(self.store.debuginfo_table(&build_id, kind).await?)),
                    loaded: Instant::now(),
                    unsettled: false,
                },
                None => Entry {
                    kind: 0,
                    table: None,
                    loaded: Instant::now(),
                    unsettled: false,
                },
            };
            let unsettled = self.stored.load(std::sync::atomic::Ordering::Acquire) != stored_before;
            self.cache.insert(build_id, Arc::new(Entry { unsettled, ..entry }));
        }
        Ok(())
    }

    /// Loads the tables the unnamed frames of a wire batch need, of its first
    /// [`MAX_TABLES_PER_BATCH`] build ids: a batch naming more (no node maps that many images)
    /// does not make the server read a table per id while the batch waits; its other frames stay
    /// unnamed in the per-function rows (flame graphs name them when they are read).
    pub async fn load_for(&self, frames: &[v1::Frame]) -> Result<(), StorageError> {
        // Every frame of the batch passes here: a fast hash (SipHash cost 2% of ingest's CPU).
        let mut seen: foldhash::HashSet<&[u8]> = foldhash::HashSet::default();
        let ids: Vec<String> = frames
            .iter()
            .filter(|f| !f.build_id.is_empty() && seen.insert(&f.build_id))
            .take(MAX_TABLES_PER_BATCH)
            .map(|f| bimodal_profile::hex(&f.build_id))
            .collect();
        if ids.len() == MAX_TABLES_PER_BATCH {
            tracing::warn!(
                "a batch names {MAX_TABLES_PER_BATCH} images or more; the functions of any beyond those stay unnamed in its rows"
            );
        }
        self.load(&ids).await
    }

    /// Names the frames of a profile read from storage that have a build id; a frame no table
    /// names keeps the name its agent gave it, if any.
    pub async fn name_profile(&self, profile: &mut bimodal_profile::Profile) -> Result<(), StorageError> {
        let ids: Vec<String> = profile
            .frames
            .iter()
            .filter(|f| !f.build_id.is_empty())
            .map(|f| f.build_id.clone())
            .collect();
        self.load(&ids).await?;
        for f in profile.frames.iter_mut().filter(|f| !f.build_id.is_empty()) {
            if let Some(name) = self.name(&f.build_id, f.elf_address, f.file_offset) {
                f.function = name;
            }
        }
        Ok(())
    }

    /// Forgets a build id's table (a file was uploaded for it here).
    pub fn invalidate(&self, build_id: &str) {
        self.stored.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.cache.remove(build_id);
    }
}

impl FrameNamer for Names {
    fn name(&self, build_id: &str, elf_address: u64, file_offset: u64) -> Option<String> {
        let entry = self.cache.get(build_id)?;
        let table = entry.table.as_ref()?;
        let address = match elf_address {
            0 => table.address_of_file_offset(file_offset)?,
            a => a,
        };
        table.name_at(address).map(str::to_owned)
    }
}

/// Names frames of images with a build id from uploaded symbols.
pub trait FrameNamer {
    /// The function at a frame of image `build_id` (hex), by ELF address (0: unknown) or else
    /// by file offset.
    fn name(&self, build_id: &str, elf_address: u64, file_offset: u64) -> Option<String>;
}

/// A namer that knows nothing (tests, and frames no upload covers).
#[derive(Debug, Default)]
pub struct NoNames;

impl FrameNamer for NoNames {
    fn name(&self, _: &str, _: u64, _: u64) -> Option<String> {
        None
    }
}
