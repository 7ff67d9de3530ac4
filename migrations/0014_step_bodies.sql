-- 0014: per-step request and response bodies in the history (issue #15).
--
-- steps.bodies holds, for the attempts its queue's step_bodies setting keeps, the request
-- body the dispatcher sent and the answer it got, each capped per server
-- (GENDURABLE_STEP_BODY_CAP) and marked when truncated:
--   {"request": {"text": "...", "size": 123, "truncated": false}, "response": {...}}
-- It is NULL for every other attempt (with the default, every step that ended in next,
-- done, await or spawn): a NULL costs no byte in a row that already has a null bitmap
-- (error and http_status are NULL there). The bodies go with their partition, as the
-- rest of the history does (migration 0011). Headers are never stored: the signature
-- is derived from the handler's secret.
--
-- Adding a nullable column without a default is a catalog change on every partition
-- (no rewrite); the queues column has a constant default (no rewrite either).
ALTER TABLE steps ADD COLUMN bodies jsonb;

-- Which attempts of a queue keep their bodies: 'failures' (every attempt that did not end
-- in next, await, spawn or done), 'all', or 'off'.
ALTER TABLE queues ADD COLUMN step_bodies text NOT NULL DEFAULT 'failures'
    CONSTRAINT queues_step_bodies_check CHECK (step_bodies IN ('failures', 'all', 'off'));
