-- name: JobCancel
-- Cancels job $1 and its live descendants in one statement. Runnable and awaiting jobs
-- are cancelled at once; an executing one is flagged (cancel_requested) and ends as
-- cancelled when its step's outcome arrives. The parent of the cancelled job (outside
-- the cancelled tree) is joined as for any finished child (fragment ParentJoin). Rows are locked in id order.
-- Index use: jobs_pkey, jobs_parent per level of the tree.
WITH RECURSIVE tree AS (
    SELECT j.id FROM jobs j WHERE j.id = $1
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
        finished_at = CASE WHEN j.status IN ('runnable', 'awaiting') THEN now() ELSE j.finished_at END,
        error = CASE WHEN j.status IN ('runnable', 'awaiting')
                     THEN '{"message": "cancelled"}'::jsonb ELSE j.error END,
        updated_at = now()
    FROM locked l
    WHERE j.id = l.id AND j.status IN ('runnable', 'executing', 'awaiting')
    RETURNING j.id, j.status, j.parent_id
),
-- @ParentJoin
notified AS (
    SELECT count(pg_notify('gendurable_jobs', q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM joined WHERE status = 'runnable') q
)
SELECT (SELECT count(*) FROM locked) AS found,
       (SELECT count(*) FROM updated) AS changed,
       n.n
FROM notified n;

-- name: JobRetry
-- Puts a failed or cancelled job back to runnable at its current step with fresh
-- attempts. A live job holding its key makes this fail (unique jobs_live_key: 409). A
-- retried child of a parent still waiting for its children counts as pending again.
WITH retried AS (
    UPDATE jobs j
    SET status = 'runnable', attempt = 0, eligible_at = now(), finished_at = NULL,
        cancel_requested = false, awaiting = NULL, updated_at = now()
    WHERE j.id = $1 AND j.status IN ('failed', 'cancelled')
    RETURNING j.id, j.queue, j.parent_id
),
parent AS (
    UPDATE jobs p
    SET pending_children = p.pending_children + 1, updated_at = now()
    FROM retried r
    WHERE p.id = r.parent_id AND p.status = 'awaiting' AND p.pending_children > 0
),
notified AS (
    SELECT count(pg_notify('gendurable_jobs', r.queue)) AS n FROM retried r
)
SELECT r.id FROM retried r, notified;
