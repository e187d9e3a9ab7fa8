-- What nodes are (facts), how their memory system moves (counters), where processes' memory
-- lives (placement), and samples attributed to the data they touched.

CREATE TABLE IF NOT EXISTS node_facts (
    received DateTime,
    node {{low_cardinality_string}},
    kernel_release String,
    cpu_vendor {{low_cardinality_string}},
    cpu_model_name {{low_cardinality_string}},
    cpu_family UInt32,
    cpu_model UInt32,
    online_cpus UInt32,
    sockets UInt32,
    numa_nodes UInt32,
    numa_balancing {{low_cardinality_string}},
    hardware_pmu {{low_cardinality_string}},
    -- the whole bimodal.v1.NodeFacts message, protobuf-encoded
    facts String
) ENGINE = ReplacingMergeTree(received)
ORDER BY node;

CREATE TABLE IF NOT EXISTS counters (
    -- start of the agent interval
    time DateTime {{time_codec}},
    node {{low_cardinality_string}},
    -- numa_hint_faults, numa_pages_migrated, pgfault, context_switches, ...
    name {{low_cardinality_string}},
    -- increase over the interval
    value UInt64 {{codec}},
    batch_id FixedString(16)
) ENGINE = MergeTree
PARTITION BY toYYYYMMDD(time)
ORDER BY (node, name, time)
--modern: TTL time + INTERVAL {{retention_days}} DAY
;

CREATE TABLE IF NOT EXISTS placements (
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
    page_size UInt64,
    batch_id FixedString(16)
) ENGINE = MergeTree
PARTITION BY toYYYYMMDD(time)
ORDER BY (node, time, pid)
--modern: TTL time + INTERVAL {{retention_days}} DAY
;

CREATE TABLE IF NOT EXISTS data_samples (
    time DateTime {{time_codec}},
    node {{low_cardinality_string}},
    event {{low_cardinality_string}},
    pid UInt32,
    tid UInt32,
    comm {{low_cardinality_string}},
    stack_id UInt64,
    mapping_kind {{low_cardinality_string}},
    mapping_path String,
    symbol String,
    cache_line UInt64,
    count UInt64 {{codec}},
    value UInt64 {{codec}},
    batch_id FixedString(16)
) ENGINE = MergeTree
PARTITION BY toYYYYMMDD(time)
ORDER BY (event, node, time, mapping_kind, symbol)
--modern: TTL time + INTERVAL {{retention_days}} DAY
;
