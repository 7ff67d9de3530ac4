-- name: LeaseExtendMany :many
-- Extends the leases of a process's in-flight steps in one statement per heartbeat tick.
-- Fenced per row by its token (only an executing row holds one). A row that another
-- transaction has locked (an application's transaction, a long statement) is skipped for
-- this tick rather than waited for: one locked row must not stall the heartbeat of every
-- step of the process until all their leases expire (found by the chaos run). Answers
-- every lease still held: extended, or (skipped) with its current expiry. A lease missing
-- from the answer is lost.
-- Index use: jobs_pkey per id (unnest × PK lookups); a skipped row one more.
WITH l AS (
    SELECT * FROM ROWS FROM (unnest(sqlc.arg(ids)::bigint[]), unnest(sqlc.arg(tokens)::uuid[])) AS l(id, token)
),
locked AS (
    SELECT j.id
    FROM jobs j JOIN l ON j.id = l.id AND j.lease_token = l.token
    WHERE j.id = ANY (sqlc.arg(ids)::bigint[])
    FOR UPDATE OF j SKIP LOCKED
),
extended AS (
    UPDATE jobs j
    SET lease_expires_at = now() + sqlc.arg(lease_ttl_ms)::bigint * interval '1 millisecond'
    FROM locked k
    WHERE j.id = k.id AND j.id = ANY (sqlc.arg(ids)::bigint[])
    RETURNING j.id, j.lease_expires_at
)
SELECT h.id::bigint AS id, h.expires_at
FROM (SELECT l.id,
             -- coalesce evaluates the probe only for a row skipped as locked
             coalesce(e.lease_expires_at,
                      (SELECT s.lease_expires_at FROM jobs s WHERE s.id = l.id AND s.lease_token = l.token)) AS expires_at
      FROM l LEFT JOIN extended e ON e.id = l.id) h
WHERE h.expires_at IS NOT NULL;

-- name: LeaseReleaseMany :many
-- Gives claimed steps back before their webhook was called (the claim's follow-up reads
-- failed): runnable again at once, the attempt the claim counted undone, the gate slot
-- returned. Fenced per row by (id, token) as the outcome is: only an executing row holds
-- a token (the CHECK jobs_lease_token_iff_executing of migration 0005). A row missing
-- from the result was no longer held.
-- No `status = 'executing'` test: it lets the planner read the partial index jobs_lease,
-- which holds every step in flight (measured, statistics gathered before a burst of
-- 100 000 claims, 50 leases: all 100 000 hash-joined, then rescanned once per row by the
-- credit's join, 3.3 million rows read; TestLeaseGiveBackReadsOnlyItsRows).
-- Index use: jobs_pkey per id (`id = ANY (ids)`, PK lookups under any plan); 50 leases
-- read 50 rows of jobs whatever is in flight.
WITH l AS (
    SELECT * FROM ROWS FROM (unnest(sqlc.arg(ids)::bigint[]), unnest(sqlc.arg(tokens)::uuid[])) AS l(id, token)
),
before AS (
    SELECT j.id, j.concurrency_key, j.gate_shard
    FROM jobs j JOIN l ON j.id = l.id AND j.lease_token = l.token
    WHERE j.id = ANY (sqlc.arg(ids)::bigint[])
),
updated AS (
    UPDATE jobs j
    SET status = 'runnable',
        attempt = greatest(j.attempt - 1, 0),
        eligible_at = now(),
        lease_token = NULL,
        lease_expires_at = NULL,
        lease_owner = NULL,
        gate_shard = NULL,
        late_signals = NULL,
        updated_at = now()
    FROM l
    WHERE j.id = l.id
      AND j.lease_token = l.token
      AND j.id = ANY (sqlc.arg(ids)::bigint[])
    RETURNING j.id, j.queue
),
-- The gate slot an ending step held goes back to its shard (capped: a gate whose limit
-- was lowered meanwhile refills only up to its new cap).
credited AS (
    UPDATE gate_slots s
    SET available = least(s.cap, s.available + d.n)
    FROM (SELECT b.concurrency_key AS key, b.gate_shard AS shard, count(*) AS n
          FROM updated u JOIN before b ON b.id = u.id
          WHERE b.gate_shard IS NOT NULL
          GROUP BY 1, 2 ORDER BY 1, 2) d
    WHERE s.key = d.key AND s.shard = d.shard
),
notified AS (
    SELECT count(pg_notify('gendurable_jobs', q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM updated) q
)
SELECT u.id FROM updated u, notified;

-- name: LeaseGetBackoffs :many
-- The attempt and the handler's backoff settings of leased steps: what the engine
-- computes a retry's delay from when its caller was not handed them by the claim (an
-- asynchronous step's outcome posted to the API with a retry without a delay). Only
-- such a retry pays this statement. Fenced by token like the outcome it precedes; a step
-- missing from the answer is no longer leased (its outcome will be refused). The backoff
-- settings are NULL when no handler is registered under the job's name.
-- Index use: jobs_pkey per id, handlers_pkey per row.
SELECT j.id, j.lease_token::uuid AS lease_token, j.attempt, h.backoff_base_ms, h.backoff_max_ms
FROM jobs j
JOIN ROWS FROM (unnest(sqlc.arg(ids)::bigint[]), unnest(sqlc.arg(tokens)::uuid[])) AS l(id, token)
  ON j.id = l.id AND j.lease_token = l.token
LEFT JOIN handlers h ON h.name = j.handler
WHERE j.id = ANY (sqlc.arg(ids)::bigint[]);

-- name: JobListExpiredLeases :many
-- Lists up to max_rows steps whose lease expired at as_of (NULL: the database's now();
-- tests pin it to skip waiting), oldest expiry first, with what the engine computes each
-- one's retry delay from: its attempt and its handler's backoff settings (NULL when no
-- handler is registered). The first half of the reaper's sweep, as River's rescuer does
-- it: JobReapExpiredLeases then takes the rows back with the delays. Locks nothing: a
-- row that changes in between is fenced off by the second statement.
-- Index use: jobs_lease range scan (only expired rows are read), handlers_pkey per row.
SELECT x.id, x.lease_token::uuid AS lease_token, x.attempt, h.backoff_base_ms, h.backoff_max_ms
FROM (SELECT j.id, j.lease_token, j.attempt, j.handler, j.lease_expires_at
      FROM jobs j
      WHERE j.status = 'executing' AND j.lease_expires_at < coalesce(sqlc.narg(as_of)::timestamptz, now())
      ORDER BY j.lease_expires_at
      LIMIT sqlc.arg(max_rows)::int) x
LEFT JOIN handlers h ON h.name = x.handler
ORDER BY x.lease_expires_at;

-- name: JobReapExpiredLeases :many
-- Takes back the expired leases JobListExpiredLeases found, each with its retry delay in
-- delays_ms: runnable again after it, or failed when the attempts are used up, cancelled
-- when a cancel was requested. Fenced per row by its lease token and, at as_of (NULL:
-- now()), its expiry: a step that reported, or whose lease was extended or taken by
-- another reaper meanwhile, is left alone and missing from the answer. SKIP LOCKED, so
-- several reapers share the work without waiting. Writes the steps history row, gives
-- back the gate slot the step held, and joins the parent of a child that ended.
-- Index use: jobs_pkey per id (unnest × PK lookups).
WITH e AS (
    SELECT * FROM ROWS FROM (unnest(sqlc.arg(ids)::bigint[]), unnest(sqlc.arg(tokens)::uuid[]),
                             unnest(sqlc.arg(delays_ms)::bigint[])) AS e(id, token, delay_ms)
),
before AS (
    SELECT j.id, j.concurrency_key, j.gate_shard, e.delay_ms
    FROM jobs j JOIN e ON e.id = j.id AND j.lease_token = e.token
    WHERE j.id = ANY (sqlc.arg(ids)::bigint[])  -- PK lookups under any plan
      AND j.lease_expires_at < coalesce(sqlc.narg(as_of)::timestamptz, now())
    FOR UPDATE OF j SKIP LOCKED
),
updated AS (
    UPDATE jobs j
    SET status = CASE WHEN j.cancel_requested THEN 'cancelled'
                      WHEN j.attempt >= j.max_attempts THEN 'failed'
                      ELSE 'runnable' END,
        error = jsonb_build_object('message', 'lease expired: the step did not report in time',
                                   'lease_owner', j.lease_owner),
        eligible_at = now() + b.delay_ms * interval '1 millisecond',
        finished_at = CASE WHEN j.cancel_requested OR j.attempt >= j.max_attempts THEN now() END,
        lease_token = NULL,
        lease_expires_at = NULL,
        lease_owner = NULL,
        gate_shard = NULL,
        late_signals = NULL,
        cancelled_while = CASE WHEN j.cancel_requested THEN 'executing' END,
        updated_at = now()
    -- By id alone: the rows are `before`'s, locked. An extra `j.id = ANY (ARRAY(...))`
    -- made the planner repeat that whole index scan per row of `before` (measured: 1 300
    -- rows read for 50 leases, custom and generic plans alike; TestReapReadsOnlyWhatExpired).
    FROM before b
    WHERE j.id = b.id
    RETURNING j.id, j.status, j.queue, j.handler, j.parent_id, j.step, j.attempt, j.attempted_at, j.error
),
-- The gate slot an ending step held goes back to its shard (capped: a gate whose limit
-- was lowered meanwhile refills only up to its new cap).
credited AS (
    UPDATE gate_slots s
    SET available = least(s.cap, s.available + d.n)
    FROM (SELECT b.concurrency_key AS key, b.gate_shard AS shard, count(*) AS n
          FROM updated u JOIN before b ON b.id = u.id
          WHERE b.gate_shard IS NOT NULL
          GROUP BY 1, 2 ORDER BY 1, 2) d
    WHERE s.key = d.key AND s.shard = d.shard
),
history AS (
    INSERT INTO steps (job_id, queue, handler, step, attempt, outcome, http_status, started_at, finished_at, error)
    SELECT u.id, u.queue, u.handler, u.step, u.attempt, 'lease_expired', NULL, coalesce(u.attempted_at, now()), now(), u.error
    FROM updated u
),
-- The parent join of a statement whose `updated` CTE ended children: each parent's
-- pending_children drops by its finished children (grouped, so two children of one
-- parent in a batch count twice), and a parent waiting for them is woken at zero.
-- A row `updated` already changed is left alone: Postgres applies only one of two
-- updates of a row in one statement. Parents are locked in id order.
joined AS (
    UPDATE jobs p
    SET pending_children = p.pending_children - d.n,
        status = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN 'runnable'
                      ELSE p.status END,
        wake = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN 'children'
                    ELSE p.wake END,
        eligible_at = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN now()
                           ELSE p.eligible_at END,
        updated_at = now()
    FROM (SELECT parent_id, count(*) AS n FROM updated
          WHERE parent_id IS NOT NULL AND status IN ('done', 'failed', 'cancelled')
          GROUP BY parent_id ORDER BY parent_id) d
    WHERE p.id = d.parent_id AND p.pending_children > 0
      AND p.id NOT IN (SELECT u.id FROM updated u)
    RETURNING p.queue, p.status
),
notified AS (
    SELECT count(pg_notify('gendurable_jobs', q.queue)) AS n
    FROM (SELECT queue FROM updated WHERE status = 'runnable'
          UNION SELECT queue FROM joined WHERE status = 'runnable') q
)
-- The queue, handler and the attempt's start and end, as its history row holds them
-- (counted into the charts' rollups, engine.StepRollups).
SELECT u.id, u.status, u.queue, u.handler, coalesce(u.attempted_at, now())::timestamptz AS started_at,
       now()::timestamptz AS finished_at
FROM updated u, notified;

-- name: JobWakeExpiredAwaits :many
-- Wakes up to max_rows awaiting jobs whose wait deadline passed at as_of (NULL: now()), with
-- wake = 'timeout'.
-- Index use: jobs_await_deadline range scan, jobs_pkey per row.
WITH due AS (
    SELECT id FROM jobs
    WHERE status = 'awaiting' AND eligible_at <= coalesce(sqlc.narg(as_of)::timestamptz, now())
    ORDER BY eligible_at
    LIMIT sqlc.arg(max_rows)::int
    FOR UPDATE SKIP LOCKED
),
woken AS (
    UPDATE jobs j
    SET status = 'runnable', wake = 'timeout', eligible_at = now(), updated_at = now()
    FROM due
    WHERE j.id = due.id AND j.status = 'awaiting' AND j.eligible_at <= coalesce(sqlc.narg(as_of)::timestamptz, now())
      AND j.id = ANY (ARRAY(SELECT d2.id FROM due d2))  -- PK lookups under any plan
    RETURNING j.id, j.queue
),
notified AS (
    SELECT count(pg_notify('gendurable_jobs', q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM woken) q
)
SELECT w.id FROM woken w, notified;
