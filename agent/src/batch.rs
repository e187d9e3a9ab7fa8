//! Builds a wire batch from one drain: frames and stacks deduplicated, samples weighted.

use std::collections::HashMap;
use std::time::SystemTime;

use bimodal_proto::v1;

use crate::bpf::Drained;
use crate::events::EventSource;
use crate::symbolize::{Frames, Ip};

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
    for (key, _) in &drained.samples {
        if let Some(stack) = drained.stacks.get(&key.user_stack_id) {
            user_ips.entry(key.tgid).or_default().extend(ips(stack));
        }
        if let Some(stack) = drained.stacks.get(&key.kernel_stack_id) {
            kernel_ips.extend(ips(stack));
        }
    }
    // Frame index by (tgid, ip); tgid 0 holds kernel frames.
    let mut frame_index: HashMap<(u32, Ip), u32> = HashMap::new();
    let mut push_frames =
        |batch: &mut v1::Batch, tgid: u32, mut list: Vec<Ip>, resolve: &dyn Fn(&[Ip]) -> Vec<v1::Frame>| {
            list.sort_unstable_by_key(|ip| (ip.address, ip.leaf));
            list.dedup();
            for (ip, frame) in list.iter().zip(resolve(&list)) {
                frame_index.insert((tgid, *ip), batch.frames.len() as u32);
                batch.frames.push(frame);
            }
        };
    push_frames(&mut batch, 0, kernel_ips, &|l| frames.kernel(l));
    for (tgid, list) in user_ips {
        push_frames(&mut batch, tgid, list, &|l| frames.user(tgid, l));
    }

    let mut stack_index: HashMap<Vec<u32>, u32> = HashMap::new();
    for (key, v) in &drained.samples {
        // Leaf first: kernel frames, then the user frames below them.
        let mut indices = Vec::new();
        if let Some(stack) = drained.stacks.get(&key.kernel_stack_id) {
            indices.extend(ips(stack).map(|ip| frame_index[&(0, ip)]));
        }
        if let Some(stack) = drained.stacks.get(&key.user_stack_id) {
            indices.extend(ips(stack).map(|ip| frame_index[&(key.tgid, ip)]));
        }
        let next = stack_index.len() as u32;
        let stack = *stack_index.entry(indices.clone()).or_insert_with(|| {
            batch.stacks.push(v1::Stack { frame_indices: indices });
            next
        });
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
    batch.sources = sources
        .iter()
        .map(|s| v1::EventSource {
            event: s.event as i32,
            source: s.description.clone(),
            period: s.period,
            dropped: drained.dropped.get(&s.event).map(|d| d.total()).unwrap_or(0),
        })
        .collect();
    batch
}

fn ips(stack: &[u64]) -> impl Iterator<Item = Ip> + '_ {
    stack
        .iter()
        .enumerate()
        .map(|(i, &address)| Ip { address, leaf: i == 0 })
}
