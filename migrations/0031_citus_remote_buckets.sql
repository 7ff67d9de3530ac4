-- 0031: nothing changes on plain PostgreSQL, where every bucket is a row the claim reads
-- and debits. On Citus the step of the same number (migrations/citus/0031_remote_buckets.sql)
-- lets a rate-limited job live away from its bucket (docs/citus.md, "Rate limits").
SELECT 1;
