//! The simulated fleet: who each node is (name, labels, hardware, kernel) and how it differs
//! from the others (sample rates, kernel base, schedule phase), all derived from the seed and the
//! node's index so that several loadgen processes can each play a slice of one fleet.

use bimodal_proto::v1;

use super::rng::{mix, Rng};

/// One simulated node: a few words, however many nodes there are.
#[derive(Clone, Debug)]
pub struct Node {
    /// Position in the fleet (`--first-node` + i).
    pub index: u32,
    /// Multiplies every sample rate: nodes are not equally busy (log-normal, mean 1).
    pub factor: f64,
    /// Where in the interval this node's batches fall, in [0, 1): agents start at any time.
    pub phase: f64,
    /// KASLR: this boot's kernel base offset.
    pub kaslr: u64,
    /// Random id of this agent process.
    pub instance: [u8; 16],
    /// Seed of everything about this node.
    pub seed: u64,
}

/// Instance types nodes are drawn from, by weight: (name, vendor, model name, family, model,
/// stepping, cpus, sockets, threads per core, NUMA nodes, memory GiB, weight).
type InstanceType = (
    &'static str,
    &'static str,
    &'static str,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u64,
    u64,
);

const INSTANCE_TYPES: [InstanceType; 6] = [
    (
        "m6i.2xlarge",
        "GenuineIntel",
        "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz",
        6,
        106,
        6,
        8,
        1,
        2,
        1,
        32,
        30,
    ),
    (
        "m6i.8xlarge",
        "GenuineIntel",
        "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz",
        6,
        106,
        6,
        32,
        1,
        2,
        1,
        128,
        25,
    ),
    (
        "m6i.24xlarge",
        "GenuineIntel",
        "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz",
        6,
        106,
        6,
        96,
        2,
        2,
        2,
        384,
        15,
    ),
    (
        "c6a.16xlarge",
        "AuthenticAMD",
        "AMD EPYC 7R13 Processor",
        25,
        1,
        1,
        64,
        1,
        2,
        1,
        128,
        15,
    ),
    (
        "r6a.48xlarge",
        "AuthenticAMD",
        "AMD EPYC 7R13 Processor",
        25,
        1,
        1,
        192,
        2,
        2,
        2,
        1536,
        5,
    ),
    ("m7g.4xlarge", "ARM", "Neoverse-V1", 0, 0xd40, 1, 16, 1, 1, 1, 64, 10),
];

const KERNELS_X86: [&str; 3] = ["6.1.0-28-cloud-amd64", "6.1.0-31-cloud-amd64", "6.8.0-1021-aws"];
const KERNELS_ARM: [&str; 2] = ["6.1.0-28-cloud-arm64", "6.8.0-1021-aws"];

/// Nodes per rack; racks are spread over three zones.
const RACK_SIZE: u32 = 40;

impl Node {
    /// Node `index` of the fleet seeded by `seed`; rates spread by a log-normal of sigma `spread`.
    pub fn new(seed: u64, run: u64, index: u32, spread: f64) -> Self {
        let node_seed = mix(&[seed, u64::from(index), 0x0de]);
        let mut rng = Rng::new(node_seed);
        let factor = (spread * rng.normal() - spread * spread / 2.0).exp();
        let phase = rng.unit();
        // 2 MiB-aligned, within 1 GiB, as x86 KASLR places the kernel.
        let kaslr = rng.below(512) << 21;
        let mut instance = [0u8; 16];
        instance[..8].copy_from_slice(&mix(&[run, u64::from(index), 1]).to_le_bytes());
        instance[8..].copy_from_slice(&mix(&[run, u64::from(index), 2]).to_le_bytes());
        Node {
            index,
            factor,
            phase,
            kaslr,
            instance,
            seed: node_seed,
        }
    }

    /// `loadgen-00042`.
    pub fn name(&self) -> String {
        format!("loadgen-{:05}", self.index)
    }

    fn instance_type(&self) -> &'static InstanceType {
        let total: u64 = INSTANCE_TYPES.iter().map(|t| t.11).sum();
        let mut pick = mix(&[self.seed, 0x17]) % total;
        for t in &INSTANCE_TYPES {
            if pick < t.11 {
                return t;
            }
            pick -= t.11;
        }
        &INSTANCE_TYPES[0]
    }

    fn kernel(&self) -> &'static str {
        let t = self.instance_type();
        let list: &[&str] = if t.1 == "ARM" { &KERNELS_ARM } else { &KERNELS_X86 };
        list[(mix(&[self.seed, 0x4e]) % list.len() as u64) as usize]
    }

    /// The first message of every stream, as an agent on this node sends it.
    pub fn hello(&self) -> v1::Hello {
        let t = self.instance_type();
        let rack = self.index / RACK_SIZE;
        let zone = ["us-east-1a", "us-east-1b", "us-east-1c"][(rack % 3) as usize];
        let labels = [
            ("zone", zone.to_owned()),
            ("rack", format!("r{rack:04}")),
            ("instance_type", t.0.to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        v1::Hello {
            node: self.name(),
            labels,
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            agent_instance: self.instance.to_vec(),
            kernel_release: self.kernel().to_owned(),
            facts: Some(self.facts()),
        }
    }

    fn facts(&self) -> v1::NodeFacts {
        let &(_, vendor, model_name, family, model, stepping, cpus, sockets, tpc, numa, mem_gib, _) =
            self.instance_type();
        let per_node = cpus / numa;
        let numa_nodes = (0..numa)
            .map(|n| v1::NumaNode {
                id: n,
                cpus: (n * per_node..(n + 1) * per_node).collect(),
                memory_bytes: (mem_gib << 30) / u64::from(numa),
                distances: (0..numa).map(|m| if m == n { 10 } else { 21 }).collect(),
            })
            .collect();
        // AMD shares an L3 per 8-core CCX; Intel and Graviton per socket.
        let l3_size = if vendor == "AuthenticAMD" {
            8 * tpc
        } else {
            cpus / sockets
        };
        let l3_domains = (0..cpus / l3_size)
            .map(|d| v1::CpuSet {
                cpus: (d * l3_size..(d + 1) * l3_size).collect(),
            })
            .collect();
        let report = |event: v1::EventKind, source: &str, encoding: &str, data_address: bool| v1::EventSourceReport {
            event: event as i32,
            source: source.to_owned(),
            encoding: encoding.to_owned(),
            attach: "perf_event".to_owned(),
            data_address,
            rejected: Vec::new(),
            unwinding: "kernel_tables".to_owned(),
            unwinding_reduced: String::new(),
        };
        v1::NodeFacts {
            kernel_release: self.kernel().to_owned(),
            cpu_vendor: vendor.to_owned(),
            cpu_model_name: model_name.to_owned(),
            cpu_family: family,
            cpu_model: model,
            cpu_stepping: stepping,
            online_cpus: (0..cpus).collect(),
            sockets,
            cores: cpus / tpc,
            threads_per_core: tpc,
            numa_nodes,
            l3_domains,
            nics: vec![v1::Nic {
                name: "ens5".to_owned(),
                numa_node: 0,
            }],
            numa_balancing: if numa > 1 { "normal" } else { "disabled" }.to_owned(),
            transparent_hugepages: "madvise".to_owned(),
            event_sources: vec![
                report(
                    v1::EventKind::Cpu,
                    "software cpu-clock, 99 Hz per CPU",
                    "cpu-clock",
                    false,
                ),
                report(
                    v1::EventKind::PageFault,
                    "software page-faults, 1 in 100",
                    "page-faults",
                    true,
                ),
            ],
            hardware_pmu: if vendor == "ARM" { "armv8_pmuv3_0" } else { "cpu" }.to_owned(),
        }
    }

    /// Online CPUs of this node's instance type.
    pub fn cpus(&self) -> u32 {
        self.instance_type().6
    }

    /// NUMA nodes of this node's instance type: its counters show NUMA traffic only with two.
    pub fn numa_nodes(&self) -> u32 {
        self.instance_type().9
    }
}
