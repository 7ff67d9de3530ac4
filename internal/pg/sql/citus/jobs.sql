-- name: JobInsert :many
-- Inserts a batch of jobs on Citus (docs/citus.md): each item at its placement (the
-- caller's: a key's, its parent's, or the next shard's), with the id seq * 1024 +
-- placement, the seqs drawn in request order (the arrays are scanned in order and the
-- handler is read by scalar subqueries, which reorder nothing). Citus evaluates the
-- arrays and the handlers (a reference table, local to the coordinator) on the
-- coordinator and copies each row to its shard: an INSERT ... SELECT "pull to
-- coordinator", bounded by the batch (a router statement needs a distributed table to
-- read from). An item whose live key is held is left out (ON CONFLICT on jobs_live_key,
-- exact because a key places its jobs at one placement) and the caller answers the
-- holder; an item of an unknown handler is left out and the caller refuses the batch
-- (rolling it back). A paused handler's or an open breaker's job goes in parked, as
-- JobInsertPlain does. An item's id is drawn here, or given by the caller (ids, 0 for
-- none: an item whose idempotency key was claimed for that id first).
INSERT INTO jobs (id, placement, queue, handler, input, key, priority, eligible_at, concurrency_key,
                  max_attempts, parent_id, lease_owner, schedule_name, schedule_tick, rate_limit, rate_key, rate_weight,
                  trace_context, fairness_key, rate_placement, extra_rate_limits)
SELECT coalesce(nullif(r.id, 0), nextval('jobs_id_seq') * 1024 + r.placement), r.placement, r.queue, r.handler,
       coalesce(nullif(r.input, '')::jsonb, '{}'::jsonb), nullif(r.key, ''), coalesce(nullif(r.priority, -1), 5)::smallint,
       CASE WHEN r.parked IS NULL
            THEN coalesce(nullif(r.run_at, '0001-01-01 00:00:00+00'::timestamptz), now() + coalesce(r.delay_ms, 0) * interval '1 millisecond')
            ELSE greatest(coalesce(nullif(r.run_at, '0001-01-01 00:00:00+00'::timestamptz), now() + coalesce(r.delay_ms, 0) * interval '1 millisecond'),
                          r.parked_until) END,
       nullif(r.concurrency_key, ''), coalesce(nullif(r.max_attempts, 0), r.handler_max_attempts), nullif(r.parent_id, 0),
       r.parked, nullif(r.schedule_name, ''), nullif(r.schedule_tick, '0001-01-01 00:00:00+00'::timestamptz),
       nullif(r.rate_limit, ''), nullif(r.rate_key, ''), coalesce(nullif(r.rate_weight, 0), 1), nullif(r.trace_context, ''),
       -- '' (the default key) in a fair queue, where every live job has a key
       coalesce(nullif(r.fairness_key, ''), CASE WHEN r.queue IN (SELECT q.name FROM queues q WHERE q.fairness <> 'none') THEN '' END),
       -- the bucket's placement when it is not the job's (-1: the job's own)
       nullif(r.rate_placement, -1), nullif(r.extra_rate_limits, '')::jsonb
FROM (SELECT a.*,
             (SELECT h.max_attempts FROM handlers h WHERE h.name = a.handler) AS handler_max_attempts,
             (SELECT CASE WHEN h.breaker_state <> 'closed' OR h.paused_at IS NOT NULL THEN 'breaker:' || h.name END
              FROM handlers h WHERE h.name = a.handler) AS parked,
             -- the batch's first item of an open breaker comes back for its next probe, the
             -- others in 150-300 s, as JobInsertMany parks them
             (SELECT CASE WHEN a.ord = 1 AND h.paused_at IS NULL
                          THEN greatest(coalesce(h.breaker_next_probe_at, now() + interval '1 second'), now())
                          ELSE now() + interval '150 seconds' + random() * interval '150 seconds' END
              FROM handlers h WHERE h.name = a.handler) AS parked_until
      FROM ROWS FROM (unnest(sqlc.arg(placements)::int[]), unnest(sqlc.arg(queues)::text[]), unnest(sqlc.arg(handlers)::text[]),
                      unnest(sqlc.arg(inputs)::text[]), unnest(sqlc.arg(keys)::text[]), unnest(sqlc.arg(priorities)::int[]),
                      unnest(sqlc.arg(run_ats)::timestamptz[]), unnest(sqlc.arg(delays_ms)::bigint[]),
                      unnest(sqlc.arg(concurrency_keys)::text[]), unnest(sqlc.arg(max_attempts)::int[]),
                      unnest(sqlc.arg(parent_ids)::bigint[]), unnest(sqlc.arg(schedule_names)::text[]),
                      unnest(sqlc.arg(schedule_ticks)::timestamptz[]), unnest(sqlc.arg(ids)::bigint[]),
                      unnest(sqlc.arg(rate_limits)::text[]), unnest(sqlc.arg(rate_keys)::text[]),
                      unnest(sqlc.arg(rate_weights)::int[]), unnest(sqlc.arg(trace_contexts)::text[]),
                      unnest(sqlc.arg(fairness_keys)::text[]), unnest(sqlc.arg(rate_placements)::int[]),
                      unnest(sqlc.arg(extra_rate_limits)::text[]))
           WITH ORDINALITY
           AS a(placement, queue, handler, input, key, priority, run_at, delay_ms, concurrency_key, max_attempts, parent_id,
                schedule_name, schedule_tick, id, rate_limit, rate_key, rate_weight, trace_context, fairness_key,
                rate_placement, extra_rate_limits, ord)
      ORDER BY a.ord) r
WHERE r.handler_max_attempts IS NOT NULL
ON CONFLICT DO NOTHING
RETURNING id, placement, queue, handler, key, status, priority, eligible_at, input, max_attempts, rate_weight, created_at, lease_owner;

-- name: JobGet :one
-- JobGet (sql/jobs.sql) at the job's placement: a router statement.
SELECT sqlc.embed(j),
       (SELECT count(*) FROM jobs c WHERE c.placement = sqlc.arg(placement)::int AND c.parent_id = j.id)
       + (SELECT count(*) FROM remote_children r WHERE r.placement = sqlc.arg(placement)::int AND r.parent_id = j.id)
         AS children_total,
       (SELECT count(*) FROM jobs c WHERE c.placement = sqlc.arg(placement)::int AND c.parent_id = j.id
                                      AND c.status IN ('done', 'failed', 'cancelled'))
       + (SELECT count(*) FROM remote_children r WHERE r.placement = sqlc.arg(placement)::int AND r.parent_id = j.id
                                                  AND r.status IN ('done', 'failed', 'cancelled'))
         AS children_finished
FROM jobs j
WHERE j.placement = sqlc.arg(placement)::int AND j.id = sqlc.arg(id)::bigint;

-- name: JobGetLiveByKey :one
-- The live job holding key, at the key's placement (jobs_live_key): a router statement.
SELECT j.* FROM jobs j
WHERE j.placement = sqlc.arg(placement)::int AND j.key = sqlc.arg(job_key)::text
  AND j.status IN ('runnable', 'executing', 'awaiting');

-- name: ChildLoadForJoin :many
-- ChildLoadForJoin (sql/jobs.sql) for the parents of one shard: children live at their
-- parent's placement, and a remote child (docs/citus.md, "A child away from its parent")
-- is read from its stub there, which holds its end once joined.
SELECT p.id::bigint AS parent_id, c.id, c.handler, c.key, c.status, c.result, c.error,
       (SELECT count(*) FROM jobs n WHERE n.placement = ANY (sqlc.arg(placements)::int[]) AND n.parent_id = p.id
                                      AND n.parent_join IS NULL)
       + (SELECT count(*) FROM remote_children n WHERE n.placement = ANY (sqlc.arg(placements)::int[]) AND n.parent_id = p.id)
         AS total
FROM unnest(sqlc.arg(parent_ids)::bigint[]) AS p(id)
CROSS JOIN LATERAL (
    SELECT u.id, u.handler, u.key, u.status, u.result, u.error
    FROM ((SELECT c.id, c.handler, c.key, c.status, c.result, c.error
           FROM jobs c
           WHERE c.placement = ANY (sqlc.arg(placements)::int[]) AND c.parent_id = p.id
             AND c.parent_join IS NULL  -- a remote child on this shard is read from its stub
           ORDER BY c.id
           LIMIT sqlc.arg(per_parent)::int)
          UNION ALL
          (SELECT r.child_id, r.handler, r.key, r.status, r.result, r.error
           FROM remote_children r
           WHERE r.placement = ANY (sqlc.arg(placements)::int[]) AND r.parent_id = p.id
           ORDER BY r.child_id
           LIMIT sqlc.arg(per_parent)::int)) u
    ORDER BY u.id
    LIMIT sqlc.arg(per_parent)::int
) c
ORDER BY p.id, c.id;

-- name: StepList :many
-- StepList (sql/steps.sql) at the job's placement.
SELECT s.id, s.step, s.attempt, s.outcome, s.http_status, s.started_at, s.finished_at, s.error, s.bodies
FROM steps s
WHERE s.placement = sqlc.arg(placement)::int AND s.job_id = sqlc.arg(job_id)::bigint
  AND s.finished_at >= (SELECT j.created_at FROM jobs j WHERE j.placement = sqlc.arg(placement)::int AND j.id = sqlc.arg(job_id)::bigint)
ORDER BY s.id
LIMIT sqlc.arg(max_rows)::int;
