-- Rate limits on Citus (docs/citus.md, "Rate limits"). A bucket (name, key) lives at its
-- own placement, gendurable_placement_of_key('rate_limit ' || name || ' ' || key), and so
-- does every job that draws from it: the claim on that shard reads, refills and debits the
-- bucket in the statement that claims the jobs, a router statement as on plain PostgreSQL.
-- Until now rate_buckets was a reference table, always empty (rate limits were refused on
-- Citus): it is made again, distributed with the jobs.
--
-- A bucket is minted when a job that draws from it is inserted (the claim cannot insert on
-- Citus: an INSERT in its CTE would not be routed), with updated_at '-infinity': the claim
-- reads such a bucket as full (its burst), as plain PostgreSQL reads a bucket it has not
-- minted yet. Putting a rate limit mints the buckets of its live jobs again (a limit
-- deleted, which deletes its buckets, then put back).
DROP TABLE rate_buckets;
CREATE TABLE rate_buckets (
    name       text NOT NULL REFERENCES rate_limits (name) ON DELETE CASCADE,
    key        text NOT NULL,
    placement  integer NOT NULL CHECK (placement >= 0 AND placement < 1024),
    tokens     double precision NOT NULL CHECK (tokens >= 0),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, key, placement)
);
SELECT create_distributed_table('rate_buckets', 'placement', colocate_with => 'jobs');

