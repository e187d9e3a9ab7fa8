-- Per-node data objects per 10 minutes: what compare's explanation reads of data addresses.
-- `data_samples` keeps a row per minute, process, stack, object and cache line; over an hour of
-- 1,000 nodes that is some hundred million rows (about 2.1 M a minute in the bench), of which
-- compare needs a value per node and object, and per line of file-backed objects. Here a node's
-- object is a row per 10 minutes and line, ordered by object so that the top objects' rows lie
-- together. Lines of data that is not file-backed are virtual addresses, which differ from
-- process to process and no read uses: they are kept as 0. From `rollups` ('data_objects') on,
-- it holds every data sample. docs/design/022 has the measurements.

CREATE TABLE IF NOT EXISTS {{local:data_objects_10m}} {{on_cluster}} (
    time DateTime {{time_codec}},
    node {{low_cardinality_string}},
    event {{low_cardinality_string}},
    source {{low_cardinality_string}},
    mapping_kind {{low_cardinality_string}},
    mapping_path String,
    symbol String,
    cache_line UInt64,
    count UInt64 {{codec}},
    value UInt64 {{codec}}
) ENGINE = {{engine SummingMergeTree (count, value)}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (event, source, toStartOfHour(time), mapping_kind, mapping_path, symbol, cache_line, node, time)
{{ttl time retention}};
{{distributed data_objects_10m cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:data_objects_10m_mv}} {{on_cluster}} TO {{local:data_objects_10m}} AS
SELECT toDateTime(intDiv(toUInt32(time), 600) * 600) AS time, node, event, source, mapping_kind, mapping_path,
    symbol, if(mapping_path = '', toUInt64(0), cache_line) AS cache_line, sum(count) AS count, sum(value) AS value
FROM {{local:data_samples_input}}
GROUP BY time, node, event, source, mapping_kind, mapping_path, symbol, cache_line;

INSERT INTO rollups (name, complete_from)
SELECT 'data_objects', if((SELECT count() FROM data_samples) = 0, toDateTime(0), now() + 300);
