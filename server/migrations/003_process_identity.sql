-- Who sampled processes are, so a fleet user filters by container, pod or unit, not by pid.

ALTER TABLE samples
    ADD COLUMN executable String,
    ADD COLUMN container_id {{low_cardinality_string}},
    ADD COLUMN pod_uid {{low_cardinality_string}},
    ADD COLUMN systemd_unit {{low_cardinality_string}};
