//! Puts unwind tables where the programs unwind from (docs/design/014): each image's rows in
//! `unwind_rows`, once for every process that maps it, and each process's executable mappings
//! with where their rows are in `unwind_processes`; then marks the process `PROCESS_TABLES` in
//! `sampled_processes`, and its samples are unwound in the kernel from then on.
//!
//! Rows are allocated first-fit from free ranges. An image stays loaded while a process maps it,
//! and after that until its room is wanted (the least recently used first): a job that restarts
//! every second finds its tables in place.

use std::collections::HashMap;
use std::ops::{ControlFlow, Range};
use std::path::{Path, PathBuf};
use std::time::Instant;

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::profile::types::{process_state, unwind_mapping, unwind_process, unwind_row, unwind_rule};
use crate::placement::Mapping;
use crate::unwind::{self, table};

/// An image by the (device, inode) of its file; the vDSO as ("[vdso]", 0).
type ImageKey = (String, u64);

/// An image's rows in `unwind_rows`.
#[derive(Debug)]
struct Loaded {
    /// Where its rows are; empty when it has none (no `.eh_frame`, unreadable, refused).
    rows: Range<u32>,
    segments: Vec<crate::elf::Segment>,
    /// Processes whose entry references it.
    users: u32,
    used: Instant,
}

/// What a process's entry was written from: the images it references (each counted in their
/// `users`), the address space and the executable ranges it covers.
type Entry = (Vec<ImageKey>, u64, Vec<Range<u64>>);

/// What the tables hold and what they could not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Images compiled and loaded since the start.
    pub images_loaded: u64,
    /// Images refused: more rows than are free, or unreadable.
    pub images_refused: u64,
    /// Rows in use now.
    pub rows: u64,
    /// Processes unwound in the kernel now.
    pub processes: u64,
}

/// Writes the unwind tables of noticed processes into the programs' maps.
pub struct TableLoader {
    rows_map: MapHandle,
    processes_map: MapHandle,
    sampled_processes: MapHandle,
    capacity: u32,
    /// Free row ranges, sorted, none touching another.
    free: Vec<Range<u32>>,
    images: HashMap<ImageKey, Loaded>,
    /// What each process's entry was written from, by tgid.
    users: HashMap<u32, Entry>,
    pub stats: TableStats,
}

impl std::fmt::Debug for TableLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableLoader")
            .field("capacity", &self.capacity)
            .field("stats", &self.stats)
            .finish()
    }
}

fn row_bytes(row: &table::Row) -> unwind_row {
    let (rule, cfa_offset) = match row.rule {
        table::Rule::FramePointer => (unwind_rule::UNWIND_RULE_FRAME_POINTER, 0),
        table::Rule::CfaRsp(offset) => (unwind_rule::UNWIND_RULE_CFA_RSP, offset),
        table::Rule::CfaRbp(offset) => (unwind_rule::UNWIND_RULE_CFA_RBP, offset),
        table::Rule::Plt(threshold) => (unwind_rule::UNWIND_RULE_PLT, i16::from(threshold)),
        table::Rule::End => (unwind_rule::UNWIND_RULE_END, 0),
    };
    unwind_row {
        pc: row.pc,
        rule: rule.0 as u8,
        cfa_offset,
        rbp_offset: row.rbp_offset,
        ..Default::default()
    }
}

/// Adds mapping `m` with its image's `rows` to a process's entry; false when the entry is full.
fn push(entry: &mut unwind_process, m: &Mapping, bias: u64, rows: Range<u32>) -> bool {
    let Some(slot) = entry.mappings.get_mut(entry.len as usize) else {
        return false;
    };
    *slot = unwind_mapping {
        start: m.start,
        end: m.end,
        bias,
        rows_start: rows.start,
        rows_len: rows.len() as u32,
    };
    entry.len += 1;
    true
}

/// The bytes of a plain C value, as maps take them.
fn bytes_of<T: plain::Plain>(value: &T) -> &[u8] {
    // SAFETY: `T` is a plain C struct of integers (see the `Plain` impls in the parent module):
    // all of its bytes are initialized and any of them may be read.
    unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

impl TableLoader {
    /// A loader over the maps of a loaded skeleton; `capacity` is `unwind_rows`' entries.
    pub fn new(rows_map: MapHandle, processes_map: MapHandle, sampled_processes: MapHandle, capacity: u32) -> Self {
        TableLoader {
            rows_map,
            processes_map,
            sampled_processes,
            capacity,
            free: std::iter::once(0..capacity).collect(),
            images: HashMap::new(),
            users: HashMap::new(),
            stats: TableStats::default(),
        }
    }

    /// Writes the tables of process `tgid`, whose executable `mappings` were just read, for the
    /// address space `mm` the programs saw it in (an entry applies to that one only: mappings
    /// read across an exec are caught there), and tells the programs to unwind it in the kernel.
    /// False when the process is gone.
    pub fn load(&mut self, tgid: u32, mm: u64, mappings: &[Mapping]) -> bool {
        let root = PathBuf::from(format!("/proc/{tgid}/root"));
        let mut sorted: Vec<&Mapping> = mappings.iter().filter(|m| m.is_executable()).collect();
        sorted.sort_by_key(|m| m.start);
        let ranges: Vec<Range<u64>> = sorted.iter().map(|m| m.start..m.end).collect();
        let unchanged = self
            .users
            .get(&tgid)
            .is_some_and(|(_, had_mm, had)| *had_mm == mm && *had == ranges);
        // Read again (after a miss, or on schedule) and nothing changed, and the programs still
        // have the entry (an exec or a reused pid with the very same ranges removed it).
        if unchanged
            && matches!(
                self.processes_map.lookup(&tgid.to_ne_bytes(), MapFlags::ANY),
                Ok(Some(_))
            )
        {
            return true;
        }
        let mut entry = unwind_process {
            mm,
            ..Default::default()
        };
        let mut keys = Vec::new();
        for m in sorted {
            let key = match m.path.as_deref() {
                Some("[vdso]") => ("[vdso]".to_string(), 0),
                Some(path) if path.starts_with('/') && m.inode != 0 => (m.device.clone(), m.inode),
                _ => {
                    // Anonymous code (JIT) has no table: frame pointers there. It is in the
                    // entry so that its addresses are not taken for code loaded since.
                    if !push(&mut entry, m, 0, 0..0) {
                        break;
                    }
                    continue;
                }
            };
            if !self.images.contains_key(&key) {
                let loaded = self.compile(&key, m, &root);
                self.images.insert(key.clone(), loaded);
            }
            let loaded = self.images.get_mut(&key).expect("inserted above");
            loaded.used = Instant::now();
            let Some(bias) = table::Table::bias_of(&loaded.segments, m.start, m.offset) else {
                continue;
            };
            if !push(&mut entry, m, bias, loaded.rows.clone()) {
                break;
            }
            // Held from here on: compiling the process's next image must not make room from it.
            loaded.users += 1;
            keys.push(key);
        }
        if let Some((old, _, _)) = self.users.insert(tgid, (keys, mm, ranges)) {
            self.release(&old);
        }
        let written = self
            .processes_map
            .update(&tgid.to_ne_bytes(), bytes_of(&entry), MapFlags::ANY)
            .and_then(|()| {
                // Only a process still there: one that exited meanwhile was removed by the programs.
                self.sampled_processes.update(
                    &tgid.to_ne_bytes(),
                    &[process_state::PROCESS_TABLES.0 as u8],
                    MapFlags::EXIST,
                )
            });
        if let Err(e) = written {
            tracing::debug!(tgid, "process gone before its tables were written: {e}");
            self.forget(tgid);
            return false;
        }
        self.stats.processes = self.users.len() as u64;
        true
    }

    /// Forgets a process: its entry, and its hold on its images.
    fn forget(&mut self, tgid: u32) {
        let _ = self.processes_map.delete(&tgid.to_ne_bytes());
        if let Some((keys, _, _)) = self.users.remove(&tgid) {
            self.release(&keys);
        }
        self.stats.processes = self.users.len() as u64;
    }

    fn release(&mut self, keys: &[ImageKey]) {
        for key in keys {
            if let Some(loaded) = self.images.get_mut(key) {
                loaded.users = loaded.users.saturating_sub(1);
            }
        }
    }

    /// Forgets processes that have exited (the programs removed their entries at exit).
    pub fn sweep(&mut self, mut alive: impl FnMut(u32) -> bool) {
        let gone: Vec<u32> = self.users.keys().copied().filter(|&t| !alive(t)).collect();
        for tgid in gone {
            self.forget(tgid);
        }
        // Images without rows are compiled again when next mapped (one refused for room may fit).
        self.images.retain(|_, l| l.users > 0 || !l.rows.is_empty());
    }

    /// Compiles and writes the table of the image mapped by `m`: counted first, then written in
    /// chunks as it is compiled again, so no image's whole table is held in the agent.
    fn compile(&mut self, key: &ImageKey, m: &Mapping, root: &Path) -> Loaded {
        let mut loaded = Loaded {
            rows: 0..0,
            segments: Vec::new(),
            users: 0,
            used: Instant::now(),
        };
        let path = root.join(m.path.as_deref().unwrap_or_default().trim_start_matches('/'));
        let mapped;
        let bytes: &[u8] = if key.0 == "[vdso]" {
            match unwind::vdso_bytes() {
                Some(bytes) => bytes,
                None => return loaded,
            }
        } else {
            match unwind::map_image(&path, m.inode) {
                Ok(map) => {
                    mapped = map;
                    &mapped
                }
                Err(e) => {
                    tracing::debug!(image = ?m.path, "no unwind table: {e}");
                    self.stats.images_refused += 1;
                    return loaded;
                }
            }
        };
        let max_rows = self.capacity.min(1 << 24) as usize;
        let counted = table::Compiler::new(bytes).and_then(|c| Ok((c.count(max_rows)?, c)));
        let (len, compiler) = match counted {
            Ok(counted) => counted,
            Err(e) => {
                tracing::debug!(image = ?m.path, "no unwind table: {e}");
                self.stats.images_refused += 1;
                return loaded;
            }
        };
        loaded.segments = compiler.segments.clone();
        if len == 0 {
            return loaded;
        }
        let Some(rows) = self.allocate(len as u32) else {
            tracing::debug!(image = ?m.path, rows = len, "no room for its unwind table");
            self.stats.images_refused += 1;
            return loaded;
        };
        if let Err(e) = self.write(rows.clone(), &compiler) {
            tracing::warn!(image = ?m.path, "cannot write its unwind table: {e}");
            self.free_range(rows);
            self.stats.images_refused += 1;
            return loaded;
        }
        self.stats.images_loaded += 1;
        self.stats.rows += rows.len() as u64;
        loaded.rows = rows;
        loaded
    }

    /// Writes the rows `compiler` produces into `range`, in batches.
    fn write(&self, range: Range<u32>, compiler: &table::Compiler<'_>) -> Result<(), String> {
        const BATCH: usize = 16384;
        let value_size = std::mem::size_of::<unwind_row>();
        let mut keys = Vec::with_capacity(BATCH * 4);
        let mut values = Vec::with_capacity(BATCH * value_size);
        let mut next = range.start;
        let mut failed = None;
        let flush = |keys: &mut Vec<u8>, values: &mut Vec<u8>| -> Result<(), libbpf_rs::Error> {
            let count = (keys.len() / 4) as u32;
            if count > 0 {
                self.rows_map
                    .update_batch(keys, values, count, MapFlags::ANY, MapFlags::ANY)?;
            }
            keys.clear();
            values.clear();
            Ok(())
        };
        compiler.rows(|row| {
            // The image cannot have changed since it was counted (it is mapped), but never
            // write past the range allocated.
            if next >= range.end {
                return ControlFlow::Break(());
            }
            keys.extend_from_slice(&next.to_ne_bytes());
            values.extend_from_slice(bytes_of(&row_bytes(&row)));
            next += 1;
            if keys.len() / 4 == BATCH {
                if let Err(e) = flush(&mut keys, &mut values) {
                    failed = Some(e);
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        })?;
        if let Some(e) = failed {
            return Err(e.to_string());
        }
        flush(&mut keys, &mut values).map_err(|e| e.to_string())?;
        if next != range.end {
            return Err(format!("{} rows written of {}", next - range.start, range.len()));
        }
        Ok(())
    }

    /// A free range of `len` rows, making room from images no process maps (the least recently
    /// used first) when there is none.
    fn allocate(&mut self, len: u32) -> Option<Range<u32>> {
        loop {
            if let Some(i) = self.free.iter().position(|r| r.len() as u32 >= len) {
                let range = self.free[i].start..self.free[i].start + len;
                self.free[i].start += len;
                if self.free[i].is_empty() {
                    self.free.remove(i);
                }
                return Some(range);
            }
            let unused = self
                .images
                .iter()
                .filter(|(_, l)| l.users == 0 && !l.rows.is_empty())
                .min_by_key(|(_, l)| l.used)
                .map(|(k, _)| k.clone())?;
            let loaded = self.images.remove(&unused).expect("found above");
            self.stats.rows -= loaded.rows.len() as u64;
            self.free_range(loaded.rows);
        }
    }

    fn free_range(&mut self, range: Range<u32>) {
        let at = self.free.partition_point(|r| r.start < range.start);
        self.free.insert(at, range);
        // merge with the neighbours it touches
        if at + 1 < self.free.len() && self.free[at].end == self.free[at + 1].start {
            self.free[at].end = self.free[at + 1].end;
            self.free.remove(at + 1);
        }
        if at > 0 && self.free[at - 1].end == self.free[at].start {
            self.free[at - 1].end = self.free[at].end;
            self.free.remove(at);
        }
    }
}
