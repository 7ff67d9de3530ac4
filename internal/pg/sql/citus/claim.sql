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
-- - a rate-limited row draws from one bucket, which lives at the row's own placement
--   (RateBucketPlacement: every job of a bucket lives there), so the bucket is read,
--   refilled and debited here, as on plain PostgreSQL: buckets locked in (name, key)
--   order, the rows of a bucket admitted in pick order while their summed weights fit
--   its tokens (a row heavier than the bucket holds is passed over and weighs nothing),
--   the winners' weights debited in this statement. A bucket is minted at insert with
--   updated_at '-infinity', read here as full (no INSERT can be routed in a CTE).
--   A row whose bucket is remote (rate_placement: its parent, fairness key, debounce key or concurrency
--   key placed it elsewhere) passes here as an unlimited row does: the claimer debits
--   its bucket on the bucket's shard before its webhook is called, and gives back the
--   leases the bucket cannot pay for (citusTakeRemoteBuckets).
-- Index use: jobs_pick per priority, jobs_concurrency_exclusive or jobs_gate_slot per keyed
-- row, rate_buckets_pkey per bucket, jobs_pkey per winner, handlers, gates and rate_limits
-- (reference tables, local to the worker).
WITH candidates AS (
    SELECT c.* FROM generate_series(0, 9) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT j.id, j.placement, j.handler, j.concurrency_key, j.priority, j.eligible_at,
               j.rate_limit, coalesce(j.rate_key, '') AS rate_key, j.rate_weight, j.rate_placement
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
    SELECT c.id, c.placement, c.handler, c.concurrency_key, c.priority, c.eligible_at, c.rate_limit, c.rate_key,
           c.rate_weight, c.rate_placement, g."limit" AS gate_limit,
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
gate_pass AS (
    SELECT r.id, r.placement, r.handler, f.slot, r.priority, r.eligible_at, r.rate_limit, r.rate_key, r.rate_weight,
           r.rate_placement
    FROM ranked r
    LEFT JOIN free_slots f ON f.concurrency_key = r.concurrency_key AND f.slot_rank = r.key_rank
    WHERE r.concurrency_key IS NULL
       OR (r.gate_limit IS NULL AND r.key_rank = 1)
       OR f.slot IS NOT NULL
),
buckets_locked AS (
    SELECT b.name, b.key, b.tokens, b.updated_at
    FROM rate_buckets b
    WHERE b.placement = ANY (sqlc.arg(placements)::int[])
      AND EXISTS (SELECT 1 FROM gate_pass p WHERE p.rate_limit IS NOT NULL)  -- one-time filter: skipped when unused
      AND (b.name, b.key, b.placement) IN (SELECT p.rate_limit, p.rate_key, p.placement FROM gate_pass p
                                           WHERE p.rate_limit IS NOT NULL AND p.rate_placement IS NULL)
    ORDER BY b.name, b.key
    FOR UPDATE OF b
),
buckets_now AS (
    SELECT l.name, l.key,
           CASE WHEN l.updated_at = '-infinity' THEN r.burst
                ELSE least(r.burst, l.tokens + r.rate * greatest(extract(epoch FROM now() - l.updated_at), 0)) END AS tokens
    FROM buckets_locked l
    JOIN rate_limits r ON r.name = l.name
),
bucket_fits AS (
    SELECT p.id, p.rate_limit AS name, p.rate_key AS key, p.rate_weight AS weight, b.tokens,
           p.rate_weight <= b.tokens
             AND sum(CASE WHEN p.rate_weight <= b.tokens THEN p.rate_weight ELSE 0 END)
                   OVER (PARTITION BY p.rate_limit, p.rate_key ORDER BY p.priority, p.eligible_at, p.id) <= b.tokens AS fits
    FROM gate_pass p
    JOIN buckets_now b ON b.name = p.rate_limit AND b.key = p.rate_key
    WHERE p.rate_limit IS NOT NULL AND p.rate_placement IS NULL
),
winners AS (
    SELECT p.id, p.handler, p.slot
    FROM gate_pass p
    WHERE p.rate_limit IS NULL OR p.rate_placement IS NOT NULL OR p.id IN (SELECT f.id FROM bucket_fits f WHERE f.fits)
),
buckets_debited AS (
    UPDATE rate_buckets b
    SET tokens = g.tokens - g.weight, updated_at = now()
    FROM (SELECT f.name, f.key, min(f.tokens) AS tokens, sum(f.weight) AS weight
          FROM bucket_fits f WHERE f.fits GROUP BY 1, 2) g
    WHERE b.placement = ANY (sqlc.arg(placements)::int[])
      AND b.name = g.name AND b.key = g.key
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
          -- a keyed or rate-limited step: its queue needs admission (the engine then
          -- probes for rows the K=1 guard, a gate or a bucket held back)
          j.concurrency_key IS NOT NULL OR j.rate_limit IS NOT NULL AS keyed,
          -- its rate limit (a rate-limited step: its shard is claimed again while its bucket
          -- refills, citusWarmth), and when rate_placement names its bucket, the claimer
          -- debits it before the call (citusTakeRemoteBuckets)
          j.rate_placement, j.rate_limit, coalesce(j.rate_key, '')::text AS rate_key, j.rate_weight,
          -- and its other buckets (a job naming several: every one of them remote)
          j.extra_rate_limits,
          -- (the claimer visits first the shards with work better than the default
          -- priority: the worst it took here says what may be left, citusUrgency)
          j.priority;

-- name: JobReadyExists :one
-- Whether queue has a due runnable job on any shard: one statement that Citus runs on
-- every shard at once (a fan-out, each shard one descent of jobs_pick that stops at its
-- first due entry), rather than one router statement per shard in turn.
SELECT EXISTS (
    SELECT 1 FROM jobs j
    WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'runnable' AND j.eligible_at <= now());
