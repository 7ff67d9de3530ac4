-- 0033: nothing changes on plain PostgreSQL, where a sweep that finds nothing is one
-- descent of a partial index per statement and every server's reaper sweeps. On Citus the
-- step of the same number (migrations/citus/0033_reaper_turn.sql) lets one reaper sweep at
-- a time, since a sweep there starts with two fan-outs to every shard.
SELECT 1;
