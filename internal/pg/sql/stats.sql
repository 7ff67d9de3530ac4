-- name: StepStats :many
-- Time-bucketed series of the steps finished on queue queue or by handler handler (exactly
-- one is given; the other branch of the UNION ALL is cut by its one-time filter and never
-- runs): buckets buckets of bucket_ms each, aligned to the epoch, the last one holding
-- now(), one row per bucket (zeros where nothing finished). Per bucket: the attempts by
-- outcome class (ok: the step continued or finished its job; failed: no retry asked, i.e.
-- the handler's fail or a request that could not be sent; the rest are retryable errors,
-- including a last attempt after which the job failed), the jobs completed (done), and
-- p50/p95/p99 of finished_at - started_at in milliseconds (NULL for an empty bucket).
-- Index use: steps_queue_finished or steps_handler_finished, a range scan from the
-- window's start of each partition the window touches (the others are pruned at run time:
-- the window's start is an initplan's value). Cost: proportional to the steps in the
-- window (a sort per bucket for the percentiles), not to the history.
WITH w AS (
    SELECT b.width, date_bin(b.width, now(), timestamptz 'epoch') - (sqlc.arg(buckets)::int - 1) * b.width AS since
    FROM (SELECT sqlc.arg(bucket_ms)::bigint * interval '1 millisecond' AS width) b
),
s AS (
    SELECT x.finished_at, x.started_at, x.outcome FROM steps x
    WHERE sqlc.narg(queue)::text IS NOT NULL AND x.queue = sqlc.narg(queue)::text
      AND x.finished_at >= (SELECT w.since FROM w)
    UNION ALL
    SELECT x.finished_at, x.started_at, x.outcome FROM steps x
    WHERE sqlc.narg(handler)::text IS NOT NULL AND x.handler = sqlc.narg(handler)::text
      AND x.finished_at >= (SELECT w.since FROM w)
),
agg AS (
    SELECT date_bin((SELECT w.width FROM w), s.finished_at, timestamptz 'epoch') AS bucket,
           count(*) FILTER (WHERE s.outcome IN ('next', 'await', 'spawn', 'done')) AS ok,
           count(*) FILTER (WHERE s.outcome IN ('fail', 'request_too_large', 'bad_secret')) AS failed,
           count(*) FILTER (WHERE s.outcome = 'done') AS done,
           count(*) AS total,
           percentile_cont(ARRAY[0.5, 0.95, 0.99]::float8[]) WITHIN GROUP (
               ORDER BY (extract(epoch FROM s.finished_at - s.started_at) * 1000)::float8) AS latency_ms
    FROM s
    GROUP BY 1
)
SELECT g.bucket::timestamptz AS bucket,
       coalesce(a.ok, 0)::bigint AS ok,
       coalesce(a.failed, 0)::bigint AS failed,
       coalesce(a.done, 0)::bigint AS done,
       coalesce(a.total, 0)::bigint AS total,
       a.latency_ms::float8[] AS latency_ms
FROM w
CROSS JOIN LATERAL generate_series(w.since, w.since + (sqlc.arg(buckets)::int - 1) * w.width, w.width) AS g(bucket)
LEFT JOIN agg a ON a.bucket = g.bucket
ORDER BY g.bucket;
