-- A child away from its parent on Citus (docs/citus.md, "A child away from its parent";
-- migrations/citus/0036): a spawned child whose own concurrency key or fairness key places
-- it elsewhere lives there, and its parent keeps a stub of it (remote_children, at the
-- parent's placement). The spawn writes the stub with the parent's outcome and the child
-- at its own placement in the same transaction; a carry takes each remote child's end to
-- its stub and its parent (and a retry's or replay's revival, and a cancel's cascade the
-- other way), the child and its parent in one transaction: right after the statement that
-- owes it, by its process (citus_family.go), else by the reaper's turn.

-- name: RemoteChildStubsInsert :exec
-- The stubs of a spawn's remote children, at the parent's placement, for the spawns the
-- statement before it in the same transaction applied (JobApplyOutcomes): each joins its
-- parent by id and by the lease token the spawn consumed, in the row version this
-- transaction wrote, and only a parent the spawn parked gets them (as JobInsertChildren).
-- Pushed down to the shard. Index use: jobs_pkey per parent.
INSERT INTO remote_children (placement, parent_id, child_id, handler, key)
SELECT p.placement, p.id, c.child_id, c.handler, nullif(c.key, '')
FROM jobs p
JOIN ROWS FROM (unnest(sqlc.arg(parent_ids)::bigint[]), unnest(sqlc.arg(parent_tokens)::text[]),
                unnest(sqlc.arg(child_ids)::bigint[]), unnest(sqlc.arg(handlers)::text[]), unnest(sqlc.arg(keys)::text[]))
     AS c(parent_id, parent_token, child_id, handler, key)
  ON p.id = c.parent_id AND p.outcome_token = c.parent_token::uuid
WHERE p.placement = ANY (sqlc.arg(placements)::int[])
  AND p.id = ANY (sqlc.arg(parent_ids)::bigint[])
  AND p.status = 'awaiting'
  AND age(p.xmin) = 0;

-- name: RemoteChildStubsMade :many
-- The stubs RemoteChildStubsInsert made (child ids are new: no older stub has them), with
-- what each child takes from its parent: its queue, trace context and fairness key. A
-- router statement (the two tables are colocated, joined on the placement).
SELECT r.child_id, p.queue, p.trace_context, p.fairness_key
FROM remote_children r
JOIN jobs p ON p.placement = r.placement AND p.id = r.parent_id
WHERE r.child_id = ANY (sqlc.arg(child_ids)::bigint[])
  AND r.placement = ANY (sqlc.arg(placements)::int[])
  AND p.placement = ANY (sqlc.arg(placements)::int[]);

-- name: JobInsertRemoteChildren :exec
-- The remote children of a spawn, each at its own placement (its concurrency key's or
-- fairness key's), marked parent_join = 'pending'. Their ids were drawn beforehand
-- (seq * 1024 + placement) and their parents' values read by RemoteChildStubsMade. The
-- rows go to several shards: Citus pulls the unnest to the coordinator and copies each
-- row to its shard, in the spawn's transaction.
INSERT INTO jobs (id, placement, queue, handler, input, key, priority, eligible_at, concurrency_key,
                  max_attempts, parent_id, trace_context, fairness_key, parent_join)
SELECT c.id, c.placement, c.queue, c.handler, coalesce(nullif(c.input, '')::jsonb, '{}'::jsonb), nullif(c.key, ''),
       coalesce(nullif(c.priority, -1), 5)::smallint,
       coalesce(nullif(c.run_at, '0001-01-01 00:00:00+00'::timestamptz), now() + c.delay_ms * interval '1 millisecond'),
       nullif(c.concurrency_key, ''), c.max_attempts, c.parent_id, nullif(c.trace_context, ''), c.fairness_key, 'pending'
FROM ROWS FROM (unnest(sqlc.arg(ids)::bigint[]), unnest(sqlc.arg(placements)::int[]), unnest(sqlc.arg(parent_ids)::bigint[]),
                unnest(sqlc.arg(queues)::text[]), unnest(sqlc.arg(handlers)::text[]), unnest(sqlc.arg(inputs)::text[]),
                unnest(sqlc.arg(keys)::text[]), unnest(sqlc.arg(priorities)::int[]), unnest(sqlc.arg(run_ats)::timestamptz[]),
                unnest(sqlc.arg(delays_ms)::bigint[]), unnest(sqlc.arg(concurrency_keys)::text[]),
                unnest(sqlc.arg(max_attempts)::int[]), unnest(sqlc.arg(trace_contexts)::text[]),
                unnest(sqlc.arg(fairness_keys)::text[]))
     AS c(id, placement, parent_id, queue, handler, input, key, priority, run_at, delay_ms, concurrency_key, max_attempts,
          trace_context, fairness_key);

-- name: RemoteChildWorkPlacements :many
-- Where the reaper's turn has remote children to carry to their parents (an end not joined
-- yet, a revival) or stubs whose cancel has to reach their child: the placements of up to
-- max_rows of them, from every shard at once (a fan-out on the partial indexes
-- jobs_parent_joins and remote_children_cancels, empty when no family spans shards).
SELECT j.placement FROM jobs j
WHERE j.parent_join = 'relive' OR (j.parent_join = 'pending' AND j.status IN ('done', 'failed', 'cancelled'))
LIMIT sqlc.arg(max_rows)::int;

-- name: RemoteChildCancelPlacements :many
-- RemoteChildWorkPlacements for the stubs a cancel reached.
SELECT r.placement FROM remote_children r WHERE r.cancel_requested LIMIT sqlc.arg(max_rows)::int;

-- name: RemoteChildTurnsTake :many
-- Up to max_rows remote children of one shard whose end is to be joined or whose revival
-- is to be counted, taken in the sweep's transaction: an end becomes 'joined', a revival
-- 'pending' (the child is live again; its next end is joined in turn). was says which.
-- The caller writes each one's parent side in the same transaction (RemoteChildrenEnd,
-- RemoteChildrenRelive), so a child's end is joined once. A router statement.
-- Index use: jobs_parent_joins.
WITH t AS (
    SELECT j.id, j.parent_join AS was
    FROM jobs j
    WHERE j.placement = ANY (sqlc.arg(placements)::int[])
      AND (j.parent_join = 'relive' OR (j.parent_join = 'pending' AND j.status IN ('done', 'failed', 'cancelled')))
    ORDER BY j.id
    LIMIT sqlc.arg(max_rows)::int
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs j
SET parent_join = CASE WHEN t.was = 'relive' THEN 'pending' ELSE 'joined' END
FROM t
WHERE j.placement = ANY (sqlc.arg(placements)::int[]) AND j.id = t.id
RETURNING j.id, j.parent_id, t.was::text AS was, j.status, j.result, j.error;

-- name: RemoteChildrenEnd :one
-- The ends of remote children at their parents' shard (placements): each stub takes its
-- child's end, and each parent counts one child fewer, woken when none is left, as the
-- outcome's join does for a child at its parent's placement. A router statement.
-- Index use: remote_children_pkey per child, jobs_pkey per parent.
WITH e AS (
    SELECT e.parent_id, e.child_id, e.status, nullif(e.result, '')::jsonb AS result, nullif(e.error, '')::jsonb AS error,
           now() AS now
    FROM ROWS FROM (unnest(sqlc.arg(parent_ids)::bigint[]), unnest(sqlc.arg(child_ids)::bigint[]),
                    unnest(sqlc.arg(statuses)::text[]), unnest(sqlc.arg(results)::text[]), unnest(sqlc.arg(errors)::text[]))
         AS e(parent_id, child_id, status, result, error)
),
stubs AS (
    UPDATE remote_children r
    SET status = e.status, result = e.result, error = e.error
    FROM e
    WHERE r.placement = ANY (sqlc.arg(placements)::int[]) AND r.parent_id = e.parent_id AND r.child_id = e.child_id
),
joined AS (
    UPDATE jobs p
    SET pending_children = p.pending_children - d.n,
        status = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN 'runnable'
                      ELSE p.status END,
        wake = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN 'children'
                    ELSE p.wake END,
        eligible_at = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN d.now
                           ELSE p.eligible_at END,
        updated_at = d.now
    FROM (SELECT e.parent_id, count(*) AS n, min(e.now) AS now FROM e GROUP BY e.parent_id ORDER BY e.parent_id) d
    WHERE p.placement = ANY (sqlc.arg(placements)::int[])
      AND p.id = d.parent_id AND p.pending_children > 0
    RETURNING p.queue, p.status
)
SELECT (SELECT array_agg(DISTINCT j.queue) FROM joined j WHERE j.status = 'runnable')::text[] AS woken;

-- name: RemoteChildrenRelive :exec
-- The revivals of remote children (a retry or replay of a child whose end was joined) at
-- their parents' shard: each stub is live again, and a parent still waiting for its
-- children counts it again, as JobRetry does for a child at its parent's placement.
-- A router statement.
WITH e AS (
    SELECT e.parent_id, e.child_id, now() AS now
    FROM ROWS FROM (unnest(sqlc.arg(parent_ids)::bigint[]), unnest(sqlc.arg(child_ids)::bigint[])) AS e(parent_id, child_id)
),
-- A child revived under a parent that a cancel reached meanwhile is cancelled in turn (the
-- cancel marked only the live stubs): its stub is marked for the next sweep.
stubs AS (
    UPDATE remote_children r
    SET status = 'runnable', result = NULL, error = NULL,
        cancel_requested = r.cancel_requested OR p.cancel_requested OR p.status = 'cancelled'
    FROM e JOIN jobs p ON p.id = e.parent_id
    WHERE r.placement = ANY (sqlc.arg(placements)::int[]) AND p.placement = ANY (sqlc.arg(placements)::int[])
      AND p.placement = r.placement
      AND r.parent_id = e.parent_id AND r.child_id = e.child_id
)
UPDATE jobs p
SET pending_children = p.pending_children + d.n, updated_at = d.now
FROM (SELECT e.parent_id, count(*) AS n, min(e.now) AS now FROM e GROUP BY e.parent_id ORDER BY e.parent_id) d
WHERE p.placement = ANY (sqlc.arg(placements)::int[])
  AND p.id = d.parent_id AND p.status = 'awaiting' AND p.pending_children > 0;

-- name: RemoteChildCancelsList :many
-- Up to max_rows stubs of one shard that a cancel of their parent's family reached, read
-- without a lock: the caller cancels each child where it lives (JobCancel there, which
-- locks the child), then clears the stubs' marks (RemoteChildCancelsClear), in one
-- transaction. The child is locked before its stub, as a carry of its end locks them
-- (RemoteChildTurnsTake, then RemoteChildrenEnd), so the two never wait on each other in
-- a cycle; two carriers that read the same stub both cancel the child, the second
-- changing nothing. A router statement. Index use: remote_children_cancels.
SELECT r.parent_id, r.child_id
FROM remote_children r
WHERE r.placement = ANY (sqlc.arg(placements)::int[]) AND r.cancel_requested
ORDER BY r.child_id
LIMIT sqlc.arg(max_rows)::int;

-- name: RemoteChildCancelsClear :exec
-- The marks of the stubs whose children RemoteChildCancelsList's caller cancelled. A
-- router statement.
UPDATE remote_children r
SET cancel_requested = false
FROM ROWS FROM (unnest(sqlc.arg(parent_ids)::bigint[]), unnest(sqlc.arg(child_ids)::bigint[])) AS c(parent_id, child_id)
WHERE r.placement = ANY (sqlc.arg(placements)::int[]) AND r.parent_id = c.parent_id AND r.child_id = c.child_id
  AND r.cancel_requested;

-- name: JobGCDeleteRemoteChildren :exec
-- The stubs of the parents of one shard that GC deleted.
DELETE FROM remote_children
WHERE placement = ANY (sqlc.arg(placements)::int[]) AND parent_id = ANY (sqlc.arg(ids)::bigint[]);
