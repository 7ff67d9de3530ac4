-- name: JobReplay :one
-- Runs a finished job (done, failed or cancelled) again from step from_step (0 up to the
-- step it ended at) with state state: runnable now, with fresh attempts; its result,
-- error, wake reason, wait and cancel are cleared, and its debounce key (a replayed job is
-- no pending debounce). Kept: the history (the replay's attempts follow it, numbered from
-- from_step), the inbox (consumed signals stay consumed), the children, the key and the
-- idempotency key. No row when the job is live, from_step is past its step, or a child of
-- it is still live; a live job holding its key makes it fail (jobs_live_key: 409). A
-- replayed child of a parent still waiting for its children counts as pending again.
-- Index use: jobs_pkey; jobs_parent for the live-children check. Not on a hot path.
WITH target AS (
    SELECT j.id,
           -- the default key for a job of a queue made fair since it ran (JobRetry)
           (SELECT '' FROM queues q WHERE q.name = j.queue AND q.fairness <> 'none') AS fair_default
    FROM jobs j
    WHERE j.id = sqlc.arg(id)::bigint AND j.status IN ('done', 'failed', 'cancelled')
      AND sqlc.arg(from_step)::int BETWEEN 0 AND j.step
      AND NOT EXISTS (SELECT 1 FROM jobs c
                      WHERE c.parent_id = j.id AND c.status IN ('runnable', 'executing', 'awaiting'))
    FOR UPDATE
),
replayed AS (
    UPDATE jobs j
    SET status = 'runnable', eligible_at = now(), step = sqlc.arg(from_step)::int, attempt = 0,
        state = sqlc.narg(state)::jsonb, result = NULL, error = NULL, wake = NULL, awaiting = NULL,
        pending_children = 0, late_signals = NULL, cancel_requested = false, cancelled_while = NULL,
        debounce_key = NULL, debounce_deadline = NULL, finished_at = NULL, updated_at = now(),
        fairness_key = coalesce(j.fairness_key, t.fair_default)
    FROM target t
    WHERE j.id = t.id
    RETURNING j.id, j.queue, j.parent_id
),
parent AS (
    UPDATE jobs p
    SET pending_children = p.pending_children + 1, updated_at = now()
    FROM replayed r
    WHERE p.id = r.parent_id AND p.status = 'awaiting' AND p.pending_children > 0
),
notified AS (
    SELECT count(pg_notify('gendurable_jobs', r.queue)) AS n FROM replayed r
)
SELECT r.id FROM replayed r, notified;

-- name: JobRerun :one
-- Inserts a new job that runs finished job id (done, failed or cancelled) again from its
-- first step, with input input (the old job's when NULL), linked by rerun_of: the same
-- handler, queue, priority, attempts, key, concurrency key, rate limits and fairness key
-- ('' in a queue made fair since: every live job of a fair queue has one); not its parent
-- (a rerun is a job of its own), schedule, debounce or idempotency key. No row when the
-- job is live; a live job holding its key makes it fail (jobs_live_key: 409).
-- Index use: jobs_pkey for the old job; the insert's own index entries. Not on a hot path.
WITH inserted AS (
    INSERT INTO jobs (queue, handler, priority, input, max_attempts, key, concurrency_key,
                      rate_limit, rate_key, rate_weight, extra_rate_limits, rerun_of, fairness_key)
    SELECT o.queue, o.handler, o.priority, coalesce(sqlc.narg(input)::jsonb, o.input), o.max_attempts,
           o.key, o.concurrency_key, o.rate_limit, o.rate_key, o.rate_weight, o.extra_rate_limits, o.id,
           coalesce(o.fairness_key, CASE WHEN o.queue IN (SELECT q.name FROM queues q WHERE q.fairness <> 'none') THEN '' END)
    FROM jobs o
    WHERE o.id = sqlc.arg(id)::bigint AND o.status IN ('done', 'failed', 'cancelled')
    RETURNING jobs.id, jobs.queue
),
notified AS (
    SELECT count(pg_notify('gendurable_jobs', i.queue)) AS n FROM inserted i
)
SELECT i.id FROM inserted i, notified;
