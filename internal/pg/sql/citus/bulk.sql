-- name: JobCancelMany :one
-- JobCancelMany (sql/job_bulk.sql) on the shard whose placements are `placements`: a router
-- statement, sent by the server shard after shard until the limit (JobCancelMany in
-- job_bulk.go). A family lives on one shard, so the trees' recursion and the parent join
-- stay on it. The clock is read in `locked` (an UPDATE's SET on Citus may not call now()
-- inside CASE), and the wake-up is the caller's (`woken`, NOTIFY on the coordinator).
WITH RECURSIVE candidates AS (
    SELECT j.id FROM jobs j
    WHERE j.placement = ANY (sqlc.arg(placements)::int[])
      AND j.status IN ('runnable', 'executing', 'awaiting')
      AND NOT (j.status = 'executing' AND j.cancel_requested)
      AND (sqlc.narg(statuses)::text[] IS NULL OR j.status = ANY (sqlc.narg(statuses)::text[]))
      AND (sqlc.narg(queue)::text IS NULL OR j.queue = sqlc.narg(queue)::text)
      AND (sqlc.narg(handler)::text IS NULL OR j.handler = sqlc.narg(handler)::text)
      AND (sqlc.narg(created_after)::timestamptz IS NULL OR j.created_at >= sqlc.narg(created_after)::timestamptz)
      AND (sqlc.narg(created_before)::timestamptz IS NULL OR j.created_at < sqlc.narg(created_before)::timestamptz)
      AND (sqlc.narg(key_prefix)::text IS NULL OR starts_with(j.key, sqlc.narg(key_prefix)::text))
    ORDER BY j.id
    LIMIT sqlc.arg(max_rows)::int + 1
),
tree AS (
    SELECT r.id FROM (SELECT c.id FROM candidates c ORDER BY c.id LIMIT sqlc.arg(max_rows)::int) r
    UNION
    SELECT c.id FROM jobs c JOIN tree t ON c.parent_id = t.id
    WHERE c.placement = ANY (sqlc.arg(placements)::int[]) AND c.status IN ('runnable', 'executing', 'awaiting')
),
locked AS (
    SELECT j.id, now() AS now FROM jobs j JOIN tree t ON t.id = j.id
    WHERE j.placement = ANY (sqlc.arg(placements)::int[])
    ORDER BY j.id FOR UPDATE OF j
),
updated AS (
    UPDATE jobs j
    SET status = CASE WHEN j.status IN ('runnable', 'awaiting') THEN 'cancelled' ELSE j.status END,
        cancel_requested = true,
        cancelled_while = CASE WHEN j.status = 'runnable' THEN 'runnable'
                               WHEN j.status = 'awaiting' AND j.pending_children > 0 THEN 'awaiting_children'
                               WHEN j.status = 'awaiting' THEN 'awaiting_signal'
                               ELSE j.cancelled_while END,
        finished_at = CASE WHEN j.status IN ('runnable', 'awaiting') THEN l.now ELSE j.finished_at END,
        error = CASE WHEN j.status IN ('runnable', 'awaiting')
                     THEN '{"message": "cancelled"}'::jsonb ELSE j.error END,
        updated_at = l.now
    FROM locked l
    WHERE j.placement = ANY (sqlc.arg(placements)::int[])
      AND j.id = l.id AND j.status IN ('runnable', 'executing', 'awaiting')
      AND NOT (j.status = 'executing' AND j.cancel_requested)
    RETURNING j.id, j.status, j.parent_id, j.parent_join, l.now
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
    FROM (SELECT parent_id, count(*) AS n, min(now) AS now FROM updated
          -- a remote child (parent_join set) joins its parent through a carry of its own,
          -- also when its placement is on its parent's shard (docs/citus.md)
          WHERE parent_id IS NOT NULL AND parent_join IS NULL AND status IN ('done', 'failed', 'cancelled')
          GROUP BY parent_id ORDER BY parent_id) d
    WHERE p.placement = ANY (sqlc.arg(placements)::int[])
      AND p.id = d.parent_id AND p.pending_children > 0
      AND p.id NOT IN (SELECT u.id FROM updated u)
    RETURNING p.queue, p.status
),
-- The live remote children of the cancelled jobs: their stubs are marked, and the reaper's
-- turn cancels each child where it lives (JobCancel in cancel.sql).
remote_cancels AS (
    UPDATE remote_children r
    SET cancel_requested = true
    FROM updated u
    WHERE r.placement = ANY (sqlc.arg(placements)::int[]) AND r.parent_id = u.id AND r.status = 'runnable'
)
SELECT (SELECT count(*) FROM candidates) > sqlc.arg(max_rows)::int AS more,
       (SELECT count(*) FROM updated) AS changed,
       (SELECT array_agg(DISTINCT j.queue) FROM joined j WHERE j.status = 'runnable')::text[] AS woken;

-- name: JobRetryManyKeys :many
-- The keys of the jobs JobRetryMany would take on the shard whose placements are
-- `placements` (its candidates, with the same filters, before the check of their keys'
-- holders elsewhere), less held_keys (found held by the caller already): the caller takes
-- their locks and reads their holders (citusKeysHeld), and asks again without those held
-- until the window's keys are free; it passes the free ones to JobRetryMany. A job whose key is displaced (it lives away from its key's placement) is a
-- candidate like any other.
SELECT DISTINCT c.key::text AS key FROM (
    SELECT j.key FROM jobs j
    WHERE j.placement = ANY (sqlc.arg(placements)::int[])
      AND j.status IN ('failed', 'cancelled')
      AND (sqlc.narg(statuses)::text[] IS NULL OR j.status = ANY (sqlc.narg(statuses)::text[]))
      AND (sqlc.narg(queue)::text IS NULL OR j.queue = sqlc.narg(queue)::text)
      AND (sqlc.narg(handler)::text IS NULL OR j.handler = sqlc.narg(handler)::text)
      AND (sqlc.narg(created_after)::timestamptz IS NULL OR j.created_at >= sqlc.narg(created_after)::timestamptz)
      AND (sqlc.narg(created_before)::timestamptz IS NULL OR j.created_at < sqlc.narg(created_before)::timestamptz)
      AND (sqlc.narg(key_prefix)::text IS NULL OR starts_with(j.key, sqlc.narg(key_prefix)::text))
      AND (j.key IS NULL OR j.key <> ALL (coalesce(sqlc.arg(held_keys)::text[], '{}')))
      AND NOT EXISTS (SELECT 1 FROM jobs l
                      WHERE l.placement = ANY (sqlc.arg(placements)::int[])
                        AND l.key = j.key AND l.status IN ('runnable', 'executing', 'awaiting'))
    ORDER BY j.id
    LIMIT sqlc.arg(max_rows)::int + 1) c
WHERE c.key IS NOT NULL;

-- name: JobRetryMany :one
-- JobRetryMany (sql/job_bulk.sql) on the shard whose placements are `placements`, a router
-- statement sent shard after shard as JobCancelMany. A keyed candidate is taken only when
-- its key is among free_keys: the caller holds those keys' locks and found no live holder
-- of them anywhere (at the key's placement, or named by its holder row: docs/citus.md,
-- "Displaced keys"); a job of any other key is not a candidate (so a key held elsewhere
-- does not fill the window). It answers the keys and ids of the keyed jobs it retried, which the
-- caller names their keys' holders. The clock is read in `target`, the wake-up is the
-- caller's.
WITH candidates AS (
    SELECT j.id, j.key FROM jobs j
    WHERE j.placement = ANY (sqlc.arg(placements)::int[])
      AND j.status IN ('failed', 'cancelled')
      AND (sqlc.narg(statuses)::text[] IS NULL OR j.status = ANY (sqlc.narg(statuses)::text[]))
      AND (sqlc.narg(queue)::text IS NULL OR j.queue = sqlc.narg(queue)::text)
      AND (sqlc.narg(handler)::text IS NULL OR j.handler = sqlc.narg(handler)::text)
      AND (sqlc.narg(created_after)::timestamptz IS NULL OR j.created_at >= sqlc.narg(created_after)::timestamptz)
      AND (sqlc.narg(created_before)::timestamptz IS NULL OR j.created_at < sqlc.narg(created_before)::timestamptz)
      AND (sqlc.narg(key_prefix)::text IS NULL OR starts_with(j.key, sqlc.narg(key_prefix)::text))
      AND (j.key IS NULL OR j.key = ANY (sqlc.arg(free_keys)::text[]))
      AND NOT EXISTS (SELECT 1 FROM jobs l
                      WHERE l.placement = ANY (sqlc.arg(placements)::int[])
                        AND l.key = j.key AND l.status IN ('runnable', 'executing', 'awaiting'))
    ORDER BY j.id
    LIMIT sqlc.arg(max_rows)::int + 1
),
picked AS (
    SELECT r.id FROM (
        SELECT c.id, c.key, row_number() OVER (PARTITION BY c.key ORDER BY c.id DESC) AS nth
        FROM (SELECT c.id, c.key FROM candidates c ORDER BY c.id LIMIT sqlc.arg(max_rows)::int) c
    ) r
    WHERE r.key IS NULL OR r.nth = 1
),
target AS (
    SELECT j.id, j.cancelled_while, now() AS now,
           j.status = 'cancelled' AND j.cancelled_while = 'awaiting_signal' AND EXISTS (
               SELECT 1 FROM signals s
               WHERE s.placement = ANY (sqlc.arg(placements)::int[])
                 AND s.job_id = j.id AND s.seq > j.consumed_seq
                 AND (j.awaiting IS NULL OR s.name = ANY (j.awaiting))) AS signalled,
           CASE WHEN j.status = 'cancelled' AND j.cancelled_while = 'awaiting_children' THEN
               (SELECT count(*) FROM jobs c
                WHERE c.placement = ANY (sqlc.arg(placements)::int[]) AND c.parent_id = j.id
                  AND c.parent_join IS NULL  -- a remote child on this shard is counted by its stub
                  AND (c.status IN ('runnable', 'executing', 'awaiting') OR c.id IN (SELECT p.id FROM picked p)))
               + (SELECT count(*) FROM remote_children r  -- its remote children's stubs
                  WHERE r.placement = ANY (sqlc.arg(placements)::int[]) AND r.parent_id = j.id AND r.status = 'runnable')
           END AS live_children,
           -- the default key for a job of a queue made fair since it ran (JobRetry)
           (SELECT '' FROM queues q WHERE q.name = j.queue AND q.fairness <> 'none') AS fair_default
    FROM jobs j JOIN picked p ON p.id = j.id
    WHERE j.placement = ANY (sqlc.arg(placements)::int[]) AND j.status IN ('failed', 'cancelled')
    ORDER BY j.id
    FOR UPDATE OF j
),
retried AS (
    UPDATE jobs j
    SET status = CASE WHEN t.signalled THEN 'runnable'
                      WHEN t.cancelled_while = 'awaiting_signal' THEN 'awaiting'
                      WHEN t.live_children > 0 THEN 'awaiting'
                      ELSE 'runnable' END,
        eligible_at = CASE WHEN t.signalled THEN t.now
                           WHEN t.cancelled_while = 'awaiting_signal' OR t.live_children > 0
                           THEN j.eligible_at ELSE t.now END,
        wake = CASE WHEN t.signalled THEN 'signal'
                    WHEN t.live_children = 0 THEN 'children'
                    WHEN t.live_children > 0 OR t.cancelled_while = 'awaiting_signal' THEN NULL
                    ELSE j.wake END,
        pending_children = coalesce(t.live_children, j.pending_children),
        awaiting = CASE WHEN t.cancelled_while = 'awaiting_signal' THEN j.awaiting END,
        error = CASE WHEN t.cancelled_while IN ('awaiting_signal', 'awaiting_children') THEN NULL
                     ELSE j.error END,
        attempt = 0, finished_at = NULL, cancel_requested = false, cancelled_while = NULL,
        fairness_key = coalesce(j.fairness_key, t.fair_default),
        -- a remote child whose end its parent counted: counted again across shards
        parent_join = CASE WHEN j.parent_join = 'joined' THEN 'relive' ELSE j.parent_join END,
        updated_at = t.now
    FROM target t
    WHERE j.placement = ANY (sqlc.arg(placements)::int[]) AND j.id = t.id
    RETURNING j.id, j.key, j.queue, j.parent_id, j.parent_join, j.status, t.now
),
parent AS (
    UPDATE jobs p
    SET pending_children = p.pending_children + d.n, updated_at = d.now
    FROM (SELECT r.parent_id, count(*) AS n, min(r.now) AS now FROM retried r
          -- a remote child is counted again across shards (parent_join 'relive')
          WHERE r.parent_id IS NOT NULL AND r.parent_join IS NULL GROUP BY r.parent_id ORDER BY r.parent_id) d
    WHERE p.placement = ANY (sqlc.arg(placements)::int[])
      AND p.id = d.parent_id AND p.status = 'awaiting' AND p.pending_children > 0
      AND p.id NOT IN (SELECT r.id FROM retried r)
)
SELECT (SELECT count(*) FROM candidates) > (SELECT count(*) FROM retried) AS more,
       (SELECT count(*) FROM retried) AS changed,
       (SELECT array_agg(DISTINCT r.queue) FROM retried r WHERE r.status = 'runnable')::text[] AS woken,
       (SELECT array_agg(r.key ORDER BY r.id) FROM retried r WHERE r.key IS NOT NULL)::text[] AS retried_keys,
       (SELECT array_agg(r.id ORDER BY r.id) FROM retried r WHERE r.key IS NOT NULL)::bigint[] AS retried_ids;
