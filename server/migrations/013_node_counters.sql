-- Node counters per minute and per 10 minutes, ordered by time: what compare, diff and alerts
-- read of every node's counters over a range. `counters` keeps a row per agent interval (10 s),
-- node and counter, ordered node first: a fleet-wide read of an hour skipped nothing and read
-- the whole of every day it touched (5.4 M rows for the bench's hour of 1,000 nodes, 0.3 s; a
-- day holds 24 times as many). Here a range's rows lie together: whole 10-minute buckets are
-- read from `counters_10m`, the edges from `counters_1m`. Reads of one node's intervals keep
-- using `counters`. From `rollups` ('counters') on, both hold every counter.
-- docs/design/023 has the measurements.

CREATE TABLE IF NOT EXISTS {{local:counters_1m}} {{on_cluster}} (
    time DateTime {{time_codec}},
    node {{low_cardinality_string}},
    name {{low_cardinality_string}},
    value UInt64 {{codec}}
) ENGINE = {{engine SummingMergeTree value}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (time, node, name)
{{ttl time retention}};
{{distributed counters_1m cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:counters_1m_mv}} {{on_cluster}} TO {{local:counters_1m}} AS
SELECT toStartOfMinute(time) AS time, node, name, sum(value) AS value
FROM {{local:counters_input}} GROUP BY time, node, name;

CREATE TABLE IF NOT EXISTS {{local:counters_10m}} {{on_cluster}} (
    time DateTime {{time_codec}},
    node {{low_cardinality_string}},
    name {{low_cardinality_string}},
    value UInt64 {{codec}}
) ENGINE = {{engine SummingMergeTree value}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (time, node, name)
{{ttl time retention}};
{{distributed counters_10m cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:counters_10m_mv}} {{on_cluster}} TO {{local:counters_10m}} AS
SELECT toDateTime(intDiv(toUInt32(time), 600) * 600) AS time, node, name, sum(value) AS value
FROM {{local:counters_input}} GROUP BY time, node, name;

INSERT INTO rollups (name, complete_from)
SELECT 'counters', if((SELECT count() FROM counters) = 0, toDateTime(0), now() + 300);
