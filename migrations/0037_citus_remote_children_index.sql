-- 0037: nothing changes on plain PostgreSQL; on Citus the step of the same number
-- (migrations/citus/0037_remote_children_index.sql) indexes the remote children to join.
SELECT 1;
