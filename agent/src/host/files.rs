//! Text files of /proc and /sys, read the way the kernel documents them: files it always has,
//! files it may lack, numbered directory entries, CPU lists; and paths as a process sees them.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// A failure to read or understand one procfs or sysfs file (of the topology, or a counter).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// A file or directory exists (or must exist) but reading it failed.
    #[error("failed to read `{}`: {source}", path.display())]
    Read {
        /// The file or directory, including the root prefix.
        path: PathBuf,
        /// The underlying I/O error.
        source: io::Error,
    },
    /// A file was read but its content is not in the format the kernel documents.
    #[error("failed to parse `{}`: {reason}", path.display())]
    Parse {
        /// The file, including the root prefix.
        path: PathBuf,
        /// What was wrong with the content.
        reason: String,
    },
}

/// Reads a file the kernel always has.
pub fn read_required(path: &Path) -> Result<String, FileError> {
    fs::read_to_string(path).map_err(|source| FileError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a file that a kernel may legitimately lack: not-found is `None`, not an error.
pub fn read_optional(path: &Path) -> Result<Option<String>, FileError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(FileError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

pub fn read_optional_u64(path: &Path) -> Result<Option<u64>, FileError> {
    let Some(text) = read_optional(path)? else {
        return Ok(None);
    };
    text.trim().parse().map(Some).map_err(|_| FileError::Parse {
        path: path.to_path_buf(),
        reason: format!("not a number: {:?}", text.trim()),
    })
}

/// Reads an id that the kernel writes as -1 when unknown (package ids on some arm64 machines,
/// `numa_node` of devices on machines without NUMA affinity information).
pub fn read_optional_id(path: &Path) -> Result<Option<u32>, FileError> {
    let Some(text) = read_optional(path)? else {
        return Ok(None);
    };
    let value: i64 = text.trim().parse().map_err(|_| FileError::Parse {
        path: path.to_path_buf(),
        reason: format!("not a number: {:?}", text.trim()),
    })?;
    Ok(u32::try_from(value).ok())
}

/// Parses the kernel's CPU (or node) list format, e.g. `0-3,8,10-11`; an empty list (a CPU-less
/// node's `cpulist`) is valid. Returns `None` on malformed input. The result is sorted and has
/// no duplicates.
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    let text = text.trim();
    if text.is_empty() {
        return Some(cpus);
    }
    for part in text.split(',') {
        let part = part.trim();
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last): (u32, u32) = (first.parse().ok()?, last.parse().ok()?);
                if first > last {
                    return None;
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// Directory entries named `<prefix><number>` (`node0`, `cpu12`, `index3`), as numbers,
/// ascending; a missing directory gives none (a kernel without NUMA has no `node` directory).
pub fn numbered_dir_entries(dir: &Path, prefix: &str) -> io::Result<Vec<u32>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let name = entry?.file_name();
        if let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|n| n.parse().ok())
        {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// A file as the process `tgid` sees it: through its root, in its own mount namespace (in a
/// container the agent's files at the same path are other files).
pub fn in_process(tgid: u32, path: &str) -> PathBuf {
    Path::new("/proc")
        .join(tgid.to_string())
        .join("root")
        .join(path.trim_start_matches('/'))
}

/// Writes `content` at `root/relative`, creating parent directories: a fake procfs or sysfs for
/// the readers' tests.
#[cfg(test)]
pub(crate) fn put(root: &Path, relative: &str, content: &str) {
    let path = root.join(relative);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}
