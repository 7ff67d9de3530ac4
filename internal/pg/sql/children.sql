-- name: ChildLoadForJoin
-- The children shown to each claimed parent that just joined them: at most $2 per
-- parent (oldest first) plus the parent's total. One statement per pick batch; a range
-- scan of jobs_parent per parent.
SELECT p.id, c.id, c.handler, c.key, c.status, c.result, c.error,
       (SELECT count(*) FROM jobs n WHERE n.parent_id = p.id) AS total
FROM unnest($1::bigint[]) AS p(id)
CROSS JOIN LATERAL (
    SELECT c.id, c.handler, c.key, c.status, c.result, c.error
    FROM jobs c
    WHERE c.parent_id = p.id
    ORDER BY c.id
    LIMIT $2
) c
ORDER BY p.id, c.id;
