-- Gates on Citus (docs/citus.md): the gates table is a reference table; a gate's slots
-- are the slot numbers its key's executing steps hold (jobs_gate_slot), at the key's
-- placement, so what is free is counted there.

-- name: GateRows :many
-- Every gate (key NULL) or one (a reference table, read on the coordinator).
SELECT g.key, g."limit", g.shards, g.created_at, g.updated_at
FROM gates g
WHERE sqlc.narg(key)::text IS NULL OR g.key = sqlc.narg(key)
ORDER BY g.key;

-- name: GateHeld :one
-- How many slots of a gate its key's executing steps hold: a router statement at the
-- key's placement. Index use: jobs_gate_slot.
SELECT count(*)::int AS held FROM jobs e
WHERE e.placement = sqlc.arg(placement)::int AND e.concurrency_key = sqlc.arg(key)::text
  AND e.status = 'executing' AND e.gate_shard IS NOT NULL;
