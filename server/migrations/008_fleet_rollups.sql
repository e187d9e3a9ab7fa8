-- Fleet rollups: the per-minute and per-10-minute sample and function tables without the node.
-- A flame graph or a function ranking of every node reads these instead of one row per node;
-- one of most nodes reads them minus the nodes left out. The views fill them from the same
-- INSERTs as the per-node tables, so the two agree row for row from the moment they exist:
-- `rollups` says from which sample time on (0 for a database that had no samples yet).

CREATE TABLE IF NOT EXISTS {{local:fleet_samples}} {{on_cluster}} (
    time DateTime {{time_codec}},
    event {{low_cardinality_string}},
    source {{low_cardinality_string}},
    process_id UInt64 {{id_codec}},
    stack_id UInt64 {{id_codec}},
    count UInt64 {{codec}},
    value UInt64 {{codec}}
) ENGINE = {{engine SummingMergeTree (count, value)}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (event, source, toStartOfHour(time), stack_id, process_id, time)
{{ttl time retention}};
{{distributed fleet_samples cityHash64(stack_id)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:fleet_samples_mv}} {{on_cluster}} TO {{local:fleet_samples}} AS
SELECT toStartOfMinute(time) AS time, event, source, process_id, stack_id, sum(count) AS count, sum(value) AS value
FROM {{local:samples_input}} WHERE kind = 0
GROUP BY time, event, source, process_id, stack_id;

CREATE TABLE IF NOT EXISTS {{local:fleet_samples_10m}} {{on_cluster}} AS {{local:fleet_samples}}
ENGINE = {{engine SummingMergeTree (count, value)}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (event, source, toStartOfHour(time), stack_id, process_id, time)
{{ttl time retention}};
{{distributed fleet_samples_10m cityHash64(stack_id)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:fleet_samples_10m_mv}} {{on_cluster}} TO {{local:fleet_samples_10m}} AS
SELECT toDateTime(intDiv(toUInt32(time), 600) * 600) AS time, event, source, process_id, stack_id,
    sum(count) AS count, sum(value) AS value
FROM {{local:samples_input}} WHERE kind = 0
GROUP BY time, event, source, process_id, stack_id;

CREATE TABLE IF NOT EXISTS {{local:fleet_function_samples}} {{on_cluster}} (
    time DateTime {{time_codec}},
    event {{low_cardinality_string}},
    source {{low_cardinality_string}},
    function_id UInt64 {{id_codec}},
    self_count UInt64 {{codec}},
    self_value UInt64 {{codec}},
    total_count UInt64 {{codec}},
    total_value UInt64 {{codec}}
) ENGINE = {{engine SummingMergeTree (self_count, self_value, total_count, total_value)}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (event, source, toStartOfHour(time), function_id, time)
{{ttl time retention}};
{{distributed fleet_function_samples cityHash64(function_id)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:fleet_function_samples_mv}} {{on_cluster}} TO {{local:fleet_function_samples}} AS
SELECT toStartOfMinute(time) AS time, event, source, function_id,
    sum(self_count) AS self_count, sum(self_value) AS self_value, sum(count) AS total_count, sum(value) AS total_value
FROM {{local:samples_input}} WHERE kind = 1
GROUP BY time, event, source, function_id;

CREATE TABLE IF NOT EXISTS {{local:fleet_function_samples_10m}} {{on_cluster}} AS {{local:fleet_function_samples}}
ENGINE = {{engine SummingMergeTree (self_count, self_value, total_count, total_value)}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (event, source, toStartOfHour(time), function_id, time)
{{ttl time retention}};
{{distributed fleet_function_samples_10m cityHash64(function_id)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:fleet_function_samples_10m_mv}} {{on_cluster}} TO {{local:fleet_function_samples_10m}} AS
SELECT toDateTime(intDiv(toUInt32(time), 600) * 600) AS time, event, source, function_id,
    sum(self_count) AS self_count, sum(self_value) AS self_value, sum(count) AS total_count, sum(value) AS total_value
FROM {{local:samples_input}} WHERE kind = 1
GROUP BY time, event, source, function_id;

-- From which sample time on each rollup holds everything. Samples stored before the views
-- existed are not copied: a sample stamped later than now + the agents' allowed clock skew
-- (ingest::validate::MAX_SKEW_SECS) can only arrive after this point, so it is in both.
CREATE TABLE IF NOT EXISTS {{local:rollups}} {{on_cluster}} (
    name String,
    complete_from DateTime
) ENGINE = {{engine ReplacingMergeTree}}
ORDER BY name;
{{distributed rollups cityHash64(name)}};

INSERT INTO rollups (name, complete_from)
SELECT 'fleet', if((SELECT count() FROM samples) = 0, toDateTime(0), now() + 300);
