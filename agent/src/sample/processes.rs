//! What the agent keeps of each sampled process: its file mappings, read while it runs, so that
//! samples handled after it exited are still unwound and named.
//!
//! Mappings are read at a process's first sample, told by the BPF programs (`new_processes`,
//! see [`crate::sample::bpf::Sampler`]), and again at a drain when older than [`REMEMBER_FOR`]. A process
//! that lives less than one drain interval is read within milliseconds of its first sample,
//! instead of never.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::host::maps::{self, Mapping, MappingClass};

/// Remembered mappings are read again after this long (libraries loaded since, a reused pid).
pub const REMEMBER_FOR: Duration = Duration::from_secs(30);
/// At most this many processes' mappings are kept; the oldest go first.
pub const REMEMBERED_PROCESSES: usize = 4096;

/// A process's executable file mappings, as they were when it was last seen alive: what naming
/// and unwinding a frame need (frames lie in code), and no more. A node of short processes
/// remembers hundreds of them at once.
#[derive(Debug)]
struct Remembered {
    mappings: Box<[CodeMapping]>,
    at: Instant,
}

/// One executable mapping of a file; its path shared with every other process mapping that file.
#[derive(Debug)]
struct CodeMapping {
    start: u64,
    end: u64,
    offset: u64,
    device: Arc<str>,
    inode: u64,
    path: Arc<str>,
}

impl CodeMapping {
    fn to_mapping(&self) -> Mapping {
        let path = self.path.to_string();
        Mapping {
            start: self.start,
            end: self.end,
            perms: "r-xp".into(),
            offset: self.offset,
            device: self.device.to_string(),
            inode: self.inode,
            image: Some(path.clone()),
            path: Some(path),
            class: MappingClass::Text,
            policy: None,
            pages_per_node: Default::default(),
            page_size_bytes: None,
            anon_pages: None,
            dirty_pages: None,
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    processes: HashMap<u32, Remembered>,
    /// Paths and devices of remembered mappings, each held once.
    names: HashSet<Arc<str>>,
}

impl Inner {
    fn name(&mut self, text: &str) -> Arc<str> {
        if let Some(name) = self.names.get(text) {
            return Arc::clone(name);
        }
        let name: Arc<str> = Arc::from(text);
        self.names.insert(Arc::clone(&name));
        name
    }
}

/// The executable file mappings of processes seen alive, by tgid; shared by the thread that reads them at
/// a process's first sample and the symbolizer that names its frames. Cloning shares them.
#[derive(Clone, Debug, Default)]
pub struct ProcessMaps(Arc<Mutex<Inner>>);

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
        let executable: Vec<Mapping> = all.into_iter().filter(Mapping::is_executable).collect();
        let mut inner = self.0.lock().expect("not poisoned");
        // Only files can name frames; a deleted file cannot be opened by path later.
        let mappings: Box<[CodeMapping]> = executable
            .iter()
            .filter_map(|m| {
                let path = m.path.as_deref()?;
                (path.starts_with('/') && !path.ends_with(" (deleted)")).then(|| CodeMapping {
                    start: m.start,
                    end: m.end,
                    offset: m.offset,
                    device: inner.name(&m.device),
                    inode: m.inode,
                    path: inner.name(path),
                })
            })
            .collect();
        // A process that has exited but is not reaped yet maps nothing: keep what was read.
        if mappings.is_empty() {
            return None;
        }
        inner.processes.insert(
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
            .processes
            .get(&tgid)
            .is_some_and(|r| r.at.elapsed() < REMEMBER_FOR);
        if !fresh {
            let _ = self.read_now(tgid);
        }
    }

    /// Where each of `addrs` lay in `tgid`'s remembered mappings (`None`: in no file); `None`
    /// when nothing is remembered of `tgid`.
    pub fn locate(&self, tgid: u32, addrs: &[u64]) -> Option<Vec<Option<Located>>> {
        let inner = self.0.lock().expect("not poisoned");
        let r = inner.processes.get(&tgid)?;
        Some(
            addrs
                .iter()
                .map(|&addr| {
                    let m = r.mappings.iter().find(|m| m.start <= addr && addr < m.end)?;
                    Some(Located {
                        path: m.path.to_string(),
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
            .processes
            .get(&tgid)
            .map(|r| r.mappings.iter().map(CodeMapping::to_mapping).collect())
            .unwrap_or_default()
    }

    /// Forgets exited processes remembered long enough that their last samples were drained,
    /// and the oldest beyond [`REMEMBERED_PROCESSES`]; and the names no process maps any more.
    pub fn tidy(&self) {
        let mut inner = self.0.lock().expect("not poisoned");
        let remembered = &mut inner.processes;
        remembered.retain(|tgid, r| r.at.elapsed() < 4 * REMEMBER_FOR || Path::new(&format!("/proc/{tgid}")).exists());
        if remembered.len() > REMEMBERED_PROCESSES {
            let mut ages: Vec<(Instant, u32)> = remembered.iter().map(|(t, r)| (r.at, *t)).collect();
            ages.sort_unstable();
            for (_, tgid) in &ages[..ages.len() - REMEMBERED_PROCESSES] {
                remembered.remove(tgid);
            }
        }
        inner.names.retain(|name| Arc::strong_count(name) > 1);
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

    /// Two processes mapping the same library remember its path once.
    #[test]
    fn processes_share_the_paths_they_map() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs");
        let maps = ProcessMaps::default();
        let read = |tgid: u32| {
            // The child may still be exec'ing: its mappings are read once they are sleep's.
            for _ in 0..100 {
                let text = maps.read_now(tgid).unwrap_or_default();
                if text
                    .iter()
                    .any(|m| m.path.as_deref().is_some_and(|p| p.contains("libc")))
                {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            panic!("process {tgid} maps no libc");
        };
        read(child.id());
        read(std::process::id());
        let _ = child.kill();
        let _ = child.wait();
        let inner = maps.0.lock().unwrap();
        let libc_of = |tgid: u32| {
            let r = &inner.processes[&tgid];
            let m = r
                .mappings
                .iter()
                .find(|m| m.path.contains("libc"))
                .expect("libc remembered");
            Arc::clone(&m.path)
        };
        let (theirs, mine) = (libc_of(child.id()), libc_of(std::process::id()));
        assert_eq!(theirs, mine, "sleep and this test map the system's libc");
        assert!(Arc::ptr_eq(&theirs, &mine), "one copy of {mine}");
    }
}
