-- 0038: nothing changes on plain PostgreSQL; on Citus the step of the same number
-- (migrations/citus/0038_fairness_beside_concurrency.sql) places a job with a fairness key
-- and a concurrency key at its concurrency key's placement, where it was refused.
SELECT 1;
