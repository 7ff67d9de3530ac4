-- name: JobCancel :one
-- JobCancel (sql/job_cancel.sql) at the job's placement: its family lives there, so the
-- tree's recursion, the locks and the parent join are one router statement. The clock
-- is read in `locked` (an UPDATE's SET on Citus may not call now() inside CASE) and the
-- wake-up is the caller's (`woken`, NOTIFY on the coordinator).
WITH RECURSIVE tree AS (
    SELECT j.id FROM jobs j WHERE j.placement = sqlc.arg(placement)::int AND j.id = sqlc.arg(id)::bigint
    UNION
    SELECT c.id FROM jobs c JOIN tree t ON c.parent_id = t.id
    WHERE c.placement = sqlc.arg(placement)::int AND c.status IN ('runnable', 'executing', 'awaiting')
),
locked AS (
    SELECT j.id, now() AS now FROM jobs j JOIN tree t ON t.id = j.id
    WHERE j.placement = sqlc.arg(placement)::int
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
    WHERE j.placement = sqlc.arg(placement)::int AND j.id = l.id AND j.status IN ('runnable', 'executing', 'awaiting')
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
    WHERE p.placement = sqlc.arg(placement)::int
      AND p.id = d.parent_id AND p.pending_children > 0
      AND p.id NOT IN (SELECT u.id FROM updated u)
    RETURNING p.queue, p.status
),
-- The live remote children of the cancelled jobs (docs/citus.md, "A child away from its
-- parent"): their stubs are marked here, and the caller (else the reaper's turn) cancels
-- each child where it lives (RemoteChildCancelsTake).
remote_cancels AS (
    UPDATE remote_children r
    SET cancel_requested = true
    FROM updated u
    WHERE r.placement = sqlc.arg(placement)::int AND r.parent_id = u.id AND r.status = 'runnable'
    RETURNING r.child_id
)
SELECT (SELECT count(*) FROM locked) AS found,
       (SELECT count(*) FROM updated) AS changed,
       (SELECT array_agg(DISTINCT j.queue) FROM joined j WHERE j.status = 'runnable')::text[] AS woken,
       -- what the caller carries across shards at once: the stubs marked, and the ends of
       -- the remote children cancelled here (their parents elsewhere)
       (SELECT count(*) FROM remote_cancels)
       + (SELECT count(*) FROM updated u WHERE u.parent_join = 'pending' AND u.status = 'cancelled') AS remote_work;

-- name: JobRetry :one
-- JobRetry (sql/job_cancel.sql) at the job's placement, a router statement; the clock is
-- read in `target`, and the wake-up is the caller's.
WITH target AS (
    SELECT j.id, j.cancelled_while, now() AS now,
           j.status = 'cancelled' AND j.cancelled_while = 'awaiting_signal' AND EXISTS (
               SELECT 1 FROM signals s
               WHERE s.placement = sqlc.arg(placement)::int AND s.job_id = j.id AND s.seq > j.consumed_seq
                 AND (j.awaiting IS NULL OR s.name = ANY (j.awaiting))) AS signalled,
           CASE WHEN j.status = 'cancelled' AND j.cancelled_while = 'awaiting_children' THEN
               (SELECT count(*) FROM jobs c
                WHERE c.placement = sqlc.arg(placement)::int AND c.parent_id = j.id
                  AND c.status IN ('runnable', 'executing', 'awaiting'))
               + (SELECT count(*) FROM remote_children r  -- its remote children's stubs
                  WHERE r.placement = sqlc.arg(placement)::int AND r.parent_id = j.id AND r.status = 'runnable')
           END AS live_children,
           -- the default key for a job of a queue made fair since it last ran (every live
           -- job of a fair queue has one: the fair claim reads only keyed jobs)
           (SELECT '' FROM queues q WHERE q.name = j.queue AND q.fairness <> 'none') AS fair_default
    FROM jobs j
    WHERE j.placement = sqlc.arg(placement)::int AND j.id = sqlc.arg(id)::bigint
 AND j.status IN ('failed', 'cancelled')
    FOR UPDATE
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
    WHERE j.placement = sqlc.arg(placement)::int AND j.id = t.id
    RETURNING j.id, j.queue, j.parent_id, j.status, j.parent_join, t.now
),
parent AS (
    UPDATE jobs p
    SET pending_children = p.pending_children + 1, updated_at = r.now
    FROM retried r
    WHERE p.placement = sqlc.arg(placement)::int AND p.id = r.parent_id AND p.status = 'awaiting' AND p.pending_children > 0
)
-- relive: a remote child to count again, which the caller (else the reaper's turn) carries
SELECT r.id, r.queue, r.status, coalesce(r.parent_join = 'relive', false)::bool AS relive FROM retried r;
