//! A process's mappings from `/proc/PID/maps`, each classified (text, data, bss, heap, ...):
//! what sampling needs to name an address and unwind through it, and what `node::placement`
//! adds NUMA pages to from `numa_maps`. Also the error every reader of a process's files shares.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The page size assumed when `numa_maps` gives none (it omits it for mappings without pages).
pub const DEFAULT_PAGE_SIZE: u64 = 4096;

/// A failure to read or understand one file of a process.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// The file could not be read (see [`ProcError::process_gone`]).
    #[error("failed to read `{}`: {source}", path.display())]
    Read {
        /// The file, including the root prefix.
        path: PathBuf,
        /// The underlying I/O error.
        source: io::Error,
    },
    /// A line of the file is not in the format the kernel documents.
    #[error("failed to parse `{}`: {reason} in line {line:?}", path.display())]
    Parse {
        /// The file, including the root prefix.
        path: PathBuf,
        /// The offending line.
        line: String,
        /// What was wrong with it.
        reason: String,
    },
}

impl ProcError {
    /// Whether the error only means the process exited while it was read, which callers
    /// sampling arbitrary pids should skip silently.
    pub fn process_gone(&self) -> bool {
        const ESRCH: i32 = 3;
        match self {
            ProcError::Read { source, .. } => {
                source.kind() == io::ErrorKind::NotFound || source.raw_os_error() == Some(ESRCH)
            }
            ProcError::Parse { .. } => false,
        }
    }
}

/// What a mapping holds, judged from its path, permissions and neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MappingClass {
    /// Executable file mapping: an ELF image's code.
    Text,
    /// Writable private mapping of an ELF image: `.data` (and the first page of `.bss`).
    Data,
    /// Anonymous writable mapping directly after an ELF image's last file mapping: `.bss`.
    Bss,
    /// Read-only mapping of an ELF image: headers, `.rodata`, RELRO after relocation.
    Rodata,
    /// The `brk` heap (`[heap]`).
    Heap,
    /// The main thread's stack (`[stack]`); other threads' stacks are anonymous mappings.
    Stack,
    /// Other anonymous memory: mmap'ed malloc arenas, thread stacks, `[anon:NAME]`.
    Anon,
    /// A mapping of a regular file that is not an ELF image (data files, caches).
    File,
    /// Shared memory: SysV, POSIX (`/dev/shm`), memfd, shared anonymous.
    Shm,
    /// Kernel-provided pages: `[vdso]`, `[vvar]`, `[vvar_vclock]`, `[vsyscall]`.
    Vdso,
    /// Anything else (`[uprobes]`, inaccessible gaps between an image's segments).
    Other,
}

impl MappingClass {
    /// The word used in findings, e.g. `bss`.
    pub fn as_str(self) -> &'static str {
        match self {
            MappingClass::Text => "text",
            MappingClass::Data => "data",
            MappingClass::Bss => "bss",
            MappingClass::Rodata => "rodata",
            MappingClass::Heap => "heap",
            MappingClass::Stack => "stack",
            MappingClass::Anon => "anon",
            MappingClass::File => "file",
            MappingClass::Shm => "shm",
            MappingClass::Vdso => "vdso",
            MappingClass::Other => "other",
        }
    }
}

/// One mapping of the process, with its NUMA placement where `node::placement` read it (empty
/// otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Permissions as in `maps`, e.g. `rw-p` (`p` private, `s` shared).
    pub perms: String,
    /// Offset into the mapped file.
    pub offset: u64,
    /// Device (`major:minor`) and inode of the mapped file; inode 0 for anonymous memory. The
    /// same file has the same pair in every mount namespace.
    pub device: String,
    pub inode: u64,
    /// The path as `maps` shows it (`/usr/bin/scylla`, `[heap]`, `/memfd:x (deleted)`); `None`
    /// for anonymous memory.
    pub path: Option<String>,
    /// The ELF image this mapping is part of, for text, data, rodata and bss.
    pub image: Option<String>,
    /// What the mapping holds.
    pub class: MappingClass,
    /// The memory policy from `numa_maps`, e.g. `default`, `bind:1`, `interleave:0-1`; `None`
    /// when `numa_maps` does not cover the mapping.
    pub policy: Option<String>,
    /// Resident pages per node (`N<node>=pages`), in units of `page_size_bytes`.
    pub pages_per_node: BTreeMap<u32, u64>,
    /// `kernelpagesize_kB` in bytes: 4 KiB normally (also for THP), 2 MiB / 1 GiB for hugetlb.
    pub page_size_bytes: Option<u64>,
    /// Anonymous pages (`anon=`), e.g. copied-on-write pages of a file mapping.
    pub anon_pages: Option<u64>,
    /// Dirty pages (`dirty=`).
    pub dirty_pages: Option<u64>,
}

impl Mapping {
    /// Whether its code may run (`x` in its permissions).
    pub fn is_executable(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }

    /// Virtual size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// Resident pages on all nodes.
    pub fn resident_pages(&self) -> u64 {
        self.pages_per_node.values().sum()
    }

    /// Resident bytes on all nodes.
    pub fn resident_bytes(&self) -> u64 {
        self.resident_pages()
            .saturating_mul(self.page_size_bytes.unwrap_or(DEFAULT_PAGE_SIZE))
    }

    /// A short human name: `bss of /usr/bin/scylla`, `[heap]`, `anonymous mapping`.
    pub fn describe(&self) -> String {
        match (&self.image, &self.path) {
            (Some(image), _) => format!("{} of {image}", self.class.as_str()),
            (None, Some(path)) => path.clone(),
            (None, None) => "anonymous mapping".to_string(),
        }
    }
}

/// The mappings of process `pid`, classified, without their pages: cheap enough to attribute
/// data addresses at every drain (reading `numa_maps` walks the page tables).
pub fn read_mappings(root: &Path, pid: u32) -> Result<Vec<Mapping>, ProcError> {
    let maps_path = root.join("proc").join(pid.to_string()).join("maps");
    let mut mappings = parse_maps(&maps_path, &read(&maps_path)?)?;
    classify(&mut mappings);
    Ok(mappings)
}

pub fn read(path: &Path) -> Result<String, ProcError> {
    fs::read_to_string(path).map_err(|source| ProcError::Read {
        path: path.to_path_buf(),
        source,
    })
}

pub fn parse_error(path: &Path, line: &str, reason: &str) -> ProcError {
    ProcError::Parse {
        path: path.to_path_buf(),
        line: line.to_string(),
        reason: reason.to_string(),
    }
}

/// Splits off the first whitespace-separated word.
fn next_word(text: &str) -> Option<(&str, &str)> {
    let text = text.trim_start();
    if text.is_empty() {
        return None;
    }
    let end = text.find(char::is_whitespace).unwrap_or(text.len());
    Some((&text[..end], &text[end..]))
}

/// `start-end perms offset dev inode [path]`; the path may contain spaces, so it is the rest of
/// the line rather than a word.
pub fn parse_maps(path: &Path, text: &str) -> Result<Vec<Mapping>, ProcError> {
    let mut mappings = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let bad = |reason: &str| parse_error(path, line, reason);
        let (range, rest) = next_word(line).ok_or_else(|| bad("empty line"))?;
        let (perms, rest) = next_word(rest).ok_or_else(|| bad("no permissions"))?;
        let (offset, rest) = next_word(rest).ok_or_else(|| bad("no offset"))?;
        let (device, rest) = next_word(rest).ok_or_else(|| bad("no device"))?;
        let (inode, rest) = next_word(rest).ok_or_else(|| bad("no inode"))?;
        let inode = inode.parse().map_err(|_| bad("bad inode"))?;
        let (start, end) = range.split_once('-').ok_or_else(|| bad("address range without '-'"))?;
        let start = u64::from_str_radix(start, 16).map_err(|_| bad("bad start address"))?;
        let end = u64::from_str_radix(end, 16).map_err(|_| bad("bad end address"))?;
        let offset = u64::from_str_radix(offset, 16).map_err(|_| bad("bad offset"))?;
        if perms.len() != 4 {
            return Err(bad("permissions are not 4 characters"));
        }
        let file = rest.trim_start();
        mappings.push(Mapping {
            start,
            end,
            perms: perms.to_string(),
            offset,
            device: device.to_string(),
            inode,
            path: (!file.is_empty()).then(|| file.to_string()),
            image: None,
            class: MappingClass::Other,
            policy: None,
            pages_per_node: BTreeMap::new(),
            page_size_bytes: None,
            anon_pages: None,
            dirty_pages: None,
        });
    }
    Ok(mappings)
}

/// Assigns classes. An ELF image is a file with an executable mapping in this process; its
/// `.bss` is the anonymous `rw-p` memory right after its last file mapping, continued through
/// further adjacent anonymous `rw-p` mappings because `mbind` or `mprotect` on part of a large
/// `.bss` splits it into several.
pub fn classify(mappings: &mut [Mapping]) {
    let images: BTreeSet<String> = mappings
        .iter()
        .filter(|m| m.is_executable())
        .filter_map(|m| m.path.clone())
        .filter(|p| !p.starts_with('[') && !is_shm_path(p))
        .collect();
    for i in 0..mappings.len() {
        let (before, rest) = mappings.split_at_mut(i);
        let m = &mut rest[0];
        let perms = m.perms.as_bytes();
        let (readable, writable, executable, shared) =
            (perms[0] == b'r', perms[1] == b'w', perms[2] == b'x', perms[3] == b's');
        let (class, image) = match m.path.as_deref() {
            None => {
                let bss_of = before.last().filter(|prev| prev.end == m.start).and_then(|prev| {
                    match (prev.class, &prev.path, &prev.image) {
                        (MappingClass::Bss, _, image) => image.clone(),
                        (_, Some(path), _) if images.contains(path) => Some(path.clone()),
                        _ => None,
                    }
                });
                match bss_of {
                    Some(image) if writable && !shared => (MappingClass::Bss, Some(image)),
                    _ if shared => (MappingClass::Shm, None),
                    _ => (MappingClass::Anon, None),
                }
            }
            Some("[heap]") => (MappingClass::Heap, None),
            Some(p) if p == "[stack]" || p.starts_with("[stack:") => (MappingClass::Stack, None),
            Some(p) if p.starts_with("[vdso") || p.starts_with("[vvar") || p == "[vsyscall]" => {
                (MappingClass::Vdso, None)
            }
            Some(p) if p.starts_with("[anon_shmem:") => (MappingClass::Shm, None),
            Some(p) if p.starts_with("[anon:") => (MappingClass::Anon, None),
            Some(p) if p.starts_with('[') => (MappingClass::Other, None),
            // MAP_SHARED|MAP_ANONYMOUS memory shows up as a deleted /dev/zero.
            Some(p) if p.starts_with("/dev/zero") => {
                (if shared { MappingClass::Shm } else { MappingClass::Anon }, None)
            }
            Some(p) if is_shm_path(p) => (MappingClass::Shm, None),
            Some(p) if images.contains(p) => {
                let class = if executable {
                    MappingClass::Text
                } else if writable && !shared {
                    MappingClass::Data
                } else if readable {
                    MappingClass::Rodata
                } else {
                    // `---p` gaps that loaders reserve between an image's segments.
                    MappingClass::Other
                };
                (class, Some(p.to_string()))
            }
            Some(_) => (MappingClass::File, None),
        };
        m.class = class;
        m.image = image;
    }
}

fn is_shm_path(path: &str) -> bool {
    path.starts_with("/dev/shm/") || path.starts_with("/SYSV") || path.starts_with("/memfd:")
}
