//! How a node's memory-system counters move: snapshots of `/proc/vmstat` NUMA and fault
//! counters, `/proc/stat` CPU time and scheduler counters, and the per-node `numastat`, and the
//! difference between two snapshots.
//!
//! Files are read below a root path ("/" in production) so tests can use a fake tree. A counter
//! this kernel does not have (no NUMA, no migration) is `None`, never 0: "the kernel cannot
//! tell" and "nothing happened" are different findings.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::host::files::read_required;

/// The `/proc/vmstat` counters a snapshot keeps. Adding one is adding a line.
pub const VMSTAT_COUNTERS: &[&str] = &[
    "numa_hit",
    "numa_miss",
    "numa_foreign",
    "numa_interleave",
    "numa_local",
    "numa_other",
    "numa_pte_updates",
    "numa_hint_faults",
    "numa_hint_faults_local",
    "numa_pages_migrated",
    "pgfault",
    "pgmajfault",
    "pgmigrate_success",
    "pgmigrate_fail",
];

/// The counters kept from each `/sys/devices/system/node/nodeN/numastat`: they say which node
/// the misses and foreign allocations happen on, which the machine-wide sums hide.
pub const NUMASTAT_COUNTERS: &[&str] = &[
    "numa_hit",
    "numa_miss",
    "numa_foreign",
    "interleave_hit",
    "local_node",
    "other_node",
];

/// Ticks per second of the CPU times in `/proc/stat` (USER_HZ). The kernel fixes it at 100 on
/// every mainstream architecture (x86, arm64, ppc64, s390, riscv) independently of CONFIG_HZ;
/// assuming it spares a libc `sysconf(_SC_CLK_TCK)` call.
pub const USER_HZ: u64 = 100;

const NANOS_PER_TICK: u64 = 1_000_000_000 / USER_HZ;

/// Reading counters fails on one file.
pub type CounterError = crate::host::files::FileError;

/// Counters by name; `None` for a counter the kernel does not have.
pub type Counters = BTreeMap<String, Option<u64>>;

/// CPU time by state, in nanoseconds (converted from USER_HZ ticks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTimes {
    /// Normal-priority user mode, guest time included.
    pub user_ns: u64,
    /// Niced user mode, niced guest time included.
    pub nice_ns: u64,
    /// Kernel mode.
    pub system_ns: u64,
    /// Idle.
    pub idle_ns: u64,
    /// Idle with I/O outstanding (unreliable by the kernel's own documentation).
    pub iowait_ns: u64,
    /// Hard interrupts.
    pub irq_ns: u64,
    /// Soft interrupts.
    pub softirq_ns: u64,
    /// Stolen by the hypervisor.
    pub steal_ns: u64,
    /// Running a guest (already counted in `user_ns`).
    pub guest_ns: u64,
    /// Running a niced guest (already counted in `nice_ns`).
    pub guest_nice_ns: u64,
}

impl CpuTimes {
    /// All time accounted, without counting guest time twice.
    pub fn total_ns(&self) -> u64 {
        self.user_ns
            .saturating_add(self.nice_ns)
            .saturating_add(self.system_ns)
            .saturating_add(self.idle_ns)
            .saturating_add(self.iowait_ns)
            .saturating_add(self.irq_ns)
            .saturating_add(self.softirq_ns)
            .saturating_add(self.steal_ns)
    }

    /// Time not idle (neither `idle` nor `iowait`).
    pub fn busy_ns(&self) -> u64 {
        self.total_ns()
            .saturating_sub(self.idle_ns)
            .saturating_sub(self.iowait_ns)
    }

    /// Field-wise difference, clamped at 0. Clamping rather than refusing: iowait is documented
    /// to go backwards at times, and one such tick must not discard the whole split.
    fn saturating_sub(&self, earlier: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user_ns: self.user_ns.saturating_sub(earlier.user_ns),
            nice_ns: self.nice_ns.saturating_sub(earlier.nice_ns),
            system_ns: self.system_ns.saturating_sub(earlier.system_ns),
            idle_ns: self.idle_ns.saturating_sub(earlier.idle_ns),
            iowait_ns: self.iowait_ns.saturating_sub(earlier.iowait_ns),
            irq_ns: self.irq_ns.saturating_sub(earlier.irq_ns),
            softirq_ns: self.softirq_ns.saturating_sub(earlier.softirq_ns),
            steal_ns: self.steal_ns.saturating_sub(earlier.steal_ns),
            guest_ns: self.guest_ns.saturating_sub(earlier.guest_ns),
            guest_nice_ns: self.guest_nice_ns.saturating_sub(earlier.guest_nice_ns),
        }
    }
}

/// One snapshot of the node's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCounters {
    /// Time since boot from `/proc/uptime` (10 ms resolution): the interval clock of deltas, and
    /// the reboot detector (it only goes down across a reboot).
    pub uptime_ns: u64,
    /// Every counter of [`VMSTAT_COUNTERS`], `None` where `/proc/vmstat` lacks it.
    pub vmstat: Counters,
    /// Context switches since boot (`ctxt`).
    pub context_switches: u64,
    /// Processes and threads created since boot (`processes`).
    pub forks: u64,
    /// Runnable tasks now (`procs_running`).
    pub procs_running: u64,
    /// Tasks blocked on I/O now (`procs_blocked`).
    pub procs_blocked: u64,
    /// CPU time of all CPUs (the `cpu` line).
    pub cpu: CpuTimes,
    /// CPU time per CPU (`cpuN` lines; offline CPUs are absent).
    pub per_cpu: BTreeMap<u32, CpuTimes>,
    /// Every counter of [`NUMASTAT_COUNTERS`] per NUMA node; empty without NUMA.
    pub per_node: BTreeMap<u32, Counters>,
}

impl NodeCounters {
    /// Takes a snapshot from the procfs and sysfs mounted under `root`.
    pub fn read_from(root: &Path) -> Result<NodeCounters, CounterError> {
        let uptime_path = root.join("proc/uptime");
        let uptime_ns = parse_uptime(&read_required(&uptime_path)?).ok_or_else(|| CounterError::Parse {
            path: uptime_path.clone(),
            reason: "expected `SECONDS.FRACTION IDLE`".to_string(),
        })?;

        let vmstat_path = root.join("proc/vmstat");
        let vmstat = pick(&vmstat_path, &read_required(&vmstat_path)?, VMSTAT_COUNTERS)?;

        let stat_path = root.join("proc/stat");
        let stat = parse_stat(&stat_path, &read_required(&stat_path)?)?;

        let mut per_node = BTreeMap::new();
        let node_dir = root.join("sys/devices/system/node");
        for node in node_ids(&node_dir)? {
            let path = node_dir.join(format!("node{node}/numastat"));
            match fs::read_to_string(&path) {
                Ok(text) => {
                    per_node.insert(node, pick(&path, &text, NUMASTAT_COUNTERS)?);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => return Err(CounterError::Read { path, source }),
            }
        }

        Ok(NodeCounters {
            uptime_ns,
            vmstat,
            context_switches: stat.ctxt,
            forks: stat.processes,
            procs_running: stat.procs_running,
            procs_blocked: stat.procs_blocked,
            cpu: stat.cpu,
            per_cpu: stat.per_cpu,
            per_node,
        })
    }

    /// The value of a `/proc/vmstat` counter of [`VMSTAT_COUNTERS`].
    pub fn vmstat(&self, name: &str) -> Option<u64> {
        self.vmstat.get(name).copied().flatten()
    }
}

/// What happened between two snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterDelta {
    /// Time between the snapshots; `None` when the node rebooted in between.
    pub interval_ns: Option<u64>,
    /// Increase of each [`VMSTAT_COUNTERS`] counter; `None` when either snapshot lacks it or it
    /// went down (a reset or wrap).
    pub vmstat: Counters,
    /// Context switches in the interval.
    pub context_switches: Option<u64>,
    /// Processes and threads created in the interval.
    pub forks: Option<u64>,
    /// Runnable tasks at the end of the interval (a gauge, not a difference).
    pub procs_running: u64,
    /// Tasks blocked on I/O at the end of the interval (a gauge).
    pub procs_blocked: u64,
    /// CPU time spent in the interval, all CPUs; `None` after a reboot.
    pub cpu: Option<CpuTimes>,
    /// CPU time per CPU that was online in both snapshots.
    pub per_cpu: BTreeMap<u32, CpuTimes>,
    /// Increase of each [`NUMASTAT_COUNTERS`] counter, per node present in both snapshots.
    pub per_node: BTreeMap<u32, Counters>,
}

impl CounterDelta {
    /// The change from `prev` to `next`. A counter that went down is `None`, not a huge or
    /// zero number: it was reset. When uptime itself went down the node rebooted, and every
    /// difference is meaningless, so all are `None` (or empty).
    pub fn between(prev: &NodeCounters, next: &NodeCounters) -> CounterDelta {
        let Some(interval_ns) = next.uptime_ns.checked_sub(prev.uptime_ns) else {
            return CounterDelta {
                interval_ns: None,
                vmstat: next.vmstat.keys().map(|k| (k.clone(), None)).collect(),
                context_switches: None,
                forks: None,
                procs_running: next.procs_running,
                procs_blocked: next.procs_blocked,
                cpu: None,
                per_cpu: BTreeMap::new(),
                per_node: BTreeMap::new(),
            };
        };
        CounterDelta {
            interval_ns: Some(interval_ns),
            vmstat: diff_counters(&prev.vmstat, &next.vmstat),
            context_switches: next.context_switches.checked_sub(prev.context_switches),
            forks: next.forks.checked_sub(prev.forks),
            procs_running: next.procs_running,
            procs_blocked: next.procs_blocked,
            cpu: Some(next.cpu.saturating_sub(&prev.cpu)),
            per_cpu: next
                .per_cpu
                .iter()
                .filter_map(|(cpu, times)| Some((*cpu, times.saturating_sub(prev.per_cpu.get(cpu)?))))
                .collect(),
            per_node: next
                .per_node
                .iter()
                .filter_map(|(node, counters)| Some((*node, diff_counters(prev.per_node.get(node)?, counters))))
                .collect(),
        }
    }

    /// The increase of a `/proc/vmstat` counter of [`VMSTAT_COUNTERS`].
    pub fn vmstat(&self, name: &str) -> Option<u64> {
        self.vmstat.get(name).copied().flatten()
    }
}

/// Keys of `next`; a key missing from `prev` or a value that went down is `None`.
/// CPU time of process `pid`, all its threads, in nanoseconds: the first field of each thread's
/// `schedstat` (time on CPU, exact, unlike the tick-based `stat`); `None` when the process is gone.
pub fn process_cpu_ns(root: &Path, pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(root.join(format!("proc/{pid}/task"))).ok()?;
    let mut total = 0u64;
    for task in tasks.flatten() {
        let text = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        total += text
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Some(total)
}

fn diff_counters(prev: &Counters, next: &Counters) -> Counters {
    next.iter()
        .map(|(name, value)| {
            let before = prev.get(name).copied().flatten();
            let delta = match (before, *value) {
                (Some(before), Some(after)) => after.checked_sub(before),
                _ => None,
            };
            (name.clone(), delta)
        })
        .collect()
}

/// `name value` lines → the wanted names, each `Some` or `None`.
fn pick(path: &Path, text: &str, wanted: &[&str]) -> Result<Counters, CounterError> {
    let lines: HashMap<&str, &str> = text
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            Some((words.next()?, words.next()?))
        })
        .collect();
    wanted
        .iter()
        .map(|&name| {
            let value = match lines.get(name) {
                Some(value) => Some(value.parse::<u64>().map_err(|_| CounterError::Parse {
                    path: path.to_path_buf(),
                    reason: format!("counter `{name}` is not a number: {value:?}"),
                })?),
                None => None,
            };
            Ok((name.to_string(), value))
        })
        .collect()
}

/// `12345.67 23456.78` → nanoseconds of the first number.
fn parse_uptime(text: &str) -> Option<u64> {
    let first = text.split_whitespace().next()?;
    let (seconds, fraction) = first.split_once('.').unwrap_or((first, ""));
    let seconds: u64 = seconds.parse().ok()?;
    // Scale the fraction's digits to nanoseconds: "67" is 670_000_000.
    let mut nanos: u64 = 0;
    for (i, digit) in fraction.bytes().take(9).enumerate() {
        if !digit.is_ascii_digit() {
            return None;
        }
        nanos += u64::from(digit - b'0') * 10u64.pow(8 - i as u32);
    }
    seconds.checked_mul(1_000_000_000)?.checked_add(nanos)
}

struct Stat {
    cpu: CpuTimes,
    per_cpu: BTreeMap<u32, CpuTimes>,
    ctxt: u64,
    processes: u64,
    procs_running: u64,
    procs_blocked: u64,
}

fn parse_stat(path: &Path, text: &str) -> Result<Stat, CounterError> {
    let parse_error = |reason: String| CounterError::Parse {
        path: path.to_path_buf(),
        reason,
    };
    let mut cpu = None;
    let mut per_cpu = BTreeMap::new();
    let mut scalars: HashMap<&str, u64> = HashMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(key) = words.next() else { continue };
        if let Some(suffix) = key.strip_prefix("cpu") {
            let ticks = words
                .map(str::parse::<u64>)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| parse_error(format!("`{key}` has a non-numeric field")))?;
            let times = cpu_times(&ticks).ok_or_else(|| parse_error(format!("`{key}` has fewer than 4 fields")))?;
            if suffix.is_empty() {
                cpu = Some(times);
            } else {
                let id = suffix
                    .parse()
                    .map_err(|_| parse_error(format!("unexpected line `{key}`")))?;
                per_cpu.insert(id, times);
            }
        } else if matches!(key, "ctxt" | "processes" | "procs_running" | "procs_blocked") {
            let value = words
                .next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| parse_error(format!("`{key}` is not followed by a number")))?;
            scalars.insert(key, value);
        }
    }
    let scalar = |key: &str| {
        scalars
            .get(key)
            .copied()
            .ok_or_else(|| parse_error(format!("no `{key}` line")))
    };
    Ok(Stat {
        cpu: cpu.ok_or_else(|| parse_error("no `cpu` line".to_string()))?,
        per_cpu,
        ctxt: scalar("ctxt")?,
        processes: scalar("processes")?,
        procs_running: scalar("procs_running")?,
        procs_blocked: scalar("procs_blocked")?,
    })
}

/// Ticks in `/proc/stat` order → nanoseconds. Fields after `idle` appeared over the 2.5/2.6
/// series; missing trailing ones read as 0.
fn cpu_times(ticks: &[u64]) -> Option<CpuTimes> {
    if ticks.len() < 4 {
        return None;
    }
    let ns = |i: usize| ticks.get(i).copied().unwrap_or(0).saturating_mul(NANOS_PER_TICK);
    Some(CpuTimes {
        user_ns: ns(0),
        nice_ns: ns(1),
        system_ns: ns(2),
        idle_ns: ns(3),
        iowait_ns: ns(4),
        irq_ns: ns(5),
        softirq_ns: ns(6),
        steal_ns: ns(7),
        guest_ns: ns(8),
        guest_nice_ns: ns(9),
    })
}

/// Node ids from `nodeN` directory names; none when the directory is missing (no NUMA).
fn node_ids(dir: &Path) -> Result<Vec<u32>, CounterError> {
    crate::host::files::numbered_dir_entries(dir, "node").map_err(|source| CounterError::Read {
        path: dir.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::host::files::put;

    const VMSTAT_NUMA: &str = "nr_free_pages 123\nnuma_hit 1000\nnuma_miss 10\nnuma_foreign 10\n\
        numa_interleave 5\nnuma_local 990\nnuma_other 20\nnuma_pte_updates 300\nnuma_huge_pte_updates 0\n\
        numa_hint_faults 200\nnuma_hint_faults_local 150\nnuma_pages_migrated 40\npgmigrate_success 40\n\
        pgmigrate_fail 1\npgfault 50000\npgmajfault 7\n";

    /// A kernel built without CONFIG_NUMA and CONFIG_MIGRATION.
    const VMSTAT_PLAIN: &str = "nr_free_pages 123\npgfault 50000\npgmajfault 7\n";

    fn stat(ctxt: u64, user: u64, iowait: u64) -> String {
        format!(
            "cpu  {user} 0 200 1000 {iowait} 0 3 0 0 0\ncpu0 {} 0 100 500 {iowait} 0 2 0 0 0\n\
             cpu1 {} 0 100 500 0 0 1 0 0 0\nintr 1 2 3\nctxt {ctxt}\nbtime 1700000000\n\
             processes 400\nprocs_running 3\nprocs_blocked 1\nsoftirq 1 2\n",
            user / 2,
            user - user / 2
        )
    }

    fn snapshot(root: &Path, uptime: &str, vmstat: &str, stat_text: &str) -> NodeCounters {
        put(root, "proc/uptime", uptime);
        put(root, "proc/vmstat", vmstat);
        put(root, "proc/stat", stat_text);
        NodeCounters::read_from(root).unwrap()
    }

    #[test]
    fn vmstat_with_numa_counters() {
        let dir = tempfile::tempdir().unwrap();
        put(
            dir.path(),
            "sys/devices/system/node/node1/numastat",
            "numa_hit 500\nnuma_miss 10\nnuma_foreign 0\ninterleave_hit 2\nlocal_node 490\nother_node 20\n",
        );
        let c = snapshot(dir.path(), "100.25 180.00\n", VMSTAT_NUMA, &stat(5000, 400, 10));
        assert_eq!(c.uptime_ns, 100_250_000_000);
        assert_eq!(c.vmstat.len(), VMSTAT_COUNTERS.len());
        assert_eq!(c.vmstat("numa_hint_faults"), Some(200));
        assert_eq!(c.vmstat("pgmigrate_fail"), Some(1));
        assert_eq!(c.context_switches, 5000);
        assert_eq!(c.forks, 400);
        assert_eq!((c.procs_running, c.procs_blocked), (3, 1));
        assert_eq!(c.cpu.user_ns, 400 * 10_000_000);
        assert_eq!(c.cpu.iowait_ns, 10 * 10_000_000);
        assert_eq!(c.per_cpu.len(), 2);
        assert_eq!(c.per_cpu[&1].softirq_ns, 10_000_000);
        assert_eq!(c.per_node[&1]["other_node"], Some(20));
        assert_eq!(c.cpu.busy_ns(), (400 + 200 + 3) * 10_000_000);

        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<NodeCounters>(&json).unwrap(), c);
    }

    /// The agent's own CPU time grows while it spins, in nanoseconds. It spins until 20 ms of
    /// CPU time are counted, not for a fixed wall-clock window: on a loaded machine 30 ms of
    /// wall time gave 14 ms of CPU (a CI run failed so). The deadline only ends a test whose
    /// count never grows.
    #[test]
    fn process_cpu_time_is_exact_and_grows() {
        let root = Path::new("/");
        let before = process_cpu_ns(root, std::process::id()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut x = 0u64;
        let mut after = before;
        while after < before + 20_000_000 && std::time::Instant::now() < deadline {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            after = process_cpu_ns(root, std::process::id()).unwrap();
        }
        assert!(after >= before + 20_000_000, "{before} -> {after} in 60 s of spinning");
        assert_eq!(process_cpu_ns(root, u32::MAX), None);
    }

    #[test]
    fn vmstat_without_numa_counters_gives_none_not_zero() {
        let dir = tempfile::tempdir().unwrap();
        let c = snapshot(dir.path(), "1.00 1.00\n", VMSTAT_PLAIN, &stat(1, 2, 0));
        assert_eq!(c.vmstat("numa_hit"), None);
        assert_eq!(c.vmstat("pgmigrate_success"), None);
        assert_eq!(c.vmstat("pgfault"), Some(50000));
        assert!(c.per_node.is_empty());
        assert!(
            c.vmstat.contains_key("numa_miss"),
            "every listed counter is present, as None"
        );

        let later = snapshot(dir.path(), "2.00 2.00\n", VMSTAT_PLAIN, &stat(11, 2, 0));
        let d = CounterDelta::between(&c, &later);
        assert_eq!(d.vmstat("numa_hit"), None);
        assert_eq!(d.vmstat("pgfault"), Some(0));
        assert_eq!(d.context_switches, Some(10));
    }

    #[test]
    fn delta_between_snapshots() {
        let dir = tempfile::tempdir().unwrap();
        put(
            dir.path(),
            "sys/devices/system/node/node0/numastat",
            "numa_hit 500\nnuma_miss 10\n",
        );
        let a = snapshot(dir.path(), "100.00 0\n", VMSTAT_NUMA, &stat(5000, 400, 10));
        let vmstat_b = VMSTAT_NUMA
            .replace("numa_hint_faults 200", "numa_hint_faults 1200")
            .replace("numa_pages_migrated 40", "numa_pages_migrated 90")
            .replace("pgmigrate_fail 1\n", "");
        put(
            dir.path(),
            "sys/devices/system/node/node0/numastat",
            "numa_hit 800\nnuma_miss 15\n",
        );
        let b = snapshot(dir.path(), "102.50 0\n", &vmstat_b, &stat(5600, 600, 5));
        let d = CounterDelta::between(&a, &b);

        assert_eq!(d.interval_ns, Some(2_500_000_000));
        assert_eq!(d.vmstat("numa_hint_faults"), Some(1000));
        assert_eq!(d.vmstat("numa_pages_migrated"), Some(50));
        assert_eq!(d.vmstat("numa_hit"), Some(0));
        assert_eq!(d.vmstat("pgmigrate_fail"), None, "missing in the later snapshot");
        assert_eq!(d.context_switches, Some(600));
        assert_eq!(d.forks, Some(0));
        assert_eq!(d.procs_running, 3);
        let cpu = d.cpu.unwrap();
        assert_eq!(cpu.user_ns, 200 * 10_000_000);
        assert_eq!(
            cpu.iowait_ns, 0,
            "iowait went down: clamped, the rest of the split kept"
        );
        assert_eq!(d.per_cpu[&0].user_ns, 100 * 10_000_000);
        assert_eq!(d.per_node[&0]["numa_hit"], Some(300));
        assert_eq!(d.per_node[&0]["numa_miss"], Some(5));
        assert_eq!(d.per_node[&0]["numa_foreign"], None);
    }

    #[test]
    fn counter_going_backwards_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let a = snapshot(dir.path(), "100.00 0\n", VMSTAT_NUMA, &stat(5000, 400, 10));
        let b = snapshot(
            dir.path(),
            "101.00 0\n",
            &VMSTAT_NUMA.replace("numa_pte_updates 300", "numa_pte_updates 12"),
            &stat(4000, 500, 10),
        );
        let d = CounterDelta::between(&a, &b);
        assert_eq!(d.vmstat("numa_pte_updates"), None);
        assert_eq!(d.vmstat("numa_hit"), Some(0));
        assert_eq!(d.context_switches, None);
        assert_eq!(d.interval_ns, Some(1_000_000_000));
    }

    #[test]
    fn reboot_between_snapshots_gives_no_differences() {
        let dir = tempfile::tempdir().unwrap();
        let a = snapshot(dir.path(), "100000.00 0\n", VMSTAT_NUMA, &stat(5000, 400, 10));
        // Every counter happens to be higher after the reboot; the differences are still junk.
        let b = snapshot(
            dir.path(),
            "50.00 0\n",
            &VMSTAT_NUMA.replace("numa_hit 1000", "numa_hit 9000"),
            &stat(9000, 900, 10),
        );
        let d = CounterDelta::between(&a, &b);
        assert_eq!(d.interval_ns, None);
        assert!(d.vmstat.values().all(Option::is_none));
        assert_eq!(d.vmstat.len(), VMSTAT_COUNTERS.len());
        assert_eq!(d.context_switches, None);
        assert_eq!(d.cpu, None);
        assert!(d.per_cpu.is_empty());
    }

    #[test]
    fn malformed_files_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        put(dir.path(), "proc/uptime", "1.00 1.00\n");
        put(dir.path(), "proc/vmstat", "numa_hit lots\n");
        put(dir.path(), "proc/stat", &stat(1, 2, 0));
        let err = NodeCounters::read_from(dir.path()).unwrap_err().to_string();
        assert!(err.starts_with("failed to parse `"), "{err}");
        assert!(
            err.contains("proc/vmstat`: counter `numa_hit` is not a number"),
            "{err}"
        );

        put(dir.path(), "proc/vmstat", VMSTAT_PLAIN);
        put(dir.path(), "proc/stat", "cpu 1 2 3 4\n");
        let err = NodeCounters::read_from(dir.path()).unwrap_err().to_string();
        assert!(err.contains("proc/stat`: no `ctxt` line"), "{err}");

        fs::remove_file(dir.path().join("proc/stat")).unwrap();
        let err = NodeCounters::read_from(dir.path()).unwrap_err().to_string();
        assert!(
            err.starts_with("failed to read `") && err.contains("proc/stat`: "),
            "{err}"
        );
    }

    #[test]
    fn uptime_parsing() {
        assert_eq!(parse_uptime("0.01 0.00"), Some(10_000_000));
        assert_eq!(parse_uptime("12 3"), Some(12_000_000_000));
        assert_eq!(parse_uptime("1.5"), Some(1_500_000_000));
        assert_eq!(parse_uptime("x"), None);
        assert_eq!(parse_uptime("1.x"), None);
    }

    /// Invariants only: this runs on whatever machine builds the agent.
    #[test]
    fn this_machine() {
        let a = NodeCounters::read_from(Path::new("/")).unwrap();
        let b = NodeCounters::read_from(Path::new("/")).unwrap();
        assert!(a.context_switches > 0);
        assert!(!a.per_cpu.is_empty());
        assert!(a.cpu.total_ns() > 0);
        assert!(a.vmstat("pgfault").is_some());
        let d = CounterDelta::between(&a, &b);
        assert!(d.interval_ns.is_some());
        assert!(d.context_switches.is_some());
        assert!(d.vmstat("pgfault").is_some());
    }
}
