-- The batch ledger again, keyed by (batch, server, state) instead of the batch alone.
-- `batches` is a ReplacingMergeTree ordered by batch_id, so a background merge keeps only the
-- newest row of a batch: another server's later claim could replace the row saying the batch
-- was stored, and that server then stored it again (seen in CI under load: the two-servers test
-- got "stored" from both). Here a merge keeps each server's newest row of each state, so a
-- "stored" row is never merged away. `batches` is no longer written; it expires with the ledger
-- retention.
CREATE TABLE IF NOT EXISTS {{local:ledger}} {{on_cluster}} (
    batch_id FixedString(16),
    node {{low_cardinality_string}},
    start_time DateTime,
    end_time DateTime,
    -- 1 writing (claimed by `server`), 2 stored, 3 claim withdrawn
    state UInt8,
    -- the random id of the server process that wrote this row
    server FixedString(16),
    -- milliseconds since the epoch when the row was written: a server's newest row is its state
    version UInt64,
    agent_version {{low_cardinality_string}},
    samples UInt64,
    source_events Array(String),
    source_names Array(String),
    source_dropped Array(UInt64)
) ENGINE = {{engine ReplacingMergeTree version}}
PARTITION BY toYYYYMMDD(start_time)
ORDER BY (batch_id, server, state)
{{ttl start_time ledger}};
{{distributed ledger cityHash64(node)}};

-- What was stored before stays a duplicate when it is resent.
INSERT INTO ledger SELECT batch_id, node, start_time, end_time, state, server, version, agent_version,
    samples, source_events, source_names, source_dropped FROM batches;
