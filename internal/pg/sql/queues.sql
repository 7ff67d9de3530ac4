-- name: QueueUpsert :one
-- Creates or changes a queue's settings; NULL parameters keep the current value
-- (clear_retention = true clears the retention override, retention_ms sets it in ms). Every dispatcher is told
-- at once (NOTIFY '!settings', a payload no queue name can take) rather than at its next
-- periodic reload: a resumed queue runs now, not up to a reload interval later.
WITH q AS (
    INSERT INTO queues AS q (name, paused, max_in_flight, batch, retention, step_bodies)
    VALUES (sqlc.arg(name)::text, coalesce(sqlc.narg(paused)::bool, false), coalesce(sqlc.narg(max_in_flight)::int, 100), coalesce(sqlc.narg(batch)::int, 50), sqlc.narg(retention_ms)::bigint * interval '1 millisecond',
            coalesce(sqlc.narg(step_bodies)::text, 'failures'))
    ON CONFLICT (name) DO UPDATE
    SET paused = coalesce(sqlc.narg(paused), q.paused),
        max_in_flight = coalesce(sqlc.narg(max_in_flight), q.max_in_flight),
        batch = coalesce(sqlc.narg(batch), q.batch),
        step_bodies = coalesce(sqlc.narg(step_bodies), q.step_bodies),
        retention = CASE WHEN sqlc.arg(clear_retention)::bool THEN NULL ELSE coalesce(sqlc.narg(retention_ms) * interval '1 millisecond', q.retention) END,
        updated_at = excluded.updated_at
    RETURNING q.*
),
notified AS (
    SELECT count(pg_notify('gendurable_jobs', '!settings')) FROM q
)
SELECT q.name, q.paused, q.max_in_flight, q.batch, q.retention, q.created_at, q.updated_at, q.step_bodies
FROM q, notified;

-- name: QueueList :many
-- Every queue's settings (the feeders reload these every second).
SELECT q.* FROM queues q ORDER BY q.name;

-- name: QueueCounts :many
-- Jobs per status of queue queue (NULL: all queues), and the age of the oldest runnable job.
-- Live statuses are counted from their partial indexes; terminal ones are bounded by the
-- GC retention. Cost: proportional to the jobs of the queue.
SELECT j.queue, j.status, count(*) AS n,
       CASE WHEN j.status = 'runnable' THEN min(j.eligible_at) END AS oldest_runnable
FROM jobs j
WHERE sqlc.narg(queue)::text IS NULL OR j.queue = sqlc.narg(queue)
GROUP BY j.queue, j.status;

-- name: QueueEnsureMany :exec
-- Creates the queues of names that do not exist yet, with default settings (the children of
-- a spawn may name a queue nothing has created; feeders start for queues rows only).
-- Index use: queues_pkey per name.
INSERT INTO queues (name)
SELECT DISTINCT n FROM unnest(sqlc.arg(names)::text[]) AS n
ON CONFLICT (name) DO NOTHING;
