-- name: GateUpsert
-- Creates or changes a gate (the slot rows follow in the same transaction).
INSERT INTO gates AS g (key, "limit", shards) VALUES ($1, $2, $3)
ON CONFLICT (key) DO UPDATE SET "limit" = excluded."limit", shards = excluded.shards, updated_at = now()
RETURNING g.key, g."limit", g.shards, g.created_at, g.updated_at;

-- name: GateSlotsLock
-- Locks the slot rows of gate $1 (every gate when NULL) in (key, shard) order, the order
-- the pick locks them in, so that the recount that follows sees every admission.
SELECT s.key, s.shard FROM gate_slots s
WHERE $1::text IS NULL OR s.key = $1
ORDER BY s.key, s.shard
FOR UPDATE;

-- name: GateSlotsShape
-- Gives gate $1 exactly $3 shards whose caps add up to its limit $2 (the first
-- $2 % $3 shards take one more); counters are recounted by GateSlotsReconcile next.
WITH shape AS (
    SELECT s AS shard, ($2 / $3 + CASE WHEN s < $2 % $3 THEN 1 ELSE 0 END)::int AS cap
    FROM generate_series(0, $3 - 1) AS s
),
dropped AS (
    DELETE FROM gate_slots d WHERE d.key = $1 AND d.shard >= $3
)
INSERT INTO gate_slots AS g (key, shard, available, cap)
SELECT $1, sh.shard, sh.cap, sh.cap FROM shape sh
ON CONFLICT (key, shard) DO UPDATE SET cap = excluded.cap, available = least(g.available, excluded.cap);

-- name: GateSlotsReconcile
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
  AND ($1::text IS NULL OR s.key = $1)
  AND s.available <> greatest(0, s.cap - coalesce(x.n, 0))
RETURNING s.key, s.shard, s.available;

-- name: GateList
-- Every gate ($1 NULL) or one, with its free slots and the steps it admitted.
SELECT g.key, g."limit", g.shards, coalesce(sum(s.available), 0)::int AS available,
       g.created_at, g.updated_at
FROM gates g LEFT JOIN gate_slots s ON s.key = g.key
WHERE $1::text IS NULL OR g.key = $1
GROUP BY g.key
ORDER BY g.key;

-- name: GateDelete
DELETE FROM gates WHERE key = $1 RETURNING key;
