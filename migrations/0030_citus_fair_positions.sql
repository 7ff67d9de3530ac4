-- 0030: nothing changes on plain PostgreSQL, where a fair queue's round-robin position is
-- queues.fair_cursor and fair_credit and its claims lock the queue's row. On Citus the step
-- of the same number (migrations/citus/0030_fair_positions.sql) keeps a position per shard
-- and queue (docs/citus.md, "Fair share").
SELECT 1;
