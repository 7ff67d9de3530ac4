-- 0003: steps carry their job's queue, so the dashboard's throughput per queue is an index
-- range scan of steps_queue_finished (no join back to jobs, which may be much larger).
ALTER TABLE steps ADD COLUMN queue text;
UPDATE steps s SET queue = j.queue FROM jobs j WHERE j.id = s.job_id;
DROP INDEX steps_finished;
CREATE INDEX steps_queue_finished ON steps (queue, finished_at);
