-- name: JobReapExpiredLeases
-- Takes back up to $1 steps whose lease expired (their process died or hung): runnable
-- again, or failed when the attempts are used up, cancelled when a cancel was requested.
-- "Expired" is judged at $2 (NULL: the database's now(); tests pin it to skip waiting).
-- Ordered by expiry and SKIP LOCKED, so several reapers share the work without waiting.
-- Writes the steps history row, gives back the gate slot the step held, and joins the
-- parent of a child that ended.
-- Index use: jobs_lease range scan (only expired rows are read), jobs_pkey per row.
WITH before AS (
    SELECT id, concurrency_key, gate_shard FROM jobs
    WHERE status = 'executing' AND lease_expires_at < coalesce($2::timestamptz, now())
    ORDER BY lease_expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
updated AS (
    UPDATE jobs j
    SET status = CASE WHEN j.cancel_requested THEN 'cancelled'
                      WHEN j.attempt >= j.max_attempts THEN 'failed'
                      ELSE 'runnable' END,
        error = jsonb_build_object('message', 'lease expired: the step did not report in time',
                                   'lease_owner', j.lease_owner),
        eligible_at = now() + coalesce((SELECT gendurable_backoff_ms(j.attempt, h.backoff_base_ms, h.backoff_max_ms)
                                        FROM handlers h WHERE h.name = j.handler), 1000) * interval '1 millisecond',
        finished_at = CASE WHEN j.cancel_requested OR j.attempt >= j.max_attempts THEN now() END,
        lease_token = NULL,
        lease_expires_at = NULL,
        lease_owner = NULL,
        gate_shard = NULL,
        late_signals = NULL,
        cancelled_while = CASE WHEN j.cancel_requested THEN 'executing' END,
        updated_at = now()
    FROM before e
    WHERE j.id = e.id AND j.status = 'executing' AND j.lease_expires_at < coalesce($2::timestamptz, now())
      AND j.id = ANY (ARRAY(SELECT e2.id FROM before e2))  -- PK lookups under any plan
    RETURNING j.id, j.status, j.queue, j.parent_id, j.step, j.attempt, j.attempted_at, j.error
),
-- @GateCredit
history AS (
    INSERT INTO steps (job_id, queue, step, attempt, outcome, http_status, started_at, finished_at, error)
    SELECT u.id, u.queue, u.step, u.attempt, 'lease_expired', NULL, coalesce(u.attempted_at, now()), now(), u.error
    FROM updated u
),
-- @ParentJoin
notified AS (
    SELECT count(pg_notify('gendurable_jobs', q.queue)) AS n
    FROM (SELECT queue FROM updated WHERE status = 'runnable'
          UNION SELECT queue FROM joined WHERE status = 'runnable') q
)
SELECT u.id, u.status FROM updated u, notified;

-- name: JobWakeExpiredAwaits
-- Wakes up to $1 awaiting jobs whose wait deadline passed at $2 (NULL: now()), with
-- wake = 'timeout'.
-- Index use: jobs_await_deadline range scan, jobs_pkey per row.
WITH due AS (
    SELECT id FROM jobs
    WHERE status = 'awaiting' AND eligible_at <= coalesce($2::timestamptz, now())
    ORDER BY eligible_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
woken AS (
    UPDATE jobs j
    SET status = 'runnable', wake = 'timeout', eligible_at = now(), updated_at = now()
    FROM due
    WHERE j.id = due.id AND j.status = 'awaiting' AND j.eligible_at <= coalesce($2::timestamptz, now())
      AND j.id = ANY (ARRAY(SELECT d2.id FROM due d2))  -- PK lookups under any plan
    RETURNING j.id, j.queue
),
notified AS (
    SELECT count(pg_notify('gendurable_jobs', q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM woken) q
)
SELECT w.id FROM woken w, notified;
