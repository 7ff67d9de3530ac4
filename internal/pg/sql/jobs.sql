-- name: JobInsertMany
-- Inserts a batch of jobs (one request item per jsonb record, in request order), with
-- live-key dedup, creating unknown queues and notifying each queue's feeders once.
-- The whole batch is refused when any handler is unknown: `missing` gates the insert,
-- so nothing is written. Returns the inserted rows (origin 'inserted', in id = request
-- order) and the pre-existing live jobs holding a requested key (origin 'existing').
-- Index use: handlers_pkey per distinct handler, jobs_live_key per keyed item (arbiter),
-- queues_pkey per distinct queue. Cost: one heap insert + its index entries per job.
WITH req AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS r(
        ord int, queue text, handler text, input jsonb, key text, priority smallint,
        run_at timestamptz, delay_ms bigint, concurrency_key text, rate_limit text,
        rate_key text, rate_weight int, max_attempts int, parent_id bigint)
),
missing AS (
    SELECT 1 FROM req r
    WHERE NOT EXISTS (SELECT 1 FROM handlers h WHERE h.name = r.handler)
       OR (r.rate_limit IS NOT NULL AND NOT EXISTS (
               SELECT 1 FROM rate_limits l WHERE l.name = r.rate_limit AND l.burst >= coalesce(r.rate_weight, 1)))
    LIMIT 1
),
new_queues AS (
    INSERT INTO queues (name)
    SELECT DISTINCT r.queue FROM req r
    WHERE NOT EXISTS (SELECT 1 FROM missing)
    ON CONFLICT (name) DO NOTHING
),
inserted AS (
    INSERT INTO jobs (queue, handler, input, key, priority, eligible_at, concurrency_key,
                      rate_limit, rate_key, rate_weight, max_attempts, parent_id)
    SELECT r.queue, r.handler, coalesce(r.input, '{}'::jsonb), r.key, coalesce(r.priority, 5),
           coalesce(r.run_at, now() + coalesce(r.delay_ms, 0) * interval '1 millisecond'),
           r.concurrency_key, r.rate_limit, r.rate_key, coalesce(r.rate_weight, 1),
           coalesce(r.max_attempts, h.max_attempts), r.parent_id
    FROM req r JOIN handlers h ON h.name = r.handler
    WHERE NOT EXISTS (SELECT 1 FROM missing)
    ORDER BY r.ord
    ON CONFLICT (key) WHERE key IS NOT NULL AND status IN ('runnable', 'executing', 'awaiting')
    DO NOTHING
    RETURNING *
),
notified AS (
    SELECT count(pg_notify('gendurable_jobs', q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM inserted WHERE eligible_at <= now()) q
)
SELECT 'inserted' AS origin, i.id, i.queue, i.handler, i.status, i.priority, i.eligible_at,
       i.input, i.state, i.result, i.error, i.step, i.attempt, i.max_attempts, i.key,
       i.concurrency_key, i.rate_limit, i.rate_key, i.rate_weight, i.parent_id,
       i.pending_children, i.awaiting, i.wake, i.inbox_seq, i.consumed_seq,
       i.lease_expires_at, i.lease_owner, i.attempted_at, i.cancel_requested,
       i.created_at, i.updated_at, i.finished_at
FROM inserted i, notified
UNION ALL
SELECT 'existing', j.id, j.queue, j.handler, j.status, j.priority, j.eligible_at,
       j.input, j.state, j.result, j.error, j.step, j.attempt, j.max_attempts, j.key,
       j.concurrency_key, j.rate_limit, j.rate_key, j.rate_weight, j.parent_id,
       j.pending_children, j.awaiting, j.wake, j.inbox_seq, j.consumed_seq,
       j.lease_expires_at, j.lease_owner, j.attempted_at, j.cancel_requested,
       j.created_at, j.updated_at, j.finished_at
FROM jobs j
WHERE j.key IN (SELECT r.key FROM req r WHERE r.key IS NOT NULL)
  AND j.status IN ('runnable', 'executing', 'awaiting');

-- name: JobInsertProblems
-- Why JobInsertMany refused a batch (its error path only): for each item, an unknown
-- handler, an unknown rate limit, or a weight that can never fit the limit's burst.
SELECT r.ord, 'handler', 'no handler named "' || r.handler || '" is registered (PUT /v1/handlers/' || r.handler || ' first)'
FROM jsonb_to_recordset($1::jsonb) AS r(ord int, handler text)
WHERE NOT EXISTS (SELECT 1 FROM handlers h WHERE h.name = r.handler)
UNION ALL
SELECT r.ord, 'rate_limit/name', 'no rate limit named "' || r.rate_limit || '" exists (PUT /v1/rate-limits/' || r.rate_limit || ' first)'
FROM jsonb_to_recordset($1::jsonb) AS r(ord int, rate_limit text)
WHERE r.rate_limit IS NOT NULL AND NOT EXISTS (SELECT 1 FROM rate_limits l WHERE l.name = r.rate_limit)
UNION ALL
SELECT r.ord, 'rate_limit/weight', 'weight ' || coalesce(r.rate_weight, 1) || ' can never fit: rate limit "' || l.name || '" has burst ' || l.burst
FROM jsonb_to_recordset($1::jsonb) AS r(ord int, rate_limit text, rate_weight int)
JOIN rate_limits l ON l.name = r.rate_limit
WHERE l.burst < coalesce(r.rate_weight, 1)
ORDER BY 1;

-- name: JobGet
-- One job by primary key, with its inbox and children counts (jobs_parent, signals_inbox).
SELECT j.id, j.queue, j.handler, j.status, j.priority, j.eligible_at,
       j.input, j.state, j.result, j.error, j.step, j.attempt, j.max_attempts, j.key,
       j.concurrency_key, j.rate_limit, j.rate_key, j.rate_weight, j.parent_id,
       j.pending_children, j.awaiting, j.wake, j.inbox_seq, j.consumed_seq,
       j.lease_expires_at, j.lease_owner, j.attempted_at, j.cancel_requested,
       j.created_at, j.updated_at, j.finished_at,
       (SELECT count(*) FROM jobs c WHERE c.parent_id = j.id) AS children_total,
       (SELECT count(*) FROM jobs c WHERE c.parent_id = j.id
                                      AND c.status IN ('done', 'failed', 'cancelled')) AS children_finished
FROM jobs j
WHERE j.id = $1;

-- name: JobList
-- Newest first with keyset pagination on id ($5 = last id seen). Filters are optional.
-- A backward scan of jobs_pkey that stops after $6 matching rows; a very selective
-- filter on a large table reads more (see docs/performance.md).
SELECT j.id, j.queue, j.handler, j.status, j.priority, j.eligible_at,
       j.input, j.state, j.result, j.error, j.step, j.attempt, j.max_attempts, j.key,
       j.concurrency_key, j.rate_limit, j.rate_key, j.rate_weight, j.parent_id,
       j.pending_children, j.awaiting, j.wake, j.inbox_seq, j.consumed_seq,
       j.lease_expires_at, j.lease_owner, j.attempted_at, j.cancel_requested,
       j.created_at, j.updated_at, j.finished_at
FROM jobs j
WHERE ($1::text IS NULL OR j.queue = $1)
  AND ($2::text IS NULL OR j.status = $2)
  AND ($3::text IS NULL OR j.handler = $3)
  AND ($4::text IS NULL OR j.key = $4)
  AND ($5::bigint IS NULL OR j.id < $5)
  AND ($7::bigint IS NULL OR j.parent_id = $7)
ORDER BY j.id DESC
LIMIT $6;

-- name: StepList
-- A job's attempt history in order (steps_pkey range scan).
SELECT s.id, s.step, s.attempt, s.outcome, s.http_status, s.started_at, s.finished_at, s.error
FROM steps s
WHERE s.job_id = $1
ORDER BY s.id
LIMIT $2;

-- name: JobGetLiveByKey
-- The live job holding key $1 (jobs_live_key).
SELECT j.id, j.queue, j.handler, j.status, j.priority, j.eligible_at,
       j.input, j.state, j.result, j.error, j.step, j.attempt, j.max_attempts, j.key,
       j.concurrency_key, j.rate_limit, j.rate_key, j.rate_weight, j.parent_id,
       j.pending_children, j.awaiting, j.wake, j.inbox_seq, j.consumed_seq,
       j.lease_expires_at, j.lease_owner, j.attempted_at, j.cancel_requested,
       j.created_at, j.updated_at, j.finished_at
FROM jobs j
WHERE j.key = $1 AND j.status IN ('runnable', 'executing', 'awaiting');
