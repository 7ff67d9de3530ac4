-- name: CitusLayout :many
-- The shard of each placement value of jobs (and of the tables colocated with it), and the
-- ids that route to placement 0 (docs/citus.md, "Placement"). Read at start and every
-- minute; cost: 1 024 lookups in the coordinator's metadata cache.
SELECT v.placement::int AS placement,
       get_shard_id_for_distribution_column('jobs', v.placement)::bigint AS shard_id,
       (SELECT l.legacy_max_id FROM placement_layout l)::bigint AS legacy_max_id
FROM generate_series(0, 1023) AS v(placement)
ORDER BY 1;
