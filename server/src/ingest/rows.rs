//! A validated wire batch turned into what storage writes: samples aggregated per (event,
//! process, stack) with thread ids dropped, per-function values, and the dimension rows
//! (stacks, frames, processes, functions) keyed by ids that depend only on what the agent
//! observed.
//!
//! Ids are xxHash64 of length-prefixed fields, so every server computes the same ones:
//! - a frame of an image with a build id is (kind, build id, file offset): the same in every
//!   process and on every node, named or not;
//! - a kernel frame is (module, function) when the agent named it (addresses move with KASLR),
//!   a JIT frame its function (addresses differ per process), anything else (module, file offset)
//!   or its address;
//! - a stack is its frame ids in order, leaf first;
//! - a process is who it is (comm, executable, container, pod, unit), never its pid.

use std::collections::HashMap;
use std::sync::Arc;

use bimodal_proto::v1;

/// Functions are keyed by the id storage reads them by, defined there.
pub use crate::storage::rows::function_id;
use crate::storage::rows::{IdHasher, PlacementRow, ProcessRow};

/// Frames are named by the debug-info store's names (or none).
pub use crate::debuginfo::names::{FrameNamer, NoNames};
/// What a batch becomes is what storage writes, defined there.
pub use crate::storage::batch::{
    BatchRows, DataAgg, FrameDim, FunctionDim, Known, NothingKnown, SampleAgg, Sender, SourceDim,
};

/// A data sample's group: (event, process, stack, mapping kind, mapping path, symbol, cache line).
type DataKey<'a> = (i32, u64, u64, &'a str, &'a str, &'a str, u64);

/// Hash maps of this hot path: ids and small keys need no DoS-resistant hashing (SipHash cost
/// a tenth of ingest's CPU).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The module a frame belongs to as functions are keyed: the file name (paths differ between
/// containers and nodes), `[jit]` for JIT code (its perf map is per process).
fn module_name(frame: &v1::Frame) -> String {
    if frame.kind == v1::FrameKind::Jit as i32 {
        return "[jit]".into();
    }
    frame.module.rsplit('/').next().unwrap_or_default().to_owned()
}

/// The id of a frame from what the agent observed (see the module doc).
pub fn frame_id(f: &v1::Frame) -> u64 {
    let kind = f.kind.clamp(0, 255) as u8;
    let h = if !f.build_id.is_empty() {
        IdHasher::new(b'b')
            .u64(kind.into())
            .bytes(&f.build_id)
            .u64(f.file_offset)
    } else if f.kind == v1::FrameKind::Kernel as i32 && !f.function.is_empty() {
        IdHasher::new(b'k')
            .bytes(f.module.as_bytes())
            .bytes(f.function.as_bytes())
    } else if f.kind == v1::FrameKind::Jit as i32 && !f.function.is_empty() {
        IdHasher::new(b'j').bytes(f.function.as_bytes())
    } else if !f.module.is_empty() && f.file_offset != 0 {
        IdHasher::new(b'm')
            .u64(kind.into())
            .bytes(f.module.as_bytes())
            .u64(f.file_offset)
    } else {
        IdHasher::new(b'a')
            .u64(kind.into())
            .bytes(f.module.as_bytes())
            .bytes(f.function.as_bytes())
            .u64(f.address)
    };
    h.finish()
}

/// The id of a stack of frame ids, leaf first.
pub fn stack_id(frame_ids: impl IntoIterator<Item = u64>) -> u64 {
    frame_ids
        .into_iter()
        .fold(IdHasher::new(b's'), |h, f| h.u64(f))
        .finish()
}

/// The frame ids of a stack, leaf first, from the ids of its batch's frames.
fn frames_of<'a>(stack: &'a v1::Stack, frame_ids: &'a [u64]) -> impl Iterator<Item = u64> + 'a {
    stack.frame_indices.iter().map(|&i| frame_ids[i as usize])
}

/// The id of a process identity (`process_id` and `last_seen` are ignored).
pub fn process_id(p: &ProcessRow) -> u64 {
    [
        &p.comm,
        &p.executable,
        &p.container_id,
        &p.container_runtime,
        &p.pod_uid,
        &p.systemd_unit,
        &p.pod_name,
        &p.pod_namespace,
        &p.container_name,
    ]
    .into_iter()
    .fold(IdHasher::new(b'p'), |h, s| h.bytes(s.as_bytes()))
    .finish()
}

/// The name a person reads for a frame nobody named: `[module+0xoffset]`, or `[unknown]`.
pub fn unnamed(module: &str, file_offset: u64, address: u64) -> String {
    let module = module.rsplit('/').next().unwrap_or_default();
    match (module.is_empty(), file_offset) {
        (true, _) => "[unknown]".into(),
        (false, 0) => format!("[{module}+{address:#x}]"),
        (false, off) => format!("[{module}+{off:#x}]"),
    }
}

/// Milliseconds the batch covers, when its end is after its start.
fn reported_ms(batch: &v1::Batch) -> Option<u64> {
    let nanos = batch.end_unix_nanos.checked_sub(batch.start_unix_nanos)?;
    (nanos > 0).then(|| (nanos as u64).div_ceil(1_000_000))
}

/// The id a batch is stored, deduplicated and claimed under: its agent's id within its node (the
/// first 16 bytes of SHA-256 over both). An agent's ids are unique to it, not to the fleet: keyed
/// by the agent's id alone, another node's batch of the same id was answered DUPLICATE and never
/// stored (issue 49), and a client writing as one node could make another's batches vanish.
/// (Batches stored before this key and resent after it are stored again: a resend comes within
/// hours of the first send, so only across an upgrade.)
pub fn stored_id(node: &str, batch_id: &[u8]) -> [u8; 16] {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    hash.update(b"bimodal batch\0");
    hash.update(node.as_bytes());
    hash.update([0]);
    hash.update(batch_id);
    let digest = hash.finalize();
    let mut id = [0; 16];
    id.copy_from_slice(&digest[..16]);
    id
}

/// Turns a validated batch into rows. `namer` names frames the agent left to the server;
/// dimension rows `known` to be written are left out.
pub fn build(sender: &Sender, batch: &v1::Batch, namer: &dyn FrameNamer, known: &dyn Known) -> BatchRows {
    let batch_id = stored_id(&sender.node, &batch.batch_id);
    let start_time = unix_secs(batch.start_unix_nanos);
    let end_time = unix_secs(batch.end_unix_nanos);

    let sources: Vec<SourceDim> = batch
        .sources
        .iter()
        .map(|s| {
            let event = event_kind(s.event);
            SourceDim {
                event: event.name(),
                // Agents before source names sent only a description.
                name: Arc::from(if s.name.is_empty() {
                    s.description.as_str()
                } else {
                    s.name.as_str()
                }),
                unit: if s.unit.is_empty() {
                    event.unit().to_owned()
                } else {
                    s.unit.clone()
                },
                description: s.description.clone(),
                dropped: s.dropped,
            }
        })
        .collect();
    let source_of = |event: i32| -> Arc<str> {
        let name = event_kind(event).name();
        sources
            .iter()
            .find(|s| s.event == name)
            .map(|s| s.name.clone())
            .unwrap_or_else(|| Arc::from(""))
    };

    // Frames: ids, and the function each one is in. A batch has thousands of frames of a few
    // images: each build id is hexed once, and frames known before are not named again.
    let mut hexed: FastMap<&[u8], Arc<str>> = FastMap::default();
    let mut frame_ids = Vec::with_capacity(batch.frames.len());
    let mut frame_functions = Vec::with_capacity(batch.frames.len());
    let mut frames = Vec::new();
    let mut functions: FastMap<u64, FunctionDim> = FastMap::default();
    let mut named_here = Vec::new();
    for f in &batch.frames {
        let id = frame_id(f);
        frame_ids.push(id);
        let mut build_id = || -> Arc<str> {
            hexed
                .entry(f.build_id.as_slice())
                .or_insert_with(|| bimodal_profile::hex(&f.build_id).into())
                .clone()
        };
        let fid = match known.function_of(id) {
            Some(fid) => fid,
            None => {
                let named = if f.build_id.is_empty() {
                    None
                } else {
                    namer.name(&build_id(), f.elf_address, f.file_offset)
                };
                let module = module_name(f);
                let agent_named = !f.function.is_empty();
                let name = named
                    .or_else(|| agent_named.then(|| f.function.clone()))
                    .unwrap_or_else(|| unnamed(&f.module, f.file_offset, f.address));
                let fid = function_id(&name, &module);
                // A frame nobody named may be named by a later upload: not remembered.
                if !name.starts_with('[') || agent_named {
                    named_here.push((id, fid));
                }
                functions
                    .entry(fid)
                    .or_insert_with(|| FunctionDim { id: fid, name, module });
                fid
            }
        };
        frame_functions.push(fid);
        if !known.frame(id) {
            frames.push(FrameDim {
                id,
                kind: f.kind.clamp(0, 255) as u8,
                module: f.module.clone(),
                build_id: build_id(),
                file_offset: f.file_offset,
                elf_address: f.elf_address,
                address: f.address,
                function: f.function.clone(),
            });
        }
    }

    // Stacks: ids, and per stack its leaf function and its distinct functions (all stacks'
    // lists in one vector: a batch has thousands of stacks, most of them known).
    let mut stack_ids = Vec::with_capacity(batch.stacks.len());
    let mut stack_functions: Vec<(Option<u64>, std::ops::Range<usize>)> = Vec::with_capacity(batch.stacks.len());
    let mut function_lists: Vec<u64> = Vec::new();
    let mut fns: Vec<u64> = Vec::new();
    for s in &batch.stacks {
        fns.clear();
        fns.extend(s.frame_indices.iter().map(|&i| frame_functions[i as usize]));
        let leaf = fns.first().copied();
        fns.sort_unstable();
        fns.dedup();
        let first = function_lists.len();
        function_lists.extend_from_slice(&fns);
        stack_functions.push((leaf, first..function_lists.len()));
        stack_ids.push(stack_id(frames_of(s, &frame_ids)));
    }

    // Processes by pid, then their ids.
    let mut processes: FastMap<u64, ProcessRow> = FastMap::default();
    let by_pid: FastMap<u32, &v1::Process> = batch.processes.iter().map(|p| (p.pid, p)).collect();
    let mut process_of = |pid: u32, comm: &str| -> u64 {
        let p = by_pid.get(&pid);
        let field = |f: fn(&v1::Process) -> &String| p.map(|p| f(p).clone()).unwrap_or_default();
        let mut row = ProcessRow {
            process_id: 0,
            comm: comm.to_owned(),
            executable: field(|p| &p.executable),
            container_id: field(|p| &p.container_id),
            container_runtime: field(|p| &p.container_runtime),
            pod_uid: field(|p| &p.pod_uid),
            systemd_unit: field(|p| &p.systemd_unit),
            pod_name: field(|p| &p.pod_name),
            pod_namespace: field(|p| &p.pod_namespace),
            container_name: field(|p| &p.container_name),
            last_seen: 0,
        };
        row.process_id = process_id(&row);
        let id = row.process_id;
        processes.entry(id).or_insert(row);
        id
    };

    // Samples without thread ids: one row per (event, process, stack).
    let mut by_stack: FastMap<(i32, u64, usize), (u64, u64)> = FastMap::default();
    let mut process_cache: FastMap<(u32, &str), u64> = FastMap::default();
    let mut sample_count = 0;
    for s in &batch.samples {
        let pid = *process_cache
            .entry((s.pid, s.comm.as_str()))
            .or_insert_with(|| process_of(s.pid, &s.comm));
        let e = by_stack.entry((s.event, pid, s.stack_index as usize)).or_default();
        e.0 += s.count;
        e.1 += s.value;
        sample_count += s.count;
    }
    let mut samples = Vec::with_capacity(by_stack.len() * 2);
    let mut by_function: FastMap<(i32, u64), [u64; 4]> = FastMap::default();
    for (&(event, process_id, stack), &(count, value)) in &by_stack {
        samples.push(SampleAgg {
            kind: 0,
            event: event_kind(event).name(),
            source: source_of(event),
            process_id,
            stack_id: stack_ids[stack],
            function_id: 0,
            count,
            value,
            self_count: 0,
            self_value: 0,
        });
        let (leaf, fns) = &stack_functions[stack];
        for &f in &function_lists[fns.clone()] {
            let v = by_function.entry((event, f)).or_default();
            v[0] += count;
            v[1] += value;
            if Some(f) == *leaf {
                v[2] += count;
                v[3] += value;
            }
        }
    }
    for (&(event, function_id), v) in &by_function {
        samples.push(SampleAgg {
            kind: 1,
            event: event_kind(event).name(),
            source: source_of(event),
            process_id: 0,
            stack_id: 0,
            function_id,
            count: v[0],
            value: v[1],
            self_count: v[2],
            self_value: v[3],
        });
    }

    // Data samples by object and line, without thread ids.
    let mut by_object: FastMap<DataKey, (u64, u64)> = FastMap::default();
    for d in &batch.data_samples {
        // A page fault touches its page once (the fault maps it): its address says which object,
        // never a hot line, and keeping lines would store one row per fault.
        let cache_line = if d.event == v1::EventKind::PageFault as i32 {
            0
        } else {
            d.cache_line
        };
        let pid = *process_cache
            .entry((d.pid, d.comm.as_str()))
            .or_insert_with(|| process_of(d.pid, &d.comm));
        let key = (
            d.event,
            pid,
            stack_ids[d.stack_index as usize],
            d.mapping_kind.as_str(),
            d.mapping_path.as_str(),
            d.symbol.as_str(),
            cache_line,
        );
        let e = by_object.entry(key).or_default();
        e.0 += d.count;
        e.1 += d.value;
    }
    let data_samples = by_object
        .into_iter()
        .map(
            |((event, process_id, stack_id, kind, path, symbol, cache_line), (count, value))| DataAgg {
                event: event_kind(event).name(),
                source: source_of(event),
                process_id,
                stack_id,
                mapping_kind: kind.to_owned(),
                mapping_path: path.to_owned(),
                symbol: symbol.to_owned(),
                cache_line,
                count,
                value,
            },
        )
        .collect();

    let placements = batch
        .placements
        .iter()
        .flat_map(|p| {
            let mut threads: Vec<(u32, u32)> = p.threads_per_node.iter().map(|(&n, &c)| (n, c)).collect();
            threads.sort_unstable();
            p.mappings.iter().map(move |m| {
                let mut pages: Vec<(u32, u64)> = m.pages_per_node.iter().map(|(&n, &c)| (n, c)).collect();
                pages.sort_unstable();
                PlacementRow {
                    time: start_time,
                    pid: p.pid,
                    comm: p.comm.clone(),
                    executable: p.executable.clone(),
                    thread_nodes: threads.iter().map(|t| t.0).collect(),
                    thread_counts: threads.iter().map(|t| t.1).collect(),
                    kind: m.kind.clone(),
                    path: m.path.clone(),
                    start: m.start,
                    end: m.end,
                    permissions: m.permissions.clone(),
                    page_nodes: pages.iter().map(|p| p.0).collect(),
                    page_counts: pages.iter().map(|p| p.1).collect(),
                    page_size: m.page_size,
                }
            })
        })
        .collect();

    // Only the stacks samples use (data samples' user-only stacks included).
    let mut used = vec![false; stack_ids.len()];
    for (_, _, stack) in by_stack.keys() {
        used[*stack] = true;
    }
    for d in &batch.data_samples {
        used[d.stack_index as usize] = true;
    }
    let stacks = batch
        .stacks
        .iter()
        .zip(stack_ids.iter().zip(used))
        .filter(|&(_, (&id, used))| used && !known.stack(id))
        .map(|(s, (&id, _))| (id, frames_of(s, &frame_ids).collect()))
        .collect();

    BatchRows {
        batch_id,
        resend: batch.resend,
        node: sender.node.clone(),
        agent_version: sender.agent_version.clone(),
        start_time,
        end_time,
        samples,
        data_samples,
        counters: batch
            .counters
            .iter()
            .filter(|c| c.name != bimodal_proto::REPORTED_COUNTER)
            .map(|c| (c.name.clone(), c.value))
            .chain(reported_ms(batch).map(|ms| (bimodal_proto::REPORTED_COUNTER.to_owned(), ms)))
            .collect(),
        placements,
        stacks,
        frames,
        processes: processes
            .into_values()
            .filter(|p| !known.process(p.process_id))
            .collect(),
        functions: functions.into_values().collect(),
        frame_functions: named_here,
        sources,
        sample_count,
    }
}

fn event_kind(event: i32) -> v1::EventKind {
    v1::EventKind::try_from(event).unwrap_or_default()
}

/// Unix seconds of Unix nanoseconds (validation keeps them in range).
pub fn unix_secs(nanos: i64) -> u32 {
    (nanos / 1_000_000_000).clamp(0, i64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(
        kind: v1::FrameKind,
        module: &str,
        build_id: &[u8],
        offset: u64,
        address: u64,
        function: &str,
    ) -> v1::Frame {
        v1::Frame {
            kind: kind as i32,
            module: module.into(),
            build_id: build_id.to_vec(),
            file_offset: offset,
            address,
            function: function.into(),
            ..Default::default()
        }
    }

    /// A frame of an image with a build id has one id wherever it was loaded and whatever it was
    /// named; kernel frames ignore KASLR; JIT frames ignore their per-process module.
    #[test]
    fn frame_ids_depend_on_what_was_observed() {
        let a = frame(
            v1::FrameKind::User,
            "/usr/lib/libc.so.6",
            b"\x01\x02",
            0x1234,
            0x7f00_0000_1234,
            "",
        );
        let b = frame(
            v1::FrameKind::User,
            "/other/libc.so.6",
            b"\x01\x02",
            0x1234,
            0x5500_0000_1234,
            "memset",
        );
        assert_eq!(frame_id(&a), frame_id(&b));
        let c = frame(
            v1::FrameKind::User,
            "/usr/lib/libc.so.6",
            b"\x01\x02",
            0x1238,
            0x7f00_0000_1238,
            "",
        );
        assert_ne!(frame_id(&a), frame_id(&c));
        let k1 = frame(
            v1::FrameKind::Kernel,
            "vmlinux",
            b"",
            0,
            0xffff_ffff_8100_0000,
            "do_page_fault",
        );
        let k2 = frame(
            v1::FrameKind::Kernel,
            "vmlinux",
            b"",
            0,
            0xffff_ffff_a100_0000,
            "do_page_fault",
        );
        assert_eq!(frame_id(&k1), frame_id(&k2));
        let j1 = frame(v1::FrameKind::Jit, "/tmp/perf-1.map", b"", 0, 0x1000, "Lfoo;bar");
        let j2 = frame(v1::FrameKind::Jit, "/tmp/perf-2.map", b"", 0, 0x2000, "Lfoo;bar");
        assert_eq!(frame_id(&j1), frame_id(&j2));
        assert_ne!(
            stack_id([frame_id(&a), frame_id(&k1)]),
            stack_id([frame_id(&k1), frame_id(&a)])
        );
    }

    fn batch() -> v1::Batch {
        v1::Batch {
            batch_id: vec![7; 16],
            start_unix_nanos: 1_795_000_000_000_000_000,
            end_unix_nanos: 1_795_000_010_000_000_000,
            frames: vec![
                frame(v1::FrameKind::User, "/bin/w", b"\xaa", 0x10, 0x5000_0010, ""),
                frame(v1::FrameKind::User, "/bin/w", b"\xaa", 0x20, 0x5000_0020, ""),
                frame(v1::FrameKind::Kernel, "vmlinux", b"", 0, 0xffff_0000, "clear_page"),
            ],
            stacks: vec![
                v1::Stack {
                    frame_indices: vec![0, 1],
                },
                v1::Stack {
                    frame_indices: vec![2, 0, 1],
                },
                v1::Stack { frame_indices: vec![1] },
            ],
            samples: vec![sample(1, 0, 10, 3), sample(1, 0, 11, 2), sample(1, 1, 10, 5)],
            sources: vec![v1::EventSource {
                event: v1::EventKind::PageFault as i32,
                description: "software page-faults, 1 in 100".into(),
                name: "page-faults".into(),
                unit: "faults".into(),
                period: 100,
                dropped: 0,
            }],
            processes: vec![v1::Process {
                pid: 1,
                executable: "/bin/w".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn sender() -> Sender {
        Sender {
            node: "n".into(),
            labels: vec![],
            agent_version: "t".into(),
            facts: None,
        }
    }

    fn sample(pid: u32, stack: u32, tid: u32, count: u64) -> v1::Sample {
        v1::Sample {
            event: v1::EventKind::PageFault as i32,
            stack_index: stack,
            pid,
            tid,
            comm: "w".into(),
            count,
            value: count * 100,
        }
    }

    struct Named;
    impl FrameNamer for Named {
        fn name(&self, _: &str, _: u64, offset: u64) -> Option<String> {
            Some(if offset == 0x10 { "leaf".into() } else { "main".into() })
        }
    }

    /// Threads merge; self values go to the leaf's function, totals to every function once per
    /// stack; only used stacks are kept; the source is on every row.
    #[test]
    fn samples_aggregate_per_stack_and_function() {
        let sender = sender();
        let rows = build(&sender, &batch(), &Named, &NothingKnown);
        let stacks: Vec<_> = rows.samples.iter().filter(|s| s.kind == 0).collect();
        assert_eq!(stacks.len(), 2, "threads 10 and 11 merge");
        assert_eq!(stacks.iter().map(|s| s.count).sum::<u64>(), 10);
        assert!(rows
            .samples
            .iter()
            .all(|s| &*s.source == "page-faults" && s.event == "page_fault"));
        let function = |name: &str| {
            let f = rows.functions.iter().find(|f| f.name == name).unwrap();
            rows.samples
                .iter()
                .find(|s| s.kind == 1 && s.function_id == f.id)
                .unwrap()
        };
        let leaf = function("leaf");
        assert_eq!((leaf.count, leaf.self_count), (10, 5));
        let main = function("main");
        assert_eq!((main.count, main.self_count), (10, 0));
        let kernel = function("clear_page");
        assert_eq!((kernel.count, kernel.self_count), (5, 5));
        assert_eq!(rows.stacks.len(), 2, "the third stack has no samples");
        assert_eq!(rows.sample_count, 10);
        assert_eq!(rows.processes.len(), 1);
    }

    /// A function twice in a stack (recursion, or two frames of one function) counts once in its
    /// total; a stack storage wrote before is left out of the rows, its samples kept.
    #[test]
    fn a_function_counts_once_per_stack_and_known_stacks_are_not_written_again() {
        struct KnowsStack(u64);
        impl Known for KnowsStack {
            fn frame(&self, _: u64) -> bool {
                false
            }
            fn stack(&self, id: u64) -> bool {
                id == self.0
            }
            fn process(&self, _: u64) -> bool {
                false
            }
            fn function_of(&self, _: u64) -> Option<u64> {
                None
            }
        }
        let sender = sender();
        let mut b = batch();
        // main (0x20) calls main (0x30) calls leaf (0x10).
        b.frames
            .push(frame(v1::FrameKind::User, "/bin/w", b"\xaa", 0x30, 0x5000_0030, ""));
        b.stacks.push(v1::Stack {
            frame_indices: vec![0, 3, 1],
        });
        b.samples.push(sample(1, 3, 10, 4));
        let known = stack_id([0, 1].map(|i| frame_id(&b.frames[i])));
        let rows = build(&sender, &b, &Named, &KnowsStack(known));
        let main = rows.functions.iter().find(|f| f.name == "main").unwrap();
        let main = rows
            .samples
            .iter()
            .find(|s| s.kind == 1 && s.function_id == main.id)
            .unwrap();
        assert_eq!(
            (main.count, main.self_count),
            (14, 0),
            "3 + 2 + 5 of the first two stacks, 4 of the third"
        );
        let written: Vec<u64> = rows.stacks.iter().map(|s| s.0).collect();
        assert_eq!(written.len(), 2, "{written:?}");
        assert!(!written.contains(&known));
        let recursive = stack_id([0, 3, 1].map(|i| frame_id(&b.frames[i])));
        let frames = &rows.stacks.iter().find(|s| s.0 == recursive).unwrap().1;
        assert_eq!(&frames[..], &[0, 3, 1].map(|i| frame_id(&b.frames[i]))[..]);
        assert_eq!(
            rows.samples.iter().filter(|s| s.kind == 0).count(),
            3,
            "the known stack's samples stay"
        );
    }
}
