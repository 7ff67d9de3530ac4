-- name: JobCancel :one
-- Cancels job id and its live descendants in one statement. Runnable and awaiting jobs
-- are cancelled at once; an executing one is flagged (cancel_requested) and ends as
-- cancelled when its step's outcome arrives. The parent of the cancelled job (outside
-- the cancelled tree) is joined as for any finished child (the CTE `joined`, a copy
-- TestStatementCopiesAgree holds equal to the outcome's). Rows are locked in id order.
-- Index use: jobs_pkey, jobs_parent per level of the tree.
WITH RECURSIVE tree AS (
    SELECT j.id FROM jobs j WHERE j.id = sqlc.arg(id)::bigint
    UNION
    SELECT c.id FROM jobs c JOIN tree t ON c.parent_id = t.id
    WHERE c.status IN ('runnable', 'executing', 'awaiting')
),
locked AS (
    SELECT j.id FROM jobs j JOIN tree t ON t.id = j.id ORDER BY j.id FOR UPDATE OF j
),
updated AS (
    UPDATE jobs j
    SET status = CASE WHEN j.status IN ('runnable', 'awaiting') THEN 'cancelled' ELSE j.status END,
        cancel_requested = true,
        cancelled_while = CASE WHEN j.status = 'runnable' THEN 'runnable'
                               WHEN j.status = 'awaiting' AND j.pending_children > 0 THEN 'awaiting_children'
                               WHEN j.status = 'awaiting' THEN 'awaiting_signal'
                               ELSE j.cancelled_while END,
        finished_at = CASE WHEN j.status IN ('runnable', 'awaiting') THEN now() ELSE j.finished_at END,
        error = CASE WHEN j.status IN ('runnable', 'awaiting')
                     THEN '{"message": "cancelled"}'::jsonb ELSE j.error END,
        updated_at = now()
    FROM locked l
    WHERE j.id = l.id AND j.status IN ('runnable', 'executing', 'awaiting')
    RETURNING j.id, j.status, j.parent_id
),
-- The parent join of a statement whose `updated` CTE ended children: each parent's
-- pending_children drops by its finished children (grouped, so two children of one
-- parent in a batch count twice), and a parent waiting for them is woken at zero.
-- A row `updated` already changed is left alone: Postgres applies only one of two
-- updates of a row in one statement. Parents are locked in id order.
joined AS (
    UPDATE jobs p
    SET pending_children = p.pending_children - d.n,
        status = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN 'runnable'
                      ELSE p.status END,
        wake = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN 'children'
                    ELSE p.wake END,
        eligible_at = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN now()
                           ELSE p.eligible_at END,
        updated_at = now()
    FROM (SELECT parent_id, count(*) AS n FROM updated
          WHERE parent_id IS NOT NULL AND status IN ('done', 'failed', 'cancelled')
          GROUP BY parent_id ORDER BY parent_id) d
    WHERE p.id = d.parent_id AND p.pending_children > 0
      AND p.id NOT IN (SELECT u.id FROM updated u)
    RETURNING p.queue, p.status
),
notified AS (
    SELECT count(pg_notify('gendurable_jobs', q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM joined WHERE status = 'runnable') q
)
SELECT (SELECT count(*) FROM locked) AS found,
       (SELECT count(*) FROM updated) AS changed,
       n.n
FROM notified n;

-- name: JobRetry :one
-- Puts a failed or cancelled job back to work with fresh attempts. A job that failed, or
-- was cancelled while runnable or executing, runs its current step again (with the same
-- wake reason). A job cancelled while parked resumes its wait instead of running the step
-- after it: an await for signals parks again with the same names and deadline (a deadline
-- already past is woken with `timeout` by the reaper's next pass); a join of children
-- waits for the children still live, and runs at once with wake `children` when none is.
-- A live job holding its key makes this fail (unique jobs_live_key: 409). A retried child
-- of a parent still waiting for its children counts as pending again.
-- Index use: jobs_pkey; jobs_parent for the live children of a resumed join.
WITH target AS (
    SELECT j.id, j.cancelled_while,
           -- An unconsumed signal the await names (one that arrived as its step was
           -- cancelled at its outcome): the resumed wait is over at once.
           j.status = 'cancelled' AND j.cancelled_while = 'awaiting_signal' AND EXISTS (
               SELECT 1 FROM signals s
               WHERE s.job_id = j.id AND s.seq > j.consumed_seq
                 AND (j.awaiting IS NULL OR s.name = ANY (j.awaiting))) AS signalled,
           CASE WHEN j.status = 'cancelled' AND j.cancelled_while = 'awaiting_children' THEN
               (SELECT count(*) FROM jobs c
                WHERE c.parent_id = j.id AND c.status IN ('runnable', 'executing', 'awaiting'))
           END AS live_children,
           -- the default key for a job of a queue made fair since it last ran (every live
           -- job of a fair queue has one: the fair claim reads only keyed jobs)
           (SELECT '' FROM queues q WHERE q.name = j.queue AND q.fairness <> 'none') AS fair_default
    FROM jobs j
    WHERE j.id = sqlc.arg(id)::bigint
 AND j.status IN ('failed', 'cancelled')
    FOR UPDATE
),
retried AS (
    UPDATE jobs j
    SET status = CASE WHEN t.signalled THEN 'runnable'
                      WHEN t.cancelled_while = 'awaiting_signal' THEN 'awaiting'
                      WHEN t.live_children > 0 THEN 'awaiting'
                      ELSE 'runnable' END,
        eligible_at = CASE WHEN t.signalled THEN now()
                           WHEN t.cancelled_while = 'awaiting_signal' OR t.live_children > 0
                           THEN j.eligible_at ELSE now() END,
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
        updated_at = now()
    FROM target t
    WHERE j.id = t.id
    RETURNING j.id, j.queue, j.parent_id, j.status
),
parent AS (
    UPDATE jobs p
    SET pending_children = p.pending_children + 1, updated_at = now()
    FROM retried r
    WHERE p.id = r.parent_id AND p.status = 'awaiting' AND p.pending_children > 0
),
notified AS (
    SELECT count(pg_notify('gendurable_jobs', r.queue)) AS n FROM retried r WHERE r.status = 'runnable'
)
SELECT r.id FROM retried r, notified;
