-- 0008: idempotency keys that outlive their job's live phase (the Idempotency-Key header).
--
-- Stored apart from jobs with their own expiry: a repeat within the window answers the
-- job the key points to, whatever its status; after expires_at the insert re-points the
-- key to a new job (JobInsertMany's ON CONFLICT … WHERE expires_at <= now()). GC keeps a
-- job while an unexpired key points to it and deletes the key rows with their job.
CREATE TABLE idempotency_keys (
    key                  text PRIMARY KEY,
    job_id               bigint NOT NULL,
    expires_at           timestamptz NOT NULL,
    created_at           timestamptz NOT NULL DEFAULT now()
);
-- GC: the keys of the jobs it considers and deletes.
CREATE INDEX idempotency_keys_job ON idempotency_keys (job_id);
