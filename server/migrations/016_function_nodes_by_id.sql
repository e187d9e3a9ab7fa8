-- Per-node function values per 10 minutes, keyed by numbers: what compare reads of its top
-- functions on every node of a band, or on a sample of it (design 029). `function_nodes_10m`
-- (010) is ordered (event, source, hour, function, node, time): a read takes every row of each
-- hour the range touches (4.1 M rows for a range straddling two hours of 1,000 nodes, where 1.2 M
-- are needed), and on ClickHouse 18.16 most of its cost per row is reading and comparing the
-- String columns event, source and node. Here the series (event, source) and the node are keyed
-- by their cityHash64, time comes right after the function, and granules are 1,024 rows: a read
-- takes the range's rows of each function wherever the range falls (1.4 M for the same read),
-- and filters on numbers; the node's name is read for the output only. From `rollups`
-- ('function_nodes_by_id') on, it holds every sample, and `function_nodes_10m` is no longer
-- written (its rows age out with the retention).

CREATE TABLE IF NOT EXISTS {{local:function_nodes_by_id_10m}} {{on_cluster}} (
    series UInt64,
    function_id UInt64 {{id_codec}},
    time DateTime {{time_codec}},
    node_id UInt64,
    node {{low_cardinality_string}},
    self_count UInt64 {{codec}},
    self_value UInt64 {{codec}},
    total_count UInt64 {{codec}},
    total_value UInt64 {{codec}}
) ENGINE = {{engine SummingMergeTree (self_count, self_value, total_count, total_value)}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (series, function_id, time, node_id)
{{ttl time retention}}
SETTINGS index_granularity = 1024;
{{distributed function_nodes_by_id_10m cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:function_nodes_by_id_10m_mv}} {{on_cluster}} TO {{local:function_nodes_by_id_10m}} AS
SELECT cityHash64(event, source) AS series, function_id, toDateTime(intDiv(toUInt32(time), 600) * 600) AS time,
    cityHash64(node) AS node_id, node, sum(self_count) AS self_count, sum(self_value) AS self_value,
    sum(count) AS total_count, sum(value) AS total_value
FROM {{local:samples_input}} WHERE kind = 1
GROUP BY series, function_id, time, node_id, node;

DROP TABLE IF EXISTS {{local:function_nodes_10m_mv}} {{on_cluster}};

-- A server from before this migration (a rollback, or one started during a rolling upgrade)
-- would read `function_nodes_10m` for ranges it no longer holds; this row tells it the table
-- holds no range (the second before the last a DateTime can hold: servers take the last as
-- "not read yet" and would ask again on every read), and it reads `function_samples_10m`.
INSERT INTO rollups (name, complete_from) SELECT 'function_nodes', toDateTime(4294967294);

INSERT INTO rollups (name, complete_from)
SELECT 'function_nodes_by_id', if((SELECT count() FROM samples) = 0, toDateTime(0), now() + 300);
