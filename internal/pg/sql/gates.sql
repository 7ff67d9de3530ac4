-- name: GateUpsert :one
-- Creates or changes a gate (the slot rows follow in the same transaction).
INSERT INTO gates AS g (key, "limit", shards) VALUES (sqlc.arg(key)::text, sqlc.arg(gate_limit)::int, sqlc.arg(shards)::smallint)
ON CONFLICT (key) DO UPDATE SET "limit" = excluded."limit", shards = excluded.shards, updated_at = excluded.updated_at
RETURNING g.*;

-- name: GateSlotsLock :exec
-- Locks the slot rows of gate key (every gate when NULL) in (key, shard) order, the order
-- the pick locks them in, so that the recount that follows sees every admission.
SELECT s.key, s.shard FROM gate_slots s
WHERE sqlc.narg(key)::text IS NULL OR s.key = sqlc.narg(key)
ORDER BY s.key, s.shard
FOR UPDATE;

-- name: GateSlotsShape :exec
-- Gives gate key exactly shards shards whose caps add up to its limit gate_limit (the first
-- gate_limit % shards shards take one more); counters are recounted by GateSlotsReconcile next.
WITH shape AS (
    SELECT s AS shard, (sqlc.arg(gate_limit)::int / sqlc.arg(shards)::int + CASE WHEN s < sqlc.arg(gate_limit) % sqlc.arg(shards) THEN 1 ELSE 0 END)::int AS cap
    FROM generate_series(0, sqlc.arg(shards) - 1) AS s
),
dropped AS (
    DELETE FROM gate_slots d WHERE d.key = sqlc.arg(key)::text AND d.shard >= sqlc.arg(shards)
)
INSERT INTO gate_slots AS g (key, shard, available, cap)
SELECT sqlc.arg(key), sh.shard, sh.cap, sh.cap FROM shape sh
ON CONFLICT (key, shard) DO UPDATE SET cap = excluded.cap, available = least(g.available, excluded.cap);

-- name: GateSlotsReconcile :many
-- Repairs slot counters from the truth: available = cap - executing jobs admitted on
-- that shard (run after GateSlotsLock, in the same transaction). Returns the counters
-- it changed. Index use: jobs_lease (the executing set only), gate_slots_pkey.
UPDATE gate_slots s
SET available = greatest(0, s.cap - coalesce(x.n, 0))
FROM gate_slots s2
LEFT JOIN (SELECT j.concurrency_key AS key, j.gate_shard AS shard, count(*) AS n
           FROM jobs j
           WHERE j.status = 'executing' AND j.gate_shard IS NOT NULL
           GROUP BY 1, 2) x ON x.key = s2.key AND x.shard = s2.shard
WHERE s.key = s2.key AND s.shard = s2.shard
  AND (sqlc.narg(key)::text IS NULL OR s.key = sqlc.narg(key))
  AND s.available <> greatest(0, s.cap - coalesce(x.n, 0))
RETURNING s.key, s.shard, s.available;

-- name: GateList :many
-- Every gate (key NULL) or one, with its free slots and the steps it admitted.
SELECT g.key, g."limit", g.shards, coalesce(sum(s.available), 0)::int AS available,
       g.created_at, g.updated_at
FROM gates g LEFT JOIN gate_slots s ON s.key = g.key
WHERE sqlc.narg(key)::text IS NULL OR g.key = sqlc.narg(key)
GROUP BY g.key
ORDER BY g.key;

-- name: GateDelete :one
DELETE FROM gates WHERE key = sqlc.arg(key) RETURNING key;
