-- GC on Citus (sql/job_gc.sql): per shard, in turn, each a router statement; the
-- idempotency keys, which live at their own key's placement (docs/citus.md), are checked
-- and deleted on every shard at once (a fan-out, once per batch of the sweep).

-- name: JobGCSelect :many
-- JobGCSelect (sql/job_gc.sql) on the shard of placements: up to max_rows jobs, of which a
-- child is taken only when its parent, on the same shard, is not live; and apart, up to
-- max_rows remote children (docs/citus.md, "A child away from its parent"), whose parents
-- are on other shards, each with its parent's id (remote_parent_id; 0 for the others) and
-- parent_join: the caller asks their parents' shards (JobGCParents) and keeps those whose
-- parent is live, or exists and has not counted their end yet. Apart, so that remote
-- children kept for a long-lived parent never fill the batch of the others. The
-- idempotency keys are checked by JobGCIdempotencyHeld. Index use: jobs_gc range scan on
-- finished_at, twice.
SELECT c.id, c.remote_parent_id, c.parent_join
FROM (VALUES (false), (true)) AS k(remote)
CROSS JOIN LATERAL (
    SELECT j.id, coalesce(CASE WHEN k.remote THEN j.parent_id END, 0)::bigint AS remote_parent_id, j.parent_join
    FROM jobs j
    WHERE j.placement = ANY (sqlc.arg(placements)::int[])
      AND j.status IN ('done', 'failed', 'cancelled')
      AND j.finished_at < now() - least(sqlc.arg(retention_ms)::bigint * interval '1 millisecond',
                                        coalesce((SELECT min(q.retention) FROM queues q), sqlc.arg(retention_ms) * interval '1 millisecond'))
      AND j.finished_at < now() - coalesce((SELECT q.retention FROM queues q WHERE q.name = j.queue),
                                           sqlc.arg(retention_ms) * interval '1 millisecond')
      AND (j.parent_join IS NOT NULL) = k.remote
      AND (k.remote OR j.parent_id IS NULL
           OR coalesce((SELECT p.status FROM jobs p
                        WHERE p.placement = ANY (sqlc.arg(placements)::int[]) AND p.placement = j.placement AND p.id = j.parent_id),
                       'gone') NOT IN ('runnable', 'executing', 'awaiting'))
    ORDER BY j.finished_at
    LIMIT sqlc.arg(max_rows)::int
) c;

-- name: JobGCParents :many
-- The parents among ids that exist, at their placements (a statement on their shards
-- only), and whether each is live: JobGCSelect's remote children are kept while theirs is.
SELECT j.id, j.status IN ('runnable', 'executing', 'awaiting') AS live
FROM jobs j
WHERE j.placement = ANY (sqlc.arg(placements)::int[]) AND j.id = ANY (sqlc.arg(ids)::bigint[]);

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
