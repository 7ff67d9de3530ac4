-- name: StepStats :many
-- Time-bucketed series of the attempts finished on queue queue or by handler handler
-- (exactly one is given; the other branch of the UNION ALL is cut by its one-time filter
-- and never runs): buckets buckets of bucket_ms each, aligned to the epoch, the last one
-- holding now(), one row per bucket (zeros where nothing finished). Read from the
-- per-second rollups of migration 0016, not from the history. Per bucket: the attempts by
-- outcome class (ok: the step continued or finished its job; failed: no retry asked, or
-- the job's last attempt, after which it failed; the rest are errors retried later), the
-- jobs completed (done), and the latency histogram merged over the bucket
-- (latency_buckets ascending, latency_counts beside them; engine reads percentiles from it).
-- Index use: step_rollups_queue or step_rollups_handler, a range scan from the window's
-- start (an initplan's value). Cost: proportional to the rollup rows of the window (one
-- per second, handler and server process at most), not to the steps.
WITH w AS (
    SELECT b.width, date_bin(b.width, now(), timestamptz 'epoch') - (sqlc.arg(buckets)::int - 1) * b.width AS since
    FROM (SELECT sqlc.arg(bucket_ms)::bigint * interval '1 millisecond' AS width) b
),
r AS (
    SELECT date_bin((SELECT w.width FROM w), x.at, timestamptz 'epoch') AS bucket,
           x.ok, x.failed, x.done, x.total, x.latency_buckets, x.latency_counts
    FROM step_rollups x
    WHERE sqlc.narg(queue)::text IS NOT NULL AND x.queue = sqlc.narg(queue)::text
      AND x.at >= (SELECT w.since FROM w)
    UNION ALL
    SELECT date_bin((SELECT w.width FROM w), x.at, timestamptz 'epoch') AS bucket,
           x.ok, x.failed, x.done, x.total, x.latency_buckets, x.latency_counts
    FROM step_rollups x
    WHERE sqlc.narg(handler)::text IS NOT NULL AND x.handler = sqlc.narg(handler)::text
      AND x.at >= (SELECT w.since FROM w)
),
counts AS (
    SELECT r.bucket, sum(r.ok) AS ok, sum(r.failed) AS failed, sum(r.done) AS done, sum(r.total) AS total
    FROM r
    GROUP BY r.bucket
),
latency AS (
    SELECT h.bucket, array_agg(h.b ORDER BY h.b) AS latency_buckets, array_agg(h.n ORDER BY h.b) AS latency_counts
    FROM (SELECT r.bucket, u.b, sum(u.n)::bigint AS n
          FROM r CROSS JOIN LATERAL ROWS FROM (unnest(r.latency_buckets), unnest(r.latency_counts)) AS u(b, n)
          GROUP BY r.bucket, u.b) h
    GROUP BY h.bucket
)
SELECT g.bucket::timestamptz AS bucket,
       coalesce(c.ok, 0)::bigint AS ok,
       coalesce(c.failed, 0)::bigint AS failed,
       coalesce(c.done, 0)::bigint AS done,
       coalesce(c.total, 0)::bigint AS total,
       l.latency_buckets::smallint[] AS latency_buckets,
       l.latency_counts::bigint[] AS latency_counts
FROM w
CROSS JOIN LATERAL generate_series(w.since, w.since + (sqlc.arg(buckets)::int - 1) * w.width, w.width) AS g(bucket)
LEFT JOIN counts c ON c.bucket = g.bucket
LEFT JOIN latency l ON l.bucket = g.bucket
ORDER BY g.bucket;

-- name: StepRollupAppend :exec
-- Appends what one server process counted since its last flush: one row per queue,
-- handler and second (engine.StepRollups, once a second), as one JSON document of
-- {at, queue, handler, ok, failed, done, total, latency_buckets, latency_counts}
-- records. Insert only: processes never touch each other's rows, nothing is locked.
INSERT INTO step_rollups (at, queue, handler, ok, failed, done, total, latency_buckets, latency_counts)
SELECT (r->>'at')::timestamptz, r->>'queue', r->>'handler', (r->>'ok')::int, (r->>'failed')::int,
       (r->>'done')::int, (r->>'total')::int,
       ARRAY(SELECT jsonb_array_elements_text(r->'latency_buckets')::smallint),
       ARRAY(SELECT jsonb_array_elements_text(r->'latency_counts')::int)
FROM jsonb_array_elements(sqlc.arg(rollups)::jsonb) AS r;

-- name: StepRollupTrim :execrows
-- Deletes the rollups older than before (the charts read 24 h at most). Index use:
-- step_rollups_at (BRIN: the rows arrive in time order).
DELETE FROM step_rollups WHERE at < sqlc.arg(before)::timestamptz;
