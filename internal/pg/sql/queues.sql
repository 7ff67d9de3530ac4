-- name: QueueUpsert
-- Creates or changes a queue's settings; NULL parameters keep the current value
-- ($5 = true clears the retention override, $6 sets it in ms). Every dispatcher is told
-- at once (NOTIFY '!settings', a payload no queue name can take) rather than at its next
-- periodic reload: a resumed queue runs now, not up to a reload interval later.
WITH q AS (
    INSERT INTO queues AS q (name, paused, max_in_flight, batch, retention)
    VALUES ($1, coalesce($2, false), coalesce($3, 100), coalesce($4, 50), $6 * interval '1 millisecond')
    ON CONFLICT (name) DO UPDATE
    SET paused = coalesce($2, q.paused),
        max_in_flight = coalesce($3, q.max_in_flight),
        batch = coalesce($4, q.batch),
        retention = CASE WHEN $5 THEN NULL ELSE coalesce($6 * interval '1 millisecond', q.retention) END,
        updated_at = now()
    RETURNING q.name, q.paused, q.max_in_flight, q.batch, q.retention, q.created_at, q.updated_at
),
notified AS (
    SELECT pg_notify('gendurable_jobs', '!settings') FROM q
)
SELECT q.name, q.paused, q.max_in_flight, q.batch, extract(epoch FROM q.retention) * 1000, q.created_at, q.updated_at
FROM q, notified;

-- name: QueueList
-- Every queue's settings (the feeders reload these every second).
SELECT q.name, q.paused, q.max_in_flight, q.batch, extract(epoch FROM q.retention) * 1000, q.created_at, q.updated_at
FROM queues q ORDER BY q.name;

-- name: QueueCounts
-- Jobs per status of queue $1 (NULL: all queues), and the age of the oldest runnable job.
-- Live statuses are counted from their partial indexes; terminal ones are bounded by the
-- GC retention. Cost: proportional to the jobs of the queue.
SELECT j.queue, j.status, count(*) AS n,
       min(j.eligible_at) FILTER (WHERE j.status = 'runnable') AS oldest_runnable
FROM jobs j
WHERE $1::text IS NULL OR j.queue = $1
GROUP BY j.queue, j.status;

-- name: QueueThroughput
-- Steps finished per minute on queue $1 over the last $2 minutes, split into completed
-- jobs, failures (any outcome that is not a step's normal continuation) and the rest.
-- Index use: steps_queue_finished range scan.
SELECT date_trunc('minute', s.finished_at) AS minute,
       count(*) FILTER (WHERE s.outcome = 'done') AS done,
       count(*) FILTER (WHERE s.outcome NOT IN ('next', 'await', 'spawn', 'done')) AS failed,
       count(*) AS total
FROM steps s
WHERE s.queue = $1 AND s.finished_at > now() - $2 * interval '1 minute'
GROUP BY 1
ORDER BY 1;

-- name: QueueEnsureMany
-- Creates the queues of $1 that do not exist yet, with default settings (the children of
-- a spawn may name a queue nothing has created; feeders start for queues rows only).
-- Index use: queues_pkey per name.
INSERT INTO queues (name)
SELECT DISTINCT n FROM unnest($1::text[]) AS n
ON CONFLICT (name) DO NOTHING;
