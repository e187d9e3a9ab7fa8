-- What a `bands_appear` alert found when no function is to blame (issue 48): its bands differ by
-- a node-wide shift of an event (every remote-access stack ×5: remote memory, THP off, a smaller
-- cache), which the alert names as such, where it named no function before. Empty otherwise.
ALTER TABLE {{local:alerts}} {{on_cluster}} ADD COLUMN node_wide String;
{{drop_distributed alerts}};
{{distributed alerts 0}}
