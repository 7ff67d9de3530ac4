-- Fair share on Citus (docs/citus.md, "Fair share"; migrations/citus/0030): a fair queue is
-- claimed one shard at a time, as every queue is, and each shard's claim is the plain
-- JobClaimFair's deficit round robin over the fairness keys with runnable work on that
-- shard, from the shard's own position (fair_positions). A fairness key places its jobs
-- (FairnessPlacement), so a key's cap counts its executing steps on one shard, exactly,
-- unless concurrency keys placed some of them on other shards: the cap then counts per
-- shard.

-- name: FairPositionLock :exec
-- Locks the position of queue on the shard whose first placement is placement, making it
-- when it is new (an upsert's conflict locks the row it meets): the fair claims of a
-- (shard, queue) are serialised, so the JobClaimFair that follows in the same transaction
-- (an explicit block: citusClaimFairShard) sees every claim before it (the keys' caps exact, one position for every
-- server process). The update's WHERE false writes no new row version: ON CONFLICT DO
-- UPDATE locks the row it meets whether or not it updates it. A router statement.
-- Index use: fair_positions_pkey.
INSERT INTO fair_positions AS f (placement, queue) VALUES (sqlc.arg(placement)::int, sqlc.arg(queue)::text)
ON CONFLICT (placement, queue) DO UPDATE SET credit = f.credit WHERE false;

-- name: JobClaimFair :many
-- Claims up to max_rows runnable jobs of a fair queue on the shard whose placements are
-- `placements` (its position's row is placements[1], locked by FairPositionLock first):
-- the plain JobClaimFair (sql/job_claim.sql) with every read of jobs on the shard, the
-- position in fair_positions, and two differences Citus asks for:
--  * a key's share of this process's slots is counted over the weights of the keys found
--    here and of the keys with work on other shards: those this process runs steps of that
--    were not found here (own_keys), or the weights the other shards held at their last
--    claims (other_weights), whichever is more. A shard holding one key alone would
--    otherwise give it every slot, and a slow key on its shard would hold the slots the
--    others' fast steps leave.
--  * the lease token is md5(nonce || id) and the UPDATE of jobs is the top-level statement
--    (Citus routes no volatile function in a modifying CTE: citus JobClaim).
--  * the key the last claim stopped in takes the rest of its turn only when another key
--    on the shard has due work: alone, it takes a whole turn.
-- Admission is the K=1 probe on the shard for a concurrency key: a job with a concurrency
-- key lives at that key's placement, with its fairness key, so a key's jobs may be on
-- several shards, each claim counting the key's steps on its own shard against the cap.
-- Index use: jobs_fair_pick per (key, priority) pair and per key taken, fairness_keys_pkey
-- per key (a reference table, local), at most cap entries of jobs_fair_executing per
-- capped key, fair_positions_pkey, jobs_pkey per winner.
WITH RECURSIVE pos AS (
    SELECT f.cursor, f.credit
    FROM fair_positions f
    WHERE f.placement = (sqlc.arg(placements)::int[])[1] AND f.queue = sqlc.arg(queue)::text
),
ring(key, priority, eligible_at, n, wrapped) AS (
    SELECT s.key, s.priority, s.eligible_at, 1, s.wrapped
    FROM pos CROSS JOIN LATERAL (
        SELECT x.key, x.priority, x.eligible_at, x.wrapped FROM (
            (SELECT j.fairness_key AS key, j.priority, j.eligible_at, false AS wrapped
             FROM jobs j
             WHERE j.placement = ANY (sqlc.arg(placements)::int[])
               AND j.queue = sqlc.arg(queue)::text AND j.status = 'runnable' AND j.fairness_key IS NOT NULL
               AND pos.credit > 0 AND j.fairness_key = pos.cursor
             ORDER BY j.fairness_key, j.priority, j.eligible_at
             LIMIT 1)
            UNION ALL
            (SELECT j.fairness_key AS key, j.priority, j.eligible_at, false AS wrapped
             FROM jobs j
             WHERE j.placement = ANY (sqlc.arg(placements)::int[])
               AND j.queue = sqlc.arg(queue)::text AND j.status = 'runnable' AND j.fairness_key IS NOT NULL
               AND j.fairness_key > pos.cursor
             ORDER BY j.fairness_key, j.priority, j.eligible_at
             LIMIT 1)
            UNION ALL
            (SELECT j.fairness_key, j.priority, j.eligible_at, true
             FROM jobs j
             WHERE j.placement = ANY (sqlc.arg(placements)::int[])
               AND j.queue = sqlc.arg(queue)::text AND j.status = 'runnable' AND j.fairness_key IS NOT NULL
             ORDER BY j.fairness_key, j.priority, j.eligible_at
             LIMIT 1)
        ) x
        LIMIT 1
    ) s
    UNION ALL
    SELECT s.key, s.priority, s.eligible_at, r.n + 1, s.wrapped
    FROM ring r CROSS JOIN pos CROSS JOIN LATERAL (
        SELECT x.key, x.priority, x.eligible_at, x.wrapped FROM (
            (SELECT j.fairness_key AS key, j.priority, j.eligible_at, r.wrapped AS wrapped
             FROM jobs j
             WHERE j.placement = ANY (sqlc.arg(placements)::int[])
               AND j.queue = sqlc.arg(queue)::text AND j.status = 'runnable' AND j.fairness_key IS NOT NULL
               AND (j.fairness_key, j.priority) > (r.key, r.priority)
             ORDER BY j.fairness_key, j.priority, j.eligible_at
             LIMIT 1)
            UNION ALL
            (SELECT j.fairness_key, j.priority, j.eligible_at, true
             FROM jobs j
             WHERE j.placement = ANY (sqlc.arg(placements)::int[])
               AND j.queue = sqlc.arg(queue)::text AND j.status = 'runnable' AND j.fairness_key IS NOT NULL
               AND NOT r.wrapped
             ORDER BY j.fairness_key, j.priority, j.eligible_at
             LIMIT 1)
        ) x
        LIMIT 1
    ) s
    WHERE r.n < greatest(sqlc.arg(max_rows)::int, (SELECT q.batch FROM queues q WHERE q.name = sqlc.arg(queue)::text))
      AND NOT (s.wrapped AND pos.cursor IS NOT NULL
               AND (s.key > pos.cursor OR (s.key = pos.cursor AND pos.credit > 0)))
),
found AS (
    SELECT f.key, f.pos, f.due_priority, f.due_priority IS NOT NULL AS due,
           coalesce(k.weight, 1) AS weight, k.max_in_flight AS cap
    FROM (SELECT r.key, min(r.n) AS pos,
                 min(r.priority) FILTER (WHERE r.eligible_at <= now()) AS due_priority
          FROM ring r GROUP BY r.key) f
    LEFT JOIN LATERAL (
        SELECT k.weight, k.max_in_flight FROM fairness_keys k
        WHERE k.queue = sqlc.arg(queue)::text AND k.key = f.key
        LIMIT 1) k ON true
),
-- The weights of the keys this process runs steps of that this shard's walk did not find
-- (their work is on other shards): they count in every key's share of the slots.
elsewhere AS (
    SELECT coalesce(sum(coalesce(k.weight, 1)), 0) AS weights
    FROM unnest(sqlc.arg(own_keys)::text[]) AS o(key)
    LEFT JOIN LATERAL (
        SELECT k.weight FROM fairness_keys k
        WHERE k.queue = sqlc.arg(queue)::text AND k.key = o.key
        LIMIT 1) k ON true
    WHERE NOT EXISTS (SELECT 1 FROM found f WHERE f.key = o.key AND f.due)
),
-- The keys' shares of the slots are counted over the weights found here and those with
-- work elsewhere: the keys this process runs on other shards, or the weights the other
-- shards held at their last claims (the caller's other_weights, the default key aside,
-- and other_default: whether it had work there, counted once, unless found here),
-- whichever is more.
sizes AS (
    SELECT greatest(1, ceil(sqlc.arg(max_rows)::int / greatest(sum(f.weight), 1)::numeric))::int AS rounds,
           greatest(sum(f.weight) + greatest((SELECT e.weights FROM elsewhere e),
                                             sqlc.arg(other_weights)::int
                                             + CASE WHEN sqlc.arg(other_default)::bool AND NOT bool_or(f.key = '') THEN 1 ELSE 0 END),
                    1) AS weights
    FROM found f WHERE f.due
),
turns AS (
    SELECT f.key, f.pos, f.due_priority,
           -- (the rest of a turn only where another key waits for its own: a key alone on
           -- the shard takes a whole turn, or the shard would give a few rows and be
           -- passed over as if it had no more)
           least(CASE WHEN f.pos = 1 AND p.credit > 0 AND f.key = p.cursor
                       AND EXISTS (SELECT 1 FROM found o WHERE o.due AND o.key <> f.key) THEN p.credit
                      ELSE f.weight * z.rounds END,
                 greatest(1, ceil(sqlc.arg(slots)::int * f.weight / z.weights::numeric))::int
                   - coalesce((SELECT o.n FROM ROWS FROM (unnest(sqlc.arg(own_keys)::text[]), unnest(sqlc.arg(own_counts)::int[])) AS o(key, n)
                               WHERE o.key = f.key LIMIT 1), 0),
                 CASE WHEN f.cap IS NULL THEN 2147483647
                      ELSE f.cap - (SELECT count(*) FROM (
                          SELECT 1 FROM jobs e
                          WHERE e.placement = ANY (sqlc.arg(placements)::int[])
                            AND e.queue = sqlc.arg(queue)::text AND e.fairness_key = f.key
                            AND e.status = 'executing'
                          LIMIT f.cap) anywhere) END) AS turn
    FROM found f CROSS JOIN sizes z CROSS JOIN pos p
    WHERE f.due
),
reached AS (
    SELECT u.key, u.pos, u.due_priority, u.turn
    FROM (SELECT t.key, t.pos, t.due_priority, t.turn,
                 sum(greatest(t.turn, 0)) OVER (ORDER BY t.pos) - greatest(t.turn, 0) AS before
          FROM turns t) u
    WHERE u.turn > 0 AND u.before < sqlc.arg(max_rows)::int
),
taken AS (
    SELECT t.id, t.handler, u.key, u.pos, u.turn, t.concurrency_key,
           row_number() OVER (PARTITION BY u.key ORDER BY t.eligible_at, t.id) AS nth,
           row_number() OVER (PARTITION BY t.concurrency_key ORDER BY u.pos, t.eligible_at, t.id) AS key_rank
    FROM reached u
    CROSS JOIN LATERAL (
        SELECT j.id, j.handler, j.priority, j.eligible_at, j.concurrency_key
        FROM jobs j
        WHERE j.placement = ANY (sqlc.arg(placements)::int[])
          AND j.queue = sqlc.arg(queue)::text AND j.status = 'runnable'
          AND j.fairness_key = u.key AND j.priority = u.due_priority
          AND j.eligible_at <= now()
          AND (j.concurrency_key IS NULL OR (
                SELECT e.id FROM jobs e
                WHERE e.placement = ANY (sqlc.arg(placements)::int[]) AND e.placement = j.placement
                  AND e.concurrency_key = j.concurrency_key
                  AND e.status = 'executing' AND e.gate_shard IS NULL
                LIMIT 1) IS NULL)
        ORDER BY j.eligible_at, j.id
        LIMIT u.turn
        FOR UPDATE OF j SKIP LOCKED
    ) t
),
ordered AS (
    SELECT t.id, t.handler, t.key, t.pos, t.turn, t.nth,
           row_number() OVER (ORDER BY t.pos, t.nth) AS rn,
           count(*) OVER (PARTITION BY t.key) AS key_rows
    FROM taken t
    WHERE t.nth <= t.turn AND (t.concurrency_key IS NULL OR t.key_rank = 1)
),
winners AS (
    SELECT o.id, o.handler FROM ordered o WHERE o.rn <= sqlc.arg(max_rows)::int
),
moved AS (
    UPDATE fair_positions f
    SET cursor = m.key, credit = m.credit
    FROM (SELECT coalesce(
                   (SELECT o.key FROM ordered o WHERE o.rn = sqlc.arg(max_rows)::int + 1),
                   (SELECT r.key FROM reached r ORDER BY r.pos DESC LIMIT 1),
                   (SELECT r.key FROM ring r ORDER BY r.n DESC LIMIT 1)) AS key,
                 coalesce(
                   (SELECT o.turn - (o.nth - 1) FROM ordered o WHERE o.rn = sqlc.arg(max_rows)::int + 1),
                   0) AS credit) m
    WHERE f.placement = (sqlc.arg(placements)::int[])[1] AND f.queue = sqlc.arg(queue)::text AND m.key IS NOT NULL
)
UPDATE jobs j
SET status = 'executing',
    attempt = j.attempt + 1,
    lease_token = md5(sqlc.arg(nonce)::text || j.id::text)::uuid,
    lease_expires_at = now() + sqlc.arg(lease_ttl_ms)::bigint * interval '1 millisecond',
    lease_owner = sqlc.arg(lease_owner)::text,
    attempted_at = now(),
    claim_inbox_seq = least(j.inbox_seq, j.consumed_seq + sqlc.arg(signal_cap)::bigint),
    gate_shard = NULL,
    updated_at = now()
FROM winners w
LEFT JOIN handlers h ON h.name = w.handler
WHERE j.placement = ANY (sqlc.arg(placements)::int[])
  AND j.id = w.id
  AND j.id = ANY (ARRAY(SELECT w2.id FROM winners w2))
RETURNING j.id, j.queue, j.handler, j.key, j.step, j.attempt, j.max_attempts, j.input,
          j.state, j.created_at, j.lease_token::uuid AS lease_token, j.lease_expires_at::timestamptz AS lease_expires_at,
          j.attempted_at::timestamptz AS attempted_at, j.wake,
          j.consumed_seq, j.claim_inbox_seq, j.inbox_seq, j.pending_children,
          coalesce(CASE WHEN j.trace_context IS NOT NULL
               THEN floor(extract(epoch FROM j.eligible_at - '1970-01-01 00:00:00+00'::timestamptz) * 1000000)::bigint::text
                        || ' ' || j.trace_context END,
                       j.trace_context) AS trace,
          h.url, h.secret, h.previous_secret, h.previous_secret_expires_at, h.timeout_ms,
          h.backoff_base_ms, h.backoff_max_ms,
          h.breaker_state, h.consecutive_failures, h.breaker_next_probe_at, h.paused_at,
          j.fairness_key,
          -- what this shard holds, for the split of the next claims among the shards
          -- (citusClaimFair): the weights of its keys with due work, the default key aside
          -- (its jobs spread over every shard), and whether the default key has due work here;
          -- and the weights of those whose placement (FairnessPlacement) is on this shard: a
          -- key whose jobs concurrency keys placed on other shards too counts once in the
          -- other shards' shares of the slots, at its own shard
          (SELECT coalesce(sum(f.weight), 0) FROM found f WHERE f.due AND f.key <> '')::int AS shard_weights,
          EXISTS (SELECT 1 FROM found f WHERE f.due AND f.key = '') AS shard_has_default_key,
          (SELECT coalesce(sum(f.weight), 0) FROM found f
           WHERE f.due AND f.key <> ''
             AND gendurable_placement_of_key('fairness ' || f.key) = ANY (sqlc.arg(placements)::int[]))::int AS shard_home_weights;

-- name: FairnessKeyList :many
-- FairnessKeyList (sql/queues.sql) on Citus: a page of a queue's fairness keys in key
-- order, after `after` (NULL: from the first), those starting with prefix. A key's jobs
-- are on its shard (or its concurrency keys'), the default key's on any, so the keys with live work are counted on
-- every shard at once (one fan-out aggregate, each shard an index-only scan of
-- jobs_fair_pick and jobs_fair_executing over the queue's live keyed jobs from `after`
-- on), and merged on the coordinator with the keys that have settings (a reference table).
-- Cost: O(the queue's live keyed jobs after the cursor), not O(page) as on plain
-- PostgreSQL; a page of the dashboard, not a hot path.
WITH live AS (
    SELECT j.fairness_key AS key,
           count(*) FILTER (WHERE j.status = 'runnable') AS runnable,
           count(*) FILTER (WHERE j.status = 'executing') AS in_flight
    FROM jobs j
    WHERE j.queue = sqlc.arg(queue)::text AND j.status IN ('runnable', 'executing') AND j.fairness_key IS NOT NULL
      AND starts_with(j.fairness_key, sqlc.arg(prefix)::text)
      AND (sqlc.narg(after)::text IS NULL OR j.fairness_key > sqlc.narg(after)::text)
    GROUP BY j.fairness_key
),
page AS (
    SELECT k.key FROM (
        SELECT l.key FROM live l
        UNION
        SELECT f.key FROM fairness_keys f
        WHERE f.queue = sqlc.arg(queue)::text AND starts_with(f.key, sqlc.arg(prefix)::text)
          AND (sqlc.narg(after)::text IS NULL OR f.key > sqlc.narg(after)::text)
    ) k
    ORDER BY k.key
    LIMIT sqlc.arg(page_size)::int + 1
)
SELECT p.key::text AS key, coalesce(f.weight, 1)::int AS weight, f.max_in_flight, f.updated_at,
       (f.key IS NOT NULL)::bool AS declared, coalesce(l.runnable, 0)::bigint AS runnable,
       coalesce(l.in_flight, 0)::bigint AS in_flight
FROM page p
LEFT JOIN live l ON l.key = p.key
LEFT JOIN fairness_keys f ON f.queue = sqlc.arg(queue)::text AND f.key = p.key
ORDER BY p.key;

-- name: FairnessKeyTop :many
-- FairnessKeyTop (sql/queues.sql) on Citus: the keys with the most runnable jobs, with
-- their executing counts, counted on every shard at once (one fan-out aggregate).
WITH live AS (
    SELECT j.fairness_key AS key,
           count(*) FILTER (WHERE j.status = 'runnable') AS runnable,
           count(*) FILTER (WHERE j.status = 'executing') AS in_flight
    FROM jobs j
    WHERE j.queue = sqlc.arg(queue)::text AND j.status IN ('runnable', 'executing') AND j.fairness_key IS NOT NULL
      AND starts_with(j.fairness_key, sqlc.arg(prefix)::text)
    GROUP BY j.fairness_key
),
top AS (
    SELECT l.key, l.runnable, l.in_flight FROM live l
    WHERE l.runnable > 0
    ORDER BY l.runnable DESC, l.key
    LIMIT sqlc.arg(page_size)::int
)
SELECT t.key::text AS key, coalesce(f.weight, 1)::int AS weight, f.max_in_flight, f.updated_at,
       (f.key IS NOT NULL)::bool AS declared, t.runnable::bigint AS runnable, t.in_flight::bigint AS in_flight
FROM top t
LEFT JOIN fairness_keys f ON f.queue = sqlc.arg(queue)::text AND f.key = t.key
ORDER BY t.runnable DESC, t.key;

-- name: InsertDefaults :many
-- What the jobs a spawn or a debounced insert makes take when they do not say: the
-- max_attempts of handlers (kind 'handler'), and which of queues are fair (kind 'fair':
-- their jobs without a fairness key get the default key ''). One read of two reference
-- tables, local to the coordinator.
SELECT 'handler'::text AS kind, h.name, h.max_attempts FROM handlers h WHERE h.name = ANY (sqlc.arg(handlers)::text[])
UNION ALL
SELECT 'fair', q.name, 0 FROM queues q WHERE q.name = ANY (sqlc.arg(queues)::text[]) AND q.fairness <> 'none';
