-- 0036: nothing changes on plain PostgreSQL, where a family lives in one database and a
-- child's end joins its parent in the statement that ends it. On Citus the step of the same
-- number (migrations/citus/0036_remote_children.sql) lets a spawned child live where its own
-- concurrency key or fairness key places it, away from its parent.
SELECT 1;
