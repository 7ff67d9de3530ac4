-- name: StepList :many
-- A job's attempt history in order: a merge of the (job_id, id, finished_at) key range of
-- each partition from the job's creation on (no step of a job finishes before the job is
-- created, so the initplan prunes the older partitions at run time). A job that no longer
-- exists has no history, even while its rows wait for their partition to be dropped.
-- bodies (migration 0014) is NULL for most rows; a kept one is at most two capped texts.
SELECT s.id, s.step, s.attempt, s.outcome, s.http_status, s.started_at, s.finished_at, s.error, s.bodies
FROM steps s
WHERE s.job_id = sqlc.arg(job_id)::bigint
  AND s.finished_at >= (SELECT j.created_at FROM jobs j WHERE j.id = sqlc.arg(job_id)::bigint)
ORDER BY s.id
LIMIT sqlc.arg(max_rows)::int;

-- name: StepPartitionList :many
-- The partitions of steps with their ranges [from_us, to_us) in µs since the epoch, oldest
-- first: from_us 0 is MINVALUE; is_default marks the DEFAULT partition (no range). The
-- bounds are read back from the catalog's own text (pg_get_expr writes them in this
-- session's time zone, and this session parses them). Cost: a catalog read, one row a partition.
SELECT c.relname::text AS name,
       coalesce((extract(epoch FROM (b.m)[1]::timestamptz) * 1000000)::bigint, 0)::bigint AS from_us,
       coalesce((extract(epoch FROM (b.m)[2]::timestamptz) * 1000000)::bigint, 0)::bigint AS to_us,
       coalesce(pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT', false)::boolean AS is_default
FROM pg_catalog.pg_inherits i
JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
CROSS JOIN LATERAL (SELECT regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                        'FROM \((?:''([^'']*)''|MINVALUE)\) TO \((?:''([^'']*)''|MAXVALUE)\)') AS m) b
WHERE i.inhparent = 'steps'::regclass
ORDER BY 3, 1;

-- name: DatabaseNow :one
-- The database's clock: what the history's partitions are made and dropped by (the rows
-- are routed by the now() of the statements that write them). Cost: nothing.
SELECT now()::timestamptz AS now;

-- name: StepWindowOfQueue :many
-- The attempts of a queue that finished in [from_at, until_at), oldest first, at most
-- max_rows: what a run's waits for a slot or a rate limit are derived from at read time
-- (engine.JobWaits; docs/protocol.md, "The run timeline"). A range of steps_queue_finished in the partitions
-- the window touches; rows read ≤ max_rows. On Citus, the same range on every shard, merged.
SELECT s.job_id, s.started_at, s.finished_at
FROM steps s
WHERE s.queue = sqlc.arg(queue)::text
  AND s.finished_at >= sqlc.arg(from_at)::timestamptz
  AND s.finished_at < sqlc.arg(until_at)::timestamptz
ORDER BY s.finished_at
LIMIT sqlc.arg(max_rows)::int;
