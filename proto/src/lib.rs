//! Generated wire types: `bimodal.v1` (the agent → server ingest service) and
//! `perftools.profiles` (pprof); and the client side of ingest every sender shares: how a server
//! is reached (`client`), the batches waiting for its acknowledgement (`spool`), and the stream
//! that sends them or the files that hold them until imported (`stream`).

pub mod client;
pub mod placement;
pub mod self_metrics;
pub mod spool;
pub mod stream;

/// The agent → server protocol, version 1.
pub mod v1 {
    #![allow(missing_docs, clippy::all, missing_debug_implementations)]
    tonic::include_proto!("bimodal.v1");
}

/// The pprof profile format.
pub mod pprof {
    #![allow(missing_docs, clippy::all, missing_debug_implementations)]
    tonic::include_proto!("perftools.profiles");
}

impl v1::EventKind {
    /// Every event kind a sample can have, in wire order.
    pub const ALL: [v1::EventKind; 6] = [
        v1::EventKind::Cpu,
        v1::EventKind::PageFault,
        v1::EventKind::CacheMiss,
        v1::EventKind::RemoteAccess,
        v1::EventKind::NumaHintFault,
        v1::EventKind::PageMigration,
    ];

    /// The one name of this event kind, shared by BPF, SQL, the API and the UI.
    pub fn name(self) -> &'static str {
        match self {
            v1::EventKind::Unspecified => "unspecified",
            v1::EventKind::Cpu => "cpu",
            v1::EventKind::PageFault => "page_fault",
            v1::EventKind::CacheMiss => "cache_miss",
            v1::EventKind::RemoteAccess => "remote_access",
            v1::EventKind::NumaHintFault => "numa_hint_fault",
            v1::EventKind::PageMigration => "page_migration",
        }
    }

    /// Parses a name produced by [`Self::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The unit of a sample's `value` for this event kind.
    pub fn unit(self) -> &'static str {
        match self {
            v1::EventKind::Cpu => "nanoseconds",
            v1::EventKind::PageMigration => "pages",
            _ => "count",
        }
    }
}

/// How a node's agent unwinds the user stacks of one event kind's samples (the facts'
/// `EventSourceReport.unwinding`): the one definition of the names the agent sends, the server
/// reads and the UI shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UnwindMethod {
    /// In the kernel, from tables compiled from `.eh_frame` (frame pointers where none covers
    /// the code); stack copies for a process's first milliseconds.
    KernelTables,
    /// By the agent, from a copy of the stack per sample (frame pointers when the ring is full).
    StackCopies,
    /// Frame pointers only: callers of code built without them are lost.
    FramePointers,
}

impl UnwindMethod {
    pub const ALL: [UnwindMethod; 3] = [
        UnwindMethod::KernelTables,
        UnwindMethod::StackCopies,
        UnwindMethod::FramePointers,
    ];

    pub fn name(self) -> &'static str {
        match self {
            UnwindMethod::KernelTables => "kernel_tables",
            UnwindMethod::StackCopies => "stack_copies",
            UnwindMethod::FramePointers => "frame_pointers",
        }
    }

    /// Parses a name produced by [`Self::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether chains reach their outermost frame through code built without frame pointers.
    pub fn whole_chains(self) -> bool {
        match self {
            UnwindMethod::KernelTables | UnwindMethod::StackCopies => true,
            UnwindMethod::FramePointers => false,
        }
    }
}

impl v1::NodeFacts {
    /// How this node unwinds `event`'s stacks, when its agent says (agents before the field did
    /// not; they unwound from tables).
    pub fn unwinding(&self, event: v1::EventKind) -> Option<UnwindMethod> {
        self.event_sources
            .iter()
            .find(|s| s.event == event as i32)
            .and_then(|s| UnwindMethod::from_name(&s.unwinding))
    }

    /// The weakest unwinding of any event kind this node samples (the facts' `unwinding`
    /// label); `None` when its agent does not say.
    pub fn weakest_unwinding(&self) -> Option<UnwindMethod> {
        self.event_sources
            .iter()
            .filter_map(|s| UnwindMethod::from_name(&s.unwinding))
            .max()
    }
}

/// The node counter carrying units of work (`bimodal-agent run --work-uprobe`): calls of one
/// function per batch interval. The server compares nodes by work per CPU-second.
pub const WORK_COUNTER: &str = "work";

/// The node counter carrying the sampled process's CPU time in nanoseconds, exact (`run --pid`):
/// the CPU-seconds every per-CPU-second rate of that node is divided by.
pub const PROCESS_CPU_COUNTER: &str = "process_cpu_ns";

/// The module of kernel frames (named from kallsyms by the agent, kernel modules included).
pub const KERNEL_MODULE: &str = "vmlinux";

/// The node counter the server writes for every batch it stores: the milliseconds the batch
/// covers. Summed over a window, it is how long a node reported in it, exact for live agents
/// and imported batches alike (an agent's own counter of this name is ignored).
pub const REPORTED_COUNTER: &str = "reported_ms";

/// Bytes of file data per `DebuginfoChunk`: an agent holds three at once while it uploads.
pub const DEBUGINFO_CHUNK_BYTES: usize = 256 << 10;

/// The messages of one `Debuginfo.Upload`: the first names the file, all carry its data in
/// order, none more than [`DEBUGINFO_CHUNK_BYTES`].
pub fn debuginfo_chunks(
    build_id: &[u8],
    kind: v1::DebuginfoKind,
    file_name: &str,
    data: &[u8],
) -> Vec<v1::DebuginfoChunk> {
    let mut parts = data.chunks(DEBUGINFO_CHUNK_BYTES);
    let first = debuginfo_first_chunk(
        build_id,
        kind,
        file_name,
        data.len() as u64,
        parts.next().unwrap_or_default().to_vec(),
    );
    std::iter::once(first)
        .chain(parts.map(|d| v1::DebuginfoChunk {
            data: d.to_vec(),
            ..Default::default()
        }))
        .collect()
}

/// The first message of an upload: the file's build id, kind, name and size, and its first
/// bytes (at most [`DEBUGINFO_CHUNK_BYTES`]); the others carry data only.
pub fn debuginfo_first_chunk(
    build_id: &[u8],
    kind: v1::DebuginfoKind,
    file_name: &str,
    size: u64,
    data: Vec<u8>,
) -> v1::DebuginfoChunk {
    v1::DebuginfoChunk {
        build_id: build_id.to_vec(),
        kind: kind as i32,
        file_name: file_name.to_owned(),
        size,
        data,
    }
}

/// What the debug-info store needs to know of an ELF file; agents and the server judge files by
/// this one reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebuginfoFile {
    /// The GNU build id; `None` when the file has no `.note.gnu.build-id`.
    pub build_id: Option<Vec<u8>>,
    /// Whether the file can name functions: a symbol table, DWARF, or functions it exports (a
    /// stripped shared library still names those in `.dynsym`).
    pub has_symbols: bool,
    /// An image with its code, or a separate debug file (`objcopy --only-keep-debug` empties
    /// `.text`, leaving it NOBITS).
    pub kind: v1::DebuginfoKind,
}

/// Reads an ELF file's build id, symbols and kind; an error says why it is not ELF.
pub fn inspect_debuginfo(bytes: &[u8]) -> Result<DebuginfoFile, String> {
    use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};
    let file = object::File::parse(bytes).map_err(|e| e.to_string())?;
    let has_symbols = file.section_by_name(".symtab").is_some()
        || file.section_by_name(".debug_info").is_some()
        || file
            .dynamic_symbols()
            .any(|s| s.is_definition() && s.kind() == SymbolKind::Text);
    let kind = match file.section_by_name(".text") {
        Some(text) if text.kind() != SectionKind::UninitializedData => v1::DebuginfoKind::Executable,
        _ => v1::DebuginfoKind::Debuginfo,
    };
    Ok(DebuginfoFile {
        build_id: file.build_id().map_err(|e| e.to_string())?.map(<[u8]>::to_vec),
        has_symbols,
        kind,
    })
}

/// Digests of what names an image's frames, to tell whether two copies of a build id would
/// name them alike: a copy uploaded by one token and the copies every other node runs.
///
/// They cover the symbols and the layout, not the code: a copy with other code but the same
/// symbols names every frame the same. They are stable across `strip`: a stripped copy and its
/// unstripped original have the same `exported` digest, and `strip -g` keeps `local` (only
/// section and file symbols go, which name nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NamingDigests {
    /// The `PT_LOAD` segments' places (file offset, address, size in the file) and the defined
    /// symbols of `.dynsym`: what turns a frame's file offset into an address and what names it
    /// in a stripped copy.
    pub exported: [u8; 32],
    /// The defined symbols of `.symtab`; `None` when the copy has none.
    pub local: Option<[u8; 32]>,
}

/// Reads an ELF image's [`NamingDigests`]; an error says why it is not ELF.
pub fn naming_digests(bytes: &[u8]) -> Result<NamingDigests, String> {
    use object::{Object, ObjectSegment, ObjectSymbolTable};
    use sha2::Digest;
    let file = object::File::parse(bytes).map_err(|e| e.to_string())?;
    let mut exported = sha2::Sha256::new();
    for segment in file.segments() {
        let (offset, size) = segment.file_range();
        for n in [offset, segment.address(), size] {
            exported.update(n.to_le_bytes());
        }
    }
    exported.update(symbols_digest(file.dynamic_symbols()));
    Ok(NamingDigests {
        exported: exported.finalize().into(),
        local: file.symbol_table().map(|t| symbols_digest(t.symbols())),
    })
}

/// The digest of a symbol table's defined symbols that can name code, as a set of (address,
/// size, name): order and section and file symbols do not count.
fn symbols_digest<'data: 'file, 'file>(symbols: impl Iterator<Item = object::Symbol<'data, 'file>>) -> [u8; 32] {
    use object::{ObjectSymbol, SymbolKind};
    use sha2::Digest;
    let mut entries: Vec<(u64, u64, &[u8])> = symbols
        .filter(|s| !s.is_undefined() && !matches!(s.kind(), SymbolKind::Section | SymbolKind::File))
        .map(|s| (s.address(), s.size(), s.name_bytes().unwrap_or_default()))
        .collect();
    entries.sort_unstable();
    entries.dedup();
    let mut digest = sha2::Sha256::new();
    digest.update((entries.len() as u64).to_le_bytes());
    for (address, size, name) in entries {
        digest.update(address.to_le_bytes());
        digest.update(size.to_le_bytes());
        digest.update((name.len() as u64).to_le_bytes());
        digest.update(name);
    }
    digest.finalize().into()
}

/// Lower-case hex of raw bytes (build ids).
pub fn hex(bytes: &[u8]) -> String {
    // A table, not `format!`: servers hex every frame's build id of every batch.
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// The bytes of hex text (either case); `None` for an odd length or a non-hex digit.
pub fn unhex(h: &str) -> Option<Vec<u8>> {
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy of this test binary changed by `objcopy ARGS` (`strip` when `strip`).
    fn changed(dir: &std::path::Path, name: &str, strip: bool, args: &[&str]) -> Vec<u8> {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let out = dir.join(name);
        let mut command = std::process::Command::new(if strip { "strip" } else { "objcopy" });
        match strip {
            true => command.args(args).arg("-o").arg(&out).arg(&exe),
            false => command.args(args).arg(&exe).arg(&out),
        };
        let status = command.status().unwrap_or_else(|e| panic!("run {command:?}: {e}"));
        assert!(status.success(), "{command:?} failed");
        std::fs::read(out).unwrap()
    }

    /// Stripping keeps what names frames the same in both digests (`strip` drops `.symtab`,
    /// `strip -g` only debugging sections); a symbol added to `.symtab` changes the local digest
    /// only.
    #[test]
    fn naming_digests_follow_the_symbols_not_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let me = naming_digests(&std::fs::read("/proc/self/exe").unwrap()).unwrap();
        assert!(me.local.is_some(), "the test binary has .symtab");
        let stripped = naming_digests(&changed(dir.path(), "stripped", true, &[])).unwrap();
        assert_eq!(stripped.exported, me.exported);
        assert_eq!(stripped.local, None);
        let no_debug = naming_digests(&changed(dir.path(), "no-debug", true, &["-g"])).unwrap();
        assert_eq!(no_debug, me);
        let renamed = naming_digests(&changed(
            dir.path(),
            "renamed",
            false,
            &["--add-symbol", "EVIL_RENAMED=.text:0x10,function,global"],
        ))
        .unwrap();
        assert_eq!(renamed.exported, me.exported);
        assert_ne!(renamed.local, me.local);
        // Copying a file changes nothing.
        let copied = naming_digests(&changed(dir.path(), "copied", false, &[])).unwrap();
        assert_eq!(copied, me);
    }
}
