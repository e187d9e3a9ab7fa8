//! Real stack shapes: folded profiles recorded by `bimodal-agent record` turned into the frames,
//! stacks and weights the batch generator draws from.
//!
//! Folded text keeps what a person reads (comm, function names, `_[k]` on kernel frames,
//! `[module+0xoffset]` for unnamed frames) and loses what the wire carries besides: modules of
//! named frames, build ids, addresses, threads. Those come from the profile's header (written by
//! testdata/loadgen/make_profile.py: threads and pids per comm, module paths), from a
//! `functions.tsv.gz` next to the profile (the module of each named function, as the agent saw
//! it), and otherwise are made up, stably: a fake build id per module, a file offset per
//! function and call site, a load base per process.

use std::collections::HashMap;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use bimodal_proto::v1;

use super::rng::{hash_str, mix, Alias};
use super::wire;

/// How frames go out: the two ways a real agent sends them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FrameNames {
    /// Function names filled in, as agents running `--symbolize local` send them.
    Named,
    /// Frames of images with a build id sent unnamed, as build id + file offset + ELF address,
    /// for the server to name (agents in server-symbolization mode).
    BuildId,
}

/// blazesym's reason for a frame in an image without symbols for it.
const NO_SYMBOLS: &str = "symbolization source has no or no relevant symbols";

/// Kernel text the agent reports frames in; a node's KASLR slide is added to it.
pub const KERNEL_TEXT: u64 = 0xffff_ffff_8100_0000;

/// Where a frame's address comes from when a batch is generated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Kernel text: the node's kernel base plus the frame's offset.
    Kernel,
    /// A file mapping: the process's load base of the module plus the file offset.
    Module(u32),
    /// No mapping (`[unknown]`, JIT code): the offset is the address.
    Raw,
}

/// One distinct frame of the profiles.
#[derive(Debug)]
pub struct FrameDef {
    /// How the address is made.
    pub place: Place,
    /// File offset (module frames), offset in kernel text, or the address itself (raw).
    pub offset: u64,
    /// Every field of the `Frame` message except `address`, encoded once.
    pub fields: Vec<u8>,
    /// What node-specific variants of this frame are made from.
    pub kind: v1::FrameKind,
    /// The function name; empty when the agent could not name it.
    pub function: String,
}

/// A mapped file frames point into.
#[derive(Debug)]
pub struct Module {
    /// Path as the agent reports it.
    pub path: String,
    /// A fake GNU build id, the same on every node: nodes run the same images.
    pub build_id: [u8; 20],
    /// A main program (loaded near 0x5555...) rather than a shared library (near 0x7f...).
    pub executable: bool,
}

/// The processes a comm stands for: how many, with how many threads, and who they are.
#[derive(Debug)]
pub struct Comm {
    /// Thread name as sampled (at most 15 bytes).
    pub name: String,
    /// Processes with this comm sampled in one interval.
    pub pids: u32,
    /// Threads with this comm sampled in one interval (at least `pids`).
    pub threads: u32,
    /// A kernel thread: no executable, no user frames.
    pub kernel: bool,
    /// Processes live shorter than an interval (a build's compilers, a script's commands): each
    /// interval has new pids.
    pub short_lived: bool,
    /// `Process.executable`.
    pub executable: String,
    /// `Process.cgroup`.
    pub cgroup: String,
    /// `Process.systemd_unit`.
    pub unit: String,
    /// Cumulative thread weights: a few threads of a process take most of its samples.
    pub thread_weights: Vec<f64>,
}

impl Comm {
    /// A thread index drawn by weight from `u` in [0, 1).
    pub fn thread_at(&self, u: f64) -> u32 {
        let total = self.thread_weights.last().copied().unwrap_or(1.0);
        let i = self.thread_weights.partition_point(|&w| w <= u * total);
        i.min(self.thread_weights.len().saturating_sub(1)) as u32
    }
}

/// A call stack of the profiles, leaf first.
#[derive(Debug)]
pub struct Stack {
    /// Index into [`Catalog::comms`].
    pub comm: u32,
    /// Indices into [`Catalog::frames`], leaf first.
    pub frames: Vec<u32>,
    /// Frames before this index are kernel frames; from it on, user frames (the user stack a
    /// data sample carries).
    pub user_from: u32,
}

impl Stack {
    /// Whether any frame is in user space, so the stack belongs to one process's addresses.
    pub fn has_user(&self) -> bool {
        (self.user_from as usize) < self.frames.len()
    }
}

/// One profile: the stacks of one event kind and how often each was sampled.
#[derive(Debug)]
pub struct Profile {
    /// The file it came from.
    pub path: PathBuf,
    pub event: v1::EventKind,
    /// Sample period in the event's unit.
    pub period: u64,
    /// Samples per second on the recorded machine.
    pub samples_per_second: f64,
    /// Its stacks, in [`Catalog::stacks`].
    pub stacks: Range<u32>,
    /// Draws a stack of `stacks` (relative index) by weight.
    pub alias: Alias,
    /// Records merged into the profile (each one interval).
    pub records: u32,
    /// Folded lines kept, and the long tail made up from the header's count.
    pub lines: usize,
    pub tail_stacks: u64,
}

impl Profile {
    /// `EventSource.description`, `name`, `unit` as the agent sends them.
    pub fn source(&self) -> (String, &'static str, &'static str) {
        match self.event {
            v1::EventKind::Cpu => (
                format!("software cpu-clock, {} Hz per CPU", 1_000_000_000 / self.period.max(1)),
                "cpu-clock",
                "nanoseconds",
            ),
            v1::EventKind::PageFault => (
                format!("software page-faults, 1 in {}", self.period),
                "page-faults",
                "faults",
            ),
            other => (format!("{} (loadgen)", other.name()), "events", "events"),
        }
    }
}

/// Everything batches are made of, shared by every simulated node.
#[derive(Debug)]
pub struct Catalog {
    pub frames: Vec<FrameDef>,
    pub modules: Vec<Module>,
    pub comms: Vec<Comm>,
    pub stacks: Vec<Stack>,
    pub profiles: Vec<Profile>,
    pub names: FrameNames,
}

impl Catalog {
    /// Encodes a frame's fields (all but the address) as the agent fills them.
    pub fn frame_fields(&self, kind: v1::FrameKind, module: Option<u32>, function: &str, file_offset: u64) -> Vec<u8> {
        let module = module.map(|m| &self.modules[m as usize]);
        let mut buf = Vec::with_capacity(64 + function.len());
        wire::put_uint(&mut buf, 1, kind as u64);
        match (kind, module) {
            (v1::FrameKind::Kernel, _) => {
                // Named from kallsyms by every agent; no build id, no file offset.
                wire::put_bytes(&mut buf, 3, b"vmlinux");
                wire::put_bytes(&mut buf, 6, function.as_bytes());
            }
            (_, Some(m)) => {
                wire::put_bytes(&mut buf, 3, m.path.as_bytes());
                wire::put_bytes(&mut buf, 4, &m.build_id);
                wire::put_uint(&mut buf, 5, file_offset);
                match (self.names, function.is_empty()) {
                    (FrameNames::Named, false) => wire::put_bytes(&mut buf, 6, function.as_bytes()),
                    (FrameNames::Named, true) => wire::put_bytes(&mut buf, 9, NO_SYMBOLS.as_bytes()),
                    // No reason: the agent leaves frames for the server unexplained.
                    (FrameNames::BuildId, _) => {}
                }
                // PIE text segments map file offsets one to one.
                wire::put_uint(&mut buf, 10, file_offset);
            }
            (_, None) if function.is_empty() => wire::put_bytes(&mut buf, 9, b"Unmapped"),
            // JIT code named from a perf map.
            (_, None) => wire::put_bytes(&mut buf, 6, function.as_bytes()),
        }
        buf
    }

    /// Median of the profiles' stack depths, for messages.
    pub fn describe(&self) -> String {
        self.profiles
            .iter()
            .map(|p| {
                format!(
                    "{}: {} ({:.0} samples/s, {} stacks + {} tail)",
                    p.path.display(),
                    p.event.name(),
                    p.samples_per_second,
                    p.lines,
                    p.tail_stacks
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// A profile file's header fields and stack lines.
struct Parsed {
    event: Option<v1::EventKind>,
    period: Option<u64>,
    records: u32,
    record_seconds: u32,
    tail: (u64, u64),
    comms: Vec<(String, u32, u32, String)>,
    modules: Vec<String>,
    lines: Vec<(String, u64)>,
}

fn read_text(path: &Path) -> anyhow::Result<String> {
    let raw = std::fs::read(path).with_context(|| format!("failed to read `{}`", path.display()))?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut text = String::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_string(&mut text)
            .with_context(|| format!("failed to decompress `{}`", path.display()))?;
        Ok(text)
    } else {
        String::from_utf8(raw).with_context(|| format!("`{}` is not UTF-8 text", path.display()))
    }
}

fn parse(path: &Path, text: &str) -> anyhow::Result<Parsed> {
    let mut p = Parsed {
        event: None,
        period: None,
        records: 1,
        record_seconds: 10,
        tail: (0, 0),
        comms: Vec::new(),
        modules: Vec::new(),
        lines: Vec::new(),
    };
    for (n, line) in text.lines().enumerate() {
        let at = || format!("`{}` line {}", path.display(), n + 1);
        if let Some(header) = line.strip_prefix("# ") {
            let fields: Vec<&str> = header.split('\t').collect();
            let num = |i: usize| -> anyhow::Result<u64> {
                fields
                    .get(i)
                    .and_then(|v| v.trim().parse().ok())
                    .with_context(|| format!("{}: expected a number in field {i}", at()))
            };
            match fields[0] {
                "event" => {
                    let name = fields.get(1).copied().unwrap_or_default();
                    p.event = Some(
                        v1::EventKind::from_name(name).with_context(|| format!("{}: unknown event `{name}`", at()))?,
                    );
                }
                "period" => p.period = Some(num(1)?),
                "intervals" => p.records = num(1)? as u32,
                "interval_seconds" => p.record_seconds = num(1)? as u32,
                "tail" => p.tail = (num(1)?, num(2)?),
                "comm" => p.comms.push((
                    fields.get(1).copied().unwrap_or_default().to_owned(),
                    num(2)? as u32,
                    num(3)? as u32,
                    fields.get(4).copied().unwrap_or_default().to_owned(),
                )),
                "module" => p.modules.extend(fields.get(1).map(|m| m.to_string())),
                _ => {}
            }
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (stack, value) = line
            .rsplit_once(' ')
            .with_context(|| format!("{}: expected `comm;frames… value`", at()))?;
        let value: u64 = value
            .trim()
            .parse()
            .with_context(|| format!("{}: `{value}` is not a sample value", at()))?;
        p.lines.push((stack.to_owned(), value));
    }
    if p.event.is_none() {
        // A plain `record` output: the event from the file name.
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        p.event = if name.contains("page_fault") {
            Some(v1::EventKind::PageFault)
        } else if name.contains("cpu") {
            Some(v1::EventKind::Cpu)
        } else {
            None
        };
    }
    if p.lines.is_empty() {
        bail!("`{}` has no stacks", path.display());
    }
    Ok(p)
}

/// Named functions' modules as the agent resolved them: `module\tfunction` lines.
fn read_functions(dir: &Path) -> anyhow::Result<HashMap<String, String>> {
    let mut map = HashMap::new();
    for name in ["functions.tsv.gz", "functions.tsv"] {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        for line in read_text(&path)?.lines() {
            if let Some((module, function)) = line.split_once('\t') {
                map.entry(function.to_owned()).or_insert_with(|| module.to_owned());
            }
        }
        break;
    }
    Ok(map)
}

/// libc functions by name, for named frames the functions table does not know.
fn is_libc(f: &str) -> bool {
    const PREFIXES: [&str; 14] = [
        "__GI_",
        "__libc_",
        "_int_",
        "__memmove",
        "__memcpy",
        "__memset",
        "__memcmp",
        "__strlen",
        "__strchr",
        "__strcmp",
        "pthread_",
        "__pthread",
        "__futex",
        "_IO_",
    ];
    const NAMES: [&str; 12] = [
        "malloc",
        "free",
        "calloc",
        "realloc",
        "start_thread",
        "clone3",
        "__clone3",
        "__clone",
        "syscall",
        "epoll_wait",
        "__poll",
        "__madvise",
    ];
    PREFIXES.iter().any(|p| f.starts_with(p)) || NAMES.contains(&f)
}

fn is_loader(f: &str) -> bool {
    f.starts_with("_dl_") || f.starts_with("_rtld") || f == "dl_main" || f == "__tls_get_addr"
}

/// Builds the catalog while loading, interning modules, frames and comms.
struct Builder {
    catalog: Catalog,
    module_index: HashMap<String, u32>,
    frame_index: HashMap<String, u32>,
    comm_index: HashMap<String, u32>,
    /// Module paths by file name, from the headers (`[libc.so.6+0x...]` names only the file).
    by_basename: HashMap<String, String>,
    functions: HashMap<String, String>,
    /// Comm facts from the header of the profile being read: (pids, threads, executable).
    comm_facts: HashMap<String, (u32, u32, String)>,
    /// The profile being read: comms are per profile, since page faults see more short-lived
    /// processes (their start-up) than CPU samples do.
    profile: usize,
}

/// One frame of a folded line, classified.
enum Parsed1<'a> {
    Kernel(&'a str),
    Jit(&'a str),
    Unknown,
    ModuleOffset(&'a str, u64),
    Named(&'a str),
}

fn classify(name: &str) -> Parsed1<'_> {
    if let Some(f) = name.strip_suffix("_[k]") {
        return Parsed1::Kernel(f);
    }
    if let Some(f) = name.strip_suffix("_[j]") {
        return Parsed1::Jit(f);
    }
    if name == "[unknown]" {
        return Parsed1::Unknown;
    }
    if let Some(inner) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        if let Some((module, hex)) = inner.rsplit_once("+0x") {
            if let Ok(offset) = u64::from_str_radix(hex, 16) {
                return Parsed1::ModuleOffset(module, offset);
            }
        }
    }
    Parsed1::Named(name)
}

/// Where a function starts in its module, and a call site (return address) inside it: one
/// function calls different children from different places.
fn function_offset(module: &str, function: &str, child: &str) -> u64 {
    let base = (0x1000 + mix(&[hash_str(module), hash_str(function)]) % 0x400_0000) & !0xf;
    base + 1 + mix(&[hash_str(function), hash_str(child)]) % 0x400
}

impl Builder {
    fn module(&mut self, path: &str) -> u32 {
        if let Some(&i) = self.module_index.get(path) {
            return i;
        }
        let mut build_id = [0u8; 20];
        for (i, chunk) in build_id.chunks_mut(8).enumerate() {
            let word = mix(&[hash_str(path), i as u64]).to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        let file = path.rsplit('/').next().unwrap_or(path);
        let i = self.catalog.modules.len() as u32;
        self.catalog.modules.push(Module {
            path: path.to_owned(),
            build_id,
            executable: !file.contains(".so"),
        });
        self.module_index.insert(path.to_owned(), i);
        i
    }

    fn module_by_basename(&mut self, file: &str) -> u32 {
        let path = self
            .by_basename
            .get(file)
            .cloned()
            .unwrap_or_else(|| format!("/usr/lib/{file}"));
        self.module(&path)
    }

    fn module_named(&mut self, prefix: &str, fallback: &str) -> u32 {
        let path = self
            .by_basename
            .iter()
            .filter(|(file, _)| file.starts_with(prefix))
            .map(|(_, path)| path.clone())
            .min()
            .unwrap_or_else(|| fallback.to_owned());
        self.module(&path)
    }

    fn comm(&mut self, name: &str) -> u32 {
        let key = format!("{}\0{name}", self.profile);
        if let Some(&i) = self.comm_index.get(&key) {
            return i;
        }
        let (pids, threads, executable) = self
            .comm_facts
            .get(name)
            .cloned()
            .unwrap_or_else(|| (1, 1, String::new()));
        let i = self.catalog.comms.len() as u32;
        self.catalog.comms.push(Comm {
            name: name.to_owned(),
            pids: pids.max(1),
            threads: threads.max(pids).max(1),
            kernel: false,
            short_lived: false,
            executable,
            cgroup: String::new(),
            unit: String::new(),
            thread_weights: Vec::new(),
        });
        self.comm_index.insert(key, i);
        i
    }

    fn frame(
        &mut self,
        key: String,
        make: impl FnOnce(&mut Self) -> (Place, u64, v1::FrameKind, Option<u32>, String),
    ) -> u32 {
        if let Some(&i) = self.frame_index.get(&key) {
            return i;
        }
        let (place, offset, kind, module, function) = make(self);
        let fields = self.catalog.frame_fields(kind, module, &function, offset);
        let i = self.catalog.frames.len() as u32;
        self.catalog.frames.push(FrameDef {
            place,
            offset,
            fields,
            kind,
            function,
        });
        self.frame_index.insert(key, i);
        i
    }

    /// The module a named user frame of `comm` lives in.
    fn module_of(&mut self, function: &str, comm: u32) -> u32 {
        if let Some(path) = self.functions.get(function).cloned() {
            return self.module(&path);
        }
        if is_loader(function) {
            return self.module_named("ld-linux", "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2");
        }
        if is_libc(function) {
            return self.module_named("libc.so", "/usr/lib/x86_64-linux-gnu/libc.so.6");
        }
        let comm = &self.catalog.comms[comm as usize];
        let path = if comm.executable.is_empty() {
            format!("/usr/bin/{}", comm.name.replace([' ', '/'], "-"))
        } else {
            comm.executable.clone()
        };
        self.module(&path)
    }

    /// Adds one folded line (`comm;root;…;leaf`) as a stack.
    fn stack(&mut self, line: &str) -> Stack {
        let mut names = line.split(';');
        let comm_name = names.next().unwrap_or_default();
        let comm = self.comm(comm_name);
        let root_first: Vec<&str> = names.collect();
        // `[unknown]` frames are told apart by the path to them: one unmapped address per caller.
        let mut prefix = Vec::with_capacity(root_first.len());
        let mut h = hash_str(comm_name);
        for name in &root_first {
            h = mix(&[h, hash_str(name)]);
            prefix.push(h);
        }
        let mut frames = Vec::with_capacity(root_first.len());
        let mut kernel_frames = 0u32;
        for (i, name) in root_first.iter().enumerate().rev() {
            let child = if i + 1 < root_first.len() {
                root_first[i + 1]
            } else {
                ""
            };
            let index = match classify(name) {
                Parsed1::Kernel(f) => {
                    if frames.len() == kernel_frames as usize {
                        kernel_frames += 1;
                    }
                    let key = format!("k\0{f}\0{child}");
                    self.frame(key, |_| {
                        let offset = (mix(&[hash_str(f)]) % 0x1e0_0000) & !0xf;
                        let site = 1 + mix(&[hash_str(f), hash_str(child)]) % 0x200;
                        (Place::Kernel, offset + site, v1::FrameKind::Kernel, None, f.to_owned())
                    })
                }
                Parsed1::Jit(f) => self.frame(format!("j\0{f}\0{child}"), |_| {
                    let address = 0x7f80_0000_0000 | (mix(&[hash_str(f), hash_str(child)]) & 0xff_ffff_fff0);
                    (Place::Raw, address, v1::FrameKind::Jit, None, f.to_owned())
                }),
                Parsed1::Unknown => self.frame(format!("u\0{}", prefix[i]), |_| {
                    let address = 0x7f00_0000_0000 | (prefix[i] & 0xff_ffff_fff0);
                    (Place::Raw, address, v1::FrameKind::User, None, String::new())
                }),
                Parsed1::ModuleOffset(file, offset) => {
                    let module = self.module_by_basename(file);
                    self.frame(format!("m\0{module}\0{offset}"), |_| {
                        (
                            Place::Module(module),
                            offset,
                            v1::FrameKind::User,
                            Some(module),
                            String::new(),
                        )
                    })
                }
                Parsed1::Named(f) => {
                    let module = self.module_of(f, comm);
                    self.frame(format!("n\0{module}\0{f}\0{child}"), |b| {
                        let path = &b.catalog.modules[module as usize].path;
                        let offset = function_offset(path, f, child);
                        (
                            Place::Module(module),
                            offset,
                            v1::FrameKind::User,
                            Some(module),
                            f.to_owned(),
                        )
                    })
                }
            };
            frames.push(index);
        }
        Stack {
            comm,
            frames,
            user_from: kernel_frames,
        }
    }

    /// A stack seen too rarely to be kept: a kept one with another leaf address, so it is as
    /// deep and as named as its kind, and distinct.
    fn tail_stack(&mut self, base: u32, n: u64) -> Stack {
        let b = &self.catalog.stacks[base as usize];
        let (comm, user_from) = (b.comm, b.user_from);
        let mut frames = b.frames.clone();
        if let Some(leaf) = frames.first_mut() {
            *leaf = self.variant(*leaf, mix(&[0x7a11, n]));
        }
        Stack {
            comm,
            frames,
            user_from,
        }
    }

    /// Another frame like `frame` at a different address (and, when named, a clone's name).
    fn variant(&mut self, frame: u32, n: u64) -> u32 {
        let key = format!("v\0{frame}\0{n}");
        self.frame(key, |b| {
            let f = &b.catalog.frames[frame as usize];
            variant_of(f, n)
        })
    }
}

/// The parts of a variant of `f` (see [`Builder::variant`]); node-specific stacks use it too.
pub fn variant_of(f: &FrameDef, n: u64) -> (Place, u64, v1::FrameKind, Option<u32>, String) {
    let shift = 0x10 + (n % 0x8000) * 0x10;
    let module = match f.place {
        Place::Module(m) => Some(m),
        _ => None,
    };
    let function = match (f.kind, f.function.is_empty()) {
        (_, true) => String::new(),
        (v1::FrameKind::Kernel, false) => format!("{}.isra.{}", f.function, n % 16),
        (_, false) => format!("{} [clone .constprop.{}]", f.function, n % 64),
    };
    (f.place, f.offset + shift, f.kind, module, function)
}

/// Loads profiles into one catalog whose frames go out as `names` says.
pub fn load(paths: &[PathBuf], names: FrameNames) -> anyhow::Result<Catalog> {
    let mut b = Builder {
        catalog: Catalog {
            frames: Vec::new(),
            modules: Vec::new(),
            comms: Vec::new(),
            stacks: Vec::new(),
            profiles: Vec::new(),
            names,
        },
        module_index: HashMap::new(),
        frame_index: HashMap::new(),
        comm_index: HashMap::new(),
        by_basename: HashMap::new(),
        functions: HashMap::new(),
        comm_facts: HashMap::new(),
        profile: 0,
    };
    let mut parsed = Vec::new();
    for path in paths {
        let text = read_text(path)?;
        let p = parse(path, &text)?;
        for m in &p.modules {
            let file = m.rsplit('/').next().unwrap_or(m);
            b.by_basename.entry(file.to_owned()).or_insert_with(|| m.clone());
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        for (function, module) in read_functions(dir)? {
            b.functions.entry(function).or_insert(module);
        }
        parsed.push((path.clone(), p));
    }

    for (pi, (path, p)) in parsed.into_iter().enumerate() {
        b.profile = pi;
        b.comm_facts = p
            .comms
            .iter()
            .map(|(name, pids, threads, exe)| (name.clone(), (*pids, *threads, exe.clone())))
            .collect();
        let event = p.event.with_context(|| {
            format!(
                "`{}`: which event is it? Add a `# event\tcpu` header or name the file after the event",
                path.display()
            )
        })?;
        let period = p.period.unwrap_or(match event {
            v1::EventKind::Cpu => 10_101_010,
            v1::EventKind::PageFault => 100,
            _ => 1,
        });
        let first = b.catalog.stacks.len() as u32;
        let mut weights = Vec::with_capacity(p.lines.len() + p.tail.0 as usize);
        let mut total = 0u64;
        for (line, value) in &p.lines {
            let count = (value + period / 2) / period.max(1);
            let stack = b.stack(line);
            b.catalog.stacks.push(stack);
            weights.push(count.max(1) as f64);
            total += count.max(1);
        }
        // The tail is made from the rarest kept stacks: those are most like it.
        let kept = b.catalog.stacks.len() as u32 - first;
        let rarest = weights.iter().copied().fold(f64::INFINITY, f64::min);
        let rare: Vec<u32> = (0..kept)
            .filter(|&i| weights[i as usize] <= rarest)
            .map(|i| first + i)
            .collect();
        let (tail_stacks, tail_samples) = p.tail;
        for n in 0..tail_stacks {
            let base = rare[(mix(&[hash_str(&path.to_string_lossy()), n]) % rare.len() as u64) as usize];
            let stack = b.tail_stack(base, n);
            b.catalog.stacks.push(stack);
            weights.push(tail_samples as f64 / tail_stacks as f64);
        }
        total += tail_samples;
        let last = b.catalog.stacks.len() as u32;
        let seconds = f64::from(p.records.max(1) * p.record_seconds.max(1));
        b.catalog.profiles.push(Profile {
            path,
            event,
            period,
            samples_per_second: total as f64 / seconds,
            stacks: first..last,
            alias: Alias::new(&weights),
            records: p.records.max(1),
            lines: p.lines.len(),
            tail_stacks,
        });
    }

    // Who the comms' processes are, from what their stacks show.
    let mut has_user = vec![false; b.catalog.comms.len()];
    for s in &b.catalog.stacks {
        has_user[s.comm as usize] |= s.has_user();
    }
    for (comm, user) in b.catalog.comms.iter_mut().zip(has_user) {
        comm.kernel = !user && comm.executable.is_empty();
        // A process per sampled thread: commands and compilers that come and go.
        comm.short_lived = !comm.kernel && comm.pids > 1 && comm.pids * 2 >= comm.threads;
    }
    // Comms of one executable are threads of its processes (rustc's `opt cgu.00`, clickhouse's
    // pools): they share its pids, and its processes come and go together.
    let mut short_exe: HashMap<String, bool> = HashMap::new();
    for comm in b.catalog.comms.iter().filter(|c| !c.executable.is_empty()) {
        *short_exe.entry(comm.executable.clone()).or_default() |= comm.short_lived;
    }
    for comm in b.catalog.comms.iter_mut() {
        comm.short_lived |= short_exe.get(&comm.executable).copied().unwrap_or(false);
        let file = comm.executable.rsplit('/').next().unwrap_or_default().to_owned();
        (comm.cgroup, comm.unit) = if comm.kernel {
            ("/".to_owned(), String::new())
        } else if comm.short_lived || file.is_empty() {
            // What runs builds and scripts on a fleet node.
            (
                "/system.slice/gitlab-runner.service".to_owned(),
                "gitlab-runner.service".to_owned(),
            )
        } else {
            (format!("/system.slice/{file}.service"), format!("{file}.service"))
        };
        if !comm.kernel && comm.executable.is_empty() {
            comm.executable = format!("/usr/bin/{}", comm.name.replace([' ', '/'], "-"));
        }
        // Zipf: the first thread of a pool is the busiest.
        let mut acc = 0.0;
        comm.thread_weights = (0..comm.threads)
            .map(|t| {
                acc += 1.0 / f64::from(t + 1);
                acc
            })
            .collect();
    }
    Ok(b.catalog)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_frames_are_classified() {
        assert!(matches!(
            classify("clear_page_erms_[k]"),
            Parsed1::Kernel("clear_page_erms")
        ));
        assert!(matches!(classify("[unknown]"), Parsed1::Unknown));
        assert!(matches!(
            classify("[libc.so.6+0x1f00]"),
            Parsed1::ModuleOffset("libc.so.6", 0x1f00)
        ));
        assert!(matches!(classify("foo [clone .warm]"), Parsed1::Named(_)));
    }
}
