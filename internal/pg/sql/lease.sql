-- name: LeaseExtendMany
-- Extends the leases of a process's in-flight steps in one statement per heartbeat tick.
-- Fenced per row by status and token; a row missing from the result has lost its lease.
-- Index use: jobs_pkey per id (unnest × PK lookups).
UPDATE jobs j
SET lease_expires_at = now() + $3 * interval '1 millisecond'
FROM unnest($1::bigint[], $2::uuid[]) AS l(id, token)
WHERE j.id = l.id
  AND j.status = 'executing'
  AND j.lease_token = l.token
RETURNING j.id, j.lease_expires_at;
