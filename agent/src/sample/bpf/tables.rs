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

use std::time::Instant;

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::profile::types::{process_state, unwind_mapping, unwind_process, unwind_row, unwind_rule};
use crate::host::maps::Mapping;
use crate::sample::unwind::{self, table};

/// An image by the (device, inode) of its file; the vDSO as ("[vdso]", 0).
type ImageKey = (String, u64);

/// An image's rows in `unwind_rows`.
#[derive(Debug)]
struct Loaded {
    /// Where its rows are; empty when it has none (no `.eh_frame`, unreadable, refused).
    rows: Range<u32>,
    segments: Vec<crate::host::elf::Segment>,
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
                let Some(loaded) = self.compile(&key, m, tgid) else {
                    // Unreadable now (the process exited before its image was read, or the file
                    // is gone): not remembered, or every later process mapping the image would
                    // be given its empty table while any of them lives.
                    if !push(&mut entry, m, 0, 0..0) {
                        break;
                    }
                    continue;
                };
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
    /// chunks as it is compiled again, so no image's whole table is held in the agent. `None`
    /// when the image cannot be read (an image without a table, or refused for room, is `Some`
    /// with no rows).
    fn compile(&mut self, key: &ImageKey, m: &Mapping, tgid: u32) -> Option<Loaded> {
        let mut loaded = Loaded {
            rows: 0..0,
            segments: Vec::new(),
            users: 0,
            used: Instant::now(),
        };
        let path = crate::host::files::in_process(tgid, m.path.as_deref().unwrap_or_default());
        let mapped;
        let bytes: &[u8] = if key.0 == "[vdso]" {
            match unwind::vdso_bytes() {
                Some(bytes) => bytes,
                None => return Some(loaded),
            }
        } else {
            match unwind::map_image(&path, m.inode) {
                Ok(map) => {
                    mapped = map;
                    &mapped
                }
                Err(e) => {
                    tracing::debug!(image = ?m.path, "cannot read it for its unwind table: {e}");
                    self.stats.images_refused += 1;
                    return None;
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
                return Some(loaded);
            }
        };
        loaded.segments = compiler.segments.clone();
        if len == 0 {
            return Some(loaded);
        }
        let Some(rows) = self.allocate(len as u32) else {
            tracing::debug!(image = ?m.path, rows = len, "no room for its unwind table");
            self.stats.images_refused += 1;
            return Some(loaded);
        };
        if let Err(e) = self.write(rows.clone(), &compiler) {
            tracing::warn!(image = ?m.path, "cannot write its unwind table: {e}");
            self.free_range(rows);
            self.stats.images_refused += 1;
            return Some(loaded);
        }
        self.stats.images_loaded += 1;
        self.stats.rows += rows.len() as u64;
        loaded.rows = rows;
        Some(loaded)
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
        // Nothing is evicted for an image that cannot fit even then.
        let free: u64 = self.free.iter().map(|r| u64::from(r.len() as u32)).sum();
        let evictable: u64 = self
            .images
            .values()
            .filter(|l| l.users == 0)
            .map(|l| l.rows.len() as u64)
            .sum();
        if u64::from(len) > free + evictable {
            return None;
        }
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

/// On real BPF maps of the programs' types and sizes (the kernel's own, made here without the
/// programs; needs CAP_BPF, as every agent test does).
#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::{Child, Command};

    use libbpf_rs::libbpf_sys::bpf_map_create_opts;
    use libbpf_rs::MapType;

    use super::*;
    use crate::host::maps::read_mappings;

    fn loader(capacity: u32) -> TableLoader {
        let opts = bpf_map_create_opts {
            sz: std::mem::size_of::<bpf_map_create_opts>() as _,
            ..Default::default()
        };
        let no_prealloc = bpf_map_create_opts {
            map_flags: libbpf_rs::libbpf_sys::BPF_F_NO_PREALLOC,
            ..opts
        };
        let map = |kind, value: usize, entries, opts: &bpf_map_create_opts| {
            MapHandle::create(kind, None::<&str>, 4, value as u32, entries, opts).expect("a BPF map (needs CAP_BPF)")
        };
        TableLoader::new(
            map(MapType::Array, std::mem::size_of::<unwind_row>(), capacity, &opts),
            map(MapType::Hash, std::mem::size_of::<unwind_process>(), 64, &no_prealloc),
            map(MapType::LruHash, 1, 64, &opts),
            capacity,
        )
    }

    /// A process the programs have noticed: its entry in `sampled_processes`.
    fn noticed(loader: &TableLoader, tgid: u32) {
        loader
            .sampled_processes
            .update(&tgid.to_ne_bytes(), &[0], MapFlags::ANY)
            .unwrap();
    }

    /// A `sleep` process, killed and reaped when dropped.
    struct Sleeper(Child);

    impl Sleeper {
        fn id(&self) -> u32 {
            self.0.id()
        }
    }

    impl Drop for Sleeper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn sleeper() -> (Sleeper, Vec<Mapping>) {
        let child = Sleeper(Command::new("sleep").arg("30").spawn().expect("sleep"));
        // Its mappings once the program and libc are mapped (the first reads may see the
        // parent's, or the program before the dynamic loader mapped libc).
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let mappings = read_mappings(Path::new("/"), child.id()).unwrap_or_default();
            let mapped = |name: &str| {
                mappings
                    .iter()
                    .any(|m| m.is_executable() && m.path.as_deref().is_some_and(|p| p.contains(name)))
            };
            if mapped("/sleep") && mapped("/libc.so") {
                return (child, mappings);
            }
            assert!(Instant::now() < deadline, "sleep never mapped libc: {mappings:?}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// The executable mapping of `sleep` alone.
    fn program(mappings: &[Mapping]) -> Vec<Mapping> {
        mappings
            .iter()
            .filter(|m| m.is_executable() && m.path.as_deref().is_some_and(|p| p.ends_with("/sleep")))
            .cloned()
            .collect()
    }

    /// An image that could not be read because its process had exited is not remembered as one
    /// without a table: the next process that maps it is unwound from its rows (a job restarting
    /// faster than the agent reads was unwound by frame pointers only, for as long as it ran).
    #[test]
    fn an_image_unread_because_its_process_exited_is_read_for_the_next() {
        let mut loader = loader(1 << 20);
        let (live, mappings) = sleeper();
        let mut gone = Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        // An exited process that mapped the same program: its root is gone, nothing is read,
        // and the programs removed its entry at exit.
        assert!(!loader.load(gone.id(), 1, &program(&mappings)));
        assert_eq!(loader.stats.rows, 0);
        noticed(&loader, live.id());
        assert!(loader.load(live.id(), 2, &program(&mappings)));
        assert!(loader.stats.rows > 0, "{:?}", loader.stats);
        let entry = loader
            .processes_map
            .lookup(&live.id().to_ne_bytes(), MapFlags::ANY)
            .unwrap()
            .expect("an entry");
        let entry: &unwind_process = plain::from_bytes(&entry).unwrap();
        assert_eq!(entry.len, 1);
        assert!(entry.mappings[0].rows_len > 0, "{:?}", entry.mappings[0].rows_len);
    }

    /// An image too large for the rows that are free and those of unused images together is
    /// refused without evicting the unused ones (a restarting job would lose its tables for
    /// nothing).
    #[test]
    fn an_image_that_cannot_fit_evicts_nothing() {
        let (first, mappings) = sleeper();
        let (second, _) = sleeper();
        let image = |name: &str| -> Vec<Mapping> {
            let found: Vec<Mapping> = mappings
                .iter()
                .filter(|m| m.is_executable() && m.path.as_deref().is_some_and(|p| p.contains(name)))
                .cloned()
                .collect();
            assert!(!found.is_empty(), "sleep maps no {name}: {mappings:?}");
            found
        };
        let (executable, loader_image, libc) = (program(&mappings), image("/ld-linux"), image("/libc.so"));
        let rows_of = |mappings: &[Mapping]| {
            let mut l = loader(1 << 20);
            noticed(&l, first.id());
            assert!(l.load(first.id(), 1, mappings));
            l.stats.rows as u32
        };
        let libc_rows = rows_of(&libc);
        // As many rows as libc's: the program's are held by the first process, the loader's are
        // unused (the second process is gone), and libc fits only if the held ones were freed.
        let mut loader = loader(libc_rows);
        noticed(&loader, first.id());
        assert!(loader.load(first.id(), 1, &executable));
        noticed(&loader, second.id());
        assert!(loader.load(second.id(), 1, &loader_image));
        let held = loader.stats.rows;
        assert!(held > 0 && held < u64::from(libc_rows), "{held} rows of {libc_rows}");
        loader.sweep(|tgid| tgid == first.id());
        assert_eq!(loader.stats.rows, held, "an unused image stays");
        let refused = loader.stats.images_refused;
        assert!(loader.load(first.id(), 1, &[executable, libc].concat()));
        assert_eq!(loader.stats.images_refused, refused + 1, "{:?}", loader.stats);
        assert_eq!(loader.stats.rows, held, "the unused image was evicted for nothing");
    }
}
