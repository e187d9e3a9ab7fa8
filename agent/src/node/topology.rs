//! What a node looks like: kernel, CPU model, sockets, cores and SMT siblings, L3 domains, NUMA
//! nodes and their distances, NICs' NUMA nodes, NUMA balancing and THP modes.
//!
//! Everything is read from procfs and sysfs below a root path ("/" in production) so that tests
//! can point the reader at a fake tree. A file that a kernel or machine legitimately lacks (no
//! NUMA, no L3 in a VM, a NIC without `numa_node`) becomes `None` or an empty list; a file that
//! exists but cannot be read or parsed is an error, because it means the reader is wrong.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::host::cpuinfo;
use crate::host::files::{
    numbered_dir_entries, parse_cpu_list, read_optional, read_optional_id, read_optional_u64, read_required, FileError,
};

/// Reading the topology fails on one file.
pub type TopologyError = FileError;

/// The static facts about one node that the fleet server needs to interpret its samples.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// `uname -r`, from `/proc/sys/kernel/osrelease`.
    pub kernel_release: String,
    /// The hostname as seen in the reader's UTS namespace (the agent runs in the host's).
    pub hostname: String,
    /// Vendor and model of the first processor in `/proc/cpuinfo`.
    pub cpu_model: CpuModel,
    /// Online CPU ids, ascending.
    pub online_cpus: Vec<u32>,
    /// One entry per online CPU, ascending by id.
    pub cpus: Vec<Cpu>,
    /// Physical packages, ascending by id; CPUs whose package is unknown are in none.
    pub sockets: Vec<Socket>,
    /// Physical cores (groups of SMT siblings), ordered by their first CPU.
    pub cores: Vec<Core>,
    /// Groups of CPUs sharing one level-3 cache, ordered by their first CPU; empty where the
    /// kernel exposes no L3 (common in VMs).
    pub l3_domains: Vec<CacheDomain>,
    /// NUMA nodes, ascending by id; empty on kernels built without NUMA.
    pub numa_nodes: Vec<NumaNode>,
    /// Network interfaces backed by a device (virtual ones are skipped), ascending by name.
    pub nics: Vec<Nic>,
    /// `/proc/sys/kernel/numa_balancing`; `None` where the kernel has no NUMA balancing.
    pub numa_balancing: Option<NumaBalancing>,
    /// The selected word of `/sys/kernel/mm/transparent_hugepage/enabled` (`always`, `madvise`,
    /// `never`); `None` without THP.
    pub thp_enabled: Option<String>,
    /// `MemTotal` of `/proc/meminfo` in bytes. Kept beside the per-node totals because they
    /// need not add up to it (e.g. with lazily initialised memory the nodes report less).
    pub memory_total_bytes: Option<u64>,
}

/// The processor model, from the first processor block of `/proc/cpuinfo`.
///
/// x86 names the fields `vendor_id`, `model name`, `cpu family`, `model`, `stepping`; arm64
/// has `CPU implementer`, `CPU architecture`, `CPU part`, `CPU variant` instead, which fill the
/// same fields so the server gets something comparable on both.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuModel {
    /// `vendor_id` (e.g. `GenuineIntel`), or arm64's `CPU implementer` (e.g. `0x41`).
    pub vendor: Option<String>,
    /// `model name`; arm64 kernels have none.
    pub model_name: Option<String>,
    /// `cpu family`, or arm64's `CPU architecture`.
    pub family: Option<u32>,
    /// `model`, or arm64's `CPU part`.
    pub model: Option<u32>,
    /// `stepping`, or arm64's `CPU variant`.
    pub stepping: Option<u32>,
}

/// One online logical CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cpu {
    /// Logical CPU id.
    pub id: u32,
    /// `physical_package_id`; `None` where the kernel reports none (or -1).
    pub socket: Option<u32>,
    /// `core_id`, unique only within a socket.
    pub core_id: Option<u32>,
    /// SMT siblings including this CPU (`thread_siblings_list`); just this CPU when unknown.
    pub thread_siblings: Vec<u32>,
    /// The NUMA node whose `cpulist` holds this CPU.
    pub node: Option<u32>,
}

/// One physical package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Socket {
    /// `physical_package_id`.
    pub id: u32,
    /// Its online CPUs, ascending.
    pub cpus: Vec<u32>,
}

/// One physical core: a set of SMT siblings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Core {
    /// The socket of its first CPU.
    pub socket: Option<u32>,
    /// `core_id` of its first CPU.
    pub core_id: Option<u32>,
    /// Its CPUs, ascending (as listed by `thread_siblings_list`).
    pub cpus: Vec<u32>,
}

/// CPUs sharing one cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheDomain {
    /// The cache's `id` where the kernel exposes it.
    pub id: Option<u32>,
    /// The cache size in bytes (`size`, e.g. `32768K`).
    pub size_bytes: Option<u64>,
    /// `shared_cpu_list`, ascending; may name CPUs that are offline.
    pub cpus: Vec<u32>,
}

/// One NUMA node, from `/sys/devices/system/node/nodeN`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaNode {
    /// Node id.
    pub id: u32,
    /// Its CPUs, ascending; empty for memory-only nodes (CXL, HBM, PMEM).
    pub cpus: Vec<u32>,
    /// `MemTotal` of the node's `meminfo` in bytes.
    pub mem_total_bytes: Option<u64>,
    /// `MemFree` of the node's `meminfo` in bytes, at the time of reading.
    pub mem_free_bytes: Option<u64>,
    /// The node's `distance` row: one entry per node of [`Topology::numa_nodes`], same order
    /// (the kernel prints one column per online node, which are exactly the node directories).
    pub distances: Vec<u32>,
}

/// A network interface backed by a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nic {
    /// Interface name, e.g. `eth0`.
    pub name: String,
    /// The NUMA node of the device (or of its parent bus device); `None` when unknown or -1.
    pub numa_node: Option<u32>,
}

/// The NUMA balancing mode (`kernel.numa_balancing`), a bit mask since Linux 5.18.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NumaBalancing {
    /// 0: no automatic page migration.
    Off,
    /// 1: classic balancing, pages follow the threads that touch them.
    Normal,
    /// 2: memory tiering, hot pages are promoted from slow (CPU-less) nodes.
    MemoryTiering,
    /// 3: both of the above.
    NormalAndMemoryTiering,
    /// A value this reader does not know (a future mode bit).
    Other(u32),
}

impl NumaBalancing {
    /// The mode for a raw sysctl value.
    pub fn from_raw(value: u32) -> Self {
        match value {
            0 => NumaBalancing::Off,
            1 => NumaBalancing::Normal,
            2 => NumaBalancing::MemoryTiering,
            3 => NumaBalancing::NormalAndMemoryTiering,
            other => NumaBalancing::Other(other),
        }
    }
}

impl Topology {
    /// Reads the topology of the machine whose procfs and sysfs are mounted under `root`.
    pub fn read_from(root: &Path) -> Result<Topology, TopologyError> {
        let kernel_release = read_required(&root.join("proc/sys/kernel/osrelease"))?
            .trim()
            .to_string();
        let hostname = read_required(&root.join("proc/sys/kernel/hostname"))?
            .trim()
            .to_string();
        let cpu_model = match read_optional(&root.join(cpuinfo::PROC_CPUINFO.trim_start_matches('/')))? {
            Some(text) => parse_cpuinfo(&text),
            None => CpuModel::default(),
        };

        let online_path = root.join("sys/devices/system/cpu/online");
        let online_cpus = parse_cpu_list_at(&online_path, &read_required(&online_path)?)?;
        let numa_nodes = read_nodes(root)?;
        let sys_cpu = root.join("sys/devices/system/cpu");

        let mut cpus = Vec::with_capacity(online_cpus.len());
        // Keyed by the shared CPU set so that every CPU of one cache lands in one domain.
        let mut l3: BTreeMap<Vec<u32>, CacheDomain> = BTreeMap::new();
        for &id in &online_cpus {
            let dir = sys_cpu.join(format!("cpu{id}"));
            let socket = read_optional_id(&dir.join("topology/physical_package_id"))?;
            let core_id = read_optional_id(&dir.join("topology/core_id"))?;
            let siblings_path = dir.join("topology/thread_siblings_list");
            let thread_siblings = match read_optional(&siblings_path)? {
                Some(text) => parse_cpu_list_at(&siblings_path, &text)?,
                None => vec![id],
            };
            if let Some(domain) = read_l3(&dir.join("cache"))? {
                l3.entry(domain.cpus.clone()).or_insert(domain);
            }
            let node = numa_nodes
                .iter()
                .find(|n| n.cpus.binary_search(&id).is_ok())
                .map(|n| n.id);
            cpus.push(Cpu {
                id,
                socket,
                core_id,
                thread_siblings,
                node,
            });
        }

        let mut sockets: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        let mut cores: BTreeMap<Vec<u32>, Core> = BTreeMap::new();
        for cpu in &cpus {
            if let Some(socket) = cpu.socket {
                sockets.entry(socket).or_default().push(cpu.id);
            }
            cores.entry(cpu.thread_siblings.clone()).or_insert_with(|| Core {
                socket: cpu.socket,
                core_id: cpu.core_id,
                cpus: cpu.thread_siblings.clone(),
            });
        }

        Ok(Topology {
            kernel_release,
            hostname,
            cpu_model,
            online_cpus,
            cpus,
            sockets: sockets.into_iter().map(|(id, cpus)| Socket { id, cpus }).collect(),
            // BTreeMap order over the sorted CPU sets is "by first CPU".
            cores: cores.into_values().collect(),
            l3_domains: l3.into_values().collect(),
            numa_nodes,
            nics: read_nics(root)?,
            numa_balancing: read_optional_u64(&root.join("proc/sys/kernel/numa_balancing"))?
                .map(|v| NumaBalancing::from_raw(u32::try_from(v).unwrap_or(u32::MAX))),
            thp_enabled: read_optional(&root.join("sys/kernel/mm/transparent_hugepage/enabled"))?
                .and_then(|text| bracketed_word(&text)),
            memory_total_bytes: match read_optional(&root.join("proc/meminfo"))? {
                Some(text) => meminfo_bytes(&text, "MemTotal"),
                None => None,
            },
        })
    }

    /// The NUMA node of an online CPU; `None` for an unknown CPU or a machine without NUMA.
    pub fn node_of_cpu(&self, cpu: u32) -> Option<u32> {
        self.cpus
            .binary_search_by_key(&cpu, |c| c.id)
            .ok()
            .and_then(|i| self.cpus[i].node)
    }

    /// The L3 domain containing `cpu`, if the kernel exposes L3 caches.
    pub fn l3_of_cpu(&self, cpu: u32) -> Option<&CacheDomain> {
        self.l3_domains.iter().find(|d| d.cpus.binary_search(&cpu).is_ok())
    }

    /// The distance from node `from` to node `to` (10 = local), as the firmware (SLIT) says.
    pub fn distance(&self, from: u32, to: u32) -> Option<u32> {
        let row = self.numa_nodes.iter().find(|n| n.id == from)?;
        let column = self.numa_nodes.iter().position(|n| n.id == to)?;
        row.distances.get(column).copied()
    }

    /// The distance matrix: row i, column j is the distance from `numa_nodes[i]` to
    /// `numa_nodes[j]`.
    pub fn distance_matrix(&self) -> Vec<Vec<u32>> {
        self.numa_nodes.iter().map(|n| n.distances.clone()).collect()
    }
}

fn parse_cpu_list_at(path: &Path, text: &str) -> Result<Vec<u32>, TopologyError> {
    parse_cpu_list(text).ok_or_else(|| TopologyError::Parse {
        path: path.to_path_buf(),
        reason: format!("not a CPU list: {:?}", text.trim()),
    })
}

/// Directory entries named `<prefix><number>`, as numbers, ascending; a missing directory
/// gives none.
fn numbered_entries(dir: &Path, prefix: &str) -> Result<Vec<u32>, TopologyError> {
    numbered_dir_entries(dir, prefix).map_err(|source| TopologyError::Read {
        path: dir.to_path_buf(),
        source,
    })
}

fn parse_cpuinfo(text: &str) -> CpuModel {
    let mut model = CpuModel::default();
    for (key, value) in cpuinfo::first_block(text) {
        match key {
            "vendor_id" | "CPU implementer" => model.vendor = Some(value.to_string()),
            "model name" => model.model_name = Some(value.to_string()),
            "cpu family" | "CPU architecture" => model.family = cpuinfo::parse_number(value),
            "model" | "CPU part" => model.model = cpuinfo::parse_number(value),
            "stepping" | "CPU variant" => model.stepping = cpuinfo::parse_number(value),
            _ => {}
        }
    }
    model
}

/// The value of `key` in a meminfo-style file (`MemTotal:  123 kB`, or per node
/// `Node 0 MemTotal:  123 kB`), in bytes.
fn meminfo_bytes(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        if name.split_whitespace().last()? != key {
            return None;
        }
        let mut words = value.split_whitespace();
        let number: u64 = words.next()?.parse().ok()?;
        match words.next() {
            Some("kB") => number.checked_mul(1024),
            None => Some(number),
            Some(_) => None,
        }
    })
}

/// `always [madvise] never` → `madvise`.
fn bracketed_word(text: &str) -> Option<String> {
    let start = text.find('[')?;
    let end = start + text[start..].find(']')?;
    Some(text[start + 1..end].to_string())
}

/// `32768K` → 33554432.
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, multiplier) = match text.as_bytes().last()? {
        b'K' => (&text[..text.len() - 1], 1 << 10),
        b'M' => (&text[..text.len() - 1], 1 << 20),
        b'G' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(multiplier)
}

/// The level-3 cache of one CPU from its `cache/indexN` directories.
fn read_l3(cache_dir: &Path) -> Result<Option<CacheDomain>, TopologyError> {
    for index in numbered_entries(cache_dir, "index")? {
        let dir = cache_dir.join(format!("index{index}"));
        if read_optional(&dir.join("level"))?.as_deref().map(str::trim) != Some("3") {
            continue;
        }
        let list_path = dir.join("shared_cpu_list");
        let Some(list) = read_optional(&list_path)? else {
            continue;
        };
        return Ok(Some(CacheDomain {
            id: read_optional_id(&dir.join("id"))?,
            size_bytes: read_optional(&dir.join("size"))?.and_then(|s| parse_size(&s)),
            cpus: parse_cpu_list_at(&list_path, &list)?,
        }));
    }
    Ok(None)
}

fn read_nodes(root: &Path) -> Result<Vec<NumaNode>, TopologyError> {
    let base = root.join("sys/devices/system/node");
    let mut nodes = Vec::new();
    for id in numbered_entries(&base, "node")? {
        let dir = base.join(format!("node{id}"));
        let cpulist_path = dir.join("cpulist");
        let cpus = match read_optional(&cpulist_path)? {
            Some(text) => parse_cpu_list_at(&cpulist_path, &text)?,
            None => Vec::new(),
        };
        let meminfo = read_optional(&dir.join("meminfo"))?;
        let distance_path = dir.join("distance");
        let distances = match read_optional(&distance_path)? {
            Some(text) => text
                .split_whitespace()
                .map(|d| d.parse::<u32>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| TopologyError::Parse {
                    path: distance_path.clone(),
                    reason: format!("not a distance row: {:?}", text.trim()),
                })?,
            None => Vec::new(),
        };
        nodes.push(NumaNode {
            id,
            cpus,
            mem_total_bytes: meminfo.as_deref().and_then(|m| meminfo_bytes(m, "MemTotal")),
            mem_free_bytes: meminfo.as_deref().and_then(|m| meminfo_bytes(m, "MemFree")),
            distances,
        });
    }
    Ok(nodes)
}

fn read_nics(root: &Path) -> Result<Vec<Nic>, TopologyError> {
    let dir = root.join("sys/class/net");
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(TopologyError::Read { path: dir, source }),
    };
    let mut nics = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| TopologyError::Read {
            path: dir.clone(),
            source,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let device = dir.join(&name).join("device");
        // Virtual interfaces (lo, bridges, veth, ifb) have no `device` link.
        if !device.exists() {
            continue;
        }
        // A virtio NIC's `device` is the virtio device, which has no `numa_node`; its parent
        // (the PCI function) has. `device/..` resolves through the symlink to that parent.
        let numa_node = match read_optional_id(&device.join("numa_node"))? {
            Some(node) => Some(node),
            None => read_optional_id(&device.join("../numa_node"))?,
        };
        nics.push(Nic { name, numa_node });
    }
    nics.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(nics)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::host::files::put;

    const CPUINFO_X86: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\n\
        model name\t: Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz\nstepping\t: 7\ncpu MHz\t\t: 2100.000\n\n\
        processor\t: 1\nvendor_id\t: OtherVendor\nmodel name\t: not this one\n\n";

    fn common(root: &Path, online: &str) {
        put(root, "proc/sys/kernel/osrelease", "6.8.0-test\n");
        put(root, "proc/sys/kernel/hostname", "db-17\n");
        put(root, "proc/cpuinfo", CPUINFO_X86);
        put(
            root,
            "proc/meminfo",
            "MemTotal:       16384 kB\nMemFree:         1024 kB\n",
        );
        put(root, "sys/devices/system/cpu/online", &format!("{online}\n"));
    }

    fn cpu(root: &Path, id: u32, package: u32, core: u32, siblings: &str, l3: Option<(u32, &str)>) {
        let dir = format!("sys/devices/system/cpu/cpu{id}");
        put(
            root,
            &format!("{dir}/topology/physical_package_id"),
            &format!("{package}\n"),
        );
        put(root, &format!("{dir}/topology/core_id"), &format!("{core}\n"));
        put(
            root,
            &format!("{dir}/topology/thread_siblings_list"),
            &format!("{siblings}\n"),
        );
        put(root, &format!("{dir}/cache/index0/level"), "1\n");
        put(
            root,
            &format!("{dir}/cache/index0/shared_cpu_list"),
            &format!("{siblings}\n"),
        );
        put(root, &format!("{dir}/cache/index2/level"), "2\n");
        put(
            root,
            &format!("{dir}/cache/index2/shared_cpu_list"),
            &format!("{siblings}\n"),
        );
        if let Some((l3_id, shared)) = l3 {
            put(root, &format!("{dir}/cache/index3/level"), "3\n");
            put(root, &format!("{dir}/cache/index3/id"), &format!("{l3_id}\n"));
            put(root, &format!("{dir}/cache/index3/size"), "16384K\n");
            put(
                root,
                &format!("{dir}/cache/index3/shared_cpu_list"),
                &format!("{shared}\n"),
            );
        }
    }

    fn node(root: &Path, id: u32, cpulist: &str, total_kb: u64, free_kb: u64, distance: &str) {
        let dir = format!("sys/devices/system/node/node{id}");
        put(root, &format!("{dir}/cpulist"), &format!("{cpulist}\n"));
        put(
            root,
            &format!("{dir}/meminfo"),
            &format!(
                "Node {id} MemTotal:       {total_kb} kB\nNode {id} MemFree:        {free_kb} kB\n\
                 Node {id} MemUsed:  1 kB\n"
            ),
        );
        put(root, &format!("{dir}/distance"), &format!("{distance}\n"));
    }

    /// Two sockets, one NUMA node and one L3 each, two cores of two SMT threads per socket;
    /// a PCI NIC on node 1, a virtio NIC whose `numa_node` is on the parent PCI device, a
    /// loopback without a device.
    fn two_node_machine(root: &Path) {
        common(root, "0-7");
        for id in 0..8u32 {
            let package = id / 4;
            let core = (id % 4) / 2;
            let first = id - id % 2;
            let l3 = if package == 0 { "0-3" } else { "4-7" };
            cpu(
                root,
                id,
                package,
                core,
                &format!("{first}-{}", first + 1),
                Some((package, l3)),
            );
        }
        node(root, 0, "0-3", 8 << 20, 6 << 20, "10 21");
        node(root, 1, "4-7", 8 << 20, 1 << 20, "21 10");
        put(root, "sys/devices/system/node/online", "0-1\n");
        put(root, "sys/devices/system/node/possible", "0-1\n");
        put(root, "proc/sys/kernel/numa_balancing", "1\n");
        put(
            root,
            "sys/kernel/mm/transparent_hugepage/enabled",
            "[always] madvise never\n",
        );

        put(root, "sys/devices/pci0000:80/0000:80:01.0/numa_node", "1\n");
        put(root, "sys/devices/pci0000:00/0000:00:03.0/numa_node", "0\n");
        put(root, "sys/devices/pci0000:00/0000:00:03.0/virtio2/features", "0\n");
        fs::create_dir_all(root.join("sys/class/net/ens1")).unwrap();
        fs::create_dir_all(root.join("sys/class/net/eth0")).unwrap();
        fs::create_dir_all(root.join("sys/class/net/lo")).unwrap();
        std::os::unix::fs::symlink(
            root.join("sys/devices/pci0000:80/0000:80:01.0"),
            root.join("sys/class/net/ens1/device"),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            root.join("sys/devices/pci0000:00/0000:00:03.0/virtio2"),
            root.join("sys/class/net/eth0/device"),
        )
        .unwrap();
    }

    #[test]
    fn two_node_numa_machine_with_smt_and_l3() {
        let dir = tempfile::tempdir().unwrap();
        two_node_machine(dir.path());
        let t = Topology::read_from(dir.path()).unwrap();

        assert_eq!(t.kernel_release, "6.8.0-test");
        assert_eq!(t.hostname, "db-17");
        assert_eq!(t.cpu_model.vendor.as_deref(), Some("GenuineIntel"));
        assert_eq!(
            t.cpu_model.model_name.as_deref(),
            Some("Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz")
        );
        assert_eq!(
            (t.cpu_model.family, t.cpu_model.model, t.cpu_model.stepping),
            (Some(6), Some(85), Some(7))
        );
        assert_eq!(t.online_cpus, (0..8).collect::<Vec<_>>());
        assert_eq!(t.memory_total_bytes, Some(16384 * 1024));

        assert_eq!(t.sockets.len(), 2);
        assert_eq!(
            t.sockets[1],
            Socket {
                id: 1,
                cpus: vec![4, 5, 6, 7]
            }
        );
        assert_eq!(t.cores.len(), 4);
        assert_eq!(
            t.cores[3],
            Core {
                socket: Some(1),
                core_id: Some(1),
                cpus: vec![6, 7]
            }
        );
        assert_eq!(t.cpus[5].thread_siblings, vec![4, 5]);

        assert_eq!(t.l3_domains.len(), 2);
        assert_eq!(t.l3_domains[1].cpus, vec![4, 5, 6, 7]);
        assert_eq!(t.l3_domains[1].id, Some(1));
        assert_eq!(t.l3_domains[1].size_bytes, Some(16 << 20));
        assert_eq!(t.l3_of_cpu(2).map(|d| d.id), Some(Some(0)));

        assert_eq!(t.numa_nodes.len(), 2);
        assert_eq!(t.numa_nodes[1].cpus, vec![4, 5, 6, 7]);
        assert_eq!(t.numa_nodes[1].mem_total_bytes, Some(8 << 30));
        assert_eq!(t.numa_nodes[1].mem_free_bytes, Some(1 << 30));
        assert_eq!(t.distance_matrix(), vec![vec![10, 21], vec![21, 10]]);
        assert_eq!(t.distance(0, 1), Some(21));
        assert_eq!(t.distance(1, 1), Some(10));
        assert_eq!(t.distance(0, 2), None);

        assert_eq!(t.node_of_cpu(0), Some(0));
        assert_eq!(t.node_of_cpu(6), Some(1));
        assert_eq!(t.node_of_cpu(8), None);

        assert_eq!(
            t.nics,
            vec![
                Nic {
                    name: "ens1".into(),
                    numa_node: Some(1)
                },
                Nic {
                    name: "eth0".into(),
                    numa_node: Some(0)
                },
            ]
        );
        assert_eq!(t.numa_balancing, Some(NumaBalancing::Normal));
        assert_eq!(t.thp_enabled.as_deref(), Some("always"));

        // What the agent sends must come back unchanged.
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Topology>(&json).unwrap(), t);
    }

    #[test]
    fn non_numa_vm_without_l3() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        common(root, "0-1");
        cpu(root, 0, 0, 0, "0", None);
        cpu(root, 1, 0, 1, "1", None);
        node(root, 0, "0-1", 4 << 20, 2 << 20, "10");
        // A NIC whose PCI device says -1 (no affinity information), as in most VMs.
        put(root, "sys/devices/pci0000:00/0000:00:03.0/numa_node", "-1\n");
        fs::create_dir_all(root.join("sys/class/net/eth0")).unwrap();
        std::os::unix::fs::symlink(
            root.join("sys/devices/pci0000:00/0000:00:03.0"),
            root.join("sys/class/net/eth0/device"),
        )
        .unwrap();

        let t = Topology::read_from(root).unwrap();
        assert_eq!(t.online_cpus, vec![0, 1]);
        assert!(t.l3_domains.is_empty());
        assert_eq!(t.cores.len(), 2);
        assert_eq!(t.sockets.len(), 1);
        assert_eq!(t.numa_nodes.len(), 1);
        assert_eq!(t.node_of_cpu(1), Some(0));
        assert_eq!(t.distance_matrix(), vec![vec![10]]);
        assert_eq!(
            t.nics,
            vec![Nic {
                name: "eth0".into(),
                numa_node: None
            }]
        );
        assert_eq!(t.numa_balancing, None);
        assert_eq!(t.thp_enabled, None);
    }

    #[test]
    fn kernel_without_numa_or_topology_directories() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        common(root, "0");
        let t = Topology::read_from(root).unwrap();
        assert!(t.numa_nodes.is_empty());
        assert_eq!(t.node_of_cpu(0), None);
        assert_eq!(t.cpus[0].thread_siblings, vec![0]);
        assert_eq!(t.cpus[0].socket, None);
        assert!(t.sockets.is_empty());
        assert!(t.nics.is_empty());
    }

    #[test]
    fn missing_online_list_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        put(dir.path(), "proc/sys/kernel/osrelease", "6.8.0\n");
        put(dir.path(), "proc/sys/kernel/hostname", "h\n");
        let err = Topology::read_from(dir.path()).unwrap_err().to_string();
        assert!(err.starts_with("failed to read `"), "{err}");
        assert!(err.contains("sys/devices/system/cpu/online`: "), "{err}");
    }

    #[test]
    fn malformed_cpulist_is_a_parse_error() {
        let dir = tempfile::tempdir().unwrap();
        common(dir.path(), "0-1");
        node(dir.path(), 0, "0-x", 1, 1, "10");
        let err = Topology::read_from(dir.path()).unwrap_err().to_string();
        assert!(err.contains("node/node0/cpulist`: not a CPU list: \"0-x\""), "{err}");
    }

    #[test]
    fn cpu_list_format() {
        assert_eq!(parse_cpu_list("0-3,8\n"), Some(vec![0, 1, 2, 3, 8]));
        assert_eq!(parse_cpu_list("10-11,0"), Some(vec![0, 10, 11]));
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list("\n"), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
        assert_eq!(parse_cpu_list("1,,2"), None);
    }

    #[test]
    fn arm64_cpuinfo() {
        let text = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU architecture: 8\n\
                    CPU variant\t: 0x1\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n";
        let m = parse_cpuinfo(text);
        assert_eq!(m.vendor.as_deref(), Some("0x41"));
        assert_eq!((m.family, m.model, m.stepping), (Some(8), Some(0xd0c), Some(1)));
        assert_eq!(m.model_name, None);
    }

    #[test]
    fn numa_balancing_modes() {
        assert_eq!(NumaBalancing::from_raw(0), NumaBalancing::Off);
        assert_eq!(NumaBalancing::from_raw(2), NumaBalancing::MemoryTiering);
        assert_eq!(NumaBalancing::from_raw(3), NumaBalancing::NormalAndMemoryTiering);
        assert_eq!(NumaBalancing::from_raw(8), NumaBalancing::Other(8));
    }

    /// Invariants only: this runs on whatever machine builds the agent.
    #[test]
    fn this_machine() {
        let t = Topology::read_from(Path::new("/")).unwrap();
        assert!(!t.online_cpus.is_empty());
        assert_eq!(t.cpus.len(), t.online_cpus.len());
        assert!(!t.kernel_release.is_empty());
        for node in &t.numa_nodes {
            assert_eq!(node.distances.len(), t.numa_nodes.len(), "node {}", node.id);
            assert_eq!(t.distance(node.id, node.id), Some(10));
        }
        for cpu in &t.cpus {
            assert!(cpu.thread_siblings.contains(&cpu.id));
            if !t.numa_nodes.is_empty() {
                assert!(t.node_of_cpu(cpu.id).is_some(), "cpu {} has no node", cpu.id);
            }
        }
        let in_cores: usize = t.cores.iter().map(|c| c.cpus.len()).sum();
        assert!(in_cores >= t.cpus.len());
    }
}
