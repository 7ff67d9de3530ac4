-- 0035: nothing changes on plain PostgreSQL; on Citus the step of the same number
-- (migrations/citus/0035_rate_waits_index.sql) indexes the steps a remote bucket gave back.
SELECT 1;
