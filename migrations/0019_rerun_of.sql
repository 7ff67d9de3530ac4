-- 0019: a rerun's link to the job it reran (POST /v1/jobs/{id}/rerun, docs/protocol.md
-- "Replay and rerun"). No foreign key: the job it reran may be collected first, and the
-- link then names an id that is gone, which the API shows as it is.
--
-- A nullable column without a default is a catalog change (no rewrite); on Citus the
-- coordinator propagates it to every shard.
ALTER TABLE jobs ADD COLUMN rerun_of bigint;
