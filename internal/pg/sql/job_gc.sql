-- name: JobGCSelect :many
-- Up to max_rows finished jobs past their retention (the queue's, or retention_ms ms), oldest first,
-- except children whose parent is still live (it will read their results). Index use:
-- jobs_gc range scan on finished_at, bounded below the shortest retention in force.
SELECT j.id
FROM jobs j
WHERE j.status IN ('done', 'failed', 'cancelled')
  AND j.finished_at < now() - least(sqlc.arg(retention_ms)::bigint * interval '1 millisecond',
                                    coalesce((SELECT min(q.retention) FROM queues q), sqlc.arg(retention_ms) * interval '1 millisecond'))
  AND j.finished_at < now() - coalesce((SELECT q.retention FROM queues q WHERE q.name = j.queue),
                                       sqlc.arg(retention_ms) * interval '1 millisecond')
  -- A scalar subquery, so it is one jobs_pkey probe per candidate that has a parent (an
  -- EXISTS is planned as a hash over every live job: a full scan of jobs).
  AND (j.parent_id IS NULL
       OR coalesce((SELECT p.status FROM jobs p WHERE p.id = j.parent_id), 'gone')
          NOT IN ('runnable', 'executing', 'awaiting'))
  -- Kept while an unexpired idempotency key points to it (a repeat answers it): one
  -- idempotency_keys_job probe per candidate, as a scalar subquery for the same reason.
  AND coalesce((SELECT max(k.expires_at) FROM idempotency_keys k WHERE k.job_id = j.id), '-infinity') <= now()
ORDER BY j.finished_at
LIMIT sqlc.arg(max_rows)::int;

-- name: JobGCDelete :many
-- Deletes the finished jobs ids with their signals and idempotency keys: every delete is by primary
-- key or by the (job_id, …) key prefix, so the cost follows the batch, not the table
-- (never `id IN (subquery)`, which the planner turns into a sequential scan of jobs).
-- Their steps stay: the history goes a partition at a time (HistoryPartitions), once no
-- job with rows in the partition is left (migration 0011; a row delete here would probe
-- every partition's key for every id).
WITH signals_deleted AS (
    DELETE FROM signals WHERE job_id = ANY (sqlc.arg(ids)::bigint[])
),
keys_deleted AS (
    DELETE FROM idempotency_keys WHERE job_id = ANY (sqlc.arg(ids)::bigint[])
)
DELETE FROM jobs
WHERE id = ANY (sqlc.arg(ids)::bigint[]) AND status IN ('done', 'failed', 'cancelled')
RETURNING id;
