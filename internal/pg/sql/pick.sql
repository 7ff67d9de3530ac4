-- name: JobClaimBatch
-- Claims up to $2 runnable jobs of queue $1 in one statement and leases them.
--
-- `queue = $1` (never ANY) lets jobs_pick hand rows over already in (priority,
-- eligible_at, id) order, so the scan, the SKIP LOCKED lock and the LIMIT stop together
-- after about $2 rows whatever the backlog. The K=1 concurrency guard is a filter inside
-- that scan (a probe of jobs_concurrency_exclusive, never executed for keyless rows), so
-- skipped rows do not use up the batch; row_number() dedups keys within the locked set.
-- The UPDATE flips each winner by primary key (one nested loop, batch × PK lookups), sets
-- a fresh lease token, and records the inbox watermark the step will be shown
-- (claim_inbox_seq, capped at $5 signals per step). Handler settings ride along from
-- handlers_pkey so a step needs no further read.
WITH candidates AS (
    SELECT j.id, j.handler, j.concurrency_key, j.priority, j.eligible_at
    FROM jobs j
    WHERE j.queue = $1
      AND j.status = 'runnable'
      AND j.eligible_at <= now()
      AND (j.concurrency_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM jobs e
            WHERE e.concurrency_key = j.concurrency_key
              AND e.status = 'executing' AND e.gate_shard IS NULL))
    ORDER BY j.priority, j.eligible_at, j.id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
winners AS (
    SELECT c.id, c.handler
    FROM (SELECT c.*, row_number() OVER (PARTITION BY c.concurrency_key
                                         ORDER BY c.priority, c.eligible_at, c.id) AS rn
          FROM candidates c) c
    WHERE c.concurrency_key IS NULL OR c.rn = 1
)
UPDATE jobs j
SET status = 'executing',
    attempt = j.attempt + 1,
    lease_token = gen_random_uuid(),
    lease_expires_at = now() + $3 * interval '1 millisecond',
    lease_owner = $4,
    attempted_at = now(),
    claim_inbox_seq = least(j.inbox_seq, j.consumed_seq + $5),
    updated_at = now()
FROM winners w LEFT JOIN handlers h ON h.name = w.handler
WHERE j.id = w.id
RETURNING j.id, j.queue, j.handler, j.key, j.step, j.attempt, j.max_attempts, j.input,
          j.state, j.created_at, j.lease_token, j.lease_expires_at, j.attempted_at, j.wake,
          j.consumed_seq, j.claim_inbox_seq, j.inbox_seq, j.pending_children,
          h.url, h.secret, h.previous_secret, h.previous_secret_expires_at, h.timeout_ms,
          h.backoff_base_ms, h.backoff_max_ms;
