-- Whether the executable stored for a build id names frames as the copies nodes run do (issue
-- 49). Any token with the `write` scope may upload the first executable of a build id, so a
-- hostile one could upload a forged image of a library every node runs, with symbols of its
-- choosing. Each agent's check of a build id carries the naming digests of its own copy
-- (`bimodal_proto::naming_digests`); a copy that differs from the stored one disputes it, and
-- its names are withheld until an operator keeps or drops it.

-- The naming digests of each stored file (written before its `debuginfo` row), and whether an
-- operator kept it despite disputes. `kept` only rises (a kept file is written again with 1)
-- until the files are dropped, so readers take max(kept).
CREATE TABLE IF NOT EXISTS {{local:debuginfo_digests}} {{on_cluster}} (
    build_id String,
    kind UInt8,
    exported FixedString(32),
    -- lower-case hex; empty: the file has no .symtab
    local String,
    kept UInt8,
    updated DateTime
) ENGINE = {{engine ReplacingMergeTree updated}}
ORDER BY (build_id, kind);
{{distributed debuginfo_digests cityHash64(build_id)}};

-- Checks whose copy contradicted the stored executable: who, when, and what differed.
CREATE TABLE IF NOT EXISTS {{local:debuginfo_disputes}} {{on_cluster}} (
    build_id String,
    time DateTime,
    -- "address (token name)"
    reporter String,
    reason String
) ENGINE = {{engine MergeTree}}
ORDER BY (build_id, time);
{{distributed debuginfo_disputes cityHash64(build_id)}}
