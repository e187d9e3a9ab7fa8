//! Batches the server has not acknowledged yet, oldest first, bounded in bytes.
//!
//! In memory by default; with a directory (`run --spool-dir`) every batch is a file there before
//! it is sent, and is deleted once the server acknowledges it, so batches survive an agent that
//! is killed or restarted: the next agent of the same node sends them first, marked as resends
//! (the server stores each batch id at most once). A file is written aside and renamed, so a
//! kill mid-write leaves no half batch. Only ids and sizes stay in memory.
//!
//! Nothing leaves the spool silently: a batch dropped for room (the server unreachable for too
//! long), refused by the server for good, or unreadable on disk is counted by reason.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use anyhow::Context;
use prost::Message;

use crate::stream::metrics;
use crate::v1;

/// Largest batch a server decodes (its gRPC message limit): a larger one could never be stored.
pub const MAX_BATCH_BYTES: usize = 64 << 20;

/// The bytes of the message a batch of `len` encoded bytes travels in (`IngestRequest`: a tag
/// and a length before it): what the server's limit counts.
pub fn wire_len(len: usize) -> usize {
    1 + prost::encoding::encoded_len_varint(len as u64) + len
}

/// Where unacknowledged batches are kept, and how many bytes of them at most.
#[derive(Clone, Debug)]
pub struct SpoolOptions {
    /// Keep them as files under this directory (one subdirectory per node name); `None`: in
    /// memory, lost when the agent stops.
    pub dir: Option<PathBuf>,
    /// Encoded bytes kept at most; the oldest batch is dropped for a new one beyond it.
    pub max_bytes: u64,
}

impl SpoolOptions {
    /// In memory, bounded by `max_bytes`.
    pub fn memory(max_bytes: u64) -> SpoolOptions {
        SpoolOptions { dir: None, max_bytes }
    }
}

/// Why a batch left the spool without being stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// The spool was full: the server was unreachable for too long.
    Full,
    /// The server refused it for good (malformed, undecodable, larger than it accepts).
    Refused,
    /// Its file could not be read back or decoded (a damaged disk, a file edited by hand).
    Unreadable,
}

impl Dropped {
    fn name(self) -> &'static str {
        match self {
            Dropped::Full => "spool_full",
            Dropped::Refused => "refused",
            Dropped::Unreadable => "unreadable",
        }
    }
}

enum Body {
    Memory(Box<v1::Batch>),
    File(PathBuf),
}

pub(crate) struct Entry {
    pub(crate) id: Vec<u8>,
    bytes: u64,
    body: Body,
    /// Sent on the current stream (and not answered "retry").
    pub(crate) sent: bool,
    /// Sent on any stream before, or found on disk at start: a resend tells the server to check
    /// what it holds.
    pub(crate) ever_sent: bool,
}

pub(crate) struct Spool {
    entries: VecDeque<Entry>,
    bytes: u64,
    max_bytes: u64,
    /// This node's directory when batches are kept on disk.
    dir: Option<PathBuf>,
    /// The next file's sequence number (files sort in the order their batches were taken).
    next: u64,
    /// Batches dropped so far, by reason.
    dropped: [u64; 3],
}

const EXTENSION: &str = "batch";

impl Spool {
    /// A spool for `node`: in memory, or its directory under `opts.dir`, created if missing,
    /// with the batches an earlier agent of this node left there (half-written files removed).
    pub(crate) fn open(opts: &SpoolOptions, node: &str) -> anyhow::Result<Spool> {
        let mut spool = Spool {
            entries: VecDeque::new(),
            bytes: 0,
            max_bytes: opts.max_bytes.max(1),
            dir: None,
            next: 0,
            dropped: [0; 3],
        };
        let Some(root) = &opts.dir else {
            return Ok(spool);
        };
        let dir = root.join(node_dir(node));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("failed to create the spool directory {}", dir.display()))?;
        let mut found: Vec<(u64, Vec<u8>, PathBuf, u64)> = Vec::new();
        for entry in std::fs::read_dir(&dir).with_context(|| format!("failed to list the spool {}", dir.display()))? {
            let entry = entry.with_context(|| format!("failed to list the spool {}", dir.display()))?;
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') && name.ends_with(".part") {
                // A write the previous agent did not finish: its batch was never acknowledged
                // nor sent (files are sent only once complete).
                let _ = std::fs::remove_file(&path);
                continue;
            }
            match parse_name(&name) {
                Some((seq, id)) => {
                    let bytes = entry.metadata().map(|m| m.len()).unwrap_or(0);
                    found.push((seq, id, path, bytes));
                }
                None => tracing::warn!(file = %path.display(), "not a spooled batch; left alone"),
            }
        }
        found.sort();
        spool.next = found.last().map_or(0, |(seq, ..)| seq + 1);
        spool.dir = Some(dir);
        // Read back when sent, not here: a full spool is not decoded twice.
        for (_, id, path, bytes) in found {
            spool.bytes += bytes;
            spool.entries.push_back(Entry {
                id,
                bytes,
                body: Body::File(path),
                sent: false,
                ever_sent: true,
            });
        }
        if !spool.entries.is_empty() {
            tracing::info!(
                batches = spool.entries.len(),
                bytes = spool.bytes,
                dir = %spool.dir.as_deref().unwrap_or(Path::new("")).display(),
                "found batches an earlier agent did not deliver; sending them first"
            );
        }
        spool.make_room(0);
        spool.publish();
        Ok(spool)
    }

    /// Keeps `b` until it is acknowledged, dropping the oldest batches if there is no room.
    pub(crate) fn push(&mut self, b: v1::Batch) {
        let len = b.encoded_len();
        if wire_len(len) > MAX_BATCH_BYTES {
            self.count(Dropped::Refused);
            tracing::error!(
                samples = b.samples.len(),
                stacks = b.stacks.len(),
                "dropped a batch larger than the server's {MAX_BATCH_BYTES}-byte limit"
            );
            return;
        }
        let bytes = len as u64;
        self.make_room(bytes);
        let id = b.batch_id.clone();
        let written = self.dir.as_deref().map(|dir| write_batch(dir, self.next, &b));
        let body = match written {
            Some(Ok(path)) => {
                self.next += 1;
                Body::File(path)
            }
            Some(Err(e)) => {
                // Kept all the same: only a restart of the agent would lose it.
                tracing::warn!("{e:#}; keeping the batch in memory");
                Body::Memory(Box::new(b))
            }
            None => Body::Memory(Box::new(b)),
        };
        self.bytes += bytes;
        self.entries.push_back(Entry {
            id,
            bytes,
            body,
            sent: false,
            ever_sent: false,
        });
        self.publish();
    }

    /// Drops the oldest batches until `incoming` more bytes fit.
    fn make_room(&mut self, incoming: u64) {
        while self.bytes + incoming > self.max_bytes {
            let Some(old) = self.entries.pop_front() else { break };
            self.forget(&old);
            self.count(Dropped::Full);
            tracing::warn!(
                bytes = old.bytes,
                dropped_batches = self.dropped(Dropped::Full),
                "spool full: dropped the oldest unacknowledged batch"
            );
        }
    }

    /// The batch of `entry` as it is to be sent; `None` (and dropped, counted) when its file
    /// cannot be read back.
    pub(crate) fn load(&mut self, index: usize) -> Option<v1::Batch> {
        let read = match &self.entries.get(index)?.body {
            Body::Memory(b) => return Some((**b).clone()),
            Body::File(path) => read_batch(path),
        };
        match read {
            Ok(b) => Some(b),
            Err(e) => {
                tracing::error!("{e:#}; dropped");
                let gone = self.entries.remove(index).expect("index checked above");
                self.forget(&gone);
                self.count(Dropped::Unreadable);
                self.publish();
                None
            }
        }
    }

    /// The server holds `id` (or refused it for good): it leaves the spool.
    pub(crate) fn remove(&mut self, id: &[u8]) {
        if let Some(i) = self.entries.iter().position(|e| e.id == id) {
            let gone = self.entries.remove(i).expect("position found");
            self.forget(&gone);
            self.publish();
        }
    }

    /// Counts a batch the server refused for good (it is not resent).
    pub(crate) fn refused(&mut self, id: &[u8]) {
        self.count(Dropped::Refused);
        self.remove(id);
    }

    pub(crate) fn entries_mut(&mut self) -> impl Iterator<Item = &mut Entry> {
        self.entries.iter_mut()
    }

    pub(crate) fn entry_mut(&mut self, index: usize) -> Option<&mut Entry> {
        self.entries.get_mut(index)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether batches outlive this agent (kept on disk).
    pub(crate) fn is_durable(&self) -> bool {
        self.dir.is_some()
    }

    pub(crate) fn dropped(&self, why: Dropped) -> u64 {
        self.dropped[why as usize]
    }

    /// Batches dropped for any reason.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.iter().sum()
    }

    fn forget(&mut self, e: &Entry) {
        self.bytes -= e.bytes;
        if let Body::File(path) = &e.body {
            if let Err(err) = std::fs::remove_file(path) {
                // Sent again by the next agent, stored once by the server.
                tracing::warn!(file = %path.display(), "failed to remove a spooled batch: {err}");
            }
        }
    }

    fn count(&mut self, why: Dropped) {
        self.dropped[why as usize] += 1;
        metrics()
            .batches_dropped
            .get_or_create(&[("reason", why.name().to_owned())])
            .inc();
    }

    fn publish(&self) {
        metrics().spool_batches.set(self.entries.len() as i64);
        metrics().spool_bytes.set(self.bytes as i64);
    }
}

/// A node's directory name: its name with anything but `[A-Za-z0-9._-]` replaced (a name is
/// not a path), cut to 100 bytes, and a checksum of the whole name, so two names never share one.
fn node_dir(node: &str) -> String {
    let readable: String = node
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    format!("{readable}-{:08x}", crc32fast::hash(node.as_bytes()))
}

/// A spooled batch's file name: its sequence number, then its id.
fn file_name(seq: u64, id: &[u8]) -> String {
    format!("{seq:020}-{}.{EXTENSION}", crate::hex(id))
}

fn parse_name(name: &str) -> Option<(u64, Vec<u8>)> {
    let (seq, id) = name.strip_suffix(&format!(".{EXTENSION}"))?.split_once('-')?;
    Some((seq.parse().ok()?, crate::unhex(id)?))
}

fn write_batch(dir: &Path, seq: u64, b: &v1::Batch) -> anyhow::Result<PathBuf> {
    use std::io::Write;
    let path = dir.join(file_name(seq, &b.batch_id));
    let aside = dir.join(format!(".{seq:020}.part"));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&aside)?;
        f.write_all(&b.encode_to_vec())?;
        // On disk before it counts as spooled: a node that loses power keeps it too.
        f.sync_data()?;
        std::fs::rename(&aside, &path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&aside);
        anyhow::anyhow!("failed to spool a batch to {}: {e}", path.display())
    })?;
    Ok(path)
}

fn read_batch(path: &Path) -> anyhow::Result<v1::Batch> {
    let bytes = std::fs::read(path).with_context(|| format!("failed to read the spooled batch {}", path.display()))?;
    v1::Batch::decode(&bytes[..]).with_context(|| format!("{} is not a batch bimodal-agent spooled", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(id: u8, samples: usize) -> v1::Batch {
        v1::Batch {
            batch_id: vec![id; 16],
            samples: (0..samples)
                .map(|i| v1::Sample {
                    count: i as u64 + 1,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    /// What the server's limit counts is the message a batch travels in: a batch a few bytes
    /// under the limit can still be over it on the wire, and would be resent forever.
    #[test]
    fn the_limit_counts_the_message_a_batch_travels_in() {
        for samples in [0, 1, 50, 5_000] {
            let b = batch(1, samples);
            let sent = v1::IngestRequest {
                message: Some(v1::ingest_request::Message::Batch(b.clone())),
            };
            assert_eq!(wire_len(b.encoded_len()), sent.encoded_len(), "{samples} samples");
        }
        assert!(wire_len(MAX_BATCH_BYTES - 4) > MAX_BATCH_BYTES);
    }

    fn ids(s: &Spool) -> Vec<u8> {
        s.entries.iter().map(|e| e.id[0]).collect()
    }

    #[test]
    fn batches_on_disk_outlive_the_spool_in_order_and_acknowledged_ones_do_not() {
        let root = tempfile::tempdir().unwrap();
        let opts = SpoolOptions {
            dir: Some(root.path().to_owned()),
            max_bytes: 1 << 20,
        };
        let mut s = Spool::open(&opts, "node/a").unwrap();
        for id in 1..=4 {
            s.push(batch(id, 3));
        }
        s.remove(&[2; 16]);
        assert_eq!(ids(&s), [1, 3, 4]);
        assert!(s.entries.iter().all(|e| !e.ever_sent));
        drop(s);
        // A write a kill interrupted, and a file that is not a batch.
        let dir = root.path().join(node_dir("node/a"));
        std::fs::write(dir.join(".00000000000000000009.part"), b"half").unwrap();
        std::fs::write(dir.join("notes.txt"), b"kept").unwrap();

        let mut s = Spool::open(&opts, "node/a").unwrap();
        assert_eq!(ids(&s), [1, 3, 4]);
        assert!(dir.join("notes.txt").exists());
        assert!(
            s.entries.iter().all(|e| e.ever_sent),
            "found on disk: may have been sent"
        );
        assert_eq!(s.load(1).unwrap(), batch(3, 3));
        s.push(batch(5, 1));
        assert!(!dir.join(".00000000000000000009.part").exists());
        // Numbered after the ones found: the order survives a second restart.
        drop(s);
        let s = Spool::open(&opts, "node/a").unwrap();
        assert_eq!(ids(&s), [1, 3, 4, 5]);
        // Another node's spool is its own.
        assert!(Spool::open(&opts, "node-b").unwrap().is_empty());
    }

    #[test]
    fn the_oldest_batches_make_room_and_are_counted() {
        let one = batch(0, 50).encoded_len() as u64;
        for dir in [None, Some(tempfile::tempdir().unwrap())] {
            let opts = SpoolOptions {
                dir: dir.as_ref().map(|d| d.path().to_owned()),
                max_bytes: 3 * one,
            };
            let mut s = Spool::open(&opts, "n").unwrap();
            for id in 1..=5 {
                s.push(batch(id, 50));
            }
            assert_eq!(ids(&s), [3, 4, 5], "{opts:?}");
            assert_eq!(s.dropped(Dropped::Full), 2);
            assert_eq!(s.bytes, 3 * one);
            if let Some(d) = &dir {
                let files = std::fs::read_dir(d.path().join(node_dir("n"))).unwrap().count();
                assert_eq!(files, 3, "dropped batches leave the disk too");
                // A smaller bound at the next start drops the oldest found.
                drop(s);
                let s = Spool::open(&SpoolOptions { max_bytes: one, ..opts }, "n").unwrap();
                assert_eq!(ids(&s), [5]);
            }
        }
    }

    #[test]
    fn an_unreadable_file_is_dropped_when_it_is_loaded() {
        let root = tempfile::tempdir().unwrap();
        let opts = SpoolOptions {
            dir: Some(root.path().to_owned()),
            max_bytes: 1 << 20,
        };
        let mut s = Spool::open(&opts, "n").unwrap();
        s.push(batch(1, 1));
        s.push(batch(2, 1));
        let Body::File(path) = &s.entries[0].body else {
            panic!("on disk")
        };
        std::fs::write(path, b"\xff\xff").unwrap();
        assert!(s.load(0).is_none());
        assert_eq!(ids(&s), [2]);
        assert_eq!(s.dropped(Dropped::Unreadable), 1);
        assert_eq!(s.load(0).unwrap().batch_id, vec![2; 16]);
    }

    #[test]
    fn node_directories_are_names_not_paths() {
        assert_eq!(node_dir("web-1").split('-').count(), 3);
        assert!(!node_dir("../../etc").contains('/'));
        assert_ne!(node_dir("a/b"), node_dir("a_b"));
        assert!(node_dir(&"x".repeat(1000)).len() < 120);
    }
}
