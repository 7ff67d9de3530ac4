-- name: JobClaim :many
-- The claim on Citus (docs/citus.md): JobClaimPlain's descent of jobs_pick per priority,
-- on the one shard whose placements are `placements`, so Citus routes the whole statement
-- to that shard (Task Count 1; `placement = ANY` of a parameter is pruned at execution,
-- also under the generic plan). The UPDATE is the top-level statement: Citus refuses a
-- volatile function in an UPDATE of a distributed table and does not route a modifying
-- CTE with one, so the lease token is md5(nonce || id), the nonce 128 random bits drawn
-- by the server for each claim (unguessable, and unique per claimed step). A concurrency
-- key places its jobs at one placement (PlacementOfKey), so the K=1 guard, the gates and
-- the dedup within the batch are exact on the shard, as on plain PostgreSQL:
-- - an ungated key (no gates row) runs one step at a time: the scan skips a key with a
--   step executing (jobs_concurrency_exclusive), the batch keeps its first row;
-- - a gated key runs up to the gate's limit: the scan skips a key whose executing steps
--   hold every slot (jobs_gate_slot), and the r-th row of the key in the batch takes the
--   key's r-th free slot number in [0, limit), or is left runnable. Two claims that give
--   the same slot collide on jobs_gate_slot and the loser is retried, as a K=1 race is.
--   Finding the free slots probes jobs_gate_slot once per slot number up to the last one
--   taken: O(limit) for a gate whose slots are nearly all held.
-- Rate limits are refused at insert on Citus.
-- Index use: jobs_pick per priority, jobs_concurrency_exclusive or jobs_gate_slot per keyed
-- row, jobs_pkey per winner, handlers and gates (reference tables, local to the worker).
WITH candidates AS (
    SELECT c.* FROM generate_series(0, 9) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT j.id, j.handler, j.concurrency_key, j.priority, j.eligible_at
        FROM jobs j
        WHERE j.placement = ANY (sqlc.arg(placements)::int[])
          AND j.queue = sqlc.arg(queue)::text
          AND j.status = 'runnable'
          AND j.priority = p.priority::smallint
          AND j.eligible_at <= now()
          AND (j.concurrency_key IS NULL OR (
                SELECT e.id FROM jobs e
                WHERE e.placement = ANY (sqlc.arg(placements)::int[]) AND e.placement = j.placement
                  AND e.concurrency_key = j.concurrency_key
                  AND e.status = 'executing' AND e.gate_shard IS NULL
                LIMIT 1) IS NULL)
          AND (j.concurrency_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM gates g
                WHERE g.key = j.concurrency_key
                  AND g."limit" <= (SELECT count(*) FROM jobs e
                                    WHERE e.placement = ANY (sqlc.arg(placements)::int[]) AND e.placement = j.placement
                                      AND e.concurrency_key = j.concurrency_key
                                      AND e.status = 'executing' AND e.gate_shard IS NOT NULL)))
        ORDER BY j.eligible_at, j.id
        LIMIT sqlc.arg(max_rows)::int
        FOR UPDATE OF j SKIP LOCKED
    ) c
    LIMIT sqlc.arg(max_rows)::int
),
ranked AS (
    SELECT c.id, c.handler, c.concurrency_key, g."limit" AS gate_limit,
           row_number() OVER (PARTITION BY c.concurrency_key ORDER BY c.priority, c.eligible_at, c.id) AS key_rank,
           count(*) OVER (PARTITION BY c.concurrency_key) AS key_rows
    FROM candidates c
    LEFT JOIN gates g ON g.key = c.concurrency_key
),
-- The free slot numbers of each gated key of the batch, as many as it has rows here.
free_slots AS (
    SELECT k.concurrency_key, f.slot, row_number() OVER (PARTITION BY k.concurrency_key ORDER BY f.slot) AS slot_rank
    FROM (SELECT DISTINCT r.concurrency_key, r.gate_limit, r.key_rows FROM ranked r WHERE r.gate_limit IS NOT NULL) k
    CROSS JOIN LATERAL (
        SELECT s.slot::smallint AS slot
        FROM generate_series(0, k.gate_limit - 1) AS s(slot)
        WHERE NOT EXISTS (SELECT 1 FROM jobs e
                          WHERE e.placement = ANY (sqlc.arg(placements)::int[])
                            AND e.concurrency_key = k.concurrency_key
                            AND e.status = 'executing' AND e.gate_shard = s.slot::smallint)
        ORDER BY s.slot
        LIMIT k.key_rows
    ) f
),
winners AS (
    SELECT r.id, r.handler, f.slot
    FROM ranked r
    LEFT JOIN free_slots f ON f.concurrency_key = r.concurrency_key AND f.slot_rank = r.key_rank
    WHERE r.concurrency_key IS NULL
       OR (r.gate_limit IS NULL AND r.key_rank = 1)
       OR f.slot IS NOT NULL
)
UPDATE jobs j
SET status = 'executing',
    attempt = j.attempt + 1,
    lease_token = md5(sqlc.arg(nonce)::text || j.id::text)::uuid,
    lease_expires_at = now() + sqlc.arg(lease_ttl_ms)::bigint * interval '1 millisecond',
    lease_owner = sqlc.arg(lease_owner)::text,
    attempted_at = now(),
    claim_inbox_seq = least(j.inbox_seq, j.consumed_seq + sqlc.arg(signal_cap)::bigint),
    gate_shard = w.slot,
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
          -- NULL for a job without a trace context (sql/job_claim.sql)
          coalesce(CASE WHEN j.trace_context IS NOT NULL
               THEN floor(extract(epoch FROM j.eligible_at - '1970-01-01 00:00:00+00'::timestamptz) * 1000000)::bigint::text
                        || ' ' || j.trace_context END,
                       j.trace_context) AS trace,  -- (coalesce: typed nullable text by sqlc)
          h.url, h.secret, h.previous_secret, h.previous_secret_expires_at, h.timeout_ms,
          h.backoff_base_ms, h.backoff_max_ms,
          h.breaker_state, h.consecutive_failures, h.breaker_next_probe_at, h.paused_at,
          -- a keyed step: its queue needs admission (the engine then probes for rows the K=1 guard held back)
          j.concurrency_key IS NOT NULL AS keyed;

-- name: JobReadyExists :one
-- Whether queue has a due runnable job on any shard: one statement that Citus runs on
-- every shard at once (a fan-out, each shard one descent of jobs_pick that stops at its
-- first due entry), rather than one router statement per shard in turn.
SELECT EXISTS (
    SELECT 1 FROM jobs j
    WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'runnable' AND j.eligible_at <= now());
