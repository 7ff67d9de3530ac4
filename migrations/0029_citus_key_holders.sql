-- 0029: nothing changes on plain PostgreSQL, where one unique index (jobs_live_key) keeps
-- a live key unique. On Citus the step of the same number (migrations/citus/0029_key_holders.sql)
-- makes key_holders, which names the job of a key that lives away from its key's
-- placement (a job with a key and a concurrency key or a rate limit: docs/citus.md,
-- "Displaced keys").
SELECT 1;
