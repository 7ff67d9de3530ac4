-- 0034: nothing changes on plain PostgreSQL, where a rate-limited step stays runnable and
-- every claim reads its bucket, so a rate limit raised by a PUT is seen by the next claim.
-- On Citus the step of the same number (migrations/citus/0034_rate_waits.sql) marks the
-- steps a remote bucket gave back, so that such a PUT wakes them.
SELECT 1;
