-- name: LeaseExtendMany :many
-- LeaseExtendMany (sql/job_lease.sql) for the leases of one shard (`placements`): a
-- router statement per shard of the process's in-flight steps at each heartbeat tick.
WITH l AS (
    SELECT * FROM ROWS FROM (unnest(sqlc.arg(ids)::bigint[]), unnest(sqlc.arg(tokens)::uuid[])) AS l(id, token)
),
locked AS (
    SELECT j.id
    FROM jobs j JOIN l ON j.id = l.id AND j.lease_token = l.token
    WHERE j.placement = ANY (sqlc.arg(placements)::int[]) AND j.id = ANY (sqlc.arg(ids)::bigint[])
    FOR UPDATE OF j SKIP LOCKED
),
extended AS (
    UPDATE jobs j
    SET lease_expires_at = now() + sqlc.arg(lease_ttl_ms)::bigint * interval '1 millisecond'
    FROM locked k
    WHERE j.placement = ANY (sqlc.arg(placements)::int[]) AND j.id = k.id AND j.id = ANY (sqlc.arg(ids)::bigint[])
    RETURNING j.id, j.lease_expires_at
)
SELECT h.id::bigint AS id, h.expires_at
FROM (SELECT l.id,
             coalesce(e.lease_expires_at,
                      (SELECT s.lease_expires_at FROM jobs s
                       WHERE s.placement = ANY (sqlc.arg(placements)::int[]) AND s.id = l.id AND s.lease_token = l.token)) AS expires_at
      FROM l LEFT JOIN extended e ON e.id = l.id) h
WHERE h.expires_at IS NOT NULL;

-- name: LeaseReleaseMany :many
-- LeaseReleaseMany (sql/job_lease.sql) for the leases of one shard: the claimed steps
-- given back before their webhook was called, the attempt uncounted, each runnable again
-- after its delay (delays_ms: 0 at once; a step whose remote bucket could not pay for it,
-- when its tokens will be there: citusTakeRemoteBuckets). A delayed step is marked as
-- waiting on its bucket (rate_waited_until, migrations/citus/0034), so that a PUT of its
-- rate limit wakes it (RateWaitsWake). The caller wakes the queues it
-- answers (pg_notify on the coordinator). No gate slot to return: on Citus a slot is held
-- by the executing row itself (jobs_gate_slot). The run times are read in the CTE: an
-- UPDATE's SET on Citus may not call a STABLE function on a column (as in
-- JobReapExpiredLeases).
WITH l AS (
    SELECT l.id, l.token, l.delay_ms, now() + l.delay_ms * interval '1 millisecond' AS run_at
    FROM ROWS FROM (unnest(sqlc.arg(ids)::bigint[]), unnest(sqlc.arg(tokens)::uuid[]),
                    unnest(sqlc.arg(delays_ms)::bigint[])) AS l(id, token, delay_ms)
)
UPDATE jobs j
SET status = 'runnable',
    attempt = greatest(j.attempt - 1, 0),
    eligible_at = l.run_at,
    rate_waited_until = CASE WHEN l.delay_ms > 0 THEN l.run_at END,
    lease_token = NULL,
    lease_expires_at = NULL,
    lease_owner = NULL,
    gate_shard = NULL,
    late_signals = NULL,
    updated_at = now()
FROM l
WHERE j.placement = ANY (sqlc.arg(placements)::int[])
  AND j.id = l.id
  AND j.lease_token = l.token
  AND j.id = ANY (sqlc.arg(ids)::bigint[])
RETURNING j.id, j.queue;

-- name: LeaseGetBackoffs :many
-- LeaseGetBackoffs (sql/job_lease.sql) for the leases of one shard.
SELECT j.id, j.lease_token::uuid AS lease_token, j.attempt, h.backoff_base_ms, h.backoff_max_ms
FROM jobs j
JOIN ROWS FROM (unnest(sqlc.arg(ids)::bigint[]), unnest(sqlc.arg(tokens)::uuid[])) AS l(id, token)
  ON j.id = l.id AND j.lease_token = l.token
LEFT JOIN handlers h ON h.name = j.handler
WHERE j.placement = ANY (sqlc.arg(placements)::int[]) AND j.id = ANY (sqlc.arg(ids)::bigint[]);

-- name: JobExpiredLeasePlacements :many
-- Where the reaper has leases to take back: the placements of up to max_rows expired
-- leases, from every shard at once (a fan-out; each shard's task one descent of jobs_lease
-- that stops at max_rows). The reaper then lists and reaps on those shards only
-- (citusReaperShards), so a sweep that finds nothing is this statement, not one on each
-- shard.
SELECT placement FROM jobs
WHERE status = 'executing' AND lease_expires_at < coalesce(sqlc.narg(as_of)::timestamptz, now())
LIMIT sqlc.arg(max_rows)::int;

-- name: JobDueAwaitPlacements :many
-- Where awaits are past their deadline: the placements of up to max_rows of them, from
-- every shard at once (a fan-out like JobExpiredLeasePlacements, on jobs_await_deadline).
SELECT placement FROM jobs
WHERE status = 'awaiting' AND eligible_at <= coalesce(sqlc.narg(as_of)::timestamptz, now())
LIMIT sqlc.arg(max_rows)::int;

-- name: JobListExpiredLeases :many
-- JobListExpiredLeases (sql/job_lease.sql) on one shard: the reaper visits the shards
-- JobExpiredLeasePlacements named (or all of them in turn), each a router statement.
SELECT x.id, x.lease_token::uuid AS lease_token, x.attempt, h.backoff_base_ms, h.backoff_max_ms
FROM (SELECT j.id, j.lease_token, j.attempt, j.handler, j.lease_expires_at
      FROM jobs j
      WHERE j.placement = ANY (sqlc.arg(placements)::int[])
        AND j.status = 'executing' AND j.lease_expires_at < coalesce(sqlc.narg(as_of)::timestamptz, now())
      ORDER BY j.lease_expires_at
      LIMIT sqlc.arg(max_rows)::int) x
LEFT JOIN handlers h ON h.name = x.handler
ORDER BY x.lease_expires_at;

-- name: JobReapExpiredLeases :many
-- JobReapExpiredLeases (sql/job_lease.sql) on one shard, without its history (written by
-- StepInsertApplied in the same transaction, from outcome_token, outcome_step and
-- outcome_attempt, set here) and its wake-ups (the caller's, on the coordinator).
WITH e AS (
    SELECT * FROM ROWS FROM (unnest(sqlc.arg(ids)::bigint[]), unnest(sqlc.arg(tokens)::uuid[]),
                             unnest(sqlc.arg(delays_ms)::bigint[])) AS e(id, token, delay_ms)
),
-- The clock and what the row's new values compute from it are read here: an UPDATE's SET
-- on Citus may not call a non-immutable function inside CASE, nor a STABLE one on a column.
before AS (
    SELECT j.id, e.token, now() AS now, now() + e.delay_ms * interval '1 millisecond' AS run_at,
           jsonb_build_object('message', 'lease expired: the step did not report in time',
                              'lease_owner', j.lease_owner) AS error
    FROM jobs j JOIN e ON e.id = j.id AND j.lease_token = e.token
    WHERE j.placement = ANY (sqlc.arg(placements)::int[])
      AND j.id = ANY (sqlc.arg(ids)::bigint[])
      AND j.lease_expires_at < coalesce(sqlc.narg(as_of)::timestamptz, now())
    FOR UPDATE OF j SKIP LOCKED
),
updated AS (
    UPDATE jobs j
    SET status = CASE WHEN j.cancel_requested THEN 'cancelled'
                      WHEN j.attempt >= j.max_attempts THEN 'failed'
                      ELSE 'runnable' END,
        error = b.error,
        eligible_at = b.run_at,
        finished_at = CASE WHEN j.cancel_requested OR j.attempt >= j.max_attempts THEN b.now END,
        lease_token = NULL,
        lease_expires_at = NULL,
        lease_owner = NULL,
        gate_shard = NULL,
        late_signals = NULL,
        cancelled_while = CASE WHEN j.cancel_requested THEN 'executing' END,
        updated_at = b.now,
        outcome_token = b.token, outcome_step = j.step, outcome_attempt = j.attempt
    FROM before b
    WHERE j.placement = ANY (sqlc.arg(placements)::int[]) AND j.id = b.id
    RETURNING j.id, j.status, j.queue, j.handler, j.parent_id, j.parent_join, j.attempted_at, b.token, b.now
),
joined AS (
    UPDATE jobs p
    SET pending_children = p.pending_children - d.n,
        status = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN 'runnable'
                      ELSE p.status END,
        wake = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN 'children'
                    ELSE p.wake END,
        eligible_at = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN d.now
                           ELSE p.eligible_at END,
        updated_at = d.now,
        -- No outcome of the parent applied here: StepInsertApplied and JobInsertChildren,
        -- which join the rows this transaction wrote, must not take a stale record of it.
        outcome_token = NULL
    FROM (SELECT parent_id, count(*) AS n, min(now) AS now FROM updated
          -- a remote child (parent_join set) joins its parent through a carry of its own,
          -- also when its placement is on its parent's shard (docs/citus.md)
          WHERE parent_id IS NOT NULL AND parent_join IS NULL AND status IN ('done', 'failed', 'cancelled')
          GROUP BY parent_id ORDER BY parent_id) d
    WHERE p.placement = ANY (sqlc.arg(placements)::int[])
      AND p.id = d.parent_id AND p.pending_children > 0
      AND p.id NOT IN (SELECT u.id FROM updated u)
    RETURNING p.queue, p.status
)
SELECT u.id, u.token::text AS token, u.status, u.queue, u.handler, coalesce(u.attempted_at, u.now)::timestamptz AS started_at,
       u.now::timestamptz AS finished_at, w.woken::text[] AS woken
FROM updated u
CROSS JOIN (SELECT array_agg(DISTINCT j.queue) AS woken FROM joined j WHERE j.status = 'runnable') w;

-- name: JobWakeExpiredAwaits :many
-- JobWakeExpiredAwaits (sql/job_lease.sql) on one shard; the caller wakes the queues.
-- The deadline test is the locked scan's (FOR UPDATE re-checks it on a changed row): an
-- UPDATE's WHERE on Citus may not call now() inside coalesce.
WITH due AS (
    SELECT id, now() AS now FROM jobs
    WHERE placement = ANY (sqlc.arg(placements)::int[])
      AND status = 'awaiting' AND eligible_at <= coalesce(sqlc.narg(as_of)::timestamptz, now())
    ORDER BY eligible_at
    LIMIT sqlc.arg(max_rows)::int
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs j
SET status = 'runnable', wake = 'timeout', eligible_at = due.now, updated_at = due.now
FROM due
WHERE j.placement = ANY (sqlc.arg(placements)::int[])
  AND j.id = due.id AND j.status = 'awaiting'
  AND j.id = ANY (ARRAY(SELECT d2.id FROM due d2))
RETURNING j.id, j.queue;

-- name: ReaperTurnTake :one
-- The reaper's turn (migrations/citus/0033, a table of the coordinator): taken by owner
-- when nobody holds it or its holder's turn lapsed, renewed when owner holds it, for
-- hold_ms from now. No row: another process holds it.
INSERT INTO reaper_turn AS t (singleton, owner, until)
VALUES (true, sqlc.arg(owner)::text, now() + sqlc.arg(hold_ms)::bigint * interval '1 millisecond')
ON CONFLICT (singleton) DO UPDATE SET owner = excluded.owner, until = excluded.until
WHERE t.owner = excluded.owner OR t.until < now()
RETURNING t.owner;
