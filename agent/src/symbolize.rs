//! Turns instruction pointers into frames: module, build id and file offset always (blazesym's
//! normalizer), function names where the binary has symbols (blazesym's symbolizer).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bimodal_proto::v1;
use blazesym::normalize::{Normalizer, UserMeta};
use blazesym::symbolize::source::{Kernel, Process, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::Pid;

use crate::host::files::in_process;
use crate::host::maps::MappingClass;
use crate::host::{debugfile, elf};
use crate::sample::processes::ProcessMaps;

/// One symbolizer per agent: blazesym caches parsed ELF files and kallsyms across calls, up to
/// a bound ([`Frames::with_cached_images`]).
pub struct Frames {
    symbolizer: std::cell::RefCell<Symbolizer>,
    /// The files and processes the symbolizer has parsed since it was made: blazesym keeps
    /// every one, so past `max_images` it is made anew (and the caches below emptied).
    images: std::cell::RefCell<std::collections::HashSet<String>>,
    max_images: usize,
    /// Times the caches were emptied for holding more than `max_images`.
    resets: std::cell::Cell<u64>,
    normalizer: Normalizer,
    /// Leave frames of images with a build id unnamed, for the server to name from its
    /// debug-info store (`--symbolize server`).
    by_server: bool,
    /// PT_LOAD segments (p_vaddr, p_offset, p_filesz) of images.
    segments: std::cell::RefCell<HashMap<ImageKey, Vec<elf::Segment>>>,
    /// Where separate debug files are looked for ([`debugfile::DEFAULT_DIRS`] by default).
    debug_dirs: Vec<PathBuf>,
    /// The separate debug file of each image (by build id, or by file without one), `None` when
    /// it has none; looked for once per image.
    debug_files: std::cell::RefCell<HashMap<ImageKey, Option<PathBuf>>>,
    /// The file mappings of processes seen alive: the samples of a process that exits before
    /// they are drained are named from them (its /proc entry is gone by then).
    processes: ProcessMaps,
    /// Build ids of image files, by file identity (device, inode): read through the mapping
    /// process's root, never by the path alone (in a container the agent's own files at that
    /// path are other files).
    build_ids: std::cell::RefCell<HashMap<(u64, u64), Vec<u8>>>,
    /// Calls of `user` so far: the remembered mappings are tidied every so many.
    calls: std::cell::Cell<u64>,
}

impl std::fmt::Debug for Frames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Frames")
    }
}

impl Default for Frames {
    fn default() -> Self {
        Frames {
            symbolizer: std::cell::RefCell::new(symbolizer()),
            images: Default::default(),
            max_images: DEFAULT_CACHED_IMAGES,
            resets: Default::default(),
            // Build ids are read here through /proc/PID/root (`build_id_of`): the normalizer
            // would open the path in the agent's own mount namespace.
            normalizer: Normalizer::builder().enable_build_ids(false).build(),
            by_server: false,
            segments: Default::default(),
            debug_dirs: debugfile::default_dirs(),
            debug_files: Default::default(),
            processes: ProcessMaps::default(),
            build_ids: Default::default(),
            calls: Default::default(),
        }
    }
}

/// Images (and processes) kept parsed for naming and unwinding, unless told otherwise.
pub const DEFAULT_CACHED_IMAGES: usize = 256;

impl Frames {
    /// Frames whose images have a build id are sent as (build id, file offset) and named by the
    /// server; the rest (kernel, JIT, images without a build id) are named here.
    pub fn by_server() -> Frames {
        Frames {
            by_server: true,
            ..Frames::default()
        }
    }

    /// Separate debug files are looked for under these directories instead of the defaults.
    pub fn with_debug_dirs(mut self, dirs: Vec<PathBuf>) -> Frames {
        self.debug_dirs = dirs;
        self
    }

    /// Mappings read by the sampler at each process's first sample ([`crate::sample::bpf::Sampler::processes`])
    /// instead of only at drains.
    pub fn with_processes(mut self, processes: ProcessMaps) -> Frames {
        self.processes = processes;
        self
    }

    /// The separate debug file of `image` (a path as process `tgid` sees it) with `build_id` (or,
    /// without one, that its `.gnu_debuglink` names), if one is installed; looked for once per
    /// image.
    fn debug_file_of(&self, tgid: u32, image: &str, build_id: &[u8]) -> Option<PathBuf> {
        if image.is_empty() {
            return None;
        }
        self.debug_file_by_key(&ImageKey::of(tgid, image, build_id)?, tgid, image, build_id)
    }

    /// [`Frames::debug_file_of`] for the image `key` names.
    fn debug_file_by_key(&self, key: &ImageKey, tgid: u32, image: &str, build_id: &[u8]) -> Option<PathBuf> {
        self.debug_files
            .borrow_mut()
            .entry(key.clone())
            .or_insert_with(|| debugfile::find(tgid, image, build_id, &self.debug_dirs))
            .clone()
    }

    /// At most `max` images and processes are kept parsed; past it, the caches are emptied
    /// and what is needed again is parsed again.
    pub fn with_cached_images(mut self, max: usize) -> Frames {
        self.max_images = max.max(1);
        self
    }

    /// The symbolizer, with `image` (a file, or a process by pid) counted among its parsed ones.
    fn symbolizer(&self, image: &str) -> std::cell::Ref<'_, Symbolizer> {
        let mut images = self.images.borrow_mut();
        if !images.contains(image) {
            images.insert(image.to_owned());
        }
        self.symbolizer.borrow()
    }

    /// How many images the caches hold (the largest of them), and how often they were emptied.
    pub fn cached_images(&self) -> (usize, u64) {
        let held = [
            self.images.borrow().len(),
            self.segments.borrow().len(),
            self.debug_files.borrow().len(),
            self.build_ids.borrow().len(),
        ];
        (held.into_iter().max().unwrap_or(0), self.resets.get())
    }

    /// Empties the caches once they hold more than `max_images`; every 256 calls, forgets the
    /// mappings of processes that exited long enough ago.
    fn tidy(&self) {
        if self.cached_images().0 > self.max_images {
            *self.symbolizer.borrow_mut() = symbolizer();
            self.images.borrow_mut().clear();
            self.segments.borrow_mut().clear();
            self.debug_files.borrow_mut().clear();
            self.build_ids.borrow_mut().clear();
            self.resets.set(self.resets.get() + 1);
            tracing::debug!(max = self.max_images, "symbolizer caches emptied");
        }
        let calls = self.calls.get() + 1;
        self.calls.set(calls);
        if calls.is_multiple_of(256) {
            self.processes.tidy();
        }
    }

    /// Fills module, file offset, build id and ELF address of `frames` from the mappings
    /// remembered of `tgid`, a process that has exited; false when none are remembered.
    fn locate_in_remembered(&self, tgid: u32, addrs: &[u64], frames: &mut [v1::Frame]) -> bool {
        let Some(located) = self.processes.locate(tgid, addrs) else {
            return false;
        };
        for ((frame, &addr), at) in frames.iter_mut().zip(addrs).zip(located) {
            let Some(at) = at else {
                frame.unsymbolized_reason =
                    format!("process {tgid} exited; no file mapped {addr:#x} when it was last seen");
                continue;
            };
            frame.build_id = self.build_id_of(Path::new(&at.path));
            frame.module = at.path;
            frame.file_offset = at.file_offset;
            frame.elf_address = self.elf_address(tgid, frame).unwrap_or(0);
            frame.unsymbolized_reason.clear();
        }
        true
    }

    /// The build id of the image file at `path` (empty when it has none or is gone), read once
    /// per file.
    fn build_id_of(&self, path: &Path) -> Vec<u8> {
        use std::os::unix::fs::MetadataExt;
        let Ok(meta) = std::fs::metadata(path) else {
            return Vec::new();
        };
        self.build_ids
            .borrow_mut()
            .entry((meta.dev(), meta.ino()))
            .or_insert_with(|| {
                blazesym::helper::read_elf_build_id(&path)
                    .ok()
                    .flatten()
                    .map(|id| id.to_vec())
                    .unwrap_or_default()
            })
            .clone()
    }

    /// Names the frames `local` from their images on the host, by ELF address (for a process
    /// that has exited).
    fn name_from_images(&self, frames: &mut [v1::Frame], local: Vec<usize>) {
        let mut by_image: HashMap<String, Vec<usize>> = HashMap::new();
        for i in local {
            if frames[i].elf_address != 0 && !frames[i].module.is_empty() {
                by_image.entry(frames[i].module.clone()).or_default().push(i);
            }
        }
        for (image, wanted) in by_image {
            let vaddrs: Vec<u64> = wanted.iter().map(|&i| frames[i].elf_address).collect();
            let source = Source::Elf(symbols_only(Path::new(&image)));
            let symbolizer = self.symbolizer(&image);
            match symbolizer.symbolize(&source, Input::VirtOffset(&vaddrs)) {
                Ok(symbols) => {
                    for (i, sym) in wanted.into_iter().zip(symbols) {
                        fill(&mut frames[i], sym);
                    }
                }
                Err(e) => {
                    for i in wanted {
                        frames[i].unsymbolized_reason = format!("symbolization failed: {e}");
                    }
                }
            }
        }
    }

    /// Names the frames `local` (indices into `frames`) whose images have a separate debug file
    /// from it, by ELF address (the stripped image and its debug file share their addresses);
    /// returns the indices left unnamed.
    fn name_from_debug_files(&self, tgid: u32, frames: &mut [v1::Frame], local: Vec<usize>) -> Vec<usize> {
        let mut by_file: HashMap<PathBuf, Vec<(usize, u64)>> = HashMap::new();
        let mut rest = Vec::new();
        // Each image's key and debug file, once per call: an image without a build id is known
        // by its file, which takes a stat.
        let mut images: HashMap<&str, Option<(ImageKey, PathBuf)>> = HashMap::new();
        for i in local {
            let frame = &frames[i];
            let found = images.entry(frame.module.as_str()).or_insert_with(|| {
                if frame.module.is_empty() {
                    return None;
                }
                let key = ImageKey::of(tgid, &frame.module, &frame.build_id)?;
                let path = self.debug_file_by_key(&key, tgid, &frame.module, &frame.build_id)?;
                Some((key, path))
            });
            let Some((key, path)) = found else {
                rest.push(i);
                continue;
            };
            // Frames of images without a build id travel without their ELF address.
            let address = match frame.elf_address {
                0 => self.vaddr(key, tgid, frame).unwrap_or(0),
                address => address,
            };
            match address {
                0 => rest.push(i),
                _ => by_file.entry(path.clone()).or_default().push((i, address)),
            }
        }
        for (path, wanted) in by_file {
            let vaddrs: Vec<u64> = wanted.iter().map(|&(_, address)| address).collect();
            let source = Source::Elf(symbols_only(&path));
            let symbolizer = self.symbolizer(&path.to_string_lossy());
            let Ok(symbols) = symbolizer.symbolize(&source, Input::VirtOffset(&vaddrs)) else {
                rest.extend(wanted.into_iter().map(|(i, _)| i));
                continue;
            };
            for ((i, _), sym) in wanted.into_iter().zip(symbols) {
                match sym {
                    Symbolized::Sym(_) => fill(&mut frames[i], sym),
                    Symbolized::Unknown(_) => rest.push(i),
                }
            }
        }
        rest.sort_unstable();
        rest
    }
}

/// An address to resolve: callers' return addresses point after the call instruction, so they
/// are looked up one byte earlier to land inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ip {
    pub address: u64,
    pub leaf: bool,
}

impl Ip {
    fn lookup_address(self) -> u64 {
        if self.leaf {
            self.address
        } else {
            self.address.saturating_sub(1)
        }
    }
}

fn unsymbolized(kind: v1::FrameKind, address: u64, reason: String) -> v1::Frame {
    v1::Frame {
        kind: kind as i32,
        address,
        unsymbolized_reason: reason,
        ..Default::default()
    }
}

impl Frames {
    /// Frames for user-space addresses of process `tgid`. A process that exited, or an address
    /// outside any file mapping, gives frames with a reason instead of a name.
    pub fn user(&self, tgid: u32, ips: &[Ip]) -> Vec<v1::Frame> {
        let addrs: Vec<u64> = ips.iter().map(|ip| ip.lookup_address()).collect();
        let mut frames: Vec<v1::Frame> = ips
            .iter()
            .map(|ip| unsymbolized(v1::FrameKind::User, ip.address, String::new()))
            .collect();

        self.tidy();
        // Whether the process had exited: its frames come from its remembered mappings.
        let mut exited = false;
        match self.normalizer.normalize_user_addrs(Pid::from(tgid), &addrs) {
            Ok(normalized) => {
                // One build id per image of the call, not per frame.
                let mut build_ids: Vec<Option<Vec<u8>>> = vec![None; normalized.meta.len()];
                for (frame, (offset, meta_index)) in frames.iter_mut().zip(&normalized.outputs) {
                    match normalized.meta.get(*meta_index) {
                        Some(UserMeta::Elf(elf)) => {
                            frame.module = elf.path.to_string_lossy().into_owned();
                            frame.build_id = build_ids[*meta_index]
                                .get_or_insert_with(|| self.build_id_of(&in_process(tgid, &frame.module)))
                                .clone();
                            frame.file_offset = *offset;
                            frame.elf_address = self.elf_address(tgid, frame).unwrap_or(0);
                        }
                        Some(UserMeta::Unknown(unknown)) => {
                            frame.unsymbolized_reason = format!("{:?}", unknown.reason);
                        }
                        Some(other) => {
                            frame.unsymbolized_reason = format!("unsupported mapping {other:?}");
                        }
                        None => {}
                    }
                }
                // A process that has exited but not been reaped maps nothing any more.
                if frames.iter().all(|f| f.module.is_empty())
                    && has_exited(tgid)
                    && self.locate_in_remembered(tgid, &addrs, &mut frames)
                {
                    exited = true;
                } else {
                    self.processes.read_if_stale(tgid);
                }
            }
            Err(e) => {
                if self.locate_in_remembered(tgid, &addrs, &mut frames) {
                    exited = true;
                } else {
                    tracing::debug!(tgid, "no mappings remembered of a process gone: {e}");
                    for frame in &mut frames {
                        frame.unsymbolized_reason = format!("process {tgid} not readable: {e}");
                    }
                    return frames;
                }
            }
        }

        // Frames to name here: all of them, or those the server cannot key by build id.
        let local: Vec<usize> = (0..frames.len())
            .filter(|&i| !self.by_server || frames[i].build_id.is_empty())
            .collect();
        // A frame left to the server carries no reason: its build id and empty name say it. The
        // same 40 bytes on every such frame went over the wire to be decoded and dropped.
        if self.by_server && local.is_empty() {
            return frames;
        }
        // Images with a separate debug file (stripped binaries of distributions) are named from
        // it, as the server does with the file this agent uploads; the rest from the process.
        let local = self.name_from_debug_files(tgid, &mut frames, local);
        if local.is_empty() {
            return frames;
        }
        if exited {
            // No process to read: each image is read from the host.
            self.name_from_images(&mut frames, local);
            return frames;
        }
        let local_addrs: Vec<u64> = local.iter().map(|&i| addrs[i]).collect();
        let mut process = Process::new(Pid::from(tgid));
        // JIT runtimes publish symbols in /tmp/perf-PID.map.
        process.perf_map = true;
        // Symbol tables only, as `symbols_only` says.
        process.debug_syms = false;
        let source = Source::Process(process);
        // Its files are opened through /proc/PID/map_files: cached apart from any other process's.
        let symbolizer = self.symbolizer(&format!("process {tgid}"));
        match symbolizer.symbolize(&source, Input::AbsAddr(&local_addrs)) {
            Ok(symbolized) => {
                for (&i, sym) in local.iter().zip(symbolized) {
                    let frame = &mut frames[i];
                    // Named although no file maps it: the name came from the perf map of a JIT.
                    let anonymous = frame.module.is_empty();
                    fill(frame, sym);
                    if anonymous && !frame.function.is_empty() {
                        frame.kind = v1::FrameKind::Jit as i32;
                        frame.module = format!("/tmp/perf-{tgid}.map");
                    }
                }
            }
            Err(e) => {
                for &i in &local {
                    if frames[i].unsymbolized_reason.is_empty() {
                        frames[i].unsymbolized_reason = format!("symbolization failed: {e}");
                    }
                }
            }
        }
        // The process may have exited between reading its mappings and naming from its files:
        // what is left unnamed is named from the images on the host.
        let unnamed: Vec<usize> = local
            .into_iter()
            .filter(|&i| frames[i].function.is_empty() && !frames[i].module.is_empty())
            .collect();
        if !unnamed.is_empty() && has_exited(tgid) {
            self.name_from_images(&mut frames, unnamed);
        }
        frames
    }

    /// The address as the frame's image states it: its file offset through the PT_LOAD segment
    /// that holds it. Program headers are read once per build id.
    fn elf_address(&self, tgid: u32, frame: &v1::Frame) -> Option<u64> {
        if frame.build_id.is_empty() {
            return None;
        }
        self.vaddr(&ImageKey::BuildId(frame.build_id.clone()), tgid, frame)
    }

    /// The ELF virtual address of `frame`'s file offset in its image, `key` (with a build id or
    /// not).
    fn vaddr(&self, key: &ImageKey, tgid: u32, frame: &v1::Frame) -> Option<u64> {
        let mut cache = self.segments.borrow_mut();
        let segments = cache.entry(key.clone()).or_insert_with(|| {
            // The host's file when the process has exited (its /proc entry is gone).
            elf::read_header(&in_process(tgid, &frame.module))
                .or_else(|| elf::read_header(Path::new(&frame.module)))
                .map(|h| h.segments)
                .unwrap_or_default()
        });
        elf::vaddr_of_offset(segments, frame.file_offset)
    }

    /// Frames for kernel addresses, named from /proc/kallsyms.
    pub fn kernel(&self, ips: &[Ip]) -> Vec<v1::Frame> {
        let addrs: Vec<u64> = ips.iter().map(|ip| ip.lookup_address()).collect();
        let mut frames: Vec<v1::Frame> = ips
            .iter()
            .map(|ip| v1::Frame {
                module: bimodal_proto::KERNEL_MODULE.into(),
                ..unsymbolized(v1::FrameKind::Kernel, ip.address, String::new())
            })
            .collect();
        // kallsyms names every kernel function; searching the disk for vmlinux images is slow.
        let kernel = Kernel {
            vmlinux: blazesym::MaybeDefault::None,
            ..Default::default()
        };
        let source = Source::Kernel(kernel);
        let symbolizer = self.symbolizer("kernel");
        match symbolizer.symbolize(&source, Input::AbsAddr(&addrs)) {
            Ok(symbolized) => {
                for (frame, sym) in frames.iter_mut().zip(symbolized) {
                    fill(frame, sym);
                }
            }
            Err(e) => {
                for frame in &mut frames {
                    frame.unsymbolized_reason = format!("kallsyms unreadable: {e}");
                }
            }
        }
        frames
    }
}

/// An image as the caches know it: by its build id, or by its file (device and inode, through
/// the process's root) when it has none.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum ImageKey {
    BuildId(Vec<u8>),
    File(u64, u64),
}

impl ImageKey {
    /// `None` for an image without a build id whose file process `tgid` no longer shows.
    fn of(tgid: u32, image: &str, build_id: &[u8]) -> Option<ImageKey> {
        use std::os::unix::fs::MetadataExt;
        if !build_id.is_empty() {
            return Some(ImageKey::BuildId(build_id.to_vec()));
        }
        let meta = std::fs::metadata(in_process(tgid, image)).ok()?;
        Some(ImageKey::File(meta.dev(), meta.ino()))
    }
}

/// A symbolizer naming functions and variables from symbol tables, without source lines.
fn symbolizer() -> Symbolizer {
    Symbolizer::builder()
        .enable_code_info(false)
        .enable_inlined_fns(false)
        .build()
}

/// `file` read for its symbol table alone. Functions are named from symbol tables, on the node as
/// on the server (which stores the symbol tables of uploaded images, not their DWARF), so a stack
/// gets the same names either way. DWARF would add source lines, which nothing downstream keeps,
/// at the cost of decompressing and parsing it: the debug sections of installed debug files
/// (compressed, as distributions ship them) were the largest item of the agent's heap when it
/// named frames itself.
fn symbols_only(file: &Path) -> blazesym::symbolize::source::Elf {
    let mut elf = blazesym::symbolize::source::Elf::new(file);
    elf.debug_syms = false;
    elf
}

fn fill(frame: &mut v1::Frame, sym: Symbolized<'_>) {
    match sym {
        Symbolized::Sym(sym) => {
            frame.function = sym.name.into_owned();
            if frame.module.is_empty() {
                if let Some(module) = &sym.module {
                    frame.module = Path::new(module).to_string_lossy().into_owned();
                }
            }
            frame.unsymbolized_reason.clear();
        }
        Symbolized::Unknown(reason) => {
            if frame.unsymbolized_reason.is_empty() {
                frame.unsymbolized_reason = reason.to_string();
            }
        }
    }
}

/// Whether process `tgid` is gone or a zombie (exited, not yet reaped: it maps nothing).
fn has_exited(tgid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{tgid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| state == "Z" || state == "X"),
        Err(_) => true,
    }
}

/// What a data address belongs to: its mapping, the global variable, the cache line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DataObject {
    /// The mapping's class (`bss`, `data`, `heap`, `anon`, ...; `unknown` when unmapped).
    pub kind: &'static str,
    /// The ELF image for data and bss, else the mapping's path; empty for anonymous memory.
    pub path: String,
    /// The global variable holding the address, where the image has symbols.
    pub symbol: String,
    /// The 64-byte line: ELF virtual address for an image's data and bss (the same in every
    /// process and node), else the offset in the mapping.
    pub cache_line: u64,
}

const CACHE_LINE: u64 = 64;

impl Frames {
    /// Attributes data addresses of process `tgid` to their data objects, one per address.
    pub fn data_objects(&self, tgid: u32, addresses: &[u64]) -> Vec<DataObject> {
        let root = Path::new("/");
        let Ok(mappings) = crate::host::maps::read_mappings(root, tgid) else {
            return addresses
                .iter()
                .map(|_| DataObject {
                    kind: "unknown",
                    ..Default::default()
                })
                .collect();
        };
        let mut out = Vec::with_capacity(addresses.len());
        // ELF virtual addresses to symbolize, per image: (index in `out`, vaddr).
        let mut lookups: HashMap<&str, Vec<(usize, u64)>> = HashMap::new();
        // Whether each image is position independent: one ELF header read per image, not per address.
        let mut pie_of: HashMap<&str, bool> = HashMap::new();
        for &address in addresses {
            let Some(m) = mappings.iter().find(|m| m.start <= address && address < m.end) else {
                out.push(DataObject {
                    kind: "unknown",
                    cache_line: address & !(CACHE_LINE - 1),
                    ..Default::default()
                });
                continue;
            };
            let mut object = DataObject {
                kind: m.class.as_str(),
                path: m.image.clone().or_else(|| m.path.clone()).unwrap_or_default(),
                symbol: String::new(),
                cache_line: (address - m.start) & !(CACHE_LINE - 1),
            };
            if let Some(image) = m
                .image
                .as_deref()
                .filter(|_| matches!(m.class, MappingClass::Data | MappingClass::Bss))
            {
                // The image's load base: its lowest mapping, which maps file offset 0.
                let base = mappings
                    .iter()
                    .filter(|x| x.path.as_deref() == Some(image))
                    .map(|x| x.start.saturating_sub(x.offset))
                    .min()
                    .unwrap_or(0);
                let pie = *pie_of.entry(image).or_insert_with(|| {
                    elf::read_header(&in_process(tgid, image)).is_none_or(|h| h.position_independent)
                });
                let vaddr = if pie { address - base } else { address };
                object.cache_line = vaddr & !(CACHE_LINE - 1);
                lookups.entry(image).or_default().push((out.len(), vaddr));
            }
            out.push(object);
        }
        for (image, wanted) in lookups {
            let vaddrs: Vec<u64> = wanted.iter().map(|w| w.1).collect();
            let file = in_process(tgid, image);
            // Variables are named from symbol tables: the installed debug file's (a stripped
            // image keeps only its exported ones), else, or when it cannot be read, the image's.
            let debug_file = self.debug_file_of(tgid, image, &self.build_id_of(&file));
            let symbols = debug_file
                .iter()
                .chain([&file])
                .find_map(|symbols| self.variables(symbols, &vaddrs));
            for ((index, _), sym) in wanted.iter().zip(symbols.unwrap_or_default()) {
                out[*index].symbol = sym;
            }
        }
        out
    }

    /// The names of the variables at `vaddrs` in the symbol table of `file` (empty where none
    /// holds the address); `None` when `file` cannot be read. Symbols only: DWARF (often
    /// compressed in debug files) names lines of code, not variables, and would be decompressed
    /// and kept for nothing.
    fn variables(&self, file: &Path, vaddrs: &[u64]) -> Option<Vec<String>> {
        let source = Source::Elf(symbols_only(file));
        let symbolizer = self.symbolizer(&file.to_string_lossy());
        let symbols = symbolizer.symbolize(&source, Input::VirtOffset(vaddrs)).ok()?;
        Some(
            symbols
                .into_iter()
                .map(|sym| match sym {
                    Symbolized::Sym(sym) => sym.name.into_owned(),
                    Symbolized::Unknown(_) => String::new(),
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_function_to_name() -> u64 {
        std::hint::black_box(a_function_to_name as *const () as u64)
    }

    /// Past its bound the symbolizer is made anew and its caches emptied, and names stay right.
    #[test]
    fn caches_are_emptied_past_their_bound_and_names_stay_right() {
        let frames = Frames::default().with_cached_images(2);
        let me = std::process::id();
        let ip = [Ip {
            address: a_function_to_name(),
            leaf: true,
        }];
        let name = |frames: &Frames| frames.user(me, &ip)[0].function.clone();
        assert!(name(&frames).ends_with("a_function_to_name"), "{}", name(&frames));
        assert_eq!(frames.cached_images(), (1, 0), "this process is one image");
        for image in ["/a", "/b"] {
            drop(frames.symbolizer(image));
        }
        assert_eq!(frames.cached_images().0, 3, "over the bound until the next call");
        assert!(name(&frames).ends_with("a_function_to_name"));
        let (held, resets) = frames.cached_images();
        assert_eq!(resets, 1, "emptied once");
        assert!(held <= 2, "{held} images held, bound 2");
    }

    /// Functions are named from symbol tables, as the server's tables name them: a compiler
    /// clone keeps its own name (`find_module.constprop.0` in Debian 12's libc), where DWARF,
    /// which libc's installed debug file has, would name it by its origin.
    #[test]
    fn functions_are_named_from_symbol_tables_as_the_server_names_them() {
        let frames = Frames::default();
        let me = std::process::id();
        let malloc = libc::malloc as *const () as u64;
        let frame = frames
            .user(
                me,
                &[Ip {
                    address: malloc,
                    leaf: true,
                }],
            )
            .remove(0);
        let debug_file = frames
            .debug_file_of(me, &frame.module, &frame.build_id)
            .unwrap_or_else(|| panic!("no debug file of {}: tools/setup.sh installs libc6-dbg", frame.module));
        // In address order, whatever the locale: the same clone on every run.
        let nm = std::process::Command::new("nm")
            .args(["--defined-only", "--numeric-sort"])
            .env("LC_ALL", "C")
            .arg(&debug_file)
            .output()
            .expect("nm runs");
        let text = String::from_utf8_lossy(&nm.stdout);
        // (address, type, name) of the symbol table's code symbols.
        let code: Vec<(u64, &str, &str)> = text
            .lines()
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                let address = u64::from_str_radix(fields.next()?, 16).ok()?;
                let (kind, name) = (fields.next()?, fields.next()?);
                ["t", "T", "W"].contains(&kind).then_some((address, kind, name))
            })
            .collect();
        // A clone the compiler made, alone at its address.
        let (address, _, clone) = *code
            .iter()
            .find(|(address, kind, name)| {
                *kind == "t" && name.contains(".constprop.") && code.iter().filter(|c| c.0 == *address).count() == 1
            })
            .expect("libc has a constant-propagated clone");
        let bias = malloc - frame.elf_address;
        let named = frames
            .user(
                me,
                &[Ip {
                    address: bias + address,
                    leaf: true,
                }],
            )
            .remove(0);
        assert_eq!(named.function, clone, "at {address:#x} of {}", debug_file.display());
    }

    /// A frame left to the server goes out as its build id and addresses: no name, and no
    /// reason for the missing name (the server stores none).
    #[test]
    fn frames_left_to_the_server_carry_their_build_id_and_nothing_to_drop() {
        let frames = Frames::by_server();
        let frame = frames
            .user(
                std::process::id(),
                &[Ip {
                    address: a_function_to_name(),
                    leaf: true,
                }],
            )
            .remove(0);
        assert!(
            !frame.build_id.is_empty(),
            "this test's binary has a build id: {frame:?}"
        );
        assert_ne!(frame.elf_address, 0, "{frame:?}");
        assert_eq!((frame.function.as_str(), frame.unsymbolized_reason.as_str()), ("", ""));
    }
}
