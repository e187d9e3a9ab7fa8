//! What the agent keeps of each sampled process: its file mappings, read while it runs, so that
//! samples handled after it exited are still unwound and named.
//!
//! Mappings are read at a process's first sample, told by the BPF programs (`new_processes`,
//! see [`crate::sample::bpf::Sampler`]), and again at a drain when older than [`REMEMBER_FOR`]. A process
//! that lives less than one drain interval is read within milliseconds of its first sample,
//! instead of never.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::host::maps::{self, Mapping};

/// Remembered mappings are read again after this long (libraries loaded since, a reused pid).
pub const REMEMBER_FOR: Duration = Duration::from_secs(30);
/// At most this many processes' mappings are kept; the oldest go first.
pub const REMEMBERED_PROCESSES: usize = 4096;

/// A process's file mappings, as they were when it was last seen alive.
#[derive(Debug)]
struct Remembered {
    mappings: Vec<Mapping>,
    at: Instant,
}

/// The file mappings of processes seen alive, by tgid; shared by the thread that reads them at
/// a process's first sample and the symbolizer that names its frames. Cloning shares them.
#[derive(Clone, Debug, Default)]
pub struct ProcessMaps(Arc<Mutex<HashMap<u32, Remembered>>>);

/// Where an address of an exited process lay, from its remembered mappings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The mapped file's path.
    pub path: String,
    /// The address's offset in that file.
    pub file_offset: u64,
}

impl ProcessMaps {
    /// Reads `tgid`'s file mappings now, whatever is remembered (it was just noticed, maybe
    /// after an exec), and returns its executable mappings as read (the vDSO's too, which is
    /// not remembered); `None` when there are none to read (the process is gone or a zombie).
    pub fn read_now(&self, tgid: u32) -> Option<Vec<Mapping>> {
        let Ok(all) = maps::read_mappings(Path::new("/"), tgid) else {
            return None;
        };
        let executable: Vec<Mapping> = all.iter().filter(|m| m.is_executable()).cloned().collect();
        // Only files can name frames; a deleted file cannot be opened by path later.
        let mappings: Vec<Mapping> = all
            .into_iter()
            .filter(|m| {
                m.path
                    .as_deref()
                    .is_some_and(|p| p.starts_with('/') && !p.ends_with(" (deleted)"))
            })
            .collect();
        // A process that has exited but is not reaped yet maps nothing: keep what was read.
        if mappings.is_empty() {
            return None;
        }
        self.0.lock().expect("not poisoned").insert(
            tgid,
            Remembered {
                mappings,
                at: Instant::now(),
            },
        );
        Some(executable)
    }

    /// Reads `tgid`'s file mappings unless they were read less than [`REMEMBER_FOR`] ago.
    pub fn read_if_stale(&self, tgid: u32) {
        let fresh = self
            .0
            .lock()
            .expect("not poisoned")
            .get(&tgid)
            .is_some_and(|r| r.at.elapsed() < REMEMBER_FOR);
        if !fresh {
            let _ = self.read_now(tgid);
        }
    }

    /// Where each of `addrs` lay in `tgid`'s remembered mappings (`None`: in no file); `None`
    /// when nothing is remembered of `tgid`.
    pub fn locate(&self, tgid: u32, addrs: &[u64]) -> Option<Vec<Option<Located>>> {
        let remembered = self.0.lock().expect("not poisoned");
        let r = remembered.get(&tgid)?;
        Some(
            addrs
                .iter()
                .map(|&addr| {
                    let m = r.mappings.iter().find(|m| m.start <= addr && addr < m.end)?;
                    Some(Located {
                        path: m.path.clone().unwrap_or_default(),
                        file_offset: addr - m.start + m.offset,
                    })
                })
                .collect(),
        )
    }

    /// The executable mappings remembered of `tgid` (empty when none are).
    pub fn executable_mappings(&self, tgid: u32) -> Vec<Mapping> {
        self.0
            .lock()
            .expect("not poisoned")
            .get(&tgid)
            .map(|r| r.mappings.iter().filter(|m| m.is_executable()).cloned().collect())
            .unwrap_or_default()
    }

    /// Forgets exited processes remembered long enough that their last samples were drained,
    /// and the oldest beyond [`REMEMBERED_PROCESSES`].
    pub fn tidy(&self) {
        let mut remembered = self.0.lock().expect("not poisoned");
        remembered.retain(|tgid, r| r.at.elapsed() < 4 * REMEMBER_FOR || Path::new(&format!("/proc/{tgid}")).exists());
        if remembered.len() > REMEMBERED_PROCESSES {
            let mut ages: Vec<(Instant, u32)> = remembered.iter().map(|(t, r)| (r.at, *t)).collect();
            ages.sort_unstable();
            for (_, tgid) in &ages[..ages.len() - REMEMBERED_PROCESSES] {
                remembered.remove(tgid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_of_this_process_are_located_in_its_executable() {
        let maps = ProcessMaps::default();
        let me = std::process::id();
        assert!(maps.read_now(me).is_some());
        let here = addresses_of_this_process_are_located_in_its_executable as *const () as u64;
        let located = maps.locate(me, &[here, 0]).expect("remembered");
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(located[0].as_ref().map(|l| Path::new(&l.path)), Some(exe.as_path()));
        assert_eq!(located[1], None, "address 0 lies in no file");
        assert!(
            maps.locate(u32::MAX, &[here]).is_none(),
            "nothing remembered of a pid never read"
        );
    }
}
