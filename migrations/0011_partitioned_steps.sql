-- 0011: the step history partitioned by range of finished_at, so that retention drops
-- whole partitions (a catalog change, no dead tuples, almost no WAL) instead of deleting
-- rows one by one with their jobs (docs/scaling.md, "History that scales").
--
-- The partitions are made ahead of time by the server (engine.HistoryPartitions), one per
-- GENDURABLE_HISTORY_PARTITION of time. steps_default catches a row no partition covers
-- (the server down longer than its lookahead); the next maintenance moves such rows into
-- the partition it makes for their range.
--
-- The existing table is not rewritten: it becomes the partition steps_legacy, covering
-- everything up to this migration (attaching builds its new primary key and checks the
-- range with one read of the table, no row is copied). On an empty table it is dropped.
--
-- A partition is dropped only once no job it holds rows of still exists (see
-- internal/pg/partitions.go), so a job is never kept without its history. GC of jobs no
-- longer deletes their steps: they go with their partition.

ALTER TABLE steps RENAME TO steps_legacy;
ALTER INDEX steps_pkey RENAME TO steps_legacy_pkey_old;
ALTER INDEX steps_queue_finished RENAME TO steps_legacy_queue_finished;

-- A partitioned table takes no identity column before PostgreSQL 17: the ids go on from a
-- plain sequence that starts where the identity's left off.
DO $$
DECLARE
    next_id bigint := nextval(pg_get_serial_sequence('steps_legacy', 'id'));
BEGIN
    ALTER TABLE steps_legacy ALTER COLUMN id DROP IDENTITY;
    EXECUTE format('CREATE SEQUENCE steps_id_seq AS bigint START %s', next_id);
END $$;

CREATE TABLE steps (
    job_id               bigint NOT NULL,
    id                   bigint NOT NULL DEFAULT nextval('steps_id_seq'),
    step                 integer NOT NULL,
    attempt              integer NOT NULL,
    outcome              text NOT NULL,
    http_status          integer,
    started_at           timestamptz NOT NULL,
    finished_at          timestamptz NOT NULL,
    error                jsonb,
    queue                text,
    -- The partition key must be in the key. A job's steps in id order: a range scan of
    -- each partition's (job_id, id, …) prefix (StepList prunes those before the job).
    PRIMARY KEY (job_id, id, finished_at)
) PARTITION BY RANGE (finished_at);
ALTER SEQUENCE steps_id_seq OWNED BY steps.id;
-- Throughput per queue over time for the dashboard (pruned to the partitions of the window).
CREATE INDEX steps_queue_finished ON steps (queue, finished_at);

CREATE TABLE steps_default PARTITION OF steps DEFAULT;

DO $$
DECLARE
    upper_bound timestamptz;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM steps_legacy) THEN
        DROP TABLE steps_legacy;
        RETURN;
    END IF;
    SELECT greatest(now(), max(finished_at) + interval '1 microsecond') INTO upper_bound FROM steps_legacy;
    -- A table has one primary key: the attach builds the (job_id, id, finished_at) one.
    ALTER TABLE steps_legacy DROP CONSTRAINT steps_legacy_pkey_old;
    EXECUTE format('ALTER TABLE steps ATTACH PARTITION steps_legacy FOR VALUES FROM (MINVALUE) TO (%L)', upper_bound);
END $$;
