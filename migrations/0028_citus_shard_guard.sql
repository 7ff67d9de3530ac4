-- 0028: nothing changes on plain PostgreSQL. On Citus the step of the same number
-- (migrations/citus/0028_shard_guard.sql) makes gendurable_shard_here, which starts each
-- transaction a server runs on one shard's own tables.
SELECT 1;
