-- citus/0028: gendurable_shard_here(shard), the first statement of each transaction a
-- server runs on one shard's own tables on the worker that holds it (docs/citus.md,
-- "Routed to the workers"; internal/pg/citus_shard_tables.go). Citus made on every node
-- (a function is propagated to the workers).
--
-- It takes the share lock on the shard's metadata that Citus takes for each write of a
-- distributed table, and that a shard move (or split) takes exclusively for its cut-over:
-- a write waits for the cut-over, and the cut-over for the writes already under way. Then,
-- in a snapshot taken after the lock (each statement of a volatile function takes its
-- own), it checks that the shard is placed on this node: a shard moved away meanwhile (its
-- old copy waits here to be dropped) is refused with SQLSTATE GDS01, before anything is
-- written, and the server runs the statements through the coordinator instead.
CREATE FUNCTION gendurable_shard_here(shard bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM lock_shard_metadata(5, ARRAY[shard]); -- 5: ShareLock
    IF NOT EXISTS (SELECT 1 FROM pg_dist_placement p
                   WHERE p.shardid = shard AND p.groupid = (SELECT g.groupid FROM pg_dist_local_group g)) THEN
        RAISE EXCEPTION 'shard % is not placed on this node (moved or split)', shard USING ERRCODE = 'GDS01';
    END IF;
END
$$;
