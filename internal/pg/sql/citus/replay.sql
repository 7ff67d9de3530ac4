-- name: JobReplay :one
-- JobReplay (sql/job_replay.sql) at the job's placement, a router statement (the job, its
-- children and its parent share the placement); the clock is read in `target`, and the
-- wake-up is the caller's.
WITH target AS (
    SELECT j.id, now() AS now,
           -- the default key for a job of a queue made fair since it ran (JobRetry)
           (SELECT '' FROM queues q WHERE q.name = j.queue AND q.fairness <> 'none') AS fair_default
    FROM jobs j
    WHERE j.placement = sqlc.arg(placement)::int AND j.id = sqlc.arg(id)::bigint
      AND j.status IN ('done', 'failed', 'cancelled')
      AND sqlc.arg(from_step)::int BETWEEN 0 AND j.step
      AND NOT EXISTS (SELECT 1 FROM jobs c
                      WHERE c.placement = sqlc.arg(placement)::int AND c.parent_id = j.id
                        AND c.status IN ('runnable', 'executing', 'awaiting'))
      AND NOT EXISTS (SELECT 1 FROM remote_children r  -- a remote child not ended (or not joined yet)
                      WHERE r.placement = sqlc.arg(placement)::int AND r.parent_id = j.id AND r.status = 'runnable')
    FOR UPDATE
),
replayed AS (
    UPDATE jobs j
    SET status = 'runnable', eligible_at = t.now, step = sqlc.arg(from_step)::int, attempt = 0,
        state = sqlc.narg(state)::jsonb, result = NULL, error = NULL, wake = NULL, awaiting = NULL,
        pending_children = 0, late_signals = NULL, cancel_requested = false, cancelled_while = NULL,
        debounce_key = NULL, debounce_deadline = NULL, finished_at = NULL, updated_at = t.now,
        fairness_key = coalesce(j.fairness_key, t.fair_default),
        -- a remote child whose end its parent counted: counted again across shards
        parent_join = CASE WHEN j.parent_join = 'joined' THEN 'relive' ELSE j.parent_join END
    FROM target t
    WHERE j.placement = sqlc.arg(placement)::int AND j.id = t.id
    RETURNING j.id, j.queue, j.parent_id, j.parent_join, t.now
),
parent AS (
    UPDATE jobs p
    SET pending_children = p.pending_children + 1, updated_at = r.now
    FROM replayed r
    WHERE p.placement = sqlc.arg(placement)::int AND p.id = r.parent_id AND p.status = 'awaiting' AND p.pending_children > 0
)
-- relive: a remote child to count again, which the caller (else the reaper's turn) carries
SELECT r.id, r.queue, coalesce(r.parent_join = 'relive', false)::bool AS relive FROM replayed r;

-- name: JobRerun :one
-- JobRerun (sql/job_replay.sql) at the old job's placement, a router INSERT ... SELECT:
-- the new job lives where the old one does (its key's or concurrency key's placement when
-- it has one), with the id new_id drawn for that placement (JobIDsDraw); the clock is read
-- in the SELECT, and the wake-up is the caller's.
INSERT INTO jobs AS n (id, placement, queue, handler, priority, eligible_at, input, max_attempts, key,
                  concurrency_key, rate_limit, rate_key, rate_weight, extra_rate_limits, rerun_of,
                  created_at, updated_at, fairness_key, rate_placement)
SELECT sqlc.arg(new_id)::bigint, o.placement, o.queue, o.handler, o.priority, now(),
       coalesce(sqlc.narg(input)::jsonb, o.input), o.max_attempts, o.key, o.concurrency_key,
       o.rate_limit, o.rate_key, o.rate_weight, o.extra_rate_limits, o.id, now(), now(),
       -- ('' in a queue made fair since, as JobRerun: every live job of a fair queue has one)
       coalesce(o.fairness_key, CASE WHEN o.queue IN (SELECT q.name FROM queues q WHERE q.fairness <> 'none') THEN '' END),
       o.rate_placement
FROM jobs o
WHERE o.placement = sqlc.arg(placement)::int AND o.id = sqlc.arg(id)::bigint
  AND o.status IN ('done', 'failed', 'cancelled')
RETURNING n.id, n.queue;
