//! ClickHouse storage: the schema and its migrations, the write path that buffers and
//! acknowledges batches (`writer`), and the reads behind the API (`queries`).
//!
//! Dimension rows (stacks, frames, processes, functions) never change once written: an id is a
//! hash of the content. Reads keep them in bounded caches, so a flame graph asks ClickHouse only
//! for the ids it has not seen.

pub mod alerts;
pub mod batch;
pub mod debuginfo;
pub mod lease;
pub mod managed;
pub mod migrate_v1;
pub mod migrations;
pub mod placement;
pub mod plan;
pub mod queries;
pub mod retention;
pub mod rows;
pub mod select;
pub mod sql;
pub mod writer;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use bimodal_profile::{Frame, FrameKind, Profile, Sample};
use bimodal_proto::v1;
use clickhouse::Client;

pub use migrations::Dialect;
pub use plan::Reach;
pub use queries::Scope;
use rows::{
    FlameRow, FrameRow, FunctionRow, NodeDataRow, NodeFunctionRow, NodeRow, NodeTotalRow, ProcessRow, StackRow,
};

use crate::selector::Selector;

/// A storage failure; the message says which step failed.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("ClickHouse failed to {what}: {source}")]
    Query {
        what: &'static str,
        source: clickhouse::error::Error,
    },
    #[error("ClickHouse failed to insert into `{table}`: {source}")]
    Insert {
        table: &'static str,
        source: clickhouse::error::Error,
    },
    #[error("ClickHouse did not answer within {0:?}")]
    Timeout(std::time::Duration),
    #[error("ClickHouse still runs {0} write(s) an earlier attempt gave up on")]
    StillWriting(u64),
    #[error("ClickHouse failed to run `{statement}`: {source}")]
    Statement {
        statement: String,
        source: clickhouse::error::Error,
    },
}

impl StorageError {
    fn query(what: &'static str) -> impl FnOnce(clickhouse::error::Error) -> StorageError {
        move |source| StorageError::Query { what, source }.counted(what)
    }

    /// A failed insert into `table` (counted).
    pub(crate) fn insert(table: &'static str) -> impl Fn(clickhouse::error::Error) -> StorageError + Copy {
        move |source| StorageError::Insert { table, source }.counted(table)
    }

    /// Why ClickHouse refused this read as too large for it, when it did: a refusal that comes
    /// again however often the read is retried, unlike storage that is down or busy. By
    /// ClickHouse's error codes: too many rows or bytes read (158, 307, 396), a query too big to
    /// parse (167, 168), and a query over its own memory limit (241, not the server's total,
    /// which other reads share and free).
    pub fn too_large(&self) -> Option<&'static str> {
        let (StorageError::Query { source, .. } | StorageError::Statement { source, .. }) = self else {
            return None;
        };
        let clickhouse::error::Error::BadResponse(text) = source else {
            return None;
        };
        let code = text.split_once("Code: ")?.1;
        let code: u32 = code[..code.find(|c: char| !c.is_ascii_digit())?].parse().ok()?;
        match code {
            158 | 307 | 396 => Some("it would read more rows or bytes than storage allows one read"),
            167 | 168 => Some("its query is larger than storage parses"),
            241 if !text.contains("(total)") => Some("it needs more memory than storage allows one read"),
            _ => None,
        }
    }

    /// This error, counted in `bimodal_clickhouse_errors_total{operation}`.
    pub(crate) fn counted(self, operation: &str) -> StorageError {
        crate::metrics::metrics()
            .clickhouse_errors
            .get_or_create(&crate::metrics::label("operation", operation))
            .inc();
        self
    }
}

/// How long the health check waits for ClickHouse.
pub const PING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Where the store is.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    pub url: String,
    pub database: String,
    pub user: Option<String>,
    pub password: Option<String>,
    /// Days samples are kept.
    pub retention_days: u32,
    /// Tables on this ClickHouse cluster (`remote_servers`), replicated and distributed.
    pub cluster: Option<String>,
    /// Stacks, frames, processes and functions kept in memory for reads, per kind.
    pub cache_entries: usize,
}

/// One node as the API lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeInfo {
    pub node: String,
    /// The operator's labels and the facts' labels, as selectors match them.
    pub labels: BTreeMap<String, String>,
    /// Unix seconds.
    pub first_seen: u32,
    pub last_seen: u32,
    pub agent_version: String,
    pub facts: Option<v1::NodeFacts>,
}

impl From<NodeRow> for NodeInfo {
    fn from(r: NodeRow) -> NodeInfo {
        use prost::Message;
        NodeInfo {
            labels: r.label_keys.into_iter().zip(r.label_values).collect(),
            node: r.node,
            first_seen: r.first_seen,
            last_seen: r.last_seen,
            agent_version: r.agent_version,
            facts: (!r.facts.is_empty())
                .then(|| v1::NodeFacts::decode(r.facts.as_slice()).ok())
                .flatten(),
        }
    }
}

/// One event source as stored: what it measures and in which unit.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SourceInfo {
    pub event: String,
    pub source: String,
    pub unit: String,
    pub description: String,
}

/// How much of a read each source has.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SourceShare {
    pub source: String,
    pub samples: u64,
    pub value: u64,
}

/// A flame graph's profile and what it covers.
#[derive(Debug)]
pub struct FlameGraph {
    /// Of one source: the one asked for, else the one with the most samples.
    pub profile: Profile,
    /// The source shown; empty when nothing matched.
    pub source: String,
    /// Every source the range had for this event.
    pub sources: Vec<SourceShare>,
    /// Stacks of the source left out beyond the limit (the smallest), exactly.
    pub truncated_stacks: u64,
    /// The samples and the value of those stacks.
    pub truncated_samples: u64,
    pub truncated_value: u64,
    /// The source's value over the range, the stacks left out included.
    pub total_value: u64,
    /// How the nodes were read ([`Reach::name`]).
    pub reach: &'static str,
}

/// Per-node totals of one event (per source).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTotal {
    pub node: String,
    pub source: String,
    pub samples: u64,
    pub value: u64,
}

/// Which nodes a per-node read of counters, sources or placements covers.
#[derive(Clone, Copy, Debug)]
pub enum NodeSet<'a> {
    /// These, by name: a few (a node, a group of a diff), each bound into the query.
    Named(&'a [String]),
    /// Those the selector's node matchers match, read as a subquery of `nodes`: the query's
    /// text is the same at any fleet size (a window's every node).
    Selected(&'a Selector),
}

/// Whose values a per-node read returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodesRead<'a> {
    /// Every node its scope reaches.
    Every,
    /// These nodes, a sample of the `of` nodes its scope reaches.
    Sample { nodes: &'a [String], of: usize },
}

impl<'a> NodesRead<'a> {
    /// The sample's nodes, if it is one.
    pub fn sample(self) -> Option<&'a [String]> {
        match self {
            NodesRead::Every => None,
            NodesRead::Sample { nodes, .. } => Some(nodes),
        }
    }

    /// The sample's nodes where a query may name them ([`select::INLINE_NODES`] or fewer). A
    /// larger sample (`explained_nodes` of thousands) is read over its scope's nodes, and its
    /// rows kept by [`NodesRead::keeps`]: 20,000 names in one query are more than ClickHouse
    /// parses.
    fn named(self) -> Option<&'a [String]> {
        self.sample().filter(|nodes| nodes.len() <= select::INLINE_NODES)
    }

    /// Whether a row of `node`, read for this, is kept: every row but those of a sample too
    /// large to name that are not of its nodes.
    fn keeps(self) -> impl Fn(&str) -> bool + 'a {
        let large: Option<HashSet<&'a str>> = match self.named() {
            None => self.sample().map(|nodes| nodes.iter().map(String::as_str).collect()),
            Some(_) => None,
        };
        move |node| large.as_ref().is_none_or(|nodes| nodes.contains(node))
    }
}

/// Which functions a per-node read reads ([`Store::node_functions_of`]).
#[derive(Clone, Copy, Debug)]
pub enum Functions<'a> {
    /// The `n` with the largest total value over the read's scope.
    Largest(u32),
    /// These, by id, chosen before (an explanation's listed functions read again over a part of
    /// its window).
    These(&'a [u64]),
}

/// The largest functions of a read and their values on each node, as columns aligned with
/// `nodes` (zero where a node did not run the function).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeFunctions {
    /// Nodes with samples of any of the functions, sorted.
    pub nodes: Vec<String>,
    /// Largest total value first.
    pub functions: Vec<FunctionValues>,
}

/// A data object: where sampled data addresses fell (the mapping, and the symbol when the
/// address is in one).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DataObject {
    /// bss, data, heap, anon, stack, file... (as placements' kinds)
    pub kind: String,
    pub path: String,
    pub symbol: String,
    /// One 64-byte line of it (its file offset), or the whole object.
    pub cache_line: Option<u64>,
}

impl std::fmt::Display for DataObject {
    /// `bss_table (bss of /usr/bin/app)`, `heap of /usr/bin/app`, `anon`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The agent resolves data addresses when it drains: a mapping gone by then is unknown.
        if self.kind == "unknown" && self.path.is_empty() && self.symbol.is_empty() {
            return f.write_str("memory unmapped before the agent read the mappings");
        }
        let mapping = match self.path.is_empty() {
            true => self.kind.clone(),
            false => format!("{} of {}", self.kind, self.path),
        };
        if let Some(line) = self.cache_line {
            f.write_str(&format!("line {line:#x} of "))?;
        }
        match self.symbol.is_empty() {
            true => f.write_str(&mapping),
            false => write!(f, "{} ({mapping})", self.symbol),
        }
    }
}

/// The largest data objects of a read and their values per node, aligned with `nodes`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeDataObjects {
    pub nodes: Vec<String>,
    /// Largest over every node first, with their value on each node.
    pub objects: Vec<(DataObject, Vec<u64>)>,
}

/// One function's values per node.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionValues {
    pub function: Arc<FunctionName>,
    /// Over every node read.
    pub total_value: u64,
    pub self_samples: Vec<u64>,
    pub self_values: Vec<u64>,
    pub total_samples: Vec<u64>,
    pub total_values: Vec<u64>,
}

/// A function as stored: its name and module file name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FunctionName {
    pub name: String,
    pub module: String,
}

/// The ClickHouse store.
pub struct Store {
    client: Client,
    write_client: Client,
    pub dialect: Dialect,
    pub version: String,
    /// The random id of this server process in the ledger.
    pub server_id: [u8; 16],
    stacks: quick_cache::sync::Cache<u64, Arc<[u64]>>,
    frames: quick_cache::sync::Cache<u64, Arc<Frame>>,
    processes: quick_cache::sync::Cache<u64, Arc<ProcessRow>>,
    functions: quick_cache::sync::Cache<u64, Arc<FunctionName>>,
    /// Sample time from which each [`Rollup`] holds every sample; `u32::MAX` until read.
    rollups_from: [std::sync::atomic::AtomicU32; Rollup::ALL.len()],
}

/// Tables filled from the moment a migration created them (`rollups` says from which sample
/// time on they hold everything).
#[derive(Clone, Copy, Debug)]
enum Rollup {
    /// The `fleet_` tables: samples summed over nodes.
    Fleet,
    /// `function_nodes_by_id_10m`: per-node function values ordered by function and time.
    FunctionNodes,
    /// `data_objects_10m`: per-node data objects per 10 minutes.
    DataObjects,
    /// `counters_1m` and `counters_10m`: node counters per minute and per 10 minutes.
    Counters,
    /// `node_sources`: the event sources of each node's batches per 10 minutes.
    NodeSources,
    /// `node_totals_by_hour`: per-node totals keyed by the hour before the node.
    NodeTotals,
    /// `counter_reports` and its rollups: node counters whose zeros survive merges.
    CounterReports,
}

// Checked when compiled: each rollup in `Rollup::ALL` sits at the index of its discriminant.
const _: () = {
    let mut i = 0;
    while i < Rollup::ALL.len() {
        assert!(Rollup::ALL[i] as usize == i, "Rollup::ALL out of order");
        i += 1;
    }
};

impl Rollup {
    /// Every rollup, each at the index of its discriminant (`rollups_from` is indexed by it).
    const ALL: [Rollup; 7] = [
        Rollup::Fleet,
        Rollup::FunctionNodes,
        Rollup::DataObjects,
        Rollup::Counters,
        Rollup::NodeSources,
        Rollup::NodeTotals,
        Rollup::CounterReports,
    ];

    fn name(self) -> &'static str {
        match self {
            Rollup::Fleet => "fleet",
            Rollup::FunctionNodes => "function_nodes_by_id",
            Rollup::DataObjects => "data_objects",
            Rollup::Counters => "counters",
            Rollup::NodeSources => "node_sources",
            Rollup::NodeTotals => "node_totals",
            Rollup::CounterReports => "counter_reports",
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dialect", &self.dialect)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct Version {
    version: String,
}

fn base_client(config: &StoreConfig) -> Client {
    let mut c = Client::default().with_url(&config.url);
    if let Some(u) = &config.user {
        c = c.with_user(u);
    }
    if let Some(p) = &config.password {
        c = c.with_password(p);
    }
    c
}

impl Store {
    /// Connects, probes the server version and applies pending migrations.
    pub async fn open(config: &StoreConfig) -> Result<Store, StorageError> {
        let probe = base_client(config).with_validation(false);
        let version = probe
            .query("SELECT version() AS version")
            .fetch_one::<Version>()
            .await
            .map_err(StorageError::query("answer `SELECT version()`"))?
            .version;
        let dialect =
            Dialect::for_version(&version, config.retention_days).on_cluster(config.cluster.clone(), &config.database);
        probe
            .query(&format!(
                "CREATE DATABASE IF NOT EXISTS {} {}",
                migrations::quote_ident(&config.database),
                dialect.on_cluster_clause()
            ))
            .execute()
            .await
            .map_err(StorageError::query("create the database"))?;
        // RowBinaryWithNamesAndTypes (the crate's validation) only exists on modern servers.
        let client = base_client(config)
            .with_database(&config.database)
            .with_validation(dialect.modern);
        migrations::apply(&client, &dialect).await?;
        // An INSERT into a Distributed table returns once every shard holds its rows: an ack
        // must mean durable. Replicated tables drop an insert block equal to a recent one, which
        // loses real rows when two batches' views aggregate alike: the ledger and batch progress
        // make writes idempotent instead (docs/design/007).
        let write_client = match &dialect.cluster {
            Some(_) => client
                .clone()
                .with_setting("insert_distributed_sync", "1")
                .with_setting("insert_deduplicate", "0"),
            None => client.clone(),
        };
        tracing::info!(%version, modern = dialect.modern, cluster = ?dialect.cluster, "ClickHouse schema ready");
        let entries = config.cache_entries.max(1024);
        Ok(Store {
            client,
            write_client,
            dialect,
            version,
            server_id: *uuid::Uuid::new_v4().as_bytes(),
            stacks: quick_cache::sync::Cache::new(entries),
            frames: quick_cache::sync::Cache::new(entries),
            processes: quick_cache::sync::Cache::new(entries),
            functions: quick_cache::sync::Cache::new(entries),
            rollups_from: Rollup::ALL.map(|_| std::sync::atomic::AtomicU32::new(u32::MAX)),
        })
    }

    /// The client reads use.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The client inserts use.
    pub(crate) fn writer_client(&self) -> Client {
        self.write_client.clone()
    }

    /// Whether ClickHouse answers, within [`PING_TIMEOUT`] (a frozen ClickHouse makes the
    /// health check fail, not hang).
    pub async fn ping(&self) -> Result<(), StorageError> {
        tokio::time::timeout(PING_TIMEOUT, self.client.query("SELECT 1").execute())
            .await
            .map_err(|_| StorageError::Timeout(PING_TIMEOUT).counted("ping"))?
            .map_err(StorageError::query("answer a ping"))
    }

    /// Nodes that reported in [from, to) and match the selector's node labels.
    pub async fn nodes(&self, selector: &Selector, from: u32, to: u32) -> Result<Vec<NodeInfo>, StorageError> {
        let rows = queries::nodes(selector, from, to)
            .query(&self.client)
            .fetch_all::<NodeRow>()
            .await
            .map_err(StorageError::query("list nodes"))?;
        Ok(rows
            .into_iter()
            .map(NodeInfo::from)
            .filter(|n| selector.matches_node(|l| n.labels.get(l).cloned()))
            .collect())
    }

    /// The first `limit` values by name of each label of the nodes [`Store::nodes`] lists,
    /// `node` among them, with how many of those nodes have each value; labels by name.
    pub async fn node_label_values(
        &self,
        selector: &Selector,
        (from, to): (u32, u32),
        limit: u32,
    ) -> Result<Vec<(String, Vec<(String, u64)>)>, StorageError> {
        #[derive(clickhouse::Row, serde::Deserialize)]
        struct Row {
            name: String,
            value: String,
            nodes: u64,
        }
        let rows = queries::node_label_values(selector, from, to, limit)
            .query(&self.client)
            .fetch_all::<Row>()
            .await
            .map_err(StorageError::query("list node labels"))?;
        let mut labels: Vec<(String, Vec<(String, u64)>)> = Vec::new();
        for r in rows {
            match labels.last_mut() {
                Some((name, values)) if *name == r.name => values.push((r.value, r.nodes)),
                _ => labels.push((r.name, vec![(r.value, r.nodes)])),
            }
        }
        Ok(labels)
    }

    /// Up to `limit` of the nodes [`Store::nodes`] lists, the first by name after `after` (""
    /// for the first page), and how many it lists in all: a listing of any fleet is read, held
    /// and answered a page at a time.
    pub async fn node_page(
        &self,
        selector: &Selector,
        (from, to): (u32, u32),
        after: &str,
        limit: u32,
    ) -> Result<(Vec<NodeInfo>, u64), StorageError> {
        #[derive(clickhouse::Row, serde::Deserialize)]
        struct Count {
            n: u64,
        }
        let (rows, count) = tokio::try_join!(
            queries::node_page(selector, from, to, after, limit)
                .query(&self.client)
                .fetch_all::<NodeRow>(),
            queries::node_count(selector, from, to)
                .query(&self.client)
                .fetch_one::<Count>(),
        )
        .map_err(StorageError::query("list nodes"))?;
        Ok((rows.into_iter().map(NodeInfo::from).collect(), count.n))
    }

    /// Up to `limit` values of each process label ([`PROCESS_LABELS`](crate::selector::PROCESS_LABELS) order), from processes
    /// seen since `from`'s day; empty values left out. Processes are not kept per node, so the
    /// values are the fleet's, whatever the selector.
    pub async fn process_label_values(&self, from: u32, limit: u32) -> Result<Vec<Vec<String>>, StorageError> {
        #[derive(clickhouse::Row, serde::Deserialize)]
        struct Row {
            comm: Vec<String>,
            executable: Vec<String>,
            container_id: Vec<String>,
            container: Vec<String>,
            pod: Vec<String>,
            pod_uid: Vec<String>,
            namespace: Vec<String>,
            unit: Vec<String>,
        }
        let r = queries::process_label_values(from, limit)
            .query(&self.client)
            .fetch_one::<Row>()
            .await
            .map_err(StorageError::query("list process label values"))?;
        Ok([
            r.comm,
            r.executable,
            r.container_id,
            r.container,
            r.pod,
            r.pod_uid,
            r.namespace,
            r.unit,
        ]
        .into_iter()
        .map(|mut values| {
            values.retain(|v| !v.is_empty());
            values.sort();
            values
        })
        .collect())
    }

    /// Every event source stored, with its unit.
    pub async fn sources(&self) -> Result<Vec<SourceInfo>, StorageError> {
        #[derive(clickhouse::Row, serde::Deserialize)]
        struct Row {
            event: String,
            source: String,
            unit: String,
            description: String,
            #[allow(dead_code)]
            seen: u32,
        }
        Ok(queries::sources()
            .query(&self.client)
            .fetch_all::<Row>()
            .await
            .map_err(StorageError::query("list event sources"))?
            .into_iter()
            .map(|r| SourceInfo {
                event: r.event,
                source: r.source,
                unit: r.unit,
                description: r.description,
            })
            .collect())
    }

    /// Per-node totals of `scope`, per source.
    pub async fn node_totals(&self, scope: &Scope) -> Result<Vec<NodeTotal>, StorageError> {
        let reach = self.reach(scope).await?;
        self.node_totals_over(scope, &reach).await
    }

    /// [`Store::node_totals`] over `reach`, found before for `scope`'s selector and range (reads
    /// of several events over the same nodes match them once).
    pub async fn node_totals_over(&self, scope: &Scope, reach: &Reach) -> Result<Vec<NodeTotal>, StorageError> {
        if *reach == Reach::Nothing {
            return Ok(Vec::new());
        }
        let by_hour = plan::totals_by_hour(reach, scope.from, scope.to)
            && plan::first_read(scope.from) >= self.rollup_from(Rollup::NodeTotals).await?;
        Ok(queries::node_totals(scope, reach, by_hour)
            .query(&self.client)
            .fetch_all::<NodeTotalRow>()
            .await
            .map_err(StorageError::query("sum samples per node"))?
            .into_iter()
            .map(|r| NodeTotal {
                node: r.node,
                source: r.source,
                samples: r.count,
                value: r.value,
            })
            .collect())
    }

    /// Whether the store has a row for node `node` (its agent wrote before).
    pub async fn node_stored(&self, node: &str) -> Result<bool, StorageError> {
        self.any_row("nodes", "node", node, "look a node up").await
    }

    /// Whether a row of `table` has `value` in `column` ([`queries::any_row`]); `what` names the
    /// read in its error.
    async fn any_row(&self, table: &str, column: &str, value: &str, what: &'static str) -> Result<bool, StorageError> {
        #[derive(clickhouse::Row, serde::Deserialize)]
        struct N {
            n: u64,
        }
        let row = queries::any_row(table, column, value)
            .query(&self.client)
            .fetch_one::<N>()
            .await
            .map_err(StorageError::query(what))?;
        Ok(row.n > 0)
    }

    /// Sample time from which `rollup` is complete (`u32::MAX`: not known yet, as right after
    /// a cluster's migration, whose row reaches the shards shortly after).
    async fn rollup_from(&self, rollup: Rollup) -> Result<u32, StorageError> {
        use std::sync::atomic::Ordering;
        let cached = &self.rollups_from[rollup as usize];
        let known = cached.load(Ordering::Relaxed);
        if known != u32::MAX {
            return Ok(known);
        }
        #[derive(clickhouse::Row, serde::Deserialize)]
        struct Row {
            from: u32,
            rows: u64,
        }
        let row = self
            .client
            .query("SELECT toUInt32(max(complete_from)) AS from, count() AS rows FROM rollups WHERE name = ?")
            .bind(rollup.name())
            .fetch_one::<Row>()
            .await
            .map_err(StorageError::query("read when a rollup starts"))?;
        if row.rows == 0 {
            return Ok(u32::MAX);
        }
        cached.store(row.from, Ordering::Relaxed);
        Ok(row.from)
    }

    /// How a read of `scope` sums its nodes: the fleet rollups when it covers every node,
    /// the rollups minus the others when it covers most, else the nodes it matches.
    pub async fn reach(&self, scope: &Scope) -> Result<Reach, StorageError> {
        let held = plan::first_read(scope.from) >= self.rollup_from(Rollup::Fleet).await?;
        if scope.selector.node_matchers().next().is_none() {
            return Ok(Reach::choose(None, held));
        }
        #[derive(clickhouse::Row, serde::Deserialize)]
        struct Row {
            node: String,
            matches: u8,
        }
        let nodes = select::matching_nodes(&scope.selector)
            .query(&self.client)
            .fetch_all::<Row>()
            .await
            .map_err(StorageError::query("match nodes to a selector"))?;
        Ok(Reach::choose(
            Some(nodes.into_iter().map(|r| (r.node, r.matches != 0)).collect()),
            held,
        ))
    }

    /// `scope` with only its selector's node labels (what is kept per node, not per process,
    /// is read that way), and how its nodes are reached; `None` when no node matches.
    async fn per_node(&self, scope: &Scope) -> Result<Option<(Scope, Reach)>, StorageError> {
        let mut scope = scope.clone();
        scope
            .selector
            .matchers
            .retain(|m| m.scope() == crate::selector::LabelScope::Node);
        let reach = self.reach(&scope).await?;
        Ok((reach != Reach::Nothing).then_some((scope, reach)))
    }

    /// Per-node values of the `limit` data objects with the most of `scope`'s event (one
    /// source; node labels of the selector only: data samples are kept per node), of every
    /// node it reaches or of a sample of them (`read`; the objects are still ranked over every
    /// node).
    pub async fn node_data_objects(
        &self,
        scope: &Scope,
        limit: u32,
        read: NodesRead<'_>,
    ) -> Result<NodeDataObjects, StorageError> {
        let Some((scope, reach)) = self.per_node(scope).await? else {
            return Ok(NodeDataObjects::default());
        };
        let rolled_up = plan::first_read(scope.from) >= self.rollup_from(Rollup::DataObjects).await?;
        // Whole objects, and the hottest lines of file-backed ones (where false sharing shows).
        let (objects, lines) = tokio::try_join!(
            queries::node_data_objects(&scope, &reach, read.named(), limit, false, rolled_up)
                .query(&self.client)
                .fetch_all::<NodeDataRow>(),
            queries::node_data_objects(&scope, &reach, read.named(), limit, true, rolled_up)
                .query(&self.client)
                .fetch_all::<NodeDataRow>(),
        )
        .map_err(StorageError::query("sum data samples per node and object"))?;
        let keeps = read.keeps();
        let rows: Vec<NodeDataRow> = objects.into_iter().chain(lines).filter(|r| keeps(&r.node)).collect();
        // Deduplicated before they are copied and sorted: a row per node and object.
        let mut nodes: Vec<String> = rows
            .iter()
            .map(|r| r.node.as_str())
            .collect::<std::collections::HashSet<&str>>()
            .into_iter()
            .map(str::to_owned)
            .collect();
        nodes.sort_unstable();
        let column: HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
        let mut objects: BTreeMap<DataObject, Vec<u64>> = BTreeMap::new();
        for r in &rows {
            let object = DataObject {
                kind: r.mapping_kind.clone(),
                path: r.mapping_path.clone(),
                symbol: r.symbol.clone(),
                cache_line: (r.cache_line != 0).then_some(r.cache_line),
            };
            objects.entry(object).or_insert_with(|| vec![0; nodes.len()])[column[r.node.as_str()]] += r.value;
        }
        let mut objects: Vec<(DataObject, Vec<u64>)> = objects.into_iter().collect();
        objects.sort_by_cached_key(|(_, values)| std::cmp::Reverse(values.iter().sum::<u64>()));
        Ok(NodeDataObjects { nodes, objects })
    }

    /// Self and total values per node of the `limit` functions with the largest total value
    /// over `scope` (its source must be set), of every node it reaches or of a sample of them
    /// (`read`; the functions are still ranked over every node). Functions are kept per node,
    /// not per process: process labels in the selector are ignored.
    pub async fn node_functions(
        &self,
        scope: &Scope,
        limit: u32,
        measures: queries::Measures,
        read: NodesRead<'_>,
    ) -> Result<NodeFunctions, StorageError> {
        self.node_functions_of(scope, Functions::Largest(limit), measures, read)
            .await
    }

    /// [`Store::node_functions`] of the `which` functions: the largest, or functions already
    /// chosen (by [`rows::function_id`]), which are not ranked again.
    pub async fn node_functions_of(
        &self,
        scope: &Scope,
        which: Functions<'_>,
        measures: queries::Measures,
        read: NodesRead<'_>,
    ) -> Result<NodeFunctions, StorageError> {
        let Some((scope, reach)) = self.per_node(scope).await? else {
            return Ok(NodeFunctions::default());
        };
        let by_function = plan::read_by_function(&reach, read)
            && plan::first_read(scope.from) >= self.rollup_from(Rollup::FunctionNodes).await?;
        let listed: Vec<u64>;
        let top = match (which, self.dialect.modern) {
            (Functions::These(ids), _) => {
                if ids.is_empty() {
                    return Ok(NodeFunctions::default());
                }
                queries::TopFunctions::Listed(ids)
            }
            (Functions::Largest(limit), true) => queries::TopFunctions::Ranked(limit),
            (Functions::Largest(limit), false) => {
                #[derive(clickhouse::Row, serde::Deserialize)]
                struct Id {
                    function_id: u64,
                }
                listed = queries::top_functions(&scope, &reach, limit)
                    .query(&self.client)
                    .fetch_all::<Id>()
                    .await
                    .map_err(StorageError::query("rank functions"))?
                    .into_iter()
                    .map(|r| r.function_id)
                    .collect();
                if listed.is_empty() {
                    return Ok(NodeFunctions::default());
                }
                queries::TopFunctions::Listed(&listed)
            }
        };
        // A fleet's read has a row per node and function (over a million at 1,000 nodes): rows
        // are taken as they arrive, borrowing the node's name, which is copied once per node.
        let mut cursor = queries::node_functions(&scope, &reach, read.named(), top, measures, by_function)
            .query(&self.client)
            .fetch::<NodeFunctionRow<'_>>()
            .map_err(StorageError::query("sum samples per node and function"))?;
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut cells: Vec<(u64, usize, [u64; 4])> = Vec::new();
        let keeps = read.keeps();
        while let Some(r) = cursor
            .next()
            .await
            .map_err(StorageError::query("sum samples per node and function"))?
        {
            if !keeps(r.node) {
                continue;
            }
            let n = match seen.get(r.node) {
                Some(&n) => n,
                None => {
                    let n = seen.len();
                    seen.insert(r.node.to_owned(), n);
                    n
                }
            };
            cells.push((
                r.function_id,
                n,
                [r.self_count, r.self_value, r.total_count, r.total_value],
            ));
        }
        // Nodes sorted by name, and where each one read went.
        let mut nodes: Vec<(String, usize)> = seen.into_iter().collect();
        nodes.sort_unstable();
        let mut column = vec![0; nodes.len()];
        for (sorted, (_, read)) in nodes.iter().enumerate() {
            column[*read] = sorted;
        }
        let nodes: Vec<String> = nodes.into_iter().map(|(name, _)| name).collect();
        // Largest total over the nodes read first: ClickHouse's ranking over every node, or,
        // when a sample was read, the sample's order.
        let mut totals: HashMap<u64, u64> = HashMap::new();
        for (function_id, _, values) in &cells {
            *totals.entry(*function_id).or_default() += values[3];
        }
        let mut top: Vec<(u64, u64)> = totals.into_iter().collect();
        top.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let ids: Vec<u64> = top.iter().map(|t| t.0).collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        let names = self.functions(&sorted).await?;
        let function_index: HashMap<u64, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        let mut functions: Vec<FunctionValues> = top
            .iter()
            .map(|t| FunctionValues {
                function: names.get(&t.0).cloned().unwrap_or_else(|| {
                    Arc::new(FunctionName {
                        name: "[function not stored]".into(),
                        module: String::new(),
                    })
                }),
                total_value: t.1,
                self_samples: vec![0; nodes.len()],
                self_values: vec![0; nodes.len()],
                total_samples: vec![0; nodes.len()],
                total_values: vec![0; nodes.len()],
            })
            .collect();
        for (function_id, read, [self_count, self_value, total_count, total_value]) in cells {
            let f = &mut functions[function_index[&function_id]];
            let n = column[read];
            f.self_samples[n] = self_count;
            f.self_values[n] = self_value;
            f.total_samples[n] = total_count;
            f.total_values[n] = total_value;
        }
        Ok(NodeFunctions { nodes, functions })
    }

    /// The profile of `scope`'s event, of its source or else the source with most samples, at
    /// most `max_stacks` stacks (the largest). Frames of images with a build id are returned
    /// as stored: the caller names them from the debug-info store.
    pub async fn flame_graph(&self, scope: &Scope, max_stacks: u32) -> Result<FlameGraph, StorageError> {
        let reach = self.reach(scope).await?;
        let rows = queries::flame(scope, &reach, max_stacks.saturating_add(1).max(1))
            .query(&self.client)
            .fetch_all::<FlameRow>()
            .await
            .map_err(StorageError::query("aggregate samples"))?;
        let totals = queries::flame_totals(scope, &reach);
        self.flame_graph_of(&self.client, scope, rows, totals, max_stacks, reach.name())
            .await
    }

    /// The profile of `scope`'s event on the nodes of `weights`, each node's values multiplied
    /// by its weight (a value then means what the weights make it: per CPU-second, per node...),
    /// at most `max_stacks` stacks. The selector's node labels are not applied: the nodes are.
    pub async fn weighted_flame_graph(
        &self,
        scope: &Scope,
        weights: &[(String, f64)],
        max_stacks: u32,
    ) -> Result<FlameGraph, StorageError> {
        // The nodes are the weights': the selector's node labels are not applied.
        let mut nodes_given = scope.clone();
        nodes_given
            .selector
            .matchers
            .retain(|m| m.scope() != crate::selector::LabelScope::Node);
        if weights.is_empty() {
            let totals = queries::weighted_flame_totals(&nodes_given);
            return self
                .flame_graph_of(&self.client, scope, Vec::new(), totals, max_stacks, "matching")
                .await;
        }
        // The weights go as rows of a temporary table of this read's own session: a group of
        // 100,000 nodes inlined as text was a query ClickHouse refused ("AST is too big").
        let session = self
            .client
            .clone()
            .with_setting("session_id", uuid::Uuid::new_v4().to_string())
            .with_setting("session_timeout", "120");
        let failed = StorageError::query("aggregate weighted samples");
        queries::create_node_weights()
            .query(&session)
            .execute()
            .await
            .map_err(failed)?;
        #[derive(clickhouse::Row, serde::Serialize)]
        struct Weight<'a> {
            node: &'a str,
            weight: f64,
        }
        let mut insert = session
            .insert::<Weight<'_>>(queries::NODE_WEIGHTS)
            .await
            .map_err(StorageError::query("send the nodes' weights"))?;
        for (node, weight) in weights {
            insert
                .write(&Weight { node, weight: *weight })
                .await
                .map_err(StorageError::query("send the nodes' weights"))?;
        }
        insert
            .end()
            .await
            .map_err(StorageError::query("send the nodes' weights"))?;
        // One query at a time in a session: the totals after the rows.
        let rows = queries::weighted_flame(&nodes_given, max_stacks.saturating_add(1).max(1))
            .query(&session)
            .fetch_all::<FlameRow>()
            .await
            .map_err(StorageError::query("aggregate weighted samples"))?;
        let totals = queries::weighted_flame_totals(&nodes_given);
        self.flame_graph_of(&session, scope, rows, totals, max_stacks, "matching")
            .await
    }

    /// Per source: its stacks (per process), samples and value, of a flame graph's whole read.
    async fn flame_totals(client: &Client, sql: sql::Sql) -> Result<BTreeMap<String, (u64, u64, u64)>, StorageError> {
        #[derive(clickhouse::Row, serde::Deserialize)]
        struct Row {
            source: String,
            stacks: u64,
            count: u64,
            value: u64,
        }
        Ok(sql
            .query(client)
            .fetch_all::<Row>()
            .await
            .map_err(StorageError::query("sum what a flame graph left out"))?
            .into_iter()
            .map(|r| (r.source, (r.stacks, r.count, r.value)))
            .collect())
    }

    /// A flame graph from rows per (source, stack, process), largest first. When the rows are
    /// more than `max_stacks` (the read was cut), `totals` (the read's [`queries::flame_totals`])
    /// is read for every source's totals over all of them: the answer states exactly what it
    /// left out.
    async fn flame_graph_of(
        &self,
        client: &Client,
        scope: &Scope,
        rows: Vec<FlameRow>,
        totals: sql::Sql,
        max_stacks: u32,
        reach: &'static str,
    ) -> Result<FlameGraph, StorageError> {
        // One source per flame graph: samples of different sources are not comparable.
        let totals = match rows.len() > max_stacks as usize {
            true => Self::flame_totals(client, totals).await?,
            false => {
                let mut totals: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
                for r in &rows {
                    let t = totals.entry(r.source.clone()).or_default();
                    t.0 += 1;
                    t.1 += r.count;
                    t.2 += r.value;
                }
                totals
            }
        };
        let shares: BTreeMap<&str, (u64, u64)> = totals.iter().map(|(s, t)| (s.as_str(), (t.1, t.2))).collect();
        let source = scope
            .source
            .clone()
            .or_else(|| {
                shares
                    .iter()
                    .max_by_key(|(_, (count, _))| *count)
                    .map(|(s, _)| (*s).to_owned())
            })
            .unwrap_or_default();
        let sources = shares
            .iter()
            .map(|(s, (samples, value))| SourceShare {
                source: (*s).to_owned(),
                samples: *samples,
                value: *value,
            })
            .collect();
        let mut rows: Vec<FlameRow> = rows.into_iter().filter(|r| r.source == source).collect();
        rows.truncate(max_stacks as usize);
        let (stacks, samples, total_value) = totals.get(&source).copied().unwrap_or_default();
        let kept = |f: fn(&FlameRow) -> u64| rows.iter().map(f).sum::<u64>();
        let truncated_stacks = stacks.saturating_sub(rows.len() as u64);
        let truncated_samples = samples.saturating_sub(kept(|r| r.count));
        let truncated_value = total_value.saturating_sub(kept(|r| r.value));

        let mut stack_ids: Vec<u64> = rows.iter().map(|r| r.stack_id).collect();
        stack_ids.sort_unstable();
        stack_ids.dedup();
        let stacks = self.stacks(&stack_ids).await?;
        let mut frame_ids: Vec<u64> = stacks.values().flat_map(|s| s.iter().copied()).collect();
        frame_ids.sort_unstable();
        frame_ids.dedup();
        let frames = self.frames(&frame_ids).await?;
        let mut process_ids: Vec<u64> = rows.iter().map(|r| r.process_id).collect();
        process_ids.sort_unstable();
        process_ids.dedup();
        let processes = self.processes(&process_ids).await?;

        let unit = self
            .sources()
            .await?
            .into_iter()
            .find(|s| s.event == scope.event && s.source == source)
            .map(|s| s.unit)
            .unwrap_or_else(|| {
                v1::EventKind::from_name(scope.event)
                    .unwrap_or_default()
                    .unit()
                    .to_owned()
            });
        let mut profile = Profile::new(scope.event, &unit);
        profile.start_unix_nanos = i64::from(scope.from) * 1_000_000_000;
        profile.duration_nanos = i64::from(scope.to.saturating_sub(scope.from)) * 1_000_000_000;
        let mut interned: HashMap<u64, u32> = HashMap::new();
        let mut missing = 0u64;
        for r in rows {
            let stack = match stacks.get(&r.stack_id) {
                Some(ids) => ids
                    .iter()
                    .map(|id| {
                        *interned.entry(*id).or_insert_with(|| {
                            let frame = frames
                                .get(id)
                                .map(|f| (**f).clone())
                                .unwrap_or_else(|| not_stored("[frame not stored]"));
                            profile.intern(frame)
                        })
                    })
                    .collect(),
                None => {
                    missing += r.count;
                    vec![profile.intern(not_stored("[stack not stored]"))]
                }
            };
            profile.samples.push(Sample {
                comm: processes.get(&r.process_id).map(|p| p.comm.clone()).unwrap_or_default(),
                stack,
                count: r.count,
                value: r.value,
            });
        }
        if missing > 0 {
            tracing::warn!(missing, "samples reference stacks that are not stored");
        }
        Ok(FlameGraph {
            profile,
            source,
            sources,
            truncated_stacks,
            truncated_samples,
            truncated_value,
            total_value,
            reach,
        })
    }

    /// Stacks by id, from the cache or ClickHouse.
    async fn stacks(&self, ids: &[u64]) -> Result<HashMap<u64, Arc<[u64]>>, StorageError> {
        let (mut found, missing) = cached(&self.stacks, ids);
        for chunk in missing.chunks(20_000) {
            let rows = queries::by_ids("stacks", "stack_id", "stack_id, frame_ids, last_seen", chunk)
                .query(&self.client)
                .fetch_all::<StackRow>()
                .await
                .map_err(StorageError::query("read stacks"))?;
            for r in rows {
                let v: Arc<[u64]> = r.frame_ids.into();
                self.stacks.insert(r.stack_id, v.clone());
                found.insert(r.stack_id, v);
            }
        }
        Ok(found)
    }

    async fn frames(&self, ids: &[u64]) -> Result<HashMap<u64, Arc<Frame>>, StorageError> {
        let (mut found, missing) = cached(&self.frames, ids);
        for chunk in missing.chunks(20_000) {
            let rows = queries::by_ids(
                "frames",
                "frame_id",
                "frame_id, kind, module, build_id, file_offset, elf_address, address, function",
                chunk,
            )
            .query(&self.client)
            .fetch_all::<FrameRow>()
            .await
            .map_err(StorageError::query("read frames"))?;
            for r in rows {
                let f = Arc::new(Frame {
                    kind: v1::FrameKind::try_from(i32::from(r.kind)).unwrap_or_default().into(),
                    function: r.function,
                    module: r.module,
                    build_id: r.build_id,
                    address: r.address,
                    file_offset: r.file_offset,
                    elf_address: r.elf_address,
                });
                self.frames.insert(r.frame_id, f.clone());
                found.insert(r.frame_id, f);
            }
        }
        Ok(found)
    }

    async fn processes(&self, ids: &[u64]) -> Result<HashMap<u64, Arc<ProcessRow>>, StorageError> {
        let (mut found, missing) = cached(&self.processes, ids);
        for chunk in missing.chunks(20_000) {
            let rows = queries::by_ids(
                "processes",
                "process_id",
                "process_id, comm, executable, container_id, container_runtime, pod_uid, systemd_unit, \
                 pod_name, pod_namespace, container_name, last_seen",
                chunk,
            )
            .query(&self.client)
            .fetch_all::<ProcessRow>()
            .await
            .map_err(StorageError::query("read processes"))?;
            for r in rows {
                let id = r.process_id;
                let p = Arc::new(r);
                self.processes.insert(id, p.clone());
                found.insert(id, p);
            }
        }
        Ok(found)
    }

    async fn functions(&self, ids: &[u64]) -> Result<HashMap<u64, Arc<FunctionName>>, StorageError> {
        let (mut found, missing) = cached(&self.functions, ids);
        for chunk in missing.chunks(20_000) {
            let rows = queries::by_ids(
                "functions",
                "function_id",
                "function_id, name, module, last_seen",
                chunk,
            )
            .query(&self.client)
            .fetch_all::<FunctionRow>()
            .await
            .map_err(StorageError::query("read functions"))?;
            for r in rows {
                let f = Arc::new(FunctionName {
                    name: r.name,
                    module: r.module,
                });
                self.functions.insert(r.function_id, f.clone());
                found.insert(r.function_id, f);
            }
        }
        Ok(found)
    }
}

/// The cached values of `ids`, and the ids not cached.
fn cached<V: Clone>(cache: &quick_cache::sync::Cache<u64, V>, ids: &[u64]) -> (HashMap<u64, V>, Vec<u64>) {
    let mut found = HashMap::with_capacity(ids.len());
    let mut missing = Vec::new();
    for &id in ids {
        match cache.get(&id) {
            Some(v) => {
                found.insert(id, v);
            }
            None => missing.push(id),
        }
    }
    (found, missing)
}

fn not_stored(name: &str) -> Frame {
    Frame {
        kind: FrameKind::Unknown,
        function: name.into(),
        module: String::new(),
        build_id: String::new(),
        address: 0,
        file_offset: 0,
        elf_address: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample small enough is named in the query and every row read is its; a larger one is
    /// read over its scope, and only its nodes' rows are kept.
    #[test]
    fn a_sample_too_large_to_name_is_kept_from_its_scope_s_rows() {
        let small: Vec<String> = vec!["a".into(), "b".into()];
        let read = NodesRead::Sample { nodes: &small, of: 10 };
        assert_eq!(read.named(), Some(small.as_slice()));
        assert!(read.keeps()("z"), "rows of a named sample are its own");
        let large: Vec<String> = (0..=select::INLINE_NODES).map(|i| format!("n{i}")).collect();
        let read = NodesRead::Sample {
            nodes: &large,
            of: 100_000,
        };
        assert_eq!(read.named(), None);
        let keeps = read.keeps();
        assert!(keeps("n7") && keeps("n1000"));
        assert!(!keeps("m7"));
        assert!(NodesRead::Every.keeps()("anything"));
    }
}
