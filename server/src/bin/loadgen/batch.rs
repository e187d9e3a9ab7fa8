//! One node's batch for one interval, as the agent builds it (agent/src/ship/batch.rs): samples drawn
//! over the profiles' stacks by weight and spread over the node's threads; frames interned per
//! process (a user address means something only in its process), kernel frames shared; stacks
//! interned per process the same way; data samples for page faults; the processes, event
//! sources and node counters of the interval.
//!
//! Everything is a function of (seed, node, interval): a resend is generated again, byte for
//! byte, instead of being kept.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use bimodal_proto::v1;

use super::fleet::Node;
use super::profile::{variant_of, Catalog, Comm, Place, Profile, KERNEL_TEXT};
use super::rng::{hash_str, mix, Rng};
use super::wire::{self, Encoded};

/// How batches are drawn, beyond what the profiles say.
#[derive(Clone, Debug)]
pub struct Options {
    /// The simulated agent's drain interval.
    pub interval: Duration,
    /// Multiplies every node's sample rates (a machine of 2 CPUs was recorded; fleets have more).
    pub scale: f64,
    /// Share of a node's samples on stacks no other node has.
    pub node_specific: f64,
    /// Share of a stack's samples on its own thread rather than any thread of its comm: code
    /// paths run on particular threads.
    pub affinity: f64,
    /// Whether page-fault samples carry data samples (the data address they touched), as they do
    /// from agents whose page-fault source has data addresses.
    pub data_samples: bool,
}

/// A generated batch and what it holds.
#[derive(Debug)]
pub struct Generated {
    /// The `IngestRequest` carrying it.
    pub request: Encoded,
    /// Sum of the samples' counts.
    pub samples: u64,
    /// `Sample` rows.
    pub rows: u64,
}

/// The interval a batch covers, Unix nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub start_ns: i64,
    pub end_ns: i64,
}

/// Stack references with this bit are a node's own stacks: (profile << 16) | number.
const NODE_SPECIFIC: u32 = 1 << 31;
/// In stack keys: the user part of a stack, which data samples point to.
const USER_PART: u64 = 1 << 30;

/// A batch id: random-looking (servers may shard and hash by it) yet the same on every resend.
pub fn batch_id(run: u64, node: u32, k: u32) -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&mix(&[run, u64::from(node), u64::from(k), 0xb1]).to_le_bytes());
    id[8..].copy_from_slice(&mix(&[run, u64::from(node), u64::from(k), 0xb2]).to_le_bytes());
    id
}

/// Hashes the already well-mixed-enough u64 keys of a batch with one multiply-xorshift round;
/// SipHash costs more than everything else at 10,000 frame lookups per batch.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
        }
    }

    fn write_u64(&mut self, k: u64) {
        let z = (k ^ (k >> 31)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = z ^ (z >> 29);
    }
}

type KeyMap = HashMap<u64, u32, BuildHasherDefault<KeyHasher>>;

/// Sizes of the last batch generated (frames, stacks, samples, data bytes; frames, stacks):
/// the next one's buffers start that large instead of growing by copying.
static LAST_SIZES: [AtomicUsize; 6] = [const { AtomicUsize::new(0) }; 6];

fn size_hint(i: usize, floor: usize) -> usize {
    (LAST_SIZES[i].load(Relaxed) * 9 / 8).max(floor)
}

/// A node's own version of a profile stack: the stack with one frame (the leaf-most user frame)
/// replaced by a variant only this node has.
struct NodeStack {
    base: u32,
    at: usize,
    fields: Vec<u8>,
    place: Place,
    offset: u64,
}

/// Data-sample mappings as the agent attributed page-fault addresses on the recorded machine
/// (share of samples: anonymous memory dominates, a third fell outside any mapping).
const DATA_KINDS: [(&str, f64); 9] = [
    ("anon", 0.571),
    ("unknown", 0.330),
    ("heap", 0.058),
    ("rodata", 0.019),
    ("file", 0.009),
    ("bss", 0.008),
    ("text", 0.0045),
    ("data", 0.0004),
    ("stack", 0.0004),
];

/// Fewer data rows than faults: faults on one cache line from one thread and stack merge.
const DATA_ROWS_PER_SAMPLE: f64 = 0.87;

/// Interns frames and stacks into the batch's buffers.
struct Assembler<'a> {
    cat: &'a Catalog,
    node: &'a Node,
    frames: Vec<u8>,
    frame_count: u32,
    frame_index: KeyMap,
    stacks: Vec<u8>,
    stack_count: u32,
    stack_index: KeyMap,
    scratch: Vec<u32>,
    node_stacks: Vec<Vec<NodeStack>>,
}

impl Assembler<'_> {
    fn load_base(&self, pid: u32, module: u32) -> u64 {
        let h = mix(&[self.node.seed, u64::from(pid), u64::from(module)]);
        if self.cat.modules[module as usize].executable {
            0x5500_0000_0000 | ((h & 0xff_ffff) << 12)
        } else {
            0x7f00_0000_0000 | ((h & 0xfff_ffff) << 12)
        }
    }

    /// The batch index of frame `r` (a catalog frame, or a node stack's variant) in process `pid`.
    fn frame(&mut self, r: u32, pid: u32, variant: Option<(&[u8], Place, u64)>) -> u32 {
        let cat = self.cat;
        let (fields, place, offset) = match variant {
            Some(v) => v,
            None => {
                let f = &cat.frames[r as usize];
                (&f.fields[..], f.place, f.offset)
            }
        };
        let owner = if place == Place::Kernel { 0 } else { pid };
        let key = u64::from(owner) << 32 | u64::from(r);
        if let Some(&i) = self.frame_index.get(&key) {
            return i;
        }
        let address = match place {
            Place::Kernel => KERNEL_TEXT + self.node.kaslr + offset,
            Place::Module(m) => self.load_base(pid, m) + offset,
            Place::Raw => offset,
        };
        let len = wire::uint_len(2, address) + fields.len();
        wire::put_len_key(&mut self.frames, 5, len);
        wire::put_uint(&mut self.frames, 2, address);
        self.frames.extend_from_slice(fields);
        let i = self.frame_count;
        self.frame_count += 1;
        self.frame_index.insert(key, i);
        i
    }

    /// The batch index of stack `r` (whole, or its user part) sampled in process `pid`.
    fn stack(&mut self, r: u32, pid: u32, user_part: bool) -> u32 {
        let (base, node_stack) = if r & NODE_SPECIFIC != 0 {
            let (profile, n) = ((r >> 16) & 0x7fff, r & 0xffff);
            let ns = &self.node_stacks[profile as usize][n as usize];
            (ns.base, Some((ns.at, r)))
        } else {
            (r, None)
        };
        let cat = self.cat;
        let stack = &cat.stacks[base as usize];
        let from = if user_part { stack.user_from as usize } else { 0 };
        let owner = if stack.has_user() { pid } else { 0 };
        let key = u64::from(owner) << 32 | if user_part { USER_PART } else { 0 } | u64::from(r);
        if let Some(&i) = self.stack_index.get(&key) {
            return i;
        }
        let mut indices = std::mem::take(&mut self.scratch);
        indices.clear();
        for (at, &f) in stack.frames.iter().enumerate().skip(from) {
            let index = match node_stack {
                Some((variant_at, r)) if variant_at == at => {
                    let (profile, n) = (((r >> 16) & 0x7fff) as usize, (r & 0xffff) as usize);
                    let ns = &mut self.node_stacks[profile][n];
                    let (place, offset) = (ns.place, ns.offset);
                    let fields = std::mem::take(&mut ns.fields);
                    let i = self.frame(r, pid, Some((&fields, place, offset)));
                    self.node_stacks[profile][n].fields = fields;
                    i
                }
                _ => self.frame(f, pid, None),
            };
            indices.push(index);
        }
        let packed: usize = indices.iter().map(|&i| wire::varint_len(u64::from(i))).sum();
        let len = if packed == 0 { 0 } else { wire::bytes_len(1, packed) };
        wire::put_len_key(&mut self.stacks, 6, len);
        if packed > 0 {
            wire::put_len_key(&mut self.stacks, 1, packed);
            for &i in &indices {
                wire::put_varint(&mut self.stacks, u64::from(i));
            }
        }
        self.scratch = indices;
        let i = self.stack_count;
        self.stack_count += 1;
        self.stack_index.insert(key, i);
        i
    }
}

/// The (pid, tid) of thread `t` of `comm` on `node` in interval `k`.
fn thread_ids(node: &Node, k: u32, comm_index: u32, comm: &Comm, t: u32) -> (u32, u32) {
    if comm.kernel {
        // Kernel threads are processes of their own with small pids.
        let pid = 2 + (mix(&[node.seed, u64::from(comm_index), u64::from(t)]) % 4000) as u32;
        return (pid, pid);
    }
    let slot = t % comm.pids;
    // Comms of one executable are threads of its processes (clickhouse-server's pools, rustc's
    // codegen threads); short-lived processes get new pids every interval.
    let generation = if comm.short_lived { u64::from(k) } else { 0 };
    let owner = hash_str(&comm.executable);
    let pid = 1000 + (mix(&[node.seed, owner, u64::from(slot), generation]) % 4_000_000) as u32;
    let tid = if t < comm.pids && comm.pids > 1 {
        pid
    } else {
        pid + 1 + (mix(&[u64::from(comm_index), u64::from(t)]) % 30_000) as u32
    };
    (pid, tid)
}

/// The fields `Sample` and `DataSample` share.
#[derive(Clone, Copy)]
struct SampleRow<'a> {
    event: i32,
    stack: u32,
    pid: u32,
    tid: u32,
    comm: &'a str,
    count: u64,
    value: u64,
}

impl SampleRow<'_> {
    fn len(&self) -> usize {
        wire::uint_len(1, self.event as u64)
            + wire::uint_len(2, u64::from(self.stack))
            + wire::uint_len(3, u64::from(self.pid))
            + wire::uint_len(4, u64::from(self.tid))
            + wire::bytes_len(5, self.comm.len())
            + wire::uint_len(6, self.count)
            + wire::uint_len(7, self.value)
    }

    fn put(&self, buf: &mut Vec<u8>) {
        wire::put_uint(buf, 1, self.event as u64);
        wire::put_uint(buf, 2, u64::from(self.stack));
        wire::put_uint(buf, 3, u64::from(self.pid));
        wire::put_uint(buf, 4, u64::from(self.tid));
        wire::put_bytes(buf, 5, self.comm.as_bytes());
        wire::put_uint(buf, 6, self.count);
        wire::put_uint(buf, 7, self.value);
    }
}

/// How many node-specific stacks a node has in a profile: its share of one interval's stacks.
fn node_stack_count(p: &Profile, share: f64) -> u32 {
    if share <= 0.0 {
        return 0;
    }
    let per_interval = (p.lines as f64 + p.tail_stacks as f64) / f64::from(p.records);
    ((share * per_interval).ceil() as u32).clamp(1, 0xffff)
}

fn node_stacks(cat: &Catalog, node: &Node, pi: usize, count: u32) -> Vec<NodeStack> {
    let p = &cat.profiles[pi];
    (0..count)
        .map(|n| {
            let mut rng = Rng::new(mix(&[node.seed, pi as u64, u64::from(n), 0x5e]));
            let base = p.stacks.start + p.alias.draw(&mut rng) as u32;
            let stack = &cat.stacks[base as usize];
            let at = if stack.has_user() { stack.user_from as usize } else { 0 };
            match stack.frames.get(at) {
                Some(&f) => {
                    let (place, offset, kind, module, function) =
                        variant_of(&cat.frames[f as usize], mix(&[node.seed, u64::from(n)]));
                    NodeStack {
                        base,
                        at,
                        fields: cat.frame_fields(kind, module, &function, offset),
                        place,
                        offset,
                    }
                }
                // An empty stack has nothing to vary: it stays as it is.
                None => NodeStack {
                    base,
                    at: usize::MAX,
                    fields: Vec::new(),
                    place: Place::Raw,
                    offset: 0,
                },
            }
        })
        .collect()
}

/// Node `node`'s batch number `k`, covering `window`.
pub fn generate(
    cat: &Catalog,
    opts: &Options,
    node: &Node,
    k: u32,
    window: Window,
    id: [u8; 16],
    resend: bool,
) -> Generated {
    let mut rng = Rng::new(mix(&[node.seed, u64::from(k), 0xba7c]));
    let seconds = opts.interval.as_secs_f64();
    let share = opts.node_specific.clamp(0.0, 1.0);
    let mut asm = Assembler {
        cat,
        node,
        frames: wire::buffer(size_hint(0, 64 << 10)),
        frame_count: 0,
        frame_index: KeyMap::with_capacity_and_hasher(size_hint(4, 1024), Default::default()),
        stacks: wire::buffer(size_hint(1, 8 << 10)),
        stack_count: 0,
        stack_index: KeyMap::with_capacity_and_hasher(size_hint(5, 1024), Default::default()),
        scratch: Vec::new(),
        node_stacks: Vec::new(),
    };
    let counts: Vec<u32> = cat.profiles.iter().map(|p| node_stack_count(p, share)).collect();
    asm.node_stacks = (0..cat.profiles.len())
        .map(|pi| node_stacks(cat, node, pi, counts[pi]))
        .collect();

    let mut samples = wire::buffer(size_hint(2, 16 << 10));
    let mut data = if opts.data_samples {
        wire::buffer(size_hint(3, 16 << 10))
    } else {
        Vec::new()
    };
    let mut pids: Vec<(u32, u32)> = Vec::new();
    let mut draws: Vec<u64> = Vec::new();
    let mut taken: Vec<(v1::EventKind, u64, u64)> = Vec::new();
    let (mut total, mut rows) = (0u64, 0u64);
    for (pi, p) in cat.profiles.iter().enumerate() {
        let expected = p.samples_per_second * seconds * node.factor * opts.scale;
        let n = (expected * (1.0 + 0.05 * rng.normal())).round().max(0.0) as u64;
        draws.clear();
        for _ in 0..n {
            let (r, base) = if counts[pi] > 0 && rng.unit() < share {
                let j = rng.below(u64::from(counts[pi])) as u32;
                (
                    NODE_SPECIFIC | (pi as u32) << 16 | j,
                    asm.node_stacks[pi][j as usize].base,
                )
            } else {
                let s = p.stacks.start + p.alias.draw(&mut rng) as u32;
                (s, s)
            };
            let comm = &cat.comms[cat.stacks[base as usize].comm as usize];
            let u = if rng.unit() < opts.affinity {
                (mix(&[node.seed, u64::from(r)]) >> 11) as f64 / (1u64 << 53) as f64
            } else {
                rng.unit()
            };
            draws.push(u64::from(r) << 32 | u64::from(comm.thread_at(u)));
        }
        draws.sort_unstable();
        let event = p.event as i32;
        let mut i = 0;
        while i < draws.len() {
            let key = draws[i];
            let mut count = 0u64;
            while i < draws.len() && draws[i] == key {
                count += 1;
                i += 1;
            }
            let (r, t) = ((key >> 32) as u32, key as u32);
            let base = if r & NODE_SPECIFIC != 0 {
                asm.node_stacks[pi][(r & 0xffff) as usize].base
            } else {
                r
            };
            let comm_index = cat.stacks[base as usize].comm;
            let comm = &cat.comms[comm_index as usize];
            let (pid, tid) = thread_ids(node, k, comm_index, comm, t);
            let stack = asm.stack(r, pid, false);
            let row = SampleRow {
                event,
                stack,
                pid,
                tid,
                comm: &comm.name,
                count,
                value: count * p.period,
            };
            wire::put_len_key(&mut samples, 7, row.len());
            row.put(&mut samples);
            pids.push((pid, comm_index));
            rows += 1;
            total += count;
            if opts.data_samples && p.event == v1::EventKind::PageFault {
                let user = SampleRow {
                    stack: asm.stack(r, pid, true),
                    ..row
                };
                data_samples(&mut data, &mut rng, node, p, user, &comm.executable);
            }
        }
        taken.push((p.event, n, p.period));
    }

    let mut tail = Vec::with_capacity(4 << 10);
    // Sources: one per event kind, as the agent reports them.
    let mut seen = Vec::new();
    for p in &cat.profiles {
        if seen.contains(&p.event) {
            continue;
        }
        seen.push(p.event);
        let (description, name, unit) = p.source();
        let n: u64 = taken.iter().filter(|t| t.0 == p.event).map(|t| t.1).sum();
        let dropped = (n as f64 * 0.02 * (0.5 + rng.unit())).round() as u64;
        let len = wire::uint_len(1, p.event as u64)
            + wire::bytes_len(2, description.len())
            + wire::uint_len(3, p.period)
            + wire::uint_len(4, dropped)
            + wire::bytes_len(5, name.len())
            + wire::bytes_len(6, unit.len());
        wire::put_len_key(&mut tail, 8, len);
        wire::put_uint(&mut tail, 1, p.event as u64);
        wire::put_bytes(&mut tail, 2, description.as_bytes());
        wire::put_uint(&mut tail, 3, p.period);
        wire::put_uint(&mut tail, 4, dropped);
        wire::put_bytes(&mut tail, 5, name.as_bytes());
        wire::put_bytes(&mut tail, 6, unit.as_bytes());
    }
    for (name, value) in counters(&mut rng, node, window, &taken) {
        let len = wire::bytes_len(1, name.len()) + wire::uint_len(2, value);
        wire::put_len_key(&mut tail, 10, len);
        wire::put_bytes(&mut tail, 1, name.as_bytes());
        wire::put_uint(&mut tail, 2, value);
    }
    // Processes: one per sampled pid.
    pids.sort_unstable();
    pids.dedup_by_key(|p| p.0);
    let mut processes = Vec::with_capacity(pids.len() * 96);
    for (pid, comm) in pids {
        let c = &cat.comms[comm as usize];
        let len = wire::uint_len(1, u64::from(pid))
            + wire::bytes_len(2, c.executable.len())
            + wire::bytes_len(3, c.cgroup.len())
            + wire::bytes_len(7, c.unit.len());
        wire::put_len_key(&mut processes, 12, len);
        wire::put_uint(&mut processes, 1, u64::from(pid));
        wire::put_bytes(&mut processes, 2, c.executable.as_bytes());
        wire::put_bytes(&mut processes, 3, c.cgroup.as_bytes());
        wire::put_bytes(&mut processes, 7, c.unit.as_bytes());
    }

    for (i, n) in [
        asm.frames.len(),
        asm.stacks.len(),
        samples.len(),
        data.len(),
        asm.frame_count as usize,
        asm.stack_count as usize,
    ]
    .into_iter()
    .enumerate()
    {
        LAST_SIZES[i].store(n, Relaxed);
    }
    let mut head = Vec::with_capacity(48);
    wire::put_bytes(&mut head, 1, &id);
    wire::put_uint(&mut head, 2, u64::from(resend));
    wire::put_int(&mut head, 3, window.start_ns);
    wire::put_int(&mut head, 4, window.end_ns);
    Generated {
        request: Encoded::batch(vec![head, asm.frames, asm.stacks, samples, tail, data, processes]),
        samples: total,
        rows,
    }
}

/// The data samples of one page-fault sample row (`row`, on its user stack): its faults spread
/// over cache lines.
fn data_samples(buf: &mut Vec<u8>, rng: &mut Rng, node: &Node, p: &Profile, row: SampleRow<'_>, executable: &str) {
    let count = row.count;
    let rows = ((count as f64 * DATA_ROWS_PER_SAMPLE).round() as u64).clamp(1, count);
    for i in 0..rows {
        // The first rows take two faults each until the faults are spread.
        let n = if i < count - rows { 2 } else { 1 };
        let mut u = rng.unit();
        let kind = DATA_KINDS
            .iter()
            .find(|(_, share)| {
                u -= share;
                u < 0.0
            })
            .map_or("anon", |k| k.0);
        let h = mix(&[node.seed, u64::from(row.pid), rng.next_u64()]);
        let (path, symbol, cache_line) = match kind {
            "anon" | "heap" | "stack" => ("", "", (h % (1 << 36)) & !63),
            "unknown" => ("", "", 0),
            "file" => ("/usr/lib/locale/locale-archive", "", (h % (1 << 24)) & !63),
            "bss" | "data" if h.is_multiple_of(2) => (executable, "main_arena", (h % (1 << 22)) & !63),
            _ => (executable, "", (h % (1 << 26)) & !63),
        };
        let data = SampleRow {
            count: n,
            value: n * p.period,
            ..row
        };
        let len = data.len()
            + wire::bytes_len(8, kind.len())
            + wire::bytes_len(9, path.len())
            + wire::bytes_len(10, symbol.len())
            + wire::uint_len(11, cache_line);
        wire::put_len_key(buf, 9, len);
        data.put(buf);
        wire::put_bytes(buf, 8, kind.as_bytes());
        wire::put_bytes(buf, 9, path.as_bytes());
        wire::put_bytes(buf, 10, symbol.as_bytes());
        wire::put_uint(buf, 11, cache_line);
    }
}

/// The node counters' increase over the interval, consistent with the samples drawn: the names
/// the agent sends (agent/src/node/facts.rs and its counting events).
fn counters(
    rng: &mut Rng,
    node: &Node,
    window: Window,
    taken: &[(v1::EventKind, u64, u64)],
) -> Vec<(&'static str, u64)> {
    let of = |e: v1::EventKind| taken.iter().filter(|t| t.0 == e).map(|t| (t.1, t.2)).next();
    let (cpu, cpu_period) = of(v1::EventKind::Cpu).unwrap_or((0, 10_101_010));
    let (faults, fault_period) = of(v1::EventKind::PageFault).unwrap_or((0, 100));
    let mut jitter = |x: f64| (x * (0.9 + 0.2 * rng.unit())).round() as u64;
    let pgfault = jitter((faults * fault_period) as f64 * 1.1);
    let numa = node.numa_nodes() > 1;
    let remote = if numa { jitter(pgfault as f64 * 0.05) } else { 0 };
    let hinting = if numa { jitter(pgfault as f64 * 0.02) } else { 0 };
    let migrated = if numa { jitter(hinting as f64 * 0.3) } else { 0 };
    let interval_ns = (window.end_ns - window.start_ns).max(0) as u64;
    let cpus = node.cpus();
    vec![
        ("numa_foreign", remote),
        ("numa_hint_faults", hinting),
        ("numa_hint_faults_local", hinting * 3 / 4),
        ("numa_hit", pgfault.saturating_sub(remote)),
        ("numa_interleave", 0),
        ("numa_local", pgfault.saturating_sub(remote)),
        ("numa_miss", remote),
        ("numa_other", remote),
        ("numa_pages_migrated", migrated),
        ("numa_pte_updates", hinting * 2),
        ("pgfault", pgfault),
        ("pgmajfault", pgfault / 10_000),
        ("pgmigrate_fail", migrated / 50),
        ("pgmigrate_success", migrated),
        ("context_switches", jitter(cpu as f64 * 7.0)),
        ("forks", jitter(cpu as f64 / 10.0)),
        ("cpu_busy_ns", cpu * cpu_period),
        ("cpu_total_ns", interval_ns * u64::from(cpus)),
        ("interval_ns", interval_ns),
        ("cpu_migrations", jitter(cpu as f64 / 11.0)),
        ("samples_cpu", cpu),
        ("samples_page_fault", faults),
    ]
}
