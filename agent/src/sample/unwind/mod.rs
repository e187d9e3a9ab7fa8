//! Call chains from `.eh_frame`, two ways (docs/design/006, 014):
//! - [`table`] compiles an image's `.eh_frame` into the rows the BPF programs unwind from in the
//!   kernel (the default);
//! - [`Unwinder`] unwinds a copy of the user stack (`struct stack_snapshot`) in the agent with
//!   framehop: a process's first milliseconds, before its tables are written, and every sample
//!   with `--unwind eh-frame` (the reference the tables are checked against).

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::{Deref, Range};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder as _};

use crate::host::elf;
use crate::host::maps::{self, Mapping};
use crate::sample::processes::ProcessMaps;
use object::{Object, ObjectSection};

pub mod table;

/// Deepest chain unwound, as for frame-pointer stacks (MAX_STACK_DEPTH in sample.h).
pub const MAX_DEPTH: usize = 127;

/// A process's modules are re-read at most this often when an address falls outside all of them
/// (a library loaded since, or JIT code that no file maps).
const REBUILD_INTERVAL: Duration = Duration::from_secs(2);

/// Bytes of an image file: memory-mapped from disk, or owned (the vDSO, read from memory).
#[derive(Debug)]
enum Backing {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Deref for Backing {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Backing::Mapped(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// One section's bytes within a shared image.
#[derive(Clone, Debug)]
pub struct Section {
    image: Arc<Backing>,
    range: Range<usize>,
}

impl Deref for Section {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.image[self.range.clone()]
    }
}

/// What unwinding needs from one ELF image, parsed once and shared by every process mapping it.
#[derive(Debug)]
struct Image {
    bytes: Arc<Backing>,
    /// (svma range, file range) of .text, .eh_frame, .eh_frame_hdr and .got.
    sections: HashMap<&'static str, (Range<u64>, Range<usize>)>,
    /// PT_LOAD segments.
    segments: Vec<elf::Segment>,
}

impl Image {
    fn parse(bytes: Backing) -> Result<Image, String> {
        let file = object::File::parse(&*bytes).map_err(|e| format!("not an ELF image: {e}"))?;
        let mut sections = HashMap::new();
        for name in [".text", ".eh_frame", ".eh_frame_hdr", ".got"] {
            if let Some(section) = file.section_by_name(name) {
                let svma = section.address()..section.address() + section.size();
                if let Some((offset, size)) = section.file_range() {
                    sections.insert(name, (svma, offset as usize..(offset + size) as usize));
                }
            }
        }
        if !sections.contains_key(".eh_frame") {
            return Err("no .eh_frame".into());
        }
        let segments = elf::segments_of(&file);
        Ok(Image {
            bytes: Arc::new(bytes),
            sections,
            segments,
        })
    }

    fn section(&self, name: &str) -> Option<Section> {
        self.sections.get(name).map(|(_, range)| Section {
            image: self.bytes.clone(),
            range: range.clone(),
        })
    }

    fn svma(&self, name: &str) -> Option<Range<u64>> {
        self.sections.get(name).map(|(svma, _)| svma.clone())
    }

    /// The load bias of a mapping of this image at `start` from file offset `offset`: what to add
    /// to an address stated in the image to get the address in the process.
    fn bias(&self, start: u64, offset: u64) -> Option<u64> {
        table::Table::bias_of(&self.segments, start, offset)
    }

    fn module(&self, name: String, avma: Range<u64>, bias: u64) -> Module<Section> {
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: self.svma(".text"),
            text: self.section(".text"),
            got_svma: self.svma(".got"),
            eh_frame_svma: self.svma(".eh_frame"),
            eh_frame: self.section(".eh_frame"),
            eh_frame_hdr_svma: self.svma(".eh_frame_hdr"),
            eh_frame_hdr: self.section(".eh_frame_hdr"),
            stubs_svma: None,
            stub_helper_svma: None,
            unwind_info: None,
            debug_frame: None,
            text_segment_svma: None,
            text_segment: None,
        };
        Module::new(name, avma, bias, info)
    }
}

fn map_file(path: &Path) -> Result<Backing, String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // SAFETY: the map is only read. Images are replaced by renaming a new file over them, which
    // leaves this inode intact; one truncated in place would fault, as it would for the process
    // executing it.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| format!("mmap {}: {e}", path.display()))?;
    Ok(Backing::Mapped(map))
}

/// The image at `path` (as a process sees it), if it is still file `inode`: the host's path may
/// name another file than the one a process mapped.
pub(crate) fn map_image(path: &Path, inode: u64) -> Result<impl Deref<Target = [u8]>, String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.ino() != inode {
        return Err(format!("{}: another file than the one mapped", path.display()));
    }
    map_file(path)
}

/// Executable mappings of process `pid`, as `maps` lists them.
fn executable_mappings(pid: u32) -> Vec<Mapping> {
    maps::read_mappings(Path::new("/"), pid)
        .map(|all| all.into_iter().filter(Mapping::is_executable).collect())
        .unwrap_or_default()
}

/// The vDSO is the same image in every process of this kernel: read from the agent's own
/// memory, once.
pub(crate) fn vdso_bytes() -> Option<&'static [u8]> {
    static VDSO: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    VDSO.get_or_init(|| {
        let mapping = executable_mappings(std::process::id())
            .into_iter()
            .find(|m| m.path.as_deref() == Some("[vdso]"))?;
        let mut mem = File::open("/proc/self/mem").ok()?;
        mem.seek(SeekFrom::Start(mapping.start)).ok()?;
        let mut bytes = vec![0; (mapping.end - mapping.start) as usize];
        mem.read_exact(&mut bytes).ok()?;
        Some(bytes)
    })
    .as_deref()
}

/// The vDSO parsed for framehop, once.
fn vdso() -> Option<&'static Image> {
    static VDSO: OnceLock<Option<Image>> = OnceLock::new();
    VDSO.get_or_init(|| Image::parse(Backing::Owned(vdso_bytes()?.to_vec())).ok())
        .as_ref()
}

/// The unwinder of one process: its modules.
struct Process {
    unwinder: UnwinderX86_64<Section>,
    /// Executable ranges the modules cover.
    covered: Vec<Range<u64>>,
    built: Instant,
    /// Times its modules were read again.
    rebuilds: u32,
}

/// What unwinding did, since the agent started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwindStats {
    pub snapshots: u64,
    /// Chains that ended before the root (unwind info missing or the copy too short).
    pub truncated: u64,
    /// Frames found, over all snapshots.
    pub frames: u64,
}

/// Unwinds stack snapshots of many processes, sharing parsed images between them.
pub struct Unwinder {
    processes: HashMap<u32, Process>,
    /// Parsed images by (device, inode), the least recently used dropped past the bound (the
    /// processes that map one keep it alive).
    images: lru::LruCache<(String, u64), Option<Arc<Image>>>,
    /// The mappings of processes read while they ran: a snapshot handled after its process
    /// exited is unwound with them (and the images on the host).
    remembered: ProcessMaps,
    /// framehop's rule cache, one for every process: its entries are keyed by a modules
    /// generation drawn from a counter global to the agent, so processes never read each
    /// other's rules. One per process was 16 KiB each, and a node of short processes (shell
    /// scripts) has hundreds alive between two sweeps.
    cache: CacheX86_64,
    /// Modules generations drawn since `cache` was made. Before the 16-bit counter can come
    /// round to a generation drawn in that time, the cache is made anew and every process
    /// forgotten (a long-lived process keeps the generation it was built with).
    generations: u32,
    pub stats: UnwindStats,
}

/// Generations drawn (one per unwinder made, one per module added) before the shared rule cache
/// is made anew: well below the 65,536 after which framehop's counter wraps around.
const GENERATIONS_PER_CACHE: u32 = 1 << 15;

impl std::fmt::Debug for Unwinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unwinder")
            .field("processes", &self.processes.len())
            .field("images", &self.images.len())
            .finish()
    }
}

/// The registers and stack copy of one sample.
#[derive(Clone, Copy, Debug)]
pub struct Snapshot<'a> {
    pub tgid: u32,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    pub stack: &'a [u8],
}

impl Default for Unwinder {
    fn default() -> Self {
        Unwinder::new(ProcessMaps::default(), crate::symbolize::DEFAULT_CACHED_IMAGES)
    }
}

impl Unwinder {
    /// An unwinder that keeps at most `max_images` images parsed, and falls back on `remembered`
    /// for processes that have exited.
    pub fn new(remembered: ProcessMaps, max_images: usize) -> Unwinder {
        let cap = std::num::NonZeroUsize::new(max_images).unwrap_or(std::num::NonZeroUsize::MIN);
        Unwinder {
            processes: HashMap::new(),
            images: lru::LruCache::new(cap),
            remembered,
            cache: CacheX86_64::new(),
            generations: 0,
            stats: UnwindStats::default(),
        }
    }

    /// Images held parsed.
    pub fn images(&self) -> usize {
        self.images.len()
    }

    /// The call chain of a snapshot, leaf first: the instruction pointer, then return addresses.
    pub fn unwind(&mut self, snapshot: &Snapshot<'_>) -> Vec<u64> {
        self.stats.snapshots += 1;
        let tgid = snapshot.tgid;
        let stale = self
            .processes
            .get(&tgid)
            .is_none_or(|p| !p.covers(snapshot.ip) && p.may_rebuild());
        if stale {
            self.rebuild(tgid);
        }
        let process = self.processes.get_mut(&tgid).expect("built above");
        let (mut frames, mut complete) = process.walk(snapshot, &mut self.cache);
        // A chain that ends in code no module covers: a library mapped after the modules were
        // read (a young process whose loader was still at work), read again and walked again.
        if !complete && frames.last().is_some_and(|&a| !process.covers(a)) && process.may_rebuild() {
            self.rebuild(tgid);
            let process = self.processes.get_mut(&tgid).expect("built above");
            (frames, complete) = process.walk(snapshot, &mut self.cache);
        }
        if !complete {
            self.stats.truncated += 1;
        }
        self.stats.frames += frames.len() as u64;
        frames
    }

    fn rebuild(&mut self, tgid: u32) {
        let rebuilds = self.processes.get(&tgid).map_or(0, |p| p.rebuilds + 1);
        let mut process = self.build(tgid);
        process.rebuilds = rebuilds;
        self.processes.insert(tgid, process);
    }

    /// Forgets processes for which `alive` is false.
    pub fn retain(&mut self, mut alive: impl FnMut(u32) -> bool) {
        self.processes.retain(|&tgid, _| alive(tgid));
    }

    /// Processes with an unwinder.
    pub fn processes(&self) -> usize {
        self.processes.len()
    }

    fn build(&mut self, tgid: u32) -> Process {
        let mut process = Process {
            unwinder: UnwinderX86_64::new(),
            covered: Vec::new(),
            built: Instant::now(),
            rebuilds: 0,
        };
        let mut mappings = executable_mappings(tgid);
        let exited = mappings.is_empty();
        if exited {
            // Its files as the host sees them, from where they were mapped when it ran.
            mappings = self.remembered.executable_mappings(tgid);
        }
        for mapping in mappings {
            let key = (mapping.device.clone(), mapping.inode);
            let image = match mapping.path.as_deref() {
                Some("[vdso]") => vdso(),
                Some(path) if exited && mapping.inode != 0 && !self.images.contains(&key) => {
                    // Only the very file it mapped: the host's path may name another one.
                    use std::os::unix::fs::MetadataExt;
                    let same = std::fs::metadata(path).is_ok_and(|m| m.ino() == mapping.inode);
                    let image = same
                        .then(|| map_file(Path::new(path)).and_then(Image::parse).ok().map(Arc::new))
                        .flatten();
                    if image.is_some() {
                        self.images.put(key.clone(), image);
                    }
                    self.images.get(&key).and_then(Option::as_deref)
                }
                Some(path) if path.starts_with('/') && mapping.inode != 0 => self
                    .images
                    .get_or_insert(key, || {
                        let file = crate::host::files::in_process(tgid, path);
                        map_file(&file).and_then(Image::parse).ok().map(Arc::new)
                    })
                    .as_deref(),
                _ => None,
            };
            let Some(image) = image else { continue };
            let Some(bias) = image.bias(mapping.start, mapping.offset) else {
                continue;
            };
            let name = mapping.path.clone().unwrap_or_default();
            process
                .unwinder
                .add_module(image.module(name, mapping.start..mapping.end, bias));
            process.covered.push(mapping.start..mapping.end);
        }
        // One generation for the unwinder, one per module added.
        self.generations += 1 + process.covered.len() as u32;
        if self.generations >= GENERATIONS_PER_CACHE {
            // The processes built before keep their generations, which the counter will come
            // round to: they are built anew (with new ones) at their next snapshot.
            self.processes.clear();
            self.cache = CacheX86_64::new();
            self.generations = 0;
        }
        process
    }
}

impl Process {
    fn covers(&self, address: u64) -> bool {
        self.covered.iter().any(|r| r.contains(&address))
    }

    /// Whether its modules may be read again: soon after they were first read (20 ms, 80 ms,
    /// 320 ms, ...), then every [`REBUILD_INTERVAL`] at most.
    fn may_rebuild(&self) -> bool {
        let wait = Duration::from_millis(20)
            .saturating_mul(1 << (2 * self.rebuilds.min(8)))
            .min(REBUILD_INTERVAL);
        self.built.elapsed() >= wait
    }

    /// Unwinds `snapshot` with the modules as they are; true when the chain reached its root.
    fn walk(&mut self, snapshot: &Snapshot<'_>, cache: &mut CacheX86_64) -> (Vec<u64>, bool) {
        let stack = snapshot.stack;
        let sp = snapshot.sp;
        let mut read_stack = |address: u64| -> Result<u64, ()> {
            let at = address.checked_sub(sp).ok_or(())? as usize;
            let bytes = stack.get(at..at.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let regs = UnwindRegsX86_64::new(snapshot.ip, snapshot.sp, snapshot.bp);
        let mut frames = Vec::new();
        let mut iter = self.unwinder.iter_frames(snapshot.ip, regs, cache, &mut read_stack);
        let complete = loop {
            match iter.next() {
                Ok(Some(frame)) if frames.len() < MAX_DEPTH => frames.push(frame.address()),
                Ok(Some(_)) => break false,
                Ok(None) => break true,
                Err(_) => break false,
            }
        };
        (frames, complete)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_bias_maps_a_segment_back_to_its_stated_address() {
        let image = Image {
            bytes: Arc::new(Backing::Owned(Vec::new())),
            sections: HashMap::new(),
            // a PIE: text at vaddr 0x1000 from offset 0x1000, data at 0x3df0 from 0x2df0
            segments: [(0, 0, 0x600), (0x1000, 0x1000, 0x1b5), (0x3df0, 0x2df0, 0x248)]
                .into_iter()
                .map(|(vaddr, offset, file_size)| elf::Segment {
                    vaddr,
                    offset,
                    file_size,
                })
                .collect(),
        };
        let bias = image.bias(0x5555_5555_5000, 0x1000).expect("text segment");
        assert_eq!(bias, 0x5555_5555_4000);
        assert_eq!(image.bias(0x5555_5555_7000, 0x2000), Some(0x5555_5555_4000));
        assert_eq!(image.bias(0x1000, 0x9000), None);
    }

    /// This process maps several images (itself, libc, the loader): one is kept parsed when the
    /// bound is one, and its chains still unwind through all of them.
    #[test]
    fn parsed_images_are_bounded_and_processes_keep_theirs() {
        let mut unwinder = Unwinder::new(ProcessMaps::default(), 1);
        let process = unwinder.build(std::process::id());
        assert!(
            process.covered.len() > 1,
            "modules of several images: {:?}",
            process.covered
        );
        assert_eq!(unwinder.images(), 1, "one image kept parsed");
    }

    /// The rule cache every process shares is made anew before framehop's 16-bit modules
    /// generation can come round to one it still holds.
    #[test]
    fn the_shared_rule_cache_is_made_anew_before_generations_wrap() {
        let mut unwinder = Unwinder::default();
        let me = std::process::id();
        let modules = unwinder.build(me).covered.len() as u32;
        assert_eq!(
            unwinder.generations,
            1 + modules,
            "one for the unwinder, one per module"
        );
        unwinder.rebuild(me);
        assert_eq!(unwinder.processes(), 1);
        unwinder.generations = GENERATIONS_PER_CACHE - 1;
        unwinder.build(me);
        assert_eq!(unwinder.generations, 0, "made anew past the bound");
        assert_eq!(unwinder.processes(), 0, "processes built before are built anew");
    }

    #[test]
    fn the_vdso_is_read_from_memory_with_its_unwind_info() {
        let vdso = vdso().expect("the kernel maps a vDSO");
        assert!(vdso.sections.contains_key(".eh_frame"));
    }
}
