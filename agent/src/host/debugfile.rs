//! Separate debug files: where distributions and builds put the symbols they strip from an
//! image, found the way gdb looks for them. By build id, `<dir>/.build-id/xx/rest.debug`; and
//! through the image's `.gnu_debuglink` (a file name and the CRC-32 of the debug file) next to the
//! image, in its `.debug/` directory, and under `<dir>/<the image's directory>/`. Every place is
//! tried in the process's mount namespace (`/proc/PID/root`) first, then on the host. A file is
//! taken only when it is the image's: the same build id (or, for an image without one, the
//! debuglink's CRC), and symbols to name functions with.
//!
//! `record` names frames from what it finds here; `run` uploads it for the server.

use std::path::{Path, PathBuf};

/// Where distributions install debug files (Debian's `-dbgsym` packages, Fedora's `-debuginfo`).
pub const DEFAULT_DIRS: &[&str] = &["/usr/lib/debug", "/lib/debug"];

/// An image's `.gnu_debuglink`: the debug file's name and its CRC-32.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebugLink {
    pub name: String,
    pub crc: u32,
}

/// A file mapped read-only (images and debug files can be hundreds of MiB: never read whole).
fn map(path: &Path) -> Option<memmap2::Mmap> {
    let file = std::fs::File::open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    // SAFETY: the mapping is only read; a file truncated underneath would fault, which the
    // agent accepts as it does for the images blazesym maps the same way.
    unsafe { memmap2::Mmap::map(&file) }.ok()
}

/// The `.gnu_debuglink` of the ELF file at `path`, if it has one.
pub fn debug_link(path: &Path) -> Option<DebugLink> {
    use object::Object;
    let bytes = map(path)?;
    let file = object::File::parse(&*bytes).ok()?;
    let (name, crc) = file.gnu_debuglink().ok()??;
    let name = std::str::from_utf8(name).ok()?;
    // A name, not a path: a link that climbs out of the directories searched is ignored.
    (!name.is_empty() && !name.contains('/')).then(|| DebugLink {
        name: name.to_owned(),
        crc,
    })
}

/// Where a debug file may be, in the order tried, relative to a root (`/` or `/proc/PID/root`).
fn candidates(image: &str, build_id: &[u8], link: Option<&DebugLink>, dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let hex = bimodal_profile::hex(build_id);
    if hex.len() > 2 {
        for dir in dirs {
            out.push(
                dir.join(".build-id")
                    .join(&hex[..2])
                    .join(format!("{}.debug", &hex[2..])),
            );
        }
    }
    if let Some(link) = link {
        let image_dir = Path::new(image).parent().unwrap_or(Path::new("/"));
        out.push(image_dir.join(&link.name));
        out.push(image_dir.join(".debug").join(&link.name));
        for dir in dirs {
            out.push(
                dir.join(image_dir.strip_prefix("/").unwrap_or(image_dir))
                    .join(&link.name),
            );
        }
    }
    out
}

/// Whether the file at `path` is the debug file of an image with `build_id` (empty: none) and
/// debug link `link`, with symbols.
fn is_debug_file_of(path: &Path, build_id: &[u8], link: Option<&DebugLink>) -> bool {
    let Some(bytes) = map(path) else {
        return false;
    };
    let Ok(file) = bimodal_proto::inspect_debuginfo(&bytes) else {
        return false;
    };
    if !file.has_symbols {
        return false;
    }
    match (build_id.is_empty(), link) {
        (false, _) => file.build_id.as_deref() == Some(build_id),
        (true, Some(link)) => crc32fast::hash(&bytes) == link.crc,
        (true, None) => false,
    }
}

/// The debug file of `image` (a path in process `pid`'s mount namespace) with `build_id`, or
/// `None`. `dirs` are the debug directories ([`DEFAULT_DIRS`] unless configured).
pub fn find(pid: u32, image: &str, build_id: &[u8], dirs: &[PathBuf]) -> Option<PathBuf> {
    // A process whose root is the host's is searched as the host: the path found then stays
    // good after the process exits (callers cache it by build id).
    let own_root = PathBuf::from(format!("/proc/{pid}/root"));
    let roots = match same_file(&own_root, Path::new("/")) {
        true => vec![PathBuf::from("/")],
        false => vec![own_root, PathBuf::from("/")],
    };
    let link = roots
        .iter()
        .find_map(|root| debug_link(&root.join(image.trim_start_matches('/'))));
    for root in &roots {
        for candidate in candidates(image, build_id, link.as_ref(), dirs) {
            // Debug directories given as relative paths (tests) are taken as they are.
            let path = if candidate.is_absolute() {
                root.join(candidate.strip_prefix("/").unwrap_or(&candidate))
            } else {
                candidate
            };
            if is_debug_file_of(&path, build_id, link.as_ref()) {
                return Some(path);
            }
        }
    }
    None
}

/// Whether `a` and `b` are the same file (directory), as their device and inode say.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// [`DEFAULT_DIRS`] as paths.
pub fn default_dirs() -> Vec<PathBuf> {
    DEFAULT_DIRS.iter().map(PathBuf::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's root is the host's: debug files found for it are host paths, good after
    /// it exits.
    #[test]
    fn a_process_sharing_the_host_root_is_searched_as_the_host() {
        let me = std::process::id();
        assert!(same_file(Path::new(&format!("/proc/{me}/root")), Path::new("/")));
        assert!(!same_file(Path::new("/proc"), Path::new("/")));
    }

    #[test]
    fn candidates_follow_gdb_order() {
        let link = DebugLink {
            name: "app.debug".into(),
            crc: 1,
        };
        let dirs = [PathBuf::from("/usr/lib/debug")];
        let got = candidates("/opt/app/bin/app", &[0xab, 0xcd, 0xef], Some(&link), &dirs);
        let want: Vec<PathBuf> = [
            "/usr/lib/debug/.build-id/ab/cdef.debug",
            "/opt/app/bin/app.debug",
            "/opt/app/bin/.debug/app.debug",
            "/usr/lib/debug/opt/app/bin/app.debug",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(got, want);
        assert!(candidates("/bin/x", &[], None, &dirs).is_empty());
    }
}
