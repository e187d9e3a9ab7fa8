-- Which event sources each node's agent sampled with, per 10 minutes: what compare reads to
-- tell a node that sampled an event and saw none of it (zero) from one that did not sample it
-- (not measured). It read the ledger, a row per batch and state keyed by batch id, which a read
-- of a time range cannot skip: with a day of batches from 1,000 nodes (17 M rows) the read took
-- 0.5–0.9 s for an hour, twice per compare, and the ledger is kept for days where samples are
-- kept for weeks. Filled from the ledger's INSERTs; from `rollups` ('node_sources') on, it holds
-- every batch's sources. docs/design/024 has the measurements.

CREATE TABLE IF NOT EXISTS {{local:node_sources}} {{on_cluster}} (
    -- the start of the 10 minutes in which batches with these sources started
    time DateTime {{time_codec}},
    node {{low_cardinality_string}},
    event {{low_cardinality_string}},
    source {{low_cardinality_string}}
) ENGINE = {{engine ReplacingMergeTree}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (time, node, event, source)
{{ttl time retention}};
{{distributed node_sources cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:node_sources_mv}} {{on_cluster}} TO {{local:node_sources}} AS
SELECT toDateTime(intDiv(toUInt32(start_time), 600) * 600) AS time, node, event, source
FROM {{local:ledger}} ARRAY JOIN source_events AS event, source_names AS source
GROUP BY time, node, event, source;

INSERT INTO rollups (name, complete_from)
SELECT 'node_sources', if((SELECT count() FROM ledger) = 0, toDateTime(0), now() + 300);
