-- Alerts (docs/design/015): one row per change of an alert's state, written by the one server
-- that evaluates the rules. The latest row of a fingerprint is the alert's state: a server that
-- takes over evaluation (or restarts) continues from it. On a cluster every row lives on one
-- shard (a constant sharding key), so the latest row is found in one place.
CREATE TABLE IF NOT EXISTS {{local:alerts}} {{on_cluster}} (
    rule String,
    -- xxHash64 of the sorted labels
    fingerprint UInt64,
    -- pending, firing, resolved or inactive (pending that never fired)
    state String,
    label_keys Array(String),
    label_values Array(String),
    annotation_keys Array(String),
    annotation_values Array(String),
    value Float64,
    active_since DateTime,
    -- 0 until it fires / until it ends
    fired_at DateTime,
    resolved_at DateTime,
    -- the alert's nodes as a selector, and the window judged last: the compare view of the alert
    selector String,
    window_from DateTime,
    window_to DateTime,
    top_function String,
    -- when the row was written (the latest row of a fingerprint wins)
    written DateTime,
    -- orders rows written in the same second
    sequence UInt64
) ENGINE = {{engine MergeTree}}
PARTITION BY toYYYYMM(written)
ORDER BY (fingerprint, active_since, written, sequence)
{{ttl written retention}};
{{distributed alerts 0}}
