-- Schema v1's tables are set aside under a `v1_` prefix: schema v2 (007) reuses their names for
-- tables of another shape. The server copies their rows into v2 in the background and drops
-- them when done (storage/migrate_v1.rs). Applied only where v1 exists; a new database starts at
-- 007.

RENAME TABLE
    samples TO v1_samples,
    stacks TO v1_stacks,
    batches TO v1_batches,
    node_facts TO v1_node_facts,
    counters TO v1_counters,
    placements TO v1_placements,
    data_samples TO v1_data_samples;
