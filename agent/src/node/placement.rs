//! Where a process's memory lives: its mappings (`/proc/PID/maps`) joined with their pages per
//! NUMA node (`/proc/PID/numa_maps`), each classified (text, data, bss, heap, ...), and the NUMA
//! nodes its threads last ran on. [`Placement::remote_mappings`] turns "the .bss is on node 1
//! while the threads run on node 0" into a finding.
//!
//! Files are read below a root path ("/" in production) so tests can use a fake tree.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::fs;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use bimodal_proto::placement as rule;

use crate::host::maps::{classify, parse_error, parse_maps, read, Mapping, MappingClass, ProcError, DEFAULT_PAGE_SIZE};

/// Where one thread last ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadPlacement {
    /// Thread id.
    pub tid: u32,
    /// Thread name (`comm`), which may contain spaces and parentheses.
    pub comm: String,
    /// The CPU it last ran on (field 39 of `stat`).
    pub cpu: u32,
    /// That CPU's NUMA node.
    pub node: Option<u32>,
    /// User plus system CPU time since it started, so callers can ignore idle threads.
    pub cpu_time_ns: u64,
}

/// The memory placement of one process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Process id.
    pub pid: u32,
    /// Process name from `/proc/PID/comm`.
    pub comm: Option<String>,
    /// Whether `numa_maps` exists (kernels without NUMA have none; then no pages are known).
    pub has_numa_maps: bool,
    /// Mappings in address order.
    pub mappings: Vec<Mapping>,
    /// Threads, ascending by id.
    pub threads: Vec<ThreadPlacement>,
    /// The distinct nodes the threads last ran on, ascending.
    pub thread_nodes: Vec<u32>,
    /// Resident bytes per node over all mappings (bytes, since hugetlb pages differ in size).
    pub bytes_per_node: BTreeMap<u32, u64>,
}

/// A mapping whose memory is mostly on nodes where the process's threads do not run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteFinding {
    /// First address of the mapping.
    pub start: u64,
    /// One past its last address.
    pub end: u64,
    /// Its class: data, bss, heap or anon.
    pub class: MappingClass,
    /// Its ELF image (for data and bss).
    pub image: Option<String>,
    /// Its path as in `maps` (for `[heap]` and named anonymous memory).
    pub path: Option<String>,
    /// The remote node holding most of its pages.
    pub node: u32,
    /// The nodes the process's threads last ran on.
    pub thread_nodes: Vec<u32>,
    /// Its resident pages per node.
    pub pages_per_node: BTreeMap<u32, u64>,
    /// Pages on nodes without any of the process's threads.
    pub remote_pages: u64,
    /// All its resident pages.
    pub total_pages: u64,
    /// Page size in bytes.
    pub page_size_bytes: u64,
}

impl fmt::Display for RemoteFinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match (&self.image, &self.path) {
            (Some(image), _) => format!(".{} of {image}", self.class.as_str()),
            (None, Some(path)) => path.clone(),
            (None, None) => "anonymous mapping".to_string(),
        };
        let mib = (self.total_pages * self.page_size_bytes) as f64 / (1 << 20) as f64;
        let node_pages = self.pages_per_node.get(&self.node).copied().unwrap_or(0);
        let nodes: Vec<String> = self.thread_nodes.iter().map(u32::to_string).collect();
        write!(
            f,
            "{what} ({:#x}-{:#x}, {mib:.1} MiB resident) is {}% on node {} ({node_pages} of {} pages) \
             while the process's threads ran on node{} {}",
            self.start,
            self.end,
            self.remote_pages * 100 / self.total_pages.max(1),
            self.node,
            self.total_pages,
            if nodes.len() == 1 { "" } else { "s" },
            nodes.join(", ")
        )
    }
}

impl Placement {
    /// Reads the placement of process `pid` from the procfs under `root`; `cpu_to_node` maps a
    /// CPU to its NUMA node (normally `Topology::node_of_cpu`). Without `numa_maps` (no NUMA)
    /// the mappings come without pages; threads that exit while being read are left out.
    pub fn read(root: &Path, pid: u32, cpu_to_node: &dyn Fn(u32) -> Option<u32>) -> Result<Placement, ProcError> {
        let proc_dir = root.join("proc").join(pid.to_string());

        let maps_path = proc_dir.join("maps");
        let mut mappings = parse_maps(&maps_path, &read(&maps_path)?)?;

        let numa_maps_path = proc_dir.join("numa_maps");
        let numa = match fs::read_to_string(&numa_maps_path) {
            Ok(text) => Some(parse_numa_maps(&numa_maps_path, &text)?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(ProcError::Read {
                    path: numa_maps_path,
                    source,
                })
            }
        };
        let has_numa_maps = numa.is_some();
        // Joined by start address: both files list the same VMAs, but they are read at two
        // moments, so a mapping created or split in between may be in only one of them.
        if let Some(numa) = numa {
            for mapping in &mut mappings {
                if let Some(entry) = numa.get(&mapping.start) {
                    mapping.policy = Some(entry.policy.clone());
                    mapping.pages_per_node = entry.pages_per_node.clone();
                    mapping.page_size_bytes = entry.page_size_bytes;
                    mapping.anon_pages = entry.anon_pages;
                    mapping.dirty_pages = entry.dirty_pages;
                }
            }
        }
        classify(&mut mappings);

        let mut bytes_per_node: BTreeMap<u32, u64> = BTreeMap::new();
        for mapping in &mappings {
            let page = mapping.page_size_bytes.unwrap_or(DEFAULT_PAGE_SIZE);
            for (&node, &pages) in &mapping.pages_per_node {
                *bytes_per_node.entry(node).or_default() += pages.saturating_mul(page);
            }
        }

        let threads = read_threads(&proc_dir, cpu_to_node)?;
        let thread_nodes: BTreeSet<u32> = threads.iter().filter_map(|t| t.node).collect();
        let comm = match fs::read_to_string(proc_dir.join("comm")) {
            Ok(text) => Some(text.trim_end_matches('\n').to_string()),
            Err(_) => None,
        };

        Ok(Placement {
            pid,
            comm,
            has_numa_maps,
            mappings,
            threads,
            thread_nodes: thread_nodes.into_iter().collect(),
            bytes_per_node,
        })
    }

    /// The mappings that are remote from the process's threads by the one rule
    /// ([`bimodal_proto::placement::remote`]: data, bss, heap and anonymous memory, at least
    /// 1 MiB resident, at least 80% of it on nodes where none of the threads last ran). Nothing
    /// when no thread's node is known (no NUMA, or no cpu→node map).
    pub fn remote_mappings(&self) -> Vec<RemoteFinding> {
        self.mappings
            .iter()
            .filter(|m| rule::is_judged(m.class.as_str()))
            .filter_map(|m| {
                let page_size_bytes = m.page_size_bytes.unwrap_or(DEFAULT_PAGE_SIZE);
                let remote = rule::remote(&m.pages_per_node, &self.thread_nodes, page_size_bytes)?;
                Some(RemoteFinding {
                    start: m.start,
                    end: m.end,
                    class: m.class,
                    image: m.image.clone(),
                    path: m.path.clone(),
                    node: remote.node,
                    thread_nodes: self.thread_nodes.clone(),
                    pages_per_node: m.pages_per_node.clone(),
                    remote_pages: remote.remote_pages,
                    total_pages: remote.total_pages,
                    page_size_bytes,
                })
            })
            .collect()
    }
}

/// The `n` processes with the most resident memory (`/proc/PID/statm`), largest first.
///
/// Resident size rather than recent CPU time: it needs one cheap read per process and no state
/// between calls, and memory placement matters most where there is most memory. The agent
/// prefers the pids its own samples name most; this is the fallback when it has none yet.
pub fn top_by_rss(root: &Path, n: usize) -> Result<Vec<u32>, ProcError> {
    let proc_dir = root.join("proc");
    let entries = fs::read_dir(&proc_dir).map_err(|source| ProcError::Read {
        path: proc_dir.clone(),
        source,
    })?;
    let mut by_rss: Vec<(u64, u32)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ProcError::Read {
            path: proc_dir.clone(),
            source,
        })?;
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        // A process that exits meanwhile, or one we may not read, is simply not a candidate.
        let Ok(statm) = fs::read_to_string(entry.path().join("statm")) else {
            continue;
        };
        if let Some(resident) = statm.split_whitespace().nth(1).and_then(|r| r.parse::<u64>().ok()) {
            if resident > 0 {
                by_rss.push((resident, pid));
            }
        }
    }
    by_rss.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    Ok(by_rss.into_iter().take(n).map(|(_, pid)| pid).collect())
}

#[derive(Debug, Default)]
struct NumaEntry {
    policy: String,
    pages_per_node: BTreeMap<u32, u64>,
    page_size_bytes: Option<u64>,
    anon_pages: Option<u64>,
    dirty_pages: Option<u64>,
}

/// Whether a `numa_maps` word is one of the per-mapping fields rather than part of the policy.
/// The policy can itself contain spaces (`weighted interleave`, `prefer (many)`) and `=`
/// (`bind=static:1`), so it is everything between the address and the first field.
fn is_numa_field(word: &str) -> bool {
    if matches!(word, "heap" | "stack" | "huge") {
        return true;
    }
    let Some((key, _)) = word.split_once('=') else {
        return false;
    };
    matches!(
        key,
        "file" | "anon" | "dirty" | "mapped" | "mapmax" | "swapcache" | "active" | "writeback" | "kernelpagesize_kB"
    ) || key
        .strip_prefix('N')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// `7f12a000 default anon=3 dirty=3 N0=2 N1=1 kernelpagesize_kB=4`, keyed by start address.
fn parse_numa_maps(path: &Path, text: &str) -> Result<HashMap<u64, NumaEntry>, ProcError> {
    let mut entries = HashMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let bad = |reason: &str| parse_error(path, line, reason);
        let mut words = line.split_whitespace();
        let start = words
            .next()
            .and_then(|a| u64::from_str_radix(a, 16).ok())
            .ok_or_else(|| bad("bad start address"))?;
        let words: Vec<&str> = words.collect();
        let first_field = words.iter().position(|w| is_numa_field(w)).unwrap_or(words.len());
        let mut entry = NumaEntry {
            policy: words[..first_field].join(" "),
            ..NumaEntry::default()
        };
        for word in &words[first_field..] {
            let Some((key, value)) = word.split_once('=') else {
                continue; // heap, stack, huge: `maps` says the same
            };
            if key == "file" {
                continue; // `maps` has the path unescaped
            }
            let number = || value.parse::<u64>().map_err(|_| bad("field value is not a number"));
            match key {
                "anon" => entry.anon_pages = Some(number()?),
                "dirty" => entry.dirty_pages = Some(number()?),
                "kernelpagesize_kB" => entry.page_size_bytes = Some(number()?.saturating_mul(1024)),
                _ => {
                    if let Some(node) = key.strip_prefix('N').and_then(|n| n.parse::<u32>().ok()) {
                        entry.pages_per_node.insert(node, number()?);
                    }
                }
            }
        }
        entries.insert(start, entry);
    }
    Ok(entries)
}

fn read_threads(proc_dir: &Path, cpu_to_node: &dyn Fn(u32) -> Option<u32>) -> Result<Vec<ThreadPlacement>, ProcError> {
    let task_dir = proc_dir.join("task");
    let entries = fs::read_dir(&task_dir).map_err(|source| ProcError::Read {
        path: task_dir.clone(),
        source,
    })?;
    let mut threads = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ProcError::Read {
            path: task_dir.clone(),
            source,
        })?;
        let Some(tid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let stat_path = entry.path().join("stat");
        let text = match fs::read_to_string(&stat_path) {
            Ok(text) => text,
            Err(source) => {
                let error = ProcError::Read {
                    path: stat_path,
                    source,
                };
                if error.process_gone() {
                    continue; // the thread exited after the directory was listed
                }
                return Err(error);
            }
        };
        let line = text.trim_end();
        let (comm, fields) = split_stat(line).ok_or_else(|| parse_error(&stat_path, line, "no `(comm)`"))?;
        let field = |number: usize| -> Result<u64, ProcError> {
            // `fields` starts at field 3 (state); fields are numbered from 1 as in proc(5).
            fields
                .get(number - 3)
                .and_then(|f| f.parse().ok())
                .ok_or_else(|| parse_error(&stat_path, line, &format!("field {number} is missing or not a number")))
        };
        let cpu = u32::try_from(field(39)?).map_err(|_| parse_error(&stat_path, line, "field 39 is not a CPU"))?;
        let ticks = field(14)?.saturating_add(field(15)?);
        threads.push(ThreadPlacement {
            tid,
            comm: comm.to_string(),
            cpu,
            node: cpu_to_node(cpu),
            cpu_time_ns: ticks.saturating_mul(1_000_000_000 / 100), // USER_HZ is 100
        });
    }
    threads.sort_by_key(|t| t.tid);
    Ok(threads)
}

/// `pid (comm) state ...` → (comm, [state, ...]). The name can contain spaces and `)`, but
/// nothing after it can, so it ends at the last `)`.
fn split_stat(line: &str) -> Option<(&str, Vec<&str>)> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    if close < open {
        return None;
    }
    Some((&line[open + 1..close], line[close + 1..].split_whitespace().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::host::files::put;

    /// A stat line with `comm`, CPU time and the CPU it last ran on.
    fn task_stat(tid: u32, comm: &str, utime: u64, stime: u64, cpu: u32) -> String {
        let mut fields = vec!["0".to_string(); 52 - 2];
        fields[0] = "S".into(); // field 3
        fields[14 - 3] = utime.to_string();
        fields[15 - 3] = stime.to_string();
        fields[39 - 3] = cpu.to_string();
        format!("{tid} ({comm}) {}\n", fields.join(" "))
    }

    /// Two nodes, CPUs 0-3 on node 0 and 4-7 on node 1.
    fn two_nodes(cpu: u32) -> Option<u32> {
        (cpu < 8).then_some(cpu / 4)
    }

    const SCYLLA_MAPS: &str = "\
00400000-00401000 r--p 00000000 fe:00 101 /opt/scylladb/libexec/scylla
00401000-02000000 r-xp 00001000 fe:00 101 /opt/scylladb/libexec/scylla
02000000-02800000 r--p 01c00000 fe:00 101 /opt/scylladb/libexec/scylla
02800000-02a00000 rw-p 02400000 fe:00 101 /opt/scylladb/libexec/scylla
02a00000-06a00000 rw-p 00000000 00:00 0 
06a00000-06c00000 rw-p 00000000 00:00 0 
0a000000-0a400000 rw-p 00000000 00:00 0                                  [heap]
600000000000-600040000000 rw-p 00000000 00:00 0 
7f0000000000-7f0000010000 rw-s 00000000 00:01 5                          /dev/shm/seastar ring
7f0000100000-7f0000126000 r--p 00000000 fe:00 202                        /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000126000-7f000027c000 r-xp 00026000 fe:00 202                        /usr/lib/x86_64-linux-gnu/libc.so.6
7f000027c000-7f00002cf000 r--p 0017c000 fe:00 202                        /usr/lib/x86_64-linux-gnu/libc.so.6
7f00002cf000-7f00002d3000 r--p 001cf000 fe:00 202                        /usr/lib/x86_64-linux-gnu/libc.so.6
7f00002d3000-7f00002d5000 rw-p 001d3000 fe:00 202                        /usr/lib/x86_64-linux-gnu/libc.so.6
7f00002d5000-7f00002e2000 rw-p 00000000 00:00 0 
7f0000300000-7f0000400000 r--p 00000000 fe:00 303                        /var/lib/scylla/data/big file.db
7f0000500000-7f0000502000 rw-p 00000000 00:00 0                          [anon:seastar stats]
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]
7ffc00100000-7ffc00102000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";

    /// .data (512 pages) and .bss (16384 + 512 pages, split in two VMAs by mbind) on node 1;
    /// heap on node 0; a 1 GiB anonymous arena mostly local; a small remote anon mapping.
    const SCYLLA_NUMA_MAPS: &str = "\
00400000 default file=/opt/scylladb/libexec/scylla mapped=1 N0=1 kernelpagesize_kB=4
00401000 default file=/opt/scylladb/libexec/scylla mapped=7000 mapmax=2 N0=7000 kernelpagesize_kB=4
02000000 default file=/opt/scylladb/libexec/scylla mapped=2048 N0=2048 kernelpagesize_kB=4
02800000 default file=/opt/scylladb/libexec/scylla anon=500 dirty=500 mapped=512 active=0 N1=512 kernelpagesize_kB=4
02a00000 bind=static|balancing:1 anon=16384 dirty=16384 active=0 N1=16384 kernelpagesize_kB=4
06a00000 default anon=512 dirty=512 N0=12 N1=500 kernelpagesize_kB=4
0a000000 default heap anon=1024 dirty=1024 N0=1024 kernelpagesize_kB=4
600000000000 weighted interleave:0-1 anon=262144 dirty=262144 N0=250000 N1=12144 kernelpagesize_kB=4
7f0000000000 default file=/dev/shm/seastar\\040ring mapped=16 N1=16 kernelpagesize_kB=4
7f0000100000 default file=/usr/lib/x86_64-linux-gnu/libc.so.6 mapped=38 mapmax=3 N0=38 kernelpagesize_kB=4
7f0000126000 default file=/usr/lib/x86_64-linux-gnu/libc.so.6 mapped=159 mapmax=5 N0=159 kernelpagesize_kB=4
7f000027c000 default file=/usr/lib/x86_64-linux-gnu/libc.so.6 mapped=16 mapmax=5 N0=16 kernelpagesize_kB=4
7f00002cf000 default file=/usr/lib/x86_64-linux-gnu/libc.so.6 anon=4 dirty=4 N1=4 kernelpagesize_kB=4
7f00002d3000 default file=/usr/lib/x86_64-linux-gnu/libc.so.6 anon=2 dirty=2 N1=2 kernelpagesize_kB=4
7f00002d5000 default anon=5 dirty=5 N1=5 kernelpagesize_kB=4
7f0000300000 default file=/var/lib/scylla/data/big\\040file.db mapped=256 N1=256 kernelpagesize_kB=4
7f0000500000 prefer (many)=balancing:1 anon=2 dirty=2 N1=2 kernelpagesize_kB=4
7ffc00000000 default stack anon=3 dirty=3 N0=3 kernelpagesize_kB=4
7ffc00100000 default
ffffffffff600000 default
";

    fn scylla(root: &Path) {
        put(root, "proc/4242/maps", SCYLLA_MAPS);
        put(root, "proc/4242/numa_maps", SCYLLA_NUMA_MAPS);
        put(root, "proc/4242/comm", "scylla\n");
        put(
            root,
            "proc/4242/task/4242/stat",
            &task_stat(4242, "scylla", 900, 100, 1),
        );
        put(
            root,
            "proc/4242/task/4243/stat",
            &task_stat(4243, "reactor-1", 5000, 10, 2),
        );
        // A thread name with spaces and parentheses: comm ends at the *last* ')'.
        put(
            root,
            "proc/4242/task/4250/stat",
            &task_stat(4250, "x) (y z) 1", 3, 4, 3),
        );
    }

    #[test]
    fn classifies_mappings() {
        let dir = tempfile::tempdir().unwrap();
        scylla(dir.path());
        let p = Placement::read(dir.path(), 4242, &two_nodes).unwrap();
        let classes: Vec<&str> = p.mappings.iter().map(|m| m.class.as_str()).collect();
        assert_eq!(
            classes,
            vec![
                "rodata", "text", "rodata", "data", "bss", "bss", "heap", "anon", "shm", "rodata", "text", "rodata",
                "rodata", "data", "bss", "file", "anon", "stack", "vdso", "vdso",
            ]
        );
        let bss = &p.mappings[4];
        assert_eq!(bss.image.as_deref(), Some("/opt/scylladb/libexec/scylla"));
        assert_eq!(bss.path, None);
        assert_eq!(bss.policy.as_deref(), Some("bind=static|balancing:1"));
        assert_eq!(bss.pages_per_node, BTreeMap::from([(1, 16384)]));
        assert_eq!(bss.page_size_bytes, Some(4096));
        assert_eq!(bss.anon_pages, Some(16384));
        assert_eq!(p.mappings[5].image.as_deref(), Some("/opt/scylladb/libexec/scylla"));
        assert_eq!(p.mappings[7].policy.as_deref(), Some("weighted interleave:0-1"));
        assert_eq!(
            p.mappings[14].image.as_deref(),
            Some("/usr/lib/x86_64-linux-gnu/libc.so.6")
        );
        assert_eq!(p.mappings[15].path.as_deref(), Some("/var/lib/scylla/data/big file.db"));
        assert_eq!(p.mappings[16].policy.as_deref(), Some("prefer (many)=balancing:1"));
        assert_eq!(p.mappings[16].describe(), "[anon:seastar stats]");
        assert_eq!(p.mappings[18].policy.as_deref(), Some("default"));
        assert!(p.mappings[18].pages_per_node.is_empty());
        assert_eq!(p.mappings[3].offset, 0x2400000);
        assert_eq!(p.mappings[3].perms, "rw-p");
        assert_eq!((p.mappings[3].device.as_str(), p.mappings[3].inode), ("fe:00", 101));
        assert_eq!(p.mappings[4].inode, 0);
        assert_eq!(p.comm.as_deref(), Some("scylla"));
        assert!(p.has_numa_maps);
    }

    #[test]
    fn threads_and_totals() {
        let dir = tempfile::tempdir().unwrap();
        scylla(dir.path());
        let p = Placement::read(dir.path(), 4242, &two_nodes).unwrap();
        let threads: Vec<(u32, &str, u32, Option<u32>)> = p
            .threads
            .iter()
            .map(|t| (t.tid, t.comm.as_str(), t.cpu, t.node))
            .collect();
        assert_eq!(
            threads,
            vec![
                (4242, "scylla", 1, Some(0)),
                (4243, "reactor-1", 2, Some(0)),
                (4250, "x) (y z) 1", 3, Some(0)),
            ]
        );
        assert_eq!(p.threads[0].cpu_time_ns, 1000 * 10_000_000);
        assert_eq!(p.thread_nodes, vec![0]);
        let n1_pages = 512 + 16384 + 500 + 12144 + 16 + 4 + 2 + 5 + 256 + 2;
        assert_eq!(p.bytes_per_node[&1], n1_pages * 4096);

        let json = serde_json::to_string(&p).unwrap();
        assert!(json.contains("\"class\":\"bss\""), "classes serialize as words");
        assert_eq!(serde_json::from_str::<Placement>(&json).unwrap(), p);
    }

    #[test]
    fn remote_bss_and_data_are_findings() {
        let dir = tempfile::tempdir().unwrap();
        scylla(dir.path());
        let p = Placement::read(dir.path(), 4242, &two_nodes).unwrap();
        let findings = p.remote_mappings();
        let summary: Vec<(&str, u64, u32, u64, u64)> = findings
            .iter()
            .map(|f| (f.class.as_str(), f.start, f.node, f.remote_pages, f.total_pages))
            .collect();
        // data (2 MiB, all on N1), the two .bss pieces (64 MiB and 2 MiB, ≥ 80% on N1); not the
        // heap (local), the arena (95% local), libc's bss (too small), the file or the shm.
        assert_eq!(
            summary,
            vec![
                ("data", 0x2800000, 1, 512, 512),
                ("bss", 0x2a00000, 1, 16384, 16384),
                ("bss", 0x6a00000, 1, 500, 512),
            ]
        );
        assert_eq!(findings[1].thread_nodes, vec![0]);
        assert_eq!(findings[1].image.as_deref(), Some("/opt/scylladb/libexec/scylla"));
        assert_eq!(
            findings[1].to_string(),
            ".bss of /opt/scylladb/libexec/scylla (0x2a00000-0x6a00000, 64.0 MiB resident) is 100% on node 1 \
             (16384 of 16384 pages) while the process's threads ran on node 0"
        );
    }

    #[test]
    fn no_findings_when_threads_run_everywhere_or_nodes_are_unknown() {
        let dir = tempfile::tempdir().unwrap();
        scylla(dir.path());
        put(
            dir.path(),
            "proc/4242/task/4251/stat",
            &task_stat(4251, "reactor-2", 1, 1, 6),
        );
        let p = Placement::read(dir.path(), 4242, &two_nodes).unwrap();
        assert_eq!(p.thread_nodes, vec![0, 1]);
        assert!(p.remote_mappings().is_empty());

        let p = Placement::read(dir.path(), 4242, &|_| None).unwrap();
        assert!(p.thread_nodes.is_empty());
        assert!(p.remote_mappings().is_empty());
    }

    #[test]
    fn kernel_without_numa_maps() {
        let dir = tempfile::tempdir().unwrap();
        scylla(dir.path());
        fs::remove_file(dir.path().join("proc/4242/numa_maps")).unwrap();
        let p = Placement::read(dir.path(), 4242, &|_| None).unwrap();
        assert!(!p.has_numa_maps);
        assert_eq!(p.mappings.len(), 20);
        assert_eq!(p.mappings[4].class, MappingClass::Bss);
        assert!(p
            .mappings
            .iter()
            .all(|m| m.policy.is_none() && m.pages_per_node.is_empty()));
        assert!(p.bytes_per_node.is_empty());
    }

    #[test]
    fn errors_name_the_file_and_tell_a_gone_process() {
        let dir = tempfile::tempdir().unwrap();
        let err = Placement::read(dir.path(), 7, &|_| None).unwrap_err();
        assert!(err.process_gone());
        let text = err.to_string();
        assert!(
            text.starts_with("failed to read `") && text.contains("proc/7/maps`: "),
            "{text}"
        );

        put(
            dir.path(),
            "proc/8/maps",
            "00400000-00401000 r--p 00000000 fe:00 1 /bin/x\n",
        );
        put(
            dir.path(),
            "proc/8/numa_maps",
            "00400000 default N0=x kernelpagesize_kB=4\n",
        );
        let err = Placement::read(dir.path(), 8, &|_| None).unwrap_err();
        assert!(!err.process_gone());
        assert!(
            err.to_string()
                .contains("proc/8/numa_maps`: field value is not a number"),
            "{err}"
        );

        put(dir.path(), "proc/8/numa_maps", "00400000 default\n");
        put(dir.path(), "proc/8/task/8/stat", "8 (x) S 1 2 3\n");
        let err = Placement::read(dir.path(), 8, &|_| None).unwrap_err().to_string();
        assert!(
            err.contains("task/8/stat`: field 39 is missing or not a number"),
            "{err}"
        );
    }

    #[test]
    fn stat_comm_with_parentheses() {
        let (comm, fields) = split_stat("12 (a (b) c)) R 1 2").unwrap();
        assert_eq!(comm, "a (b) c)");
        assert_eq!(fields, vec!["R", "1", "2"]);
        assert_eq!(split_stat("12 no comm"), None);
    }

    #[test]
    fn top_processes_by_resident_memory() {
        let dir = tempfile::tempdir().unwrap();
        put(dir.path(), "proc/1/statm", "1000 300 10 1 0 100 0\n");
        put(dir.path(), "proc/20/statm", "9000 5000 10 1 0 100 0\n");
        put(dir.path(), "proc/300/statm", "50 50 1 1 0 10 0\n");
        put(dir.path(), "proc/2/statm", "0 0 0 0 0 0 0\n"); // a kernel thread
        put(dir.path(), "proc/self/statm", "1 1 1 1 0 1 0\n");
        fs::create_dir_all(dir.path().join("proc/77")).unwrap(); // exited meanwhile
        assert_eq!(top_by_rss(dir.path(), 2).unwrap(), vec![20, 1]);
        assert_eq!(top_by_rss(dir.path(), 10).unwrap(), vec![20, 1, 300]);
    }

    /// Invariants only: reads this test process through the real procfs.
    #[test]
    fn this_process() {
        let pid = std::process::id();
        let p = Placement::read(Path::new("/"), pid, &|_| Some(0)).unwrap();
        assert_eq!(p.pid, pid);
        assert!(!p.threads.is_empty());
        assert!(p.threads.iter().any(|t| t.tid == pid));
        assert_eq!(p.thread_nodes, vec![0]);
        assert!(p.mappings.iter().any(|m| m.class == MappingClass::Text));
        assert!(p.mappings.iter().any(|m| m.class == MappingClass::Stack));
        assert!(p.mappings.windows(2).all(|w| w[0].end <= w[1].start));
        if p.has_numa_maps {
            assert!(p.mappings.iter().any(|m| m.policy.is_some()));
            assert!(!p.bytes_per_node.is_empty());
        }
        assert!(top_by_rss(Path::new("/"), 3).unwrap().len() <= 3);
    }
}
