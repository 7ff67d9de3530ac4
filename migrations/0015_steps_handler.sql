-- 0015: the handler of each step history row, for per-handler throughput, error rate and
-- latency (GET /v1/stats/steps?handler=…). Written by the outcome statement and the
-- reaper from the job row they already read; rows written before this migration have
-- none and count for their queue only.
--
-- Adding a nullable column without a default rewrites nothing. The index is built on
-- every partition under the lock CREATE INDEX takes (writes to steps wait for it: on a
-- large history, run the migration at a quiet time; see docs/scaling.md).
ALTER TABLE steps ADD COLUMN handler text;
-- Throughput per handler over time (pruned to the partitions of the window), beside
-- steps_queue_finished.
CREATE INDEX steps_handler_finished ON steps (handler, finished_at);
