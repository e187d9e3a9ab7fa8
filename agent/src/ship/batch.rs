//! Builds a wire batch from one drain: frames and stacks deduplicated, samples weighted, data
//! addresses attributed to the mapping, symbol and cache line they fall in; processes named by
//! their cgroup, and by the Kubernetes API where the agent may ask it (`name_pods`).

use std::time::SystemTime;

// Every map here is keyed by what one drain holds (tens of thousands of data samples at high
// rates), within the agent's own process: foldhash, not SipHash (design 021).
use foldhash::{HashMap, HashMapExt};

use bimodal_proto::v1;

use crate::node::identity;
use crate::node::kubernetes::PodResolver;
use crate::sample::bpf::Drained;
use crate::sample::events::EventSource;
use crate::symbolize::{DataObject, Frames, Ip};

/// The interval a drain covered.
#[derive(Clone, Copy, Debug)]
pub struct Interval {
    pub start: SystemTime,
    pub end: SystemTime,
}

fn unix_nanos(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Data samples by (event, stack index, pid, tid, data object): (count, value).
type DataGroups = HashMap<(i32, u32, u32, u32, DataObject), (u64, u64)>;

/// Interns frames and stacks into a batch.
struct Stacks<'a> {
    drained: &'a Drained,
    /// Frame index by (tgid, ip); tgid 0 holds kernel frames.
    frame_index: HashMap<(u32, Ip), u32>,
    stack_index: HashMap<Vec<u32>, u32>,
    /// The stack index of each (tgid, kernel stack id, user stack id) interned so far: the many
    /// samples of one stack are looked up once.
    interned: HashMap<(u32, i32, i32), u32>,
}

impl Stacks<'_> {
    /// The batch's index of the stack made of `kernel_stack_id` over `user_stack_id`.
    fn intern(&mut self, batch: &mut v1::Batch, tgid: u32, kernel_stack_id: i32, user_stack_id: i32) -> u32 {
        if let Some(&index) = self.interned.get(&(tgid, kernel_stack_id, user_stack_id)) {
            return index;
        }
        let index = self.intern_new(batch, tgid, kernel_stack_id, user_stack_id);
        self.interned.insert((tgid, kernel_stack_id, user_stack_id), index);
        index
    }

    fn intern_new(&mut self, batch: &mut v1::Batch, tgid: u32, kernel_stack_id: i32, user_stack_id: i32) -> u32 {
        // Leaf first: kernel frames, then the user frames below them.
        let mut indices = Vec::new();
        if let Some(stack) = self.drained.stacks.get(&kernel_stack_id) {
            // The leaf frames of a tracing program's stack are the BPF machinery that took it.
            let frames = ips(stack)
                .map(|ip| self.frame_index[&(0, ip)])
                .skip_while(|&i| is_bpf_machinery(&batch.frames[i as usize].function));
            indices.extend(frames);
        }
        if let Some(stack) = self.drained.stacks.get(&user_stack_id) {
            indices.extend(ips(stack).map(|ip| self.frame_index[&(tgid, ip)]));
        }
        let next = self.stack_index.len() as u32;
        *self.stack_index.entry(indices.clone()).or_insert_with(|| {
            batch.stacks.push(v1::Stack { frame_indices: indices });
            next
        })
    }
}

/// Symbolizes and packs one drain into a batch with a fresh batch id.
pub fn build(drained: &Drained, sources: &[EventSource], frames: &Frames, interval: Interval) -> v1::Batch {
    let mut batch = v1::Batch {
        batch_id: uuid::Uuid::new_v4().as_bytes().to_vec(),
        start_unix_nanos: unix_nanos(interval.start),
        end_unix_nanos: unix_nanos(interval.end),
        ..Default::default()
    };

    // Resolve each distinct address once: user addresses per process, kernel ones together.
    let mut user_ips: HashMap<u32, Vec<Ip>> = HashMap::new();
    let mut kernel_ips: Vec<Ip> = Vec::new();
    let user_stacks = drained
        .samples
        .iter()
        .map(|(k, _)| (k.tgid, k.user_stack_id))
        .chain(drained.data.iter().map(|d| (d.tgid, d.user_stack_id)));
    for (tgid, id) in user_stacks {
        if let Some(stack) = drained.stacks.get(&id) {
            user_ips.entry(tgid).or_default().extend(ips(stack));
        }
    }
    for (key, _) in &drained.samples {
        if let Some(stack) = drained.stacks.get(&key.kernel_stack_id) {
            kernel_ips.extend(ips(stack));
        }
    }
    let mut stacks = Stacks {
        drained,
        frame_index: HashMap::new(),
        stack_index: HashMap::new(),
        interned: HashMap::new(),
    };
    let mut push_frames =
        |batch: &mut v1::Batch, tgid: u32, mut list: Vec<Ip>, resolved: &dyn Fn(&[Ip]) -> Vec<v1::Frame>| {
            list.sort_unstable_by_key(|ip| (ip.address, ip.leaf));
            list.dedup();
            for (ip, frame) in list.iter().zip(resolved(&list)) {
                stacks.frame_index.insert((tgid, *ip), batch.frames.len() as u32);
                batch.frames.push(frame);
            }
        };
    push_frames(&mut batch, 0, kernel_ips, &|l| frames.kernel(l));
    for (tgid, list) in user_ips {
        push_frames(&mut batch, tgid, list, &|l| frames.user(tgid, l));
    }

    let mut comm_of: HashMap<u32, &str> = HashMap::new();
    for (key, v) in &drained.samples {
        comm_of.insert(key.pid, &key.comm);
        let stack = stacks.intern(&mut batch, key.tgid, key.kernel_stack_id, key.user_stack_id);
        batch.samples.push(v1::Sample {
            event: key.event as i32,
            stack_index: stack,
            pid: key.tgid,
            tid: key.pid,
            comm: key.comm.clone(),
            count: v.count,
            value: v.value,
        });
    }

    // Data samples: grouped by stack and the data object the address falls in.
    let mut by_process: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, d) in drained.data.iter().enumerate() {
        by_process.entry(d.tgid).or_default().push(i);
    }
    let mut grouped: DataGroups = HashMap::new();
    for (tgid, indices) in by_process {
        let addresses: Vec<u64> = indices.iter().map(|&i| drained.data[i].address).collect();
        for (&i, object) in indices.iter().zip(frames.data_objects(tgid, &addresses)) {
            let d = &drained.data[i];
            let stack = stacks.intern(&mut batch, d.tgid, -1, d.user_stack_id);
            let entry = grouped
                .entry((d.event as i32, stack, d.tgid, d.pid, object))
                .or_default();
            entry.0 += 1;
            entry.1 += d.weight;
        }
    }
    for ((event, stack_index, pid, tid, object), (count, value)) in grouped {
        batch.data_samples.push(v1::DataSample {
            event,
            stack_index,
            pid,
            tid,
            comm: comm_of.get(&tid).map(|c| c.to_string()).unwrap_or_default(),
            count,
            value,
            mapping_kind: object.kind.to_owned(),
            mapping_path: object.path,
            symbol: object.symbol,
            cache_line: object.cache_line,
        });
    }

    // Who each sampled process is (container, pod, unit), read once per drain.
    let mut pids: Vec<u32> = batch
        .samples
        .iter()
        .map(|s| s.pid)
        .chain(batch.data_samples.iter().map(|d| d.pid))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    batch.processes = pids
        .into_iter()
        .map(|pid| {
            let id = identity::read(std::path::Path::new("/"), pid);
            v1::Process {
                pid,
                executable: id.executable,
                cgroup: id.cgroup,
                container_id: id.container_id,
                container_runtime: id.container_runtime,
                pod_uid: id.pod_uid,
                systemd_unit: id.systemd_unit,
                // Only the API server knows these: `name_pods` fills them when it may be asked.
                pod_name: String::new(),
                pod_namespace: String::new(),
                container_name: String::new(),
            }
        })
        .collect();

    batch.sources = sources
        .iter()
        .map(|s| v1::EventSource {
            event: s.event as i32,
            description: s.description.clone(),
            name: s.name.clone(),
            unit: s.unit.into(),
            period: s.period,
            dropped: drained.dropped.get(&s.event).map(|d| d.total()).unwrap_or(0),
        })
        .collect();
    batch
}

/// Names the pods of the batch's processes that have a pod UID, as the Kubernetes API server
/// knows them; a pod it does not know (or a server that cannot be asked) leaves them empty.
/// Blocking: a lookup that misses the resolver's cache may list this node's pods.
pub fn name_pods(batch: &mut v1::Batch, resolver: &mut PodResolver) {
    for process in batch.processes.iter_mut().filter(|p| !p.pod_uid.is_empty()) {
        if let Some(pod) = resolver.lookup(&process.pod_uid, &process.container_id) {
            process.pod_namespace = pod.namespace;
            process.pod_name = pod.pod_name;
            process.container_name = pod.container_name;
        }
    }
}

/// Kernel functions that run a BPF program: not part of the sampled code path.
fn is_bpf_machinery(function: &str) -> bool {
    function.starts_with("bpf_prog_") || function.starts_with("bpf_trampoline_") || function.starts_with("__bpf_prog_")
}

fn ips(stack: &[u64]) -> impl Iterator<Item = Ip> + '_ {
    stack
        .iter()
        .enumerate()
        .map(|(i, &address)| Ip { address, leaf: i == 0 })
}
