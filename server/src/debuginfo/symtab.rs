//! Function tables read from uploaded ELF files: what the server names frames with.
//!
//! Agents send user frames as (build id, ELF address, file offset). Servers are stateless and
//! share ClickHouse, so an uploaded executable, shared library or separate debug file is read
//! once, on upload, into a compact table of (address, size, name) entries that every server loads
//! from storage; the file itself is not kept. Reading maps the file and touches only its headers
//! and symbol tables, so an upload of hundreds of megabytes (most of it code and DWARF) costs
//! memory for its symbols, not for its size.
//!
//! Agents that symbolize locally use blazesym, and a frame must get the same name whether its
//! agent or the server named it, or the same function splits in two in a flame graph. So the
//! table reproduces what blazesym 0.2's ELF symbolizer (`Source::Elf`, demangling on) answers for
//! every code address, rather than a simpler rule of our own:
//!
//! - It searches `.symtab`, then `.dynsym`, each sorted by address and, at one address, by size
//!   descending; `NOTYPE` and `OBJECT` symbols take part next to `FUNC` and `GNU_IFUNC` (a
//!   `NOTYPE` label inside code names what follows it), undefined ones only hide lower ones.
//! - Only the symbols at the highest address at or below the looked-up address are candidates;
//!   the first defined one that covers it wins. Among aliases (same address) that is the largest;
//!   aliases of equal size are ordered by the very unstable sort blazesym runs on the very same
//!   input, which is deterministic, so both pick the same alias (given the same Rust standard
//!   library: agents and servers are built by one toolchain from one workspace).
//! - A symbol of size 0 (unknown) covers everything up to the next symbol in `.symtab`, but only
//!   its exact address in `.dynsym`, whose sparse exports would otherwise claim unrelated code.
//! - Names are demangled as Rust (without the hash), else as C++, else kept as they are.
//!
//! Each entry of the table is a maximal run of code addresses with one answer, so one lookup is a
//! binary search: a symbol split by a label inside it becomes two entries, and `size` is the run's
//! length. Only addresses in executable segments are kept: frames never point elsewhere, and
//! leaving data symbols out keeps the table small. Files whose `.symtab` is compressed into
//! `.gnu_debugdata` (MiniDebugInfo) are read by their `.dynsym` alone, and symbol names that are
//! not UTF-8 name nothing (blazesym fails on both).
//!
//! blazesym, asked for debug symbols (`debug_syms`, on by default), prefers DWARF when it finds
//! some (in the file, or through `.gnu_debuglink` in /usr/lib/debug), and DWARF names compiler
//! clones by their origin (`f`, not `f.isra.0` or `f.cold`) and aliases by the definition
//! (`__GI_memset`, not `memset`). This table reads symbol tables only, and so do agents that name
//! frames themselves (their sources have `debug_syms` off): both name a frame alike.
//!
//! A separate debug file (`objcopy --only-keep-debug`) keeps `.symtab` and the program headers
//! but none of the code: its sections are `NOBITS` and its segments hold no file bytes. Its
//! addresses are the executable's, so its table names frames by ELF address like the
//! executable's own; its file offsets describe the debug file, so its table has no segments and
//! translates no file offset.

use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, Sym};
use object::read::StringTable;
use object::{Endianness, FileKind};

/// A table's types are what storage keeps of it, defined there.
pub use crate::storage::debuginfo::{Function, Segment, SymbolTable};

/// Why a file's table could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SymtabError {
    /// The file cannot be opened.
    #[error("failed to open `{}`: {source}", path.display())]
    Open { path: PathBuf, source: std::io::Error },
    /// The file cannot be memory-mapped.
    #[error("failed to map `{}`: {source}", path.display())]
    Map { path: PathBuf, source: std::io::Error },
    /// The file does not start like an ELF file.
    #[error("`{}` is not an ELF file", path.display())]
    NotElf { path: PathBuf },
    /// The file's headers or symbol tables are malformed or truncated.
    #[error("failed to read the ELF structure of `{}`: {source}", path.display())]
    Elf { path: PathBuf, source: object::read::Error },
}

/// Reads the function table of an ELF executable, shared library or separate debug file.
///
/// The file is memory-mapped and must not be truncated or rewritten while this runs (the
/// server reads its own private copy of an upload).
pub fn read(path: &Path) -> Result<SymbolTable, SymtabError> {
    parse_mapped(
        path,
        read_elf::<elf::FileHeader32<Endianness>>,
        read_elf::<elf::FileHeader64<Endianness>>,
    )
}

/// Maps the ELF file at `path` and reads it with the reader of its class.
fn parse_mapped<T>(
    path: &Path,
    elf32: fn(&[u8]) -> object::read::Result<T>,
    elf64: fn(&[u8]) -> object::read::Result<T>,
) -> Result<T, SymtabError> {
    let file = std::fs::File::open(path).map_err(|source| SymtabError::Open {
        path: path.to_owned(),
        source,
    })?;
    // SAFETY: a read-only mapping; every access below is bounds-checked by `object`, so bytes
    // that change under us give a wrong answer at worst. Only truncating the file while it is
    // mapped could fault, which the callers rule out (they read the server's private copy of
    // an upload).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| SymtabError::Map {
        path: path.to_owned(),
        source,
    })?;
    let data: &[u8] = &map;
    let parsed = match FileKind::parse(data) {
        Ok(FileKind::Elf32) => elf32(data),
        Ok(FileKind::Elf64) => elf64(data),
        _ => return Err(SymtabError::NotElf { path: path.to_owned() }),
    };
    parsed.map_err(|source| SymtabError::Elf {
        path: path.to_owned(),
        source,
    })
}

/// Where a separate debug file names a function of its executable otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disagreement {
    /// The ELF address of the executable's function.
    pub address: u64,
    /// The executable's name for it.
    pub executable: String,
    /// Every name the debug file gives the address (none: it names nothing there).
    pub debug_file: Vec<String>,
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the executable names 0x{:x} `{}`, ", self.address, self.executable)?;
        match self.debug_file.as_slice() {
            [] => write!(f, "the debug file names nothing there"),
            names => write!(f, "the debug file only `{}`", names.join("`, `")),
        }
    }
}

/// Checks that the separate debug file at `path` agrees with `executable`, the table of the
/// image it claims to describe: every function the image names must carry the same name in the
/// debug file, as one of the symbols covering its address (a debug file's `.symtab` holds every
/// alias of a function, as `memcpy` and `__memcpy_avx_unaligned_erms`, and the image's table
/// picked one of them, so any alias agrees). Version suffixes (`@@GLIBC_2.14`) are not part of
/// a name. The first function it names otherwise is returned.
///
/// This is what can be checked without the image's code: names the image does not carry (its
/// local functions, when it is stripped) are the debug file's word.
pub fn disagreement(path: &Path, executable: &SymbolTable) -> Result<Option<Disagreement>, SymtabError> {
    let symbols = parse_mapped(
        path,
        defined_symbols::<elf::FileHeader32<Endianness>>,
        defined_symbols::<elf::FileHeader64<Endianness>>,
    )?;
    // A symbol names its own address, and what its size spans.
    let covers = |address: u64, size: u64, at: u64| address == at || (address < at && at - address < size);
    let mut by_name: std::collections::HashMap<&str, Vec<(u64, u64)>> = std::collections::HashMap::new();
    for (address, size, name) in &symbols {
        by_name.entry(name).or_default().push((*address, *size));
    }
    for function in &executable.functions {
        let name = unversioned(&function.name);
        let agrees = by_name.get(name).is_some_and(|spans| {
            spans
                .iter()
                .any(|&(address, size)| covers(address, size, function.address))
        });
        if !agrees {
            let mut names: Vec<String> = symbols
                .iter()
                .filter(|&&(address, size, _)| covers(address, size, function.address))
                .map(|(_, _, name)| name.clone())
                .collect();
            names.sort();
            names.dedup();
            names.truncate(8);
            return Ok(Some(Disagreement {
                address: function.address,
                executable: function.name.clone(),
                debug_file: names,
            }));
        }
    }
    Ok(None)
}

/// A name without its symbol version (`memcpy@@GLIBC_2.14` is `memcpy`).
fn unversioned(name: &str) -> &str {
    name.split_once('@').map_or(name, |(name, _)| name)
}

/// Every defined symbol of `.symtab` and `.dynsym` that can name code: (address, size,
/// demangled name without version).
fn defined_symbols<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> object::read::Result<Vec<(u64, u64, String)>> {
    let header = Elf::parse(data)?;
    let endian = header.endian()?;
    let sections = header.sections(endian, data)?;
    let mut out = Vec::new();
    for kind in [elf::SHT_SYMTAB, elf::SHT_DYNSYM] {
        let table = sections.symbols(endian, data, kind)?;
        for symbol in table.symbols() {
            let code_like = matches!(
                symbol.st_type(),
                elf::STT_NOTYPE | elf::STT_OBJECT | elf::STT_FUNC | elf::STT_GNU_IFUNC
            );
            if !code_like || symbol.st_shndx(endian) == elf::SHN_UNDEF {
                continue;
            }
            let Some(name) = symbol
                .name(endian, table.strings())
                .ok()
                .and_then(|n| std::str::from_utf8(n).ok())
            else {
                continue;
            };
            let name = demangle(unversioned(name));
            out.push((symbol.st_value(endian).into(), symbol.st_size(endian).into(), name));
        }
    }
    Ok(out)
}

/// The table of a mapped ELF file of either class and byte order.
fn read_elf<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> object::read::Result<SymbolTable> {
    let header = Elf::parse(data)?;
    let endian = header.endian()?;
    let program_headers = header.program_headers(endian, data)?;
    let sections = header.sections(endian, data)?;

    let symtab = sections.symbols(endian, data, elf::SHT_SYMTAB)?;
    let dynsym = sections.symbols(endian, data, elf::SHT_DYNSYM)?;
    let symtab = groups(symtab.symbols(), symtab.strings(), endian);
    let dynsym = groups(dynsym.symbols(), dynsym.strings(), endian);

    let code = code_ranges::<Elf>(program_headers, sections.iter(), endian);
    let functions = runs(&code, &symtab, &dynsym)
        .into_iter()
        .map(|(address, end, name)| Function {
            address,
            size: end - address,
            name: demangle(name),
        })
        .collect();

    let loads = program_headers.iter().filter(|p| p.p_type(endian) == elf::PT_LOAD);
    // A debug file keeps the program headers with no bytes behind the code: its offsets
    // describe the debug file, and translating an image's offsets through them would be wrong.
    let code_elsewhere = loads
        .clone()
        .any(|p| p.p_flags(endian).0 & elf::PF_X.0 != 0 && p.p_filesz(endian).into() == 0);
    let segments = if code_elsewhere {
        Vec::new()
    } else {
        loads
            .map(|p| Segment {
                offset: p.p_offset(endian).into(),
                address: p.p_vaddr(endian).into(),
                file_size: p.p_filesz(endian).into(),
            })
            .filter(|s| s.file_size > 0)
            .collect()
    };
    Ok(SymbolTable { functions, segments })
}

/// The symbols of one table at one address, reduced to what blazesym's lookup can answer.
#[derive(Debug)]
struct Group<'data> {
    address: u64,
    /// The largest defined symbol with a size, and that size.
    sized: Option<(u64, Name<'data>)>,
    /// The first defined symbol of size 0.
    sizeless: Option<Name<'data>>,
}

/// A symbol's raw name; None when it cannot be read or is not UTF-8, where blazesym fails.
type Name<'data> = Option<&'data str>;

/// A symbol table's symbols grouped by address, in blazesym's order.
fn groups<'data, S: Sym<Endian = Endianness>>(
    symbols: &'data [S],
    strings: StringTable<'data>,
    endian: Endianness,
) -> Vec<Group<'data>> {
    let value = |i: usize| -> u64 { symbols[i].st_value(endian).into() };
    let size = |i: usize| -> u64 { symbols[i].st_size(endian).into() };
    // The same indices (the null symbol included), the same comparisons and the same unstable
    // sort as blazesym's `create_by_addr_idx`: the order of aliases of equal size is whatever
    // that sort leaves, so only running it identically picks the alias blazesym picks.
    let mut order: Vec<usize> = (0..symbols.len())
        .filter(|&i| {
            matches!(
                symbols[i].st_type(),
                elf::STT_NOTYPE | elf::STT_OBJECT | elf::STT_FUNC | elf::STT_GNU_IFUNC
            )
        })
        .collect();
    order.sort_unstable_by(|&a, &b| value(a).cmp(&value(b)).then_with(|| size(a).cmp(&size(b)).reverse()));

    let mut groups: Vec<Group<'data>> = Vec::new();
    for i in order {
        let address = value(i);
        if groups.last().is_none_or(|g| g.address != address) {
            groups.push(Group {
                address,
                sized: None,
                sizeless: None,
            });
        }
        // Undefined symbols still form a group, which hides the ones below it as in blazesym.
        if symbols[i].st_shndx(endian) == elf::SHN_UNDEF {
            continue;
        }
        let name = symbols[i]
            .name(endian, strings)
            .ok()
            .and_then(|n| std::str::from_utf8(n).ok());
        let Some(group) = groups.last_mut() else { continue };
        match size(i) {
            0 => {
                group.sizeless.get_or_insert(name);
            }
            // Sizes descend within a group: the first is the largest, and covers whatever any
            // smaller one would.
            s => {
                group.sized.get_or_insert((s, name));
            }
        }
    }
    groups
}

/// What one table answers for an address, as blazesym's `find_sym`: None when nothing there
/// covers it (the next table is asked), Some(None) when a symbol does but has no usable name.
fn lookup<'data>(groups: &[Group<'data>], address: u64, sizeless_spans: bool) -> Option<Name<'data>> {
    let g = &groups[groups.partition_point(|g| g.address <= address).checked_sub(1)?];
    match (g.sized, g.sizeless) {
        (Some((size, name)), _) if address - g.address < size => Some(name),
        (_, Some(name)) if sizeless_spans || address == g.address => Some(name),
        _ => None,
    }
}

/// The name for an address: `.symtab` first, then `.dynsym`.
fn answer<'data>(symtab: &[Group<'data>], dynsym: &[Group<'data>], address: u64) -> Name<'data> {
    lookup(symtab, address, true)
        .or_else(|| lookup(dynsym, address, false))
        .flatten()
}

/// Maximal runs `(start, end, raw name)` of the code ranges with one name, sorted.
fn runs<'data>(code: &[(u64, u64)], symtab: &[Group<'data>], dynsym: &[Group<'data>]) -> Vec<(u64, u64, &'data str)> {
    // The answer changes only where a group starts, where a group's largest sized symbol ends,
    // and one byte past a `.dynsym` symbol of size 0 (which names its exact address only).
    let mut points: Vec<u64> = Vec::with_capacity(2 * (symtab.len() + dynsym.len()));
    for g in symtab.iter().chain(dynsym) {
        points.push(g.address);
        if let Some((size, _)) = g.sized {
            points.extend(g.address.checked_add(size));
        }
    }
    points.extend(
        dynsym
            .iter()
            .filter(|g| g.sized.is_none() && g.sizeless.is_some())
            .filter_map(|g| g.address.checked_add(1)),
    );
    points.sort_unstable();
    points.dedup();

    let mut runs: Vec<(u64, u64, &'data str)> = Vec::new();
    for &(start, end) in code {
        let first = points.partition_point(|&p| p <= start);
        let inner = points[first..].iter().copied().take_while(|&p| p < end);
        let mut at = start;
        for next in inner.chain([end]) {
            if let Some(name) = answer(symtab, dynsym, at) {
                match runs.last_mut() {
                    Some(last) if last.1 == at && last.2 == name => last.1 = next,
                    _ => runs.push((at, next, name)),
                }
            }
            at = next;
        }
    }
    runs
}

/// The address ranges holding code, sorted and disjoint: executable load segments, or for a
/// file without program headers, executable sections.
fn code_ranges<'data, Elf: FileHeader<Endian = Endianness>>(
    program_headers: &[Elf::ProgramHeader],
    sections: impl Iterator<Item = &'data Elf::SectionHeader>,
    endian: Endianness,
) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> = program_headers
        .iter()
        .filter(|p| p.p_type(endian) == elf::PT_LOAD && p.p_flags(endian).0 & elf::PF_X.0 != 0)
        .map(|p| (p.p_vaddr(endian).into(), p.p_memsz(endian).into()))
        .collect();
    if ranges.is_empty() {
        let executable = elf::SHF_ALLOC.0 | elf::SHF_EXECINSTR.0;
        ranges = sections
            .filter(|s| s.sh_flags(endian).0 & executable == executable)
            .map(|s| (s.sh_addr(endian).into(), s.sh_size(endian).into()))
            .collect();
    }
    let mut ranges: Vec<(u64, u64)> = ranges
        .into_iter()
        .filter(|&(_, size)| size > 0)
        .map(|(start, size)| (start, start.saturating_add(size)))
        .collect();
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// Demangles like blazesym does for ELF symbols (whose language it does not know): as Rust in
/// the alternate form (no hash), else as C++, else the name unchanged.
fn demangle(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return format!("{rust:#}");
    }
    cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|symbol| symbol.demangle().ok())
        .unwrap_or_else(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::process::Command;

    use blazesym::symbolize::source::{Elf as ElfSource, Source};
    use blazesym::symbolize::{Input, Symbolized, Symbolizer};

    use super::*;

    const PROGRAM: &str = r#"
__attribute__((noipa)) int leaf(int x) { return x * 3 + 1; }
static __attribute__((noipa)) int helper(int x) { return leaf(x) ^ 5; }
int main(int argc, char **argv) { (void)argv; return helper(argc); }
"#;

    const LIBRARY: &str = r#"
static __attribute__((noipa)) int lib_hidden(int x) { return x * 7; }
__attribute__((noipa)) int lib_work(int x) { return lib_hidden(x) + 1; }
"#;

    const CPP_PROGRAM: &str = r#"
#include <vector>
namespace shapes {
struct Circle {
    double r;
    __attribute__((noinline)) double area() const { return 3.14159 * r * r; }
};
template <typename T> __attribute__((noinline)) T scale(T value, int by) { return value * by; }
__attribute__((noinline)) double total(const std::vector<Circle> &circles) {
    double sum = 0;
    for (const Circle &c : circles) sum += c.area();
    return sum;
}
}
int main(int argc, char **) {
    std::vector<shapes::Circle> circles(argc, shapes::Circle{2.0});
    return (int)(shapes::total(circles) + shapes::scale<long>(argc, 3));
}
"#;

    fn run(cmd: &mut Command) {
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("failed to run {cmd:?}: {e} (install gcc, g++, binutils)"));
        assert!(
            out.status.success(),
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Compiles `source` with `compiler` and `flags` into `dir/name`.
    fn compile(dir: &Path, compiler: &str, name: &str, source: &str, flags: &[&str]) -> PathBuf {
        let extension = if compiler == "g++" { "cc" } else { "c" };
        let source_path = dir.join(format!("{name}.{extension}"));
        std::fs::write(&source_path, source).unwrap();
        let out = dir.join(name);
        run(Command::new(compiler)
            .args(flags)
            .args(["-Wall", "-Werror", "-o"])
            .arg(&out)
            .arg(&source_path));
        out
    }

    /// `binary`'s debug file (`objcopy --only-keep-debug`) and a stripped copy (`strip
    /// --strip-all`), written beside it as `name.debug` and `name-stripped`.
    fn split_debug(dir: &Path, binary: &Path, name: &str) -> (PathBuf, PathBuf) {
        let debug_file = dir.join(format!("{name}.debug"));
        run(Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(binary)
            .arg(&debug_file));
        let stripped = dir.join(format!("{name}-stripped"));
        run(Command::new("strip")
            .arg("--strip-all")
            .arg("-o")
            .arg(&stripped)
            .arg(binary));
        (debug_file, stripped)
    }

    /// Defined symbols by (mangled) name: (address, size), from `nm`.
    fn nm(path: &Path, dynamic: bool) -> HashMap<String, (u64, u64)> {
        let mut cmd = Command::new("nm");
        cmd.args(["--defined-only", "-S"]);
        if dynamic {
            cmd.arg("-D");
        }
        let out = cmd.arg(path).output().expect("run nm");
        assert!(
            out.status.success(),
            "nm {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let hex = |s: &str| u64::from_str_radix(s, 16).ok();
                match fields[..] {
                    [address, size, _, name] => Some((name.to_owned(), (hex(address)?, hex(size)?))),
                    [address, _, name] => Some((name.to_owned(), (hex(address)?, 0))),
                    _ => None,
                }
            })
            .collect()
    }

    fn address_of(symbols: &HashMap<String, (u64, u64)>, name: &str) -> (u64, u64) {
        *symbols
            .get(name)
            .unwrap_or_else(|| panic!("no symbol {name} in {symbols:?}"))
    }

    /// What blazesym names `addresses` of `path` as agents naming frames themselves ask it
    /// (`Source::Elf`, symbol tables only, demangling).
    fn blazesym_names(path: &Path, input: Input<&[u64]>) -> Vec<Option<String>> {
        let mut elf = ElfSource::new(path);
        elf.debug_syms = false;
        Symbolizer::new()
            .symbolize(&Source::Elf(elf), input)
            .unwrap_or_else(|e| panic!("blazesym cannot symbolize {}: {e}", path.display()))
            .into_iter()
            .map(|s| match s {
                Symbolized::Sym(sym) => Some(sym.name.into_owned()),
                _ => None,
            })
            .collect()
    }

    /// Code addresses of a 64-bit ELF file to compare names at: every symbol's first, last and
    /// middle byte and its neighbours (from the file, not from our table), and a stride across
    /// the code; at most about `limit`.
    fn probes(path: &Path, limit: usize) -> Vec<u64> {
        let file = std::fs::File::open(path).unwrap();
        // SAFETY: a test's private file, not written while mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
        let data: &[u8] = &map;
        let header = elf::FileHeader64::<Endianness>::parse(data).unwrap();
        let endian = header.endian().unwrap();
        let sections = header.sections(endian, data).unwrap();
        let code = code_ranges::<elf::FileHeader64<Endianness>>(
            header.program_headers(endian, data).unwrap(),
            sections.iter(),
            endian,
        );
        let in_code = |a: &u64| code.iter().any(|&(start, end)| (start..end).contains(a));
        let mut boundaries = Vec::new();
        for kind in [elf::SHT_SYMTAB, elf::SHT_DYNSYM] {
            for sym in sections.symbols(endian, data, kind).unwrap().symbols() {
                let (value, size) = (sym.st_value(endian), sym.st_size(endian));
                for a in [value.wrapping_sub(1), value, value + 1, value + size / 2] {
                    boundaries.push(a);
                }
                if size > 0 {
                    boundaries.extend([value + size - 1, value + size, value + size + 1]);
                }
            }
        }
        boundaries.retain(in_code);
        boundaries.sort_unstable();
        boundaries.dedup();
        let keep_every = boundaries.len().div_ceil(limit / 2).max(1);
        let mut addresses: Vec<u64> = boundaries.into_iter().step_by(keep_every).collect();
        let code_bytes: u64 = code.iter().map(|&(start, end)| end - start).sum();
        let stride = (code_bytes / (limit as u64 / 2)).max(1) | 1;
        for &(start, end) in &code {
            addresses.extend((start..end).step_by(stride as usize));
        }
        addresses.sort_unstable();
        addresses.dedup();
        addresses
    }

    /// Asserts `name_at` names every probed code address of `path` exactly as blazesym does.
    fn assert_agrees_with_blazesym(path: &Path, limit: usize) {
        let table = read(path).unwrap();
        let addresses = probes(path, limit);
        let expected = blazesym_names(path, Input::VirtOffset(&addresses));
        let mismatches: Vec<String> = addresses
            .iter()
            .zip(&expected)
            .filter(|(a, e)| table.name_at(**a) != e.as_deref())
            .map(|(a, e)| format!("{a:#x}: ours {:?}, blazesym {e:?}", table.name_at(*a)))
            .collect();
        assert!(
            mismatches.is_empty(),
            "{}: {} of {} addresses named differently, first: {:#?}",
            path.display(),
            mismatches.len(),
            addresses.len(),
            &mismatches[..mismatches.len().min(20)]
        );
        let named = expected.iter().filter(|e| e.is_some()).count();
        assert!(
            named > 0,
            "{}: nothing named, the comparison proves nothing",
            path.display()
        );
    }

    fn libc() -> Option<&'static Path> {
        ["/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists())
    }

    #[test]
    fn names_the_functions_of_an_executable_with_symbols() {
        let dir = tempfile::tempdir().unwrap();
        let exe = compile(dir.path(), "cc", "program", PROGRAM, &["-O1"]);
        let symbols = nm(&exe, false);
        let table = read(&exe).unwrap();

        let (leaf, size) = address_of(&symbols, "leaf");
        assert!(size > 0);
        assert_eq!(table.name_at(leaf), Some("leaf"));
        assert_eq!(table.name_at(leaf + size - 1), Some("leaf"));
        assert_ne!(table.name_at(leaf + size), Some("leaf"), "past its end is not leaf");
        // Local (static) functions are named from .symtab.
        assert_eq!(table.name_at(address_of(&symbols, "helper").0), Some("helper"));
        assert_eq!(table.name_at(address_of(&symbols, "main").0 + 1), Some("main"));
        assert!(table
            .functions
            .windows(2)
            .all(|w| w[0].address + w[0].size <= w[1].address));
        assert!(!table.segments.is_empty());
    }

    #[test]
    fn a_separate_debug_file_names_by_elf_address() {
        let dir = tempfile::tempdir().unwrap();
        let exe = compile(dir.path(), "cc", "program", PROGRAM, &["-O1", "-g"]);
        let (debug_file, stripped) = split_debug(dir.path(), &exe, "program");
        let symbols = nm(&exe, false);

        let table = read(&debug_file).unwrap();
        let (leaf, size) = address_of(&symbols, "leaf");
        assert_eq!(table.name_at(leaf), Some("leaf"));
        assert_eq!(table.name_at(leaf + size - 1), Some("leaf"));
        assert_eq!(table.name_at(address_of(&symbols, "helper").0), Some("helper"));
        // The same functions as the executable's own symbols give.
        assert_eq!(table.functions, read(&exe).unwrap().functions);
        // Its offsets are the debug file's, not the image's: it translates none.
        assert!(table.segments.is_empty(), "{:?}", table.segments);
        assert_eq!(table.address_of_file_offset(leaf), None);
        // The stripped image itself names nothing of its own.
        assert_eq!(read(&stripped).unwrap().name_at(leaf), None);
    }

    #[test]
    fn a_stripped_shared_library_is_named_by_its_exports() {
        let dir = tempfile::tempdir().unwrap();
        let library = compile(dir.path(), "cc", "libwork.so", LIBRARY, &["-O1", "-shared", "-fPIC"]);
        let stripped = dir.path().join("libwork-stripped.so");
        run(Command::new("strip")
            .arg("--strip-all")
            .arg("-o")
            .arg(&stripped)
            .arg(&library));
        let all = nm(&library, false);

        let table = read(&stripped).unwrap();
        let (work, size) = address_of(&nm(&stripped, true), "lib_work");
        assert_eq!(table.name_at(work), Some("lib_work"));
        assert_eq!(table.name_at(work + size - 1), Some("lib_work"));
        assert_eq!(
            table.name_at(address_of(&all, "lib_hidden").0),
            None,
            "not exported, not named"
        );
        assert_agrees_with_blazesym(&stripped, 10_000);
    }

    #[test]
    fn a_debug_file_must_name_the_exports_of_its_library_as_the_library_does() {
        let dir = tempfile::tempdir().unwrap();
        let library = compile(
            dir.path(),
            "cc",
            "libwork.so",
            LIBRARY,
            &["-O1", "-g", "-shared", "-fPIC"],
        );
        let (debug_file, stripped) = split_debug(dir.path(), &library, "libwork");
        let exports = read(&stripped).unwrap();
        assert!(exports.functions.iter().any(|f| f.name == "lib_work"));
        assert_eq!(disagreement(&debug_file, &exports).unwrap(), None);

        // The same build id with an export renamed: refused, naming both sides.
        let forged = dir.path().join("forged.debug");
        run(Command::new("objcopy")
            .arg("--redefine-sym=lib_work=not_lib_work")
            .arg(&debug_file)
            .arg(&forged));
        let found = disagreement(&forged, &exports)
            .unwrap()
            .expect("a renamed export disagrees");
        assert_eq!(found.executable, "lib_work");
        assert_eq!(found.debug_file, vec!["not_lib_work".to_owned()]);
        assert_eq!(found.address, address_of(&nm(&stripped, true), "lib_work").0);

        // A function the stripped library does not name is the debug file's word.
        let renamed_local = dir.path().join("local.debug");
        run(Command::new("objcopy")
            .arg("--redefine-sym=lib_hidden=other_name")
            .arg(&debug_file)
            .arg(&renamed_local));
        assert_eq!(disagreement(&renamed_local, &exports).unwrap(), None);
    }

    #[test]
    fn the_installed_debug_file_of_libc_agrees_with_libc() {
        let Some(libc) = libc() else {
            eprintln!("no glibc here: nothing to compare");
            return;
        };
        let build_id = blazesym::helper::read_elf_build_id(&libc)
            .unwrap()
            .map(|id| bimodal_profile::hex(&id))
            .expect("libc has a build id");
        let debug_file = Path::new("/usr/lib/debug/.build-id")
            .join(&build_id[..2])
            .join(format!("{}.debug", &build_id[2..]));
        assert!(
            debug_file.exists(),
            "{} is missing: install libc6-dbg (tools/setup.sh does)",
            debug_file.display()
        );
        let exports = read(libc).unwrap();
        // libc's exports carry many aliases (memcpy, __memcpy_chk's neighbours, versioned
        // names): every one must be found among the debug file's symbols.
        assert!(exports.functions.len() > 1000, "{}", exports.functions.len());
        assert_eq!(disagreement(&debug_file, &exports).unwrap(), None);
        // Its DWARF (names by origin and definition) is not read, here or by agents.
        assert_agrees_with_blazesym(&debug_file, 40_000);
    }

    #[test]
    fn file_offsets_translate_through_load_segments() {
        let dir = tempfile::tempdir().unwrap();
        // Not position independent: code addresses and file offsets differ by the load address.
        let exe = compile(dir.path(), "cc", "program", PROGRAM, &["-O1", "-no-pie"]);
        let (leaf, _) = address_of(&nm(&exe, false), "leaf");
        let data = std::fs::read(&exe).unwrap();
        let header = elf::FileHeader64::<Endianness>::parse(data.as_slice()).unwrap();
        let endian = header.endian().unwrap();
        let sections = header.sections(endian, data.as_slice()).unwrap();
        let (_, text) = sections.section_by_name(endian, b".text").unwrap();
        let offset = leaf - text.sh_addr(endian) + text.sh_offset(endian);
        assert_ne!(offset, leaf);

        let table = read(&exe).unwrap();
        assert_eq!(table.address_of_file_offset(offset), Some(leaf));
        let address = table.address_of_file_offset(offset).unwrap();
        assert_eq!(table.name_at(address), Some("leaf"));
        assert_eq!(table.address_of_file_offset(data.len() as u64 + 0x10000), None);

        // Every offset of the code, translated by blazesym itself, names the same function.
        let offsets: Vec<u64> = (text.sh_offset(endian)..text.sh_offset(endian) + text.sh_size(endian)).collect();
        let expected = blazesym_names(&exe, Input::FileOffset(&offsets));
        for (offset, expected) in offsets.iter().zip(expected) {
            let ours = table.address_of_file_offset(*offset).and_then(|a| table.name_at(a));
            assert_eq!(ours, expected.as_deref(), "file offset {offset:#x}");
        }
    }

    #[test]
    fn agrees_with_blazesym_on_c_fixtures() {
        let dir = tempfile::tempdir().unwrap();
        // With DWARF in the file: symbol tables alone are read, by both.
        let program = compile(dir.path(), "cc", "program", PROGRAM, &["-O1", "-g"]);
        assert_agrees_with_blazesym(&program, 10_000);
        let workload_c =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/fixtures/workload.c"))
                .unwrap();
        for (name, flags) in [
            ("workload", &["-O1", "-fno-omit-frame-pointer"][..]),
            ("workload-O2", &["-O2"][..]),
            ("workload-static", &["-O2", "-static"][..]),
        ] {
            let exe = compile(dir.path(), "cc", name, &workload_c, flags);
            assert_eq!(
                read(&exe)
                    .unwrap()
                    .name_at(address_of(&nm(&exe, false), "spin_hot_loop").0),
                Some("spin_hot_loop")
            );
            assert_agrees_with_blazesym(&exe, 40_000);
        }
    }

    #[test]
    fn agrees_with_blazesym_on_libc() {
        let Some(libc) = libc() else {
            eprintln!("no glibc here: nothing to compare");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        // A copy without the debug link: the exports alone, as this table reads them (blazesym
        // asked for debug symbols would follow the link to the installed debug file).
        let exports = dir.path().join("libc.so.6");
        run(Command::new("objcopy")
            .arg("--remove-section=.gnu_debuglink")
            .arg(libc)
            .arg(&exports));
        assert_agrees_with_blazesym(&exports, 100_000);

        // libc's debug file (libc6-dbg), when installed: its full .symtab, without its DWARF.
        let build_id = blazesym::helper::read_elf_build_id(&libc)
            .unwrap()
            .map(|id| bimodal_profile::hex(&id))
            .unwrap_or_default();
        let debug_file = Path::new("/usr/lib/debug/.build-id")
            .join(build_id.get(..2).unwrap_or_default())
            .join(format!("{}.debug", build_id.get(2..).unwrap_or_default()));
        if !debug_file.exists() {
            eprintln!(
                "no debug file for {} at {}: compared its exports only",
                libc.display(),
                debug_file.display()
            );
            return;
        }
        let symbols = dir.path().join("libc.debug");
        run(Command::new("objcopy")
            .arg("--strip-debug")
            .arg(&debug_file)
            .arg(&symbols));
        assert_agrees_with_blazesym(&symbols, 100_000);
        assert!(read(&symbols).unwrap().functions.len() > read(&exports).unwrap().functions.len());
    }

    #[test]
    fn demangles_cpp_like_blazesym() {
        let dir = tempfile::tempdir().unwrap();
        let exe = compile(dir.path(), "g++", "shapes", CPP_PROGRAM, &["-O1"]);
        let symbols = nm(&exe, false);
        let table = read(&exe).unwrap();
        for (mangled, demangled) in [
            ("_ZNK6shapes6Circle4areaEv", "shapes::Circle::area() const"),
            ("_ZN6shapes5scaleIlEET_S1_i", "long shapes::scale<long>(long, int)"),
        ] {
            let (address, _) = address_of(&symbols, mangled);
            assert_eq!(table.name_at(address), Some(demangled));
            assert_eq!(
                blazesym_names(&exe, Input::VirtOffset(&[address])),
                [Some(demangled.to_owned())]
            );
        }
        assert_agrees_with_blazesym(&exe, 20_000);
    }

    #[test]
    fn demangles_rust_like_blazesym() {
        // This test binary is Rust; a copy without DWARF is named from its symbols.
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("tests");
        run(Command::new("objcopy")
            .arg("--strip-debug")
            .arg(std::env::current_exe().unwrap())
            .arg(&copy));
        let table = read(&copy).unwrap();
        let reader = table
            .functions
            .iter()
            .find(|f| f.name == "bimodal_server::debuginfo::symtab::read")
            .expect("read() named without its hash");
        assert!(reader.size > 0);
        assert_agrees_with_blazesym(&copy, 40_000);
    }

    #[test]
    fn lookups_in_a_table_from_parts() {
        let function = |address, size, name: &str| Function {
            address,
            size,
            name: name.to_owned(),
        };
        let table = SymbolTable::from_parts(
            vec![
                function(0x2000, 0x10, "b"),
                function(0x3000, 0, "c"),
                function(0x1000, 0x20, "a"),
            ],
            vec![
                Segment {
                    offset: 0,
                    address: 0x400000,
                    file_size: 0x800,
                },
                Segment {
                    offset: 0x1000,
                    address: 0x401000,
                    file_size: 0x500,
                },
            ],
        );
        assert_eq!(
            table.functions.iter().map(|f| f.address).collect::<Vec<_>>(),
            [0x1000, 0x2000, 0x3000]
        );
        assert_eq!(table.name_at(0xfff), None);
        assert_eq!(table.name_at(0x1000), Some("a"));
        assert_eq!(table.name_at(0x101f), Some("a"));
        assert_eq!(table.name_at(0x1020), None, "past a sized function's end");
        assert_eq!(table.name_at(0x200f), Some("b"));
        assert_eq!(table.name_at(0x2010), None);
        assert_eq!(table.name_at(0x3000), Some("c"));
        assert_eq!(
            table.name_at(u64::MAX),
            Some("c"),
            "size 0 reaches up to the next entry"
        );
        assert_eq!(SymbolTable::default().name_at(0x1000), None);

        assert_eq!(table.address_of_file_offset(0), Some(0x400000));
        assert_eq!(table.address_of_file_offset(0x7ff), Some(0x4007ff));
        assert_eq!(table.address_of_file_offset(0x800), None);
        assert_eq!(table.address_of_file_offset(0x14ff), Some(0x4014ff));
        assert_eq!(table.address_of_file_offset(0x1500), None);
    }

    #[test]
    fn errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let e = read(&missing).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "failed to open `{}`: No such file or directory (os error 2)",
                missing.display()
            )
        );
        let text = dir.path().join("text");
        std::fs::write(&text, "not an ELF file at all").unwrap();
        assert_eq!(
            read(&text).unwrap_err().to_string(),
            format!("`{}` is not an ELF file", text.display())
        );
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "").unwrap();
        assert!(read(&empty)
            .unwrap_err()
            .to_string()
            .contains(&format!("`{}`", empty.display())));
        let truncated = dir.path().join("truncated");
        let exe = compile(dir.path(), "cc", "program", PROGRAM, &["-O1"]);
        std::fs::write(&truncated, &std::fs::read(exe).unwrap()[..100]).unwrap();
        let e = read(&truncated).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "failed to read the ELF structure of `{}`: ",
                truncated.display()
            )),
            "{e}"
        );
    }
}
