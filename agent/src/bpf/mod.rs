//! Loads the BPF sampling programs, attaches them to perf events and drains their maps.

use std::collections::{HashMap, HashSet};
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::path::Path;
use std::time::Duration;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

use crate::events::{self, perf, EventKind, EventSource};

mod profile {
    #![allow(
        clippy::all,
        clippy::undocumented_unsafe_blocks,
        missing_debug_implementations,
        non_camel_case_types,
        unsafe_op_in_unsafe_fn
    )]
    include!(concat!(env!("OUT_DIR"), "/profile.skel.rs"));
}

use profile::types::sample_key;
use profile::{ProfileSkel, ProfileSkelBuilder};

// SAFETY: `sample_key` is a plain C struct of integers and a byte array: every bit pattern of
// its size is a valid value, which is what `plain` requires.
unsafe impl plain::Plain for sample_key {}

/// Why sampling could not start.
#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    #[error("the kernel has no BTF (`/sys/kernel/btf/vmlinux` is missing): bimodal needs a kernel built with CONFIG_DEBUG_INFO_BTF=y")]
    NoBtf,
    #[error("failed to load the BPF programs: {meaning} ({source})")]
    Load {
        meaning: &'static str,
        source: libbpf_rs::Error,
    },
    #[error("{0}")]
    Unavailable(#[from] events::Unavailable),
    #[error(transparent)]
    Perf(#[from] perf::OpenError),
    #[error("failed to attach the BPF program for {event} on CPU {cpu}: {source}")]
    Attach {
        event: &'static str,
        cpu: u32,
        source: libbpf_rs::Error,
    },
    #[error("failed to read BPF map `{map}`: {source}")]
    Map {
        map: &'static str,
        source: libbpf_rs::Error,
    },
}

/// Sizes of the BPF maps, in entries.
#[derive(Clone, Copy, Debug)]
pub struct MapSizes {
    /// Distinct (thread, event, stacks) keys per drain interval, per buffer.
    pub samples: u32,
    /// Distinct stacks alive at once.
    pub stacks: u32,
}

impl Default for MapSizes {
    fn default() -> Self {
        MapSizes {
            samples: 16384,
            stacks: 16384,
        }
    }
}

/// What one drain read: sample counts per key and the stacks they reference.
#[derive(Debug, Default)]
pub struct Drained {
    pub samples: Vec<(SampleKey, u64)>,
    /// Instruction pointers, leaf first, by stack id.
    pub stacks: HashMap<i32, Vec<u64>>,
    /// Losses since the previous drain, per event kind.
    pub dropped: HashMap<EventKind, Dropped>,
}

/// Lost samples and stacks, by reason (the BPF `drop_reason` enum).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    pub sample_map_full: u64,
    pub user_stack: u64,
    pub kernel_stack: u64,
    /// Samples whose stack id was gone from the stack map when read.
    pub stack_missing: u64,
}

impl Dropped {
    pub fn total(&self) -> u64 {
        self.sample_map_full + self.user_stack + self.kernel_stack + self.stack_missing
    }
}

/// A sample key as Rust reads it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SampleKey {
    pub tgid: u32,
    pub pid: u32,
    pub event: EventKind,
    pub user_stack_id: i32,
    pub kernel_stack_id: i32,
    pub comm: String,
}

/// The loaded programs and their perf events. Dropping it detaches everything.
pub struct Sampler {
    skel: ProfileSkel<'static>,
    sources: Vec<EventSource>,
    _links: Vec<Link>,
    /// Cumulative loss counters at the previous drain, by `drops` map index.
    drops_seen: HashMap<u32, u64>,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler").field("sources", &self.sources).finish()
    }
}

/// Settings for [`Sampler::start`].
#[derive(Clone, Debug)]
pub struct SamplerOptions {
    pub sources: Vec<EventSource>,
    /// Only sample this process; `None` samples all.
    pub pid: Option<u32>,
    pub map_sizes: MapSizes,
}

fn load_error_meaning(e: &libbpf_rs::Error) -> &'static str {
    match e.kind() {
        libbpf_rs::ErrorKind::PermissionDenied => "not permitted: the agent needs CAP_BPF and CAP_PERFMON (or root)",
        _ => "the kernel rejected the programs",
    }
}

impl Sampler {
    /// Loads the programs and starts sampling every source on every online CPU.
    pub fn start(opts: SamplerOptions) -> Result<Sampler, SamplerError> {
        if !Path::new("/sys/kernel/btf/vmlinux").exists() {
            return Err(SamplerError::NoBtf);
        }
        let cpus = perf::online_cpus()?;
        // The skeleton borrows its object storage for its whole life; one sampler lives for the
        // whole process, so the few bytes are leaked deliberately rather than self-referenced.
        let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
        let load = |e: libbpf_rs::Error| SamplerError::Load {
            meaning: load_error_meaning(&e),
            source: e,
        };
        let mut open = ProfileSkelBuilder::default().open(storage).map_err(load)?;
        if let Some(rodata) = open.maps.rodata_data.as_deref_mut() {
            rodata.filter_tgid = opts.pid.unwrap_or(0);
        }
        for map in [&mut open.maps.samples_0, &mut open.maps.samples_1] {
            map.set_max_entries(opts.map_sizes.samples).map_err(load)?;
        }
        open.maps.stacks.set_max_entries(opts.map_sizes.stacks).map_err(load)?;
        let skel = open.load().map_err(load)?;

        // Open every event first: a refusal then leaves nothing half attached.
        let mut fds = Vec::new();
        for source in &opts.sources {
            for &cpu in &cpus {
                fds.push((source.event, cpu, perf::open_sampling_event(source, cpu)?));
            }
        }
        let mut links = Vec::new();
        for (event, cpu, fd) in fds {
            let prog = match event {
                EventKind::Cpu => &skel.progs.sample_cpu,
                EventKind::PageFault => &skel.progs.sample_page_fault,
                EventKind::CacheMiss => &skel.progs.sample_cache_miss,
                EventKind::RemoteAccess => &skel.progs.sample_remote_access,
                other => return Err(events::Unavailable::NoSource(other.name()).into()),
            };
            let link = prog
                .attach_perf_event(fd.as_raw_fd())
                .map_err(|source| SamplerError::Attach {
                    event: event.name(),
                    cpu,
                    source,
                })?;
            // The link owns the perf event from here on and closes it when dropped.
            let _ = fd.into_raw_fd();
            links.push(link);
        }
        Ok(Sampler {
            skel,
            sources: opts.sources,
            _links: links,
            drops_seen: HashMap::new(),
        })
    }

    /// The sources being sampled.
    pub fn sources(&self) -> &[EventSource] {
        &self.sources
    }

    /// Flips the sample buffers and reads (and empties) the one programs stopped counting into.
    pub fn drain(&mut self) -> Result<Drained, SamplerError> {
        let bss = self
            .skel
            .maps
            .bss_data
            .as_deref_mut()
            .expect("profile.bpf.c has a .bss section");
        let draining = bss.active_buffer;
        // .bss is memory-mapped and shared with the programs, which read it on every sample.
        bss.active_buffer = 1 - draining;
        // Programs that read the old value just before the flip finish within microseconds.
        std::thread::sleep(Duration::from_millis(2));

        let (inactive, active) = if draining == 0 {
            (&self.skel.maps.samples_0, &self.skel.maps.samples_1)
        } else {
            (&self.skel.maps.samples_1, &self.skel.maps.samples_0)
        };
        let map_err = |map: &'static str| move |source| SamplerError::Map { map, source };

        let mut drained = Drained::default();
        let mut keys = Vec::new();
        for raw in inactive.keys() {
            let Some(value) = inactive.lookup(&raw, MapFlags::ANY).map_err(map_err("samples"))? else {
                continue;
            };
            let count = u64::from_ne_bytes(value[..8].try_into().expect("8-byte value"));
            drained.samples.push((decode_key(&raw), count));
            keys.push(raw);
        }
        for raw in &keys {
            // A key deleted meanwhile is no error: it was counted once already.
            let _ = inactive.delete(raw);
        }

        // Stacks referenced by the active buffer must survive this drain.
        let mut keep: HashSet<i32> = HashSet::new();
        for raw in active.keys() {
            let k = decode_key(&raw);
            keep.insert(k.user_stack_id);
            keep.insert(k.kernel_stack_id);
        }
        let wanted: HashSet<i32> = drained
            .samples
            .iter()
            .flat_map(|(k, _)| [k.user_stack_id, k.kernel_stack_id])
            .filter(|&id| id >= 0)
            .collect();
        let stacks = &self.skel.maps.stacks;
        for id in wanted {
            let key = (id as u32).to_ne_bytes();
            if let Some(raw) = stacks.lookup(&key, MapFlags::ANY).map_err(map_err("stacks"))? {
                let ips: Vec<u64> = raw
                    .chunks_exact(8)
                    .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
                    .take_while(|&ip| ip != 0)
                    .collect();
                drained.stacks.insert(id, ips);
            }
            if !keep.contains(&id) {
                let _ = stacks.delete(&key);
            }
        }
        for (k, count) in &drained.samples {
            for id in [k.user_stack_id, k.kernel_stack_id] {
                if id >= 0 && !drained.stacks.contains_key(&id) {
                    drained.dropped.entry(k.event).or_default().stack_missing += count;
                }
            }
        }

        // Loss counters only grow in BPF; report what was added since the last drain.
        let reasons = profile::types::drop_reason::DROP_REASON_COUNT.0;
        for source in &self.sources {
            let entry = drained.dropped.entry(source.event).or_default();
            for reason in 0..reasons {
                let index = source.event as u32 * reasons + reason;
                let per_cpu = self
                    .skel
                    .maps
                    .drops
                    .lookup_percpu(&index.to_ne_bytes(), MapFlags::ANY)
                    .map_err(map_err("drops"))?
                    .unwrap_or_default();
                let total: u64 = per_cpu
                    .iter()
                    .map(|v| u64::from_ne_bytes(v[..8].try_into().expect("8 bytes")))
                    .sum();
                let seen = self.drops_seen.insert(index, total).unwrap_or(0);
                let added = total.saturating_sub(seen);
                match reason {
                    0 => entry.sample_map_full += added,
                    1 => entry.user_stack += added,
                    _ => entry.kernel_stack += added,
                }
            }
        }
        Ok(drained)
    }
}

fn decode_key(raw: &[u8]) -> SampleKey {
    let mut k = sample_key::default();
    plain::copy_from_bytes(&mut k, raw).expect("map key has the size of sample_key");
    let comm_bytes: Vec<u8> = k.comm.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
    SampleKey {
        tgid: k.tgid,
        pid: k.pid,
        event: EventKind::try_from(k.event as i32).unwrap_or(EventKind::Unspecified),
        user_stack_id: k.user_stack_id,
        kernel_stack_id: k.kernel_stack_id,
        comm: String::from_utf8_lossy(&comm_bytes).into_owned(),
    }
}
