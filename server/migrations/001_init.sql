-- The first schema: samples pre-aggregated per agent interval, stacks stored once by id,
-- and one row per stored batch (node, labels, sources, losses).
--
-- Lines starting with `--modern:` are used only on ClickHouse 23 and later, `--legacy:` only
-- before; {{placeholders}} are filled per server version (see storage/migrations.rs).

CREATE TABLE IF NOT EXISTS samples (
    -- start of the agent interval the samples were counted in
    time DateTime {{time_codec}},
    node {{low_cardinality_string}},
    -- cpu, page_fault, cache_miss, remote_access, numa_hint_fault, page_migration
    event {{low_cardinality_string}},
    pid UInt32,
    tid UInt32,
    comm {{low_cardinality_string}},
    stack_id UInt64,
    -- samples taken
    count UInt64 {{codec}},
    -- events they stand for (count x period), unit by event
    value UInt64 {{codec}},
    batch_id FixedString(16)
) ENGINE = MergeTree
PARTITION BY toYYYYMMDD(time)
ORDER BY (event, node, time, stack_id)
--modern: TTL time + INTERVAL {{retention_days}} DAY
;

CREATE TABLE IF NOT EXISTS stacks (
    stack_id UInt64,
    -- per frame, leaf first: 1 user, 2 kernel, 3 jit (bimodal.v1.FrameKind)
    kinds Array(UInt8),
    functions Array(String),
    modules Array(String),
    build_ids Array(String),
    addresses Array(UInt64),
    file_offsets Array(UInt64)
) ENGINE = ReplacingMergeTree
ORDER BY stack_id;

CREATE TABLE IF NOT EXISTS batches (
    received DateTime,
    node {{low_cardinality_string}},
    batch_id FixedString(16),
    start_time DateTime,
    end_time DateTime,
    label_keys Array(String),
    label_values Array(String),
    agent_version String,
    kernel_release String,
    samples UInt64,
    source_events Array(String),
    source_descriptions Array(String),
    source_periods Array(UInt64),
    source_dropped Array(UInt64)
) ENGINE = MergeTree
PARTITION BY toYYYYMM(received)
ORDER BY (node, received)
--modern: TTL received + INTERVAL {{retention_days}} DAY
;
