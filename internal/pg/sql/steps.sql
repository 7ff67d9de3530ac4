-- name: QueueThroughput :many
-- Steps finished per minute on queue queue over the last minutes minutes, split into completed
-- jobs, failures (any outcome that is not a step's normal continuation) and the rest.
-- Index use: steps_queue_finished range scan.
SELECT date_trunc('minute', s.finished_at)::timestamptz AS minute,
       count(*) FILTER (WHERE s.outcome = 'done') AS done,
       count(*) FILTER (WHERE s.outcome NOT IN ('next', 'await', 'spawn', 'done')) AS failed,
       count(*) AS total
FROM steps s
WHERE s.queue = sqlc.arg(queue)::text AND s.finished_at > now() - sqlc.arg(minutes)::int * interval '1 minute'
GROUP BY 1
ORDER BY 1;

-- name: StepList :many
-- A job's attempt history in order (steps_pkey range scan).
SELECT s.id, s.step, s.attempt, s.outcome, s.http_status, s.started_at, s.finished_at, s.error
FROM steps s
WHERE s.job_id = sqlc.arg(job_id)::bigint
ORDER BY s.id
LIMIT sqlc.arg(max_rows)::int;
