-- GC on Citus (sql/job_gc.sql): per shard, in turn, each a router statement; the
-- idempotency keys, which live at their own key's placement (docs/citus.md), are checked
-- and deleted on every shard at once (a fan-out, once per batch of the sweep).

-- name: JobGCSelect :many
-- JobGCSelect (sql/job_gc.sql) on the shard of placements: a child is kept while its
-- parent, on the same shard, is live; a remote child (docs/citus.md, "A child away from its
-- parent"), whose parent is on another shard, is kept until GC deletes its parent and
-- releases it (RemoteChildrenRelease). The idempotency keys are checked by
-- JobGCIdempotencyHeld. Index use: jobs_gc range scan on finished_at.
SELECT j.id
FROM jobs j
WHERE j.placement = ANY (sqlc.arg(placements)::int[])
  AND j.status IN ('done', 'failed', 'cancelled')
  AND j.finished_at < now() - least(sqlc.arg(retention_ms)::bigint * interval '1 millisecond',
                                    coalesce((SELECT min(q.retention) FROM queues q), sqlc.arg(retention_ms) * interval '1 millisecond'))
  AND j.finished_at < now() - coalesce((SELECT q.retention FROM queues q WHERE q.name = j.queue),
                                       sqlc.arg(retention_ms) * interval '1 millisecond')
  AND j.parent_join IS NULL
  AND (j.parent_id IS NULL
       OR coalesce((SELECT p.status FROM jobs p
                    WHERE p.placement = ANY (sqlc.arg(placements)::int[]) AND p.placement = j.placement AND p.id = j.parent_id),
                   'gone') NOT IN ('runnable', 'executing', 'awaiting'))
ORDER BY j.finished_at
LIMIT sqlc.arg(max_rows)::int;

-- name: JobGCIdempotencyHeld :many
-- The jobs among ids that an unexpired idempotency key points to (kept: a repeat answers
-- them). A fan-out: one idempotency_keys_job probe per id on each shard.
SELECT DISTINCT k.job_id FROM idempotency_keys k
WHERE k.job_id = ANY (sqlc.arg(ids)::bigint[]) AND k.expires_at > now();

-- name: JobGCDeleteSignals :exec
-- The inboxes of the jobs of one shard that GC deletes.
DELETE FROM signals WHERE placement = ANY (sqlc.arg(placements)::int[]) AND job_id = ANY (sqlc.arg(ids)::bigint[]);

-- name: JobGCDeleteIdempotencyKeys :exec
-- The (expired) idempotency keys of the jobs GC deletes, wherever they live: a fan-out.
DELETE FROM idempotency_keys WHERE job_id = ANY (sqlc.arg(ids)::bigint[]);

-- name: JobGCDeleteKeyHolders :exec
-- The holder rows that name the jobs GC deletes (displaced keys: docs/citus.md), wherever
-- they live: a fan-out, one key_holders_job probe per id on each shard. A row re-pointed
-- to another job meanwhile is kept.
DELETE FROM key_holders WHERE job_id = ANY (sqlc.arg(ids)::bigint[]);

-- name: JobGCDeleteDebounceHolders :exec
-- The holder rows that name the jobs GC deletes (displaced debounce keys), wherever they
-- live: a fan-out, one debounce_holders_job probe per id on each shard.
DELETE FROM debounce_holders WHERE job_id = ANY (sqlc.arg(ids)::bigint[]);

-- name: JobGCDeleteJobs :many
-- The finished jobs of one shard that GC deletes (their history goes a partition at a time).
DELETE FROM jobs
WHERE placement = ANY (sqlc.arg(placements)::int[]) AND id = ANY (sqlc.arg(ids)::bigint[])
  AND status IN ('done', 'failed', 'cancelled')
RETURNING id;
