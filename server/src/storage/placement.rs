//! Memory placement snapshots: the newest per process, and the findings they support.

use std::collections::BTreeMap;

use bimodal_proto::placement as rule;
use serde::Serialize;

use super::rows::CounterPointRow;
use super::select::{self, Nodes};
use super::{plan, queries, NodeSet, StorageError, Store};

/// One mapping of a process and its resident pages per NUMA node.
#[derive(Clone, Debug, Serialize)]
pub struct MappingPages {
    pub kind: String,
    pub path: String,
    pub start: u64,
    pub end: u64,
    pub permissions: String,
    pub pages_per_node: BTreeMap<u32, u64>,
    pub page_size: u64,
}

/// A process's newest placement snapshot in a time range.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessPlacement {
    pub time: u32,
    pub pid: u32,
    pub comm: String,
    pub executable: String,
    pub threads_per_node: BTreeMap<u32, u32>,
    pub mappings: Vec<MappingPages>,
}

/// Memory of a process held mostly on NUMA nodes where none of its threads ran: the ScyllaDB
/// `.bss`-on-the-remote-node case.
#[derive(Clone, Debug, Serialize)]
pub struct RemoteMemory {
    pub pid: u32,
    pub comm: String,
    pub kind: String,
    pub path: String,
    /// The node holding most of the mapping's pages.
    pub node: u32,
    pub thread_nodes: Vec<u32>,
    pub remote_pages: u64,
    pub total_pages: u64,
    pub text: String,
}

impl ProcessPlacement {
    /// The mappings whose placement is judged ([`rule::JUDGED_CLASSES`]).
    fn judged(&self) -> impl Iterator<Item = &MappingPages> {
        self.mappings.iter().filter(|m| rule::is_judged(&m.kind))
    }

    fn thread_nodes(&self) -> Vec<u32> {
        self.threads_per_node.keys().copied().collect()
    }

    /// Pages of the judged mappings on NUMA nodes none of the threads ran on, and all of them;
    /// (0, 0) when no thread's node is known.
    pub fn remote_pages(&self) -> (u64, u64) {
        let thread_nodes = self.thread_nodes();
        self.judged()
            .map(|m| rule::remote_pages(&m.pages_per_node, &thread_nodes))
            .fold((0, 0), |(remote, total), (r, t)| (remote + r, total + t))
    }

    /// The mappings remote from the process's threads by the one rule
    /// ([`bimodal_proto::placement::remote`]), as the agent's `placement` command reports them.
    pub fn remote_memory(&self) -> Vec<RemoteMemory> {
        let thread_nodes = self.thread_nodes();
        self.judged()
            .filter_map(|m| {
                let found = rule::remote(&m.pages_per_node, &thread_nodes, m.page_size)?;
                let (node, remote, total) = (found.node, found.remote_pages, found.total_pages);
                Some(RemoteMemory {
                    pid: self.pid,
                    comm: self.comm.clone(),
                    kind: m.kind.clone(),
                    path: m.path.clone(),
                    node,
                    thread_nodes: thread_nodes.clone(),
                    remote_pages: remote,
                    total_pages: total,
                    text: format!(
                        "{} of {} ({}): {remote} of {total} pages on node {node}, its threads ran on node(s) {thread_nodes:?}",
                        m.kind, self.comm, m.path
                    ),
                })
            })
            .collect()
    }
}

/// One mapping of one process in one placement snapshot, with its node (a read).
#[derive(clickhouse::Row, serde::Deserialize)]
struct NodePlacementRow {
    node: String,
    time: u32,
    pid: u32,
    comm: String,
    executable: String,
    thread_nodes: Vec<u32>,
    thread_counts: Vec<u32>,
    kind: String,
    path: String,
    start: u64,
    end: u64,
    permissions: String,
    page_nodes: Vec<u32>,
    page_counts: Vec<u64>,
    page_size: u64,
}

impl Store {
    /// The newest placement snapshot of every process of `node` within [from, to).
    pub async fn placements(&self, node: &str, from: u32, to: u32) -> Result<Vec<ProcessPlacement>, StorageError> {
        let mut of = self.placements_of(NodeSet::Named(&[node.to_owned()]), from, to).await?;
        Ok(of.remove(node).unwrap_or_default())
    }

    /// [`Store::placements`] of every listed node that has some, in one read per 1,000 nodes.
    pub async fn placements_of(
        &self,
        nodes: NodeSet<'_>,
        from: u32,
        to: u32,
    ) -> Result<BTreeMap<String, Vec<ProcessPlacement>>, StorageError> {
        let mut out = BTreeMap::new();
        for chunk in chunks(nodes) {
            let rows = queries::placements(chunk, from, to)
                .query(&self.client)
                .fetch_all::<NodePlacementRow>()
                .await
                .map_err(StorageError::query("read placements"))?;
            let mut newest: BTreeMap<(String, u32), ProcessPlacement> = BTreeMap::new();
            for r in rows {
                let p = newest
                    .entry((r.node.clone(), r.pid))
                    .or_insert_with(|| ProcessPlacement {
                        time: r.time,
                        pid: r.pid,
                        comm: String::new(),
                        executable: String::new(),
                        threads_per_node: BTreeMap::new(),
                        mappings: Vec::new(),
                    });
                // Rows come oldest first: a newer snapshot replaces the one collected so far.
                if r.time > p.time || p.mappings.is_empty() {
                    p.time = r.time;
                    p.mappings.clear();
                }
                p.comm = r.comm;
                p.executable = r.executable;
                p.threads_per_node = r.thread_nodes.into_iter().zip(r.thread_counts).collect();
                p.mappings.push(MappingPages {
                    kind: r.kind,
                    path: r.path,
                    start: r.start,
                    end: r.end,
                    permissions: r.permissions,
                    pages_per_node: r.page_nodes.into_iter().zip(r.page_counts).collect(),
                    page_size: r.page_size,
                });
            }
            for ((node, _), p) in newest {
                out.entry(node).or_insert_with(Vec::new).push(p);
            }
        }
        Ok(out)
    }

    /// The tables that hold the node counters of a range starting at `from`: those that keep
    /// zeros once they hold every counter, before that the older ones.
    async fn counter_tables(&self, from: u32) -> Result<plan::CounterTables, StorageError> {
        let first = plan::first_read(from);
        Ok(if first >= self.rollup_from(super::Rollup::CounterReports).await? {
            plan::CounterTables::Reports
        } else if first >= self.rollup_from(super::Rollup::Counters).await? {
            plan::CounterTables::Rollups
        } else {
            plan::CounterTables::Intervals
        })
    }

    /// Per-interval increases of node counters, oldest first; `names` empty means all.
    pub async fn counters(
        &self,
        node: &str,
        names: &[String],
        from: u32,
        to: u32,
    ) -> Result<Vec<(u32, String, u64)>, StorageError> {
        let tables = self.counter_tables(from).await?;
        let rows = queries::counters(node, names, from, to, tables)
            .query(&self.client)
            .fetch_all::<CounterPointRow>()
            .await
            .map_err(StorageError::query("read counters"))?;
        Ok(rows.into_iter().map(|r| (r.time, r.name, r.value)).collect())
    }

    /// The (node, event, source) triples the listed nodes' agents sampled with in [from, to):
    /// a node without a source for an event has no value for it, not zero.
    pub async fn node_sources(
        &self,
        nodes: NodeSet<'_>,
        from: u32,
        to: u32,
    ) -> Result<Vec<(String, String, String)>, StorageError> {
        #[derive(clickhouse::Row, serde::Deserialize)]
        struct Row {
            node: String,
            event: String,
            source: String,
        }
        // Per 10 minutes from the table ordered by time once it holds every batch's sources;
        // before, from the ledger, keyed by batch id (every row of each day it touches).
        let rolled_up = plan::sources_from(from, true) >= self.rollup_from(super::Rollup::NodeSources).await?;
        let mut out = Vec::new();
        for chunk in chunks(nodes) {
            let rows = queries::node_sources(chunk, from, to, rolled_up)
                .query(&self.client)
                .fetch_all::<Row>()
                .await
                .map_err(StorageError::query("read which sources nodes sampled with"))?;
            out.extend(rows.into_iter().map(|r| (r.node, r.event, r.source)));
        }
        Ok(out)
    }

    /// Each listed node's counters summed over [from, to) (whole minutes once the counter
    /// rollups are complete, see [`plan::counter_pieces`]): (node, counter, increase).
    pub async fn node_counters(
        &self,
        nodes: NodeSet<'_>,
        from: u32,
        to: u32,
    ) -> Result<Vec<(String, String, u64)>, StorageError> {
        #[derive(clickhouse::Row, serde::Deserialize)]
        struct Row {
            node: String,
            name: String,
            value: u64,
        }
        // Whole minutes and 10-minute buckets from the tables ordered by time once they hold
        // every counter; before, the intervals from `counters`, ordered by node.
        let tables = self.counter_tables(from).await?;
        // One read per chunk of names, or one for a selector's nodes.
        let mut rows = Vec::new();
        for chunk in chunks(nodes) {
            rows.extend(
                queries::node_counters(chunk, from, to, tables)
                    .query(&self.client)
                    .fetch_all::<Row>()
                    .await
                    .map_err(StorageError::query("sum counters per node"))?,
            );
        }
        Ok(rows.into_iter().map(|r| (r.node, r.name, r.value)).collect())
    }
}

/// The node filters of a read of `nodes`: a list of names in chunks of at most
/// [`select::INLINE_NODES`], or the selector once.
fn chunks(nodes: NodeSet<'_>) -> Vec<Nodes<'_>> {
    match nodes {
        NodeSet::Named(names) => names.chunks(select::INLINE_NODES).map(Nodes::In).collect(),
        NodeSet::Selected(selector) => vec![Nodes::Matching {
            selector,
            negate: false,
        }],
    }
}
