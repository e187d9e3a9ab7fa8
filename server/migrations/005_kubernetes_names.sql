-- Kubernetes names of sampled processes, from the API server where the agent may ask it: a fleet
-- user filters by namespace and pod name, which read better and outlive pod UIDs.

ALTER TABLE samples
    ADD COLUMN pod_name {{low_cardinality_string}},
    ADD COLUMN pod_namespace {{low_cardinality_string}},
    ADD COLUMN container_name {{low_cardinality_string}};
