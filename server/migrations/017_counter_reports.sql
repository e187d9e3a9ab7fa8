-- Node counters that keep their zeros. `counters`, `counters_1m` and `counters_10m` (007, 013)
-- are SummingMergeTree tables summing `value` alone, and such a table deletes a row whose summed
-- columns are all zero when it merges parts: a node whose numa_hint_faults, pgmajfault or unit
-- of work counted zero read as measured (0) until its parts merged and as not measured after,
-- so answers depended on merge timing (issue 48). Here each row also sums `reports`, how many
-- agent intervals reported it, which is never zero: a zero stays a zero. ClickHouse cannot
-- change a table's summed columns, hence new tables.
--
-- The old tables keep being written: ranges before `rollups` ('counter_reports') are read from
-- them, and a batch spooled by its agent across this migration, with a time before it, reaches
-- both. Ranges from it on are read here.

CREATE TABLE IF NOT EXISTS {{local:counter_reports}} {{on_cluster}} (
    -- start of the agent interval
    time DateTime {{time_codec}},
    node {{low_cardinality_string}},
    name {{low_cardinality_string}},
    value UInt64 {{codec}},
    reports UInt64 {{codec}}
) ENGINE = {{engine SummingMergeTree (value, reports)}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (node, name, time)
{{ttl time retention}};
{{distributed counter_reports cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:counter_reports_mv}} {{on_cluster}} TO {{local:counter_reports}} AS
SELECT time, node, name, sum(value) AS value, count() AS reports
FROM {{local:counters_input}} GROUP BY time, node, name;

CREATE TABLE IF NOT EXISTS {{local:counter_reports_1m}} {{on_cluster}} (
    time DateTime {{time_codec}},
    node {{low_cardinality_string}},
    name {{low_cardinality_string}},
    value UInt64 {{codec}},
    reports UInt64 {{codec}}
) ENGINE = {{engine SummingMergeTree (value, reports)}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (time, node, name)
{{ttl time retention}};
{{distributed counter_reports_1m cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:counter_reports_1m_mv}} {{on_cluster}} TO {{local:counter_reports_1m}} AS
SELECT toStartOfMinute(time) AS time, node, name, sum(value) AS value, count() AS reports
FROM {{local:counters_input}} GROUP BY time, node, name;

CREATE TABLE IF NOT EXISTS {{local:counter_reports_10m}} {{on_cluster}} (
    time DateTime {{time_codec}},
    node {{low_cardinality_string}},
    name {{low_cardinality_string}},
    value UInt64 {{codec}},
    reports UInt64 {{codec}}
) ENGINE = {{engine SummingMergeTree (value, reports)}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (time, node, name)
{{ttl time retention}};
{{distributed counter_reports_10m cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:counter_reports_10m_mv}} {{on_cluster}} TO {{local:counter_reports_10m}} AS
SELECT toDateTime(intDiv(toUInt32(time), 600) * 600) AS time, node, name, sum(value) AS value, count() AS reports
FROM {{local:counters_input}} GROUP BY time, node, name;

INSERT INTO rollups (name, complete_from)
SELECT 'counter_reports', if((SELECT count() FROM counters) = 0, toDateTime(0), now() + 300);
