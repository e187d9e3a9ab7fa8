-- Schema v2, built for a fleet: what every query of a fleet reads (event E, nodes matching a
-- selector, time range T, as a flame graph, per-node totals or per-node × per-function values)
-- is pre-aggregated at ingest, dimension rows (stacks, frames, processes, functions, nodes) are
-- written once per id, and every table expires. docs/design/007-fleet-storage.md has the why.
--
-- Placeholders (storage/migrations.rs): {{local:T}} is the table as stored on one server (T, or
-- T_local in a cluster); {{engine E ARGS}} its engine (Replicated in a cluster);
-- {{distributed T KEY}} the Distributed table over it in a cluster (nothing otherwise);
-- {{ttl EXPR retention|ledger}} a TTL where the server has TTL (older servers drop partitions,
-- storage/retention.rs); {{on_cluster}}; column types and codecs per server version.

-- The ledger: one row per state of each batch an agent sent, keyed by the batch's id. A server
-- claims a batch (state 1) before writing its rows, marks it stored (2) after, or withdraws its
-- claim (3); the newest row (by `version`) is the state. Read by id only, for resends.
CREATE TABLE IF NOT EXISTS {{local:batches}} {{on_cluster}} (
    batch_id FixedString(16),
    node {{low_cardinality_string}},
    -- the interval the batch covers
    start_time DateTime,
    end_time DateTime,
    -- 1 writing (claimed by `server`), 2 stored, 3 claim withdrawn
    state UInt8,
    -- the random id of the server process that wrote this row
    server FixedString(16),
    -- milliseconds since the epoch when the row was written: the newest row of a batch wins
    version UInt64,
    agent_version {{low_cardinality_string}},
    -- samples taken, per event, and samples the agent lost, per source
    samples UInt64,
    source_events Array(String),
    source_names Array(String),
    source_dropped Array(UInt64)
) ENGINE = {{engine ReplacingMergeTree version}}
PARTITION BY toYYYYMMDD(start_time)
ORDER BY batch_id
{{ttl start_time ledger}};
{{distributed batches cityHash64(node)}};

-- Which fact tables hold a batch's rows: written by the same INSERT as the rows (a view on each
-- input table), so a batch that a crashed server half-wrote is completed without duplicates.
CREATE TABLE IF NOT EXISTS {{local:batch_progress}} {{on_cluster}} (
    batch_id FixedString(16),
    -- samples, data_samples, counters or placements
    part {{low_cardinality_string}},
    start_time DateTime
) ENGINE = {{engine MergeTree}}
PARTITION BY toYYYYMMDD(start_time)
ORDER BY batch_id
{{ttl start_time ledger}};
{{distributed batch_progress cityHash64(batch_id)}};

-- Every node that ever reported, with its labels (the operator's, then its facts under the
-- names in selector::NODE_FACT_LABELS) as a selector matches them; the newest row wins.
CREATE TABLE IF NOT EXISTS {{local:nodes}} {{on_cluster}} (
    node String,
    first_seen DateTime,
    last_seen DateTime,
    label_keys Array(String),
    label_values Array(String),
    agent_version String,
    -- the whole bimodal.v1.NodeFacts message, protobuf-encoded
    facts String,
    -- milliseconds since the epoch when the row was written
    version UInt64
) ENGINE = {{engine ReplacingMergeTree version}}
PARTITION BY toYYYYMM(last_seen)
ORDER BY node
{{ttl last_seen retention}};
{{distributed nodes cityHash64(node)}};

-- Each distinct set of facts a node had, and when: a kernel upgrade or a new CPU model shows as
-- a new row.
CREATE TABLE IF NOT EXISTS {{local:node_facts}} {{on_cluster}} (
    node String,
    facts_hash UInt64,
    first_seen DateTime,
    last_seen DateTime,
    kernel_release String,
    cpu_vendor {{low_cardinality_string}},
    cpu_model_name {{low_cardinality_string}},
    online_cpus UInt32,
    numa_nodes UInt32,
    facts String
) ENGINE = {{engine ReplacingMergeTree last_seen}}
PARTITION BY toYYYYMM(last_seen)
ORDER BY (node, facts_hash)
{{ttl last_seen retention}};
{{distributed node_facts cityHash64(node)}};

-- What each source measures and in which unit (`cpu-clock` in nanoseconds, `task_numa_fault`
-- in pages, a PMU event in accesses): samples of different sources are never added together.
CREATE TABLE IF NOT EXISTS {{local:event_sources}} {{on_cluster}} (
    event {{low_cardinality_string}},
    source {{low_cardinality_string}},
    unit {{low_cardinality_string}},
    description String,
    last_seen DateTime
) ENGINE = {{engine ReplacingMergeTree last_seen}}
PARTITION BY toYYYYMM(last_seen)
ORDER BY (event, source)
{{ttl last_seen retention}};
{{distributed event_sources cityHash64(source)}};

-- Stacks by an id computed from what the agent observed (frames' build id and file offset,
-- kinds), never from names: the same on every server, before and after symbols arrive.
-- Rewritten once a day while in use, so `last_seen` keeps a used stack from expiring.
CREATE TABLE IF NOT EXISTS {{local:stacks}} {{on_cluster}} (
    stack_id UInt64,
    -- leaf first
    frame_ids Array(UInt64),
    last_seen Date
) ENGINE = {{engine ReplacingMergeTree last_seen}}
PARTITION BY toMonday(last_seen)
ORDER BY stack_id
{{ttl last_seen retention}};
{{distributed stacks stack_id}};

-- Frames by id, named once per (build id, address): `function` is the name the agent saw
-- (kernel, JIT, local symbolization); frames of images with a build id are named from the
-- symbol tables (debuginfo_symbols) when read.
CREATE TABLE IF NOT EXISTS {{local:frames}} {{on_cluster}} (
    frame_id UInt64,
    -- 1 user, 2 kernel, 3 jit (bimodal.v1.FrameKind)
    kind UInt8,
    module String,
    -- lower-case hex
    build_id String,
    file_offset UInt64,
    elf_address UInt64,
    -- an address the frame was seen at (addresses differ between processes)
    address UInt64,
    function String,
    last_seen Date
) ENGINE = {{engine ReplacingMergeTree last_seen}}
PARTITION BY toMonday(last_seen)
ORDER BY frame_id
{{ttl last_seen retention}};
{{distributed frames frame_id}};

-- Who sampled processes are, by an id over these columns. Pids and thread ids are not kept
-- with samples: a fleet asks by service, container and pod, and pids only multiply rows.
CREATE TABLE IF NOT EXISTS {{local:processes}} {{on_cluster}} (
    process_id UInt64,
    -- the sampled thread's command name
    comm String,
    executable String,
    container_id String,
    container_runtime String,
    pod_uid String,
    systemd_unit String,
    pod_name String,
    pod_namespace String,
    container_name String,
    last_seen Date
) ENGINE = {{engine ReplacingMergeTree last_seen}}
PARTITION BY toMonday(last_seen)
ORDER BY process_id
{{ttl last_seen retention}};
{{distributed processes process_id}};

-- Functions by id (their name and the file name of their module), for per-function values.
CREATE TABLE IF NOT EXISTS {{local:functions}} {{on_cluster}} (
    function_id UInt64,
    name String,
    module String,
    last_seen Date
) ENGINE = {{engine ReplacingMergeTree last_seen}}
PARTITION BY toMonday(last_seen)
ORDER BY function_id
{{ttl last_seen retention}};
{{distributed functions function_id}};

-- Samples enter here, one INSERT per flush: kind 0 rows are a stack's samples in one interval,
-- kind 1 rows a function's. The views below fill the fact tables and the ledger's progress
-- from the same INSERT, so a batch's samples are in all of them or in none.
CREATE TABLE IF NOT EXISTS {{local:samples_input}} {{on_cluster}} (
    kind UInt8,
    batch_id FixedString(16),
    -- start of the agent interval
    time DateTime,
    node {{low_cardinality_string}},
    event {{low_cardinality_string}},
    source {{low_cardinality_string}},
    process_id UInt64,
    stack_id UInt64,
    function_id UInt64,
    -- samples taken and the events they stand for (count × period, in the source's unit);
    -- kind 1: those with the function anywhere on the stack
    count UInt64,
    value UInt64,
    -- kind 1: those with the function as the leaf
    self_count UInt64,
    self_value UInt64
) ENGINE = Null;
{{distributed samples_input cityHash64(node)}};

-- Samples per minute, node, event, source, process and stack: flame graphs over short ranges.
CREATE TABLE IF NOT EXISTS {{local:samples}} {{on_cluster}} (
    time DateTime {{time_codec}},
    node {{low_cardinality_string}},
    event {{low_cardinality_string}},
    source {{low_cardinality_string}},
    process_id UInt64 {{id_codec}},
    stack_id UInt64 {{id_codec}},
    count UInt64 {{codec}},
    value UInt64 {{codec}}
) ENGINE = {{engine SummingMergeTree (count, value)}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (event, source, node, toStartOfHour(time), stack_id, process_id, time)
{{ttl time retention}};
{{distributed samples cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:samples_mv}} {{on_cluster}} TO {{local:samples}} AS
SELECT toStartOfMinute(time) AS time, node, event, source, process_id, stack_id, sum(count) AS count, sum(value) AS value
FROM {{local:samples_input}} WHERE kind = 0
GROUP BY time, node, event, source, process_id, stack_id;

-- The same per 10 minutes: flame graphs over hours read a tenth of the rows.
CREATE TABLE IF NOT EXISTS {{local:samples_10m}} {{on_cluster}} AS {{local:samples}}
ENGINE = {{engine SummingMergeTree (count, value)}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (event, source, node, toStartOfHour(time), stack_id, process_id, time)
{{ttl time retention}};
{{distributed samples_10m cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:samples_10m_mv}} {{on_cluster}} TO {{local:samples_10m}} AS
SELECT toDateTime(intDiv(toUInt32(time), 600) * 600) AS time, node, event, source, process_id, stack_id,
    sum(count) AS count, sum(value) AS value
FROM {{local:samples_input}} WHERE kind = 0
GROUP BY time, node, event, source, process_id, stack_id;

-- Totals per minute, node, event and source: per-node figures without reading stacks.
CREATE TABLE IF NOT EXISTS {{local:node_totals}} {{on_cluster}} (
    time DateTime {{time_codec}},
    node {{low_cardinality_string}},
    event {{low_cardinality_string}},
    source {{low_cardinality_string}},
    count UInt64 {{codec}},
    value UInt64 {{codec}}
) ENGINE = {{engine SummingMergeTree (count, value)}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (event, source, node, time)
{{ttl time retention}};
{{distributed node_totals cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:node_totals_mv}} {{on_cluster}} TO {{local:node_totals}} AS
SELECT toStartOfMinute(time) AS time, node, event, source, sum(count) AS count, sum(value) AS value
FROM {{local:samples_input}} WHERE kind = 0
GROUP BY time, node, event, source;

-- Per minute, node, event, source and function: self (leaf) and total (anywhere on the stack).
CREATE TABLE IF NOT EXISTS {{local:function_samples}} {{on_cluster}} (
    time DateTime {{time_codec}},
    node {{low_cardinality_string}},
    event {{low_cardinality_string}},
    source {{low_cardinality_string}},
    function_id UInt64 {{id_codec}},
    self_count UInt64 {{codec}},
    self_value UInt64 {{codec}},
    total_count UInt64 {{codec}},
    total_value UInt64 {{codec}}
) ENGINE = {{engine SummingMergeTree (self_count, self_value, total_count, total_value)}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (event, source, node, toStartOfHour(time), function_id, time)
{{ttl time retention}};
{{distributed function_samples cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:function_samples_mv}} {{on_cluster}} TO {{local:function_samples}} AS
SELECT toStartOfMinute(time) AS time, node, event, source, function_id,
    sum(self_count) AS self_count, sum(self_value) AS self_value, sum(count) AS total_count, sum(value) AS total_value
FROM {{local:samples_input}} WHERE kind = 1
GROUP BY time, node, event, source, function_id;

-- The same per 10 minutes: per-node × per-function values of a fleet over hours.
CREATE TABLE IF NOT EXISTS {{local:function_samples_10m}} {{on_cluster}} AS {{local:function_samples}}
ENGINE = {{engine SummingMergeTree (self_count, self_value, total_count, total_value)}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (event, source, node, toStartOfHour(time), function_id, time)
{{ttl time retention}};
{{distributed function_samples_10m cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:function_samples_10m_mv}} {{on_cluster}} TO {{local:function_samples_10m}} AS
SELECT toDateTime(intDiv(toUInt32(time), 600) * 600) AS time, node, event, source, function_id,
    sum(self_count) AS self_count, sum(self_value) AS self_value, sum(count) AS total_count, sum(value) AS total_value
FROM {{local:samples_input}} WHERE kind = 1
GROUP BY time, node, event, source, function_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:samples_progress_mv}} {{on_cluster}} TO {{local:batch_progress}} AS
SELECT batch_id, 'samples' AS part, min(time) AS start_time FROM {{local:samples_input}} GROUP BY batch_id;

-- Samples that carry the data address they touched, by the data object and cache line.
CREATE TABLE IF NOT EXISTS {{local:data_samples_input}} {{on_cluster}} (
    batch_id FixedString(16),
    time DateTime,
    node {{low_cardinality_string}},
    event {{low_cardinality_string}},
    source {{low_cardinality_string}},
    process_id UInt64,
    stack_id UInt64,
    -- bss, data, heap, anon, ... (as placements' kind)
    mapping_kind {{low_cardinality_string}},
    mapping_path String,
    symbol String,
    -- the 64-byte line: file offset for file-backed data, else the virtual address
    cache_line UInt64,
    count UInt64,
    value UInt64
) ENGINE = Null;
{{distributed data_samples_input cityHash64(node)}};

CREATE TABLE IF NOT EXISTS {{local:data_samples}} {{on_cluster}} (
    time DateTime {{time_codec}},
    node {{low_cardinality_string}},
    event {{low_cardinality_string}},
    source {{low_cardinality_string}},
    process_id UInt64 {{id_codec}},
    stack_id UInt64 {{id_codec}},
    mapping_kind {{low_cardinality_string}},
    mapping_path String,
    symbol String,
    cache_line UInt64,
    count UInt64 {{codec}},
    value UInt64 {{codec}}
) ENGINE = {{engine SummingMergeTree (count, value)}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (event, source, node, toStartOfHour(time), mapping_kind, symbol, cache_line, stack_id, process_id, time)
{{ttl time retention}};
{{distributed data_samples cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:data_samples_mv}} {{on_cluster}} TO {{local:data_samples}} AS
SELECT toStartOfMinute(time) AS time, node, event, source, process_id, stack_id, mapping_kind, mapping_path,
    symbol, cache_line, sum(count) AS count, sum(value) AS value
FROM {{local:data_samples_input}}
GROUP BY time, node, event, source, process_id, stack_id, mapping_kind, mapping_path, symbol, cache_line;

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:data_samples_progress_mv}} {{on_cluster}} TO {{local:batch_progress}} AS
SELECT batch_id, 'data_samples' AS part, min(time) AS start_time FROM {{local:data_samples_input}} GROUP BY batch_id;

-- A node-wide counter's increase over one agent interval (numa_hint_faults, pgfault, ...).
CREATE TABLE IF NOT EXISTS {{local:counters_input}} {{on_cluster}} (
    batch_id FixedString(16),
    time DateTime,
    node {{low_cardinality_string}},
    name {{low_cardinality_string}},
    value UInt64
) ENGINE = Null;
{{distributed counters_input cityHash64(node)}};

CREATE TABLE IF NOT EXISTS {{local:counters}} {{on_cluster}} (
    -- start of the agent interval
    time DateTime {{time_codec}},
    node {{low_cardinality_string}},
    name {{low_cardinality_string}},
    value UInt64 {{codec}}
) ENGINE = {{engine SummingMergeTree value}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (node, name, time)
{{ttl time retention}};
{{distributed counters cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:counters_mv}} {{on_cluster}} TO {{local:counters}} AS
SELECT time, node, name, sum(value) AS value FROM {{local:counters_input}} GROUP BY time, node, name;

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:counters_progress_mv}} {{on_cluster}} TO {{local:batch_progress}} AS
SELECT batch_id, 'counters' AS part, min(time) AS start_time FROM {{local:counters_input}} GROUP BY batch_id;

-- Where one process's memory lives per mapping and NUMA node, and where its threads ran.
CREATE TABLE IF NOT EXISTS {{local:placements_input}} {{on_cluster}} (
    batch_id FixedString(16),
    time DateTime,
    node {{low_cardinality_string}},
    pid UInt32,
    comm String,
    executable String,
    thread_nodes Array(UInt32),
    thread_counts Array(UInt32),
    kind {{low_cardinality_string}},
    path String,
    start UInt64,
    end UInt64,
    permissions {{low_cardinality_string}},
    page_nodes Array(UInt32),
    page_counts Array(UInt64),
    page_size UInt64
) ENGINE = Null;
{{distributed placements_input cityHash64(node)}};

CREATE TABLE IF NOT EXISTS {{local:placements}} {{on_cluster}} (
    time DateTime,
    node {{low_cardinality_string}},
    pid UInt32,
    comm {{low_cardinality_string}},
    executable String,
    -- threads per NUMA node they last ran on
    thread_nodes Array(UInt32),
    thread_counts Array(UInt32),
    -- text, data, bss, rodata, heap, stack, anon, file, shm, other
    kind {{low_cardinality_string}},
    path String,
    start UInt64,
    end UInt64,
    permissions {{low_cardinality_string}},
    -- resident pages per NUMA node
    page_nodes Array(UInt32),
    page_counts Array(UInt64),
    page_size UInt64
) ENGINE = {{engine MergeTree}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (node, time, pid)
{{ttl time retention}};
{{distributed placements cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:placements_mv}} {{on_cluster}} TO {{local:placements}} AS
SELECT time, node, pid, comm, executable, thread_nodes, thread_counts, kind, path, start, end, permissions,
    page_nodes, page_counts, page_size
FROM {{local:placements_input}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:placements_progress_mv}} {{on_cluster}} TO {{local:batch_progress}} AS
SELECT batch_id, 'placements' AS part, min(time) AS start_time FROM {{local:placements_input}} GROUP BY batch_id;

-- The debug-info store, shared by every server: which files were uploaded for a build id, and
-- the functions they name. Files themselves are not kept.
CREATE TABLE IF NOT EXISTS {{local:debuginfo}} {{on_cluster}} (
    -- lower-case hex
    build_id String,
    -- 1 executable (an image with symbols), 2 a separate debug file (bimodal.v1.DebuginfoKind)
    kind UInt8,
    -- SHA-256 of the file: an upload with other content for the same build id and kind is refused
    sha256 FixedString(32),
    size UInt64,
    file_name String,
    functions UInt64,
    -- PT_LOAD segments, to turn file offsets into addresses
    segment_offsets Array(UInt64),
    segment_addresses Array(UInt64),
    segment_sizes Array(UInt64),
    uploaded DateTime
) ENGINE = {{engine ReplacingMergeTree uploaded}}
ORDER BY (build_id, kind);
{{distributed debuginfo cityHash64(build_id)}};

CREATE TABLE IF NOT EXISTS {{local:debuginfo_symbols}} {{on_cluster}} (
    build_id String,
    kind UInt8,
    -- ELF virtual address and size in bytes (0: up to the next function)
    address UInt64,
    size UInt64,
    name String
) ENGINE = {{engine ReplacingMergeTree}}
ORDER BY (build_id, kind, address);
{{distributed debuginfo_symbols cityHash64(build_id)}}
