-- Totals per minute, node, event and source again, keyed by the hour before the node: what a
-- read of every node (compare, diff, alerts, the fleet's totals) takes over a range. In
-- `node_totals`, keyed by node, such a read takes every minute of the event in each day it
-- touches (1.2 M rows for an hour of page faults with a day of 1,000 nodes held, against 82 K
-- here). A few nodes over many hours keep reading `node_totals`, where a node's minutes lie
-- together. From `rollups` ('node_totals') on, both hold every minute. docs/design/025 has the
-- measurements.

CREATE TABLE IF NOT EXISTS {{local:node_totals_by_hour}} {{on_cluster}} (
    time DateTime {{time_codec}},
    node {{low_cardinality_string}},
    event {{low_cardinality_string}},
    source {{low_cardinality_string}},
    count UInt64 {{codec}},
    value UInt64 {{codec}}
) ENGINE = {{engine SummingMergeTree (count, value)}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (event, source, toStartOfHour(time), node, time)
{{ttl time retention}};
{{distributed node_totals_by_hour cityHash64(node)}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{local:node_totals_by_hour_mv}} {{on_cluster}} TO {{local:node_totals_by_hour}} AS
SELECT toStartOfMinute(time) AS time, node, event, source, sum(count) AS count, sum(value) AS value
FROM {{local:samples_input}} WHERE kind = 0
GROUP BY time, node, event, source;

INSERT INTO rollups (name, complete_from)
SELECT 'node_totals', if((SELECT count() FROM node_totals) = 0, toDateTime(0), now() + 300);
