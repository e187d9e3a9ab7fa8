-- Per-node function values per 10 minutes again, ordered by function before node. Compare reads
-- the values of its top functions on every node of a fleet; in `function_samples_10m`, ordered
-- node first, the functions of a node and hour share granules, so a filter on 200 functions
-- still reads every function of every node (15.9 M rows for an hour of 1,000 nodes). Here the
-- top functions' rows lie together and the primary key skips the rest. Reads of a few nodes
-- keep using `function_samples_10m`, where the node comes first. docs/design/012 has the
-- measurements. From `rollups` ('function_nodes') on, it holds every sample.

CREATE TABLE IF NOT EXISTS {{local:function_nodes_10m}} {{on_cluster}} (
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
ORDER BY (event, source, toStartOfHour(time), function_id, node, time)
{{ttl time retention}};
{{distributed function_nodes_10m cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:function_nodes_10m_mv}} {{on_cluster}} TO {{local:function_nodes_10m}} AS
SELECT toDateTime(intDiv(toUInt32(time), 600) * 600) AS time, node, event, source, function_id,
    sum(self_count) AS self_count, sum(self_value) AS self_value, sum(count) AS total_count, sum(value) AS total_value
FROM {{local:samples_input}} WHERE kind = 1
GROUP BY time, node, event, source, function_id;

INSERT INTO rollups (name, complete_from)
SELECT 'function_nodes', if((SELECT count() FROM samples) = 0, toDateTime(0), now() + 300);
