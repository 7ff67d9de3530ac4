-- 0032: nothing changes on plain PostgreSQL, where one unique index (jobs_debounce) finds a
-- debounce key's pending job wherever the job's other keys would put it. On Citus the step
-- of the same number (migrations/citus/0032_debounce_holders.sql) lets a debounced job live
-- away from its debounce key's placement (docs/citus.md, "Displaced keys").
SELECT 1;
