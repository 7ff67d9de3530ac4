-- 0020: nothing changes on plain PostgreSQL. On Citus the step of the same number
-- (migrations/citus/0020_rate_buckets.sql) distributes the rate-limit buckets.
SELECT 1;
