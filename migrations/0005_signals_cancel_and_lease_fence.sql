-- 0005: what an await needs to know about the signals that arrived during its step, and
-- where a cancelled job was when it was cancelled.
--
-- late_signals: the distinct names of the signals delivered while the job was executing
-- (at most 64; a 65th distinct name is not recorded and the row counts as "may match").
-- It lives on the job row because the await's outcome statement must decide on the
-- latest row version: when the outcome waited for a delivery's row lock, Postgres
-- re-evaluates its SET list on the delivered version, but a subquery of the signals table
-- would still read the statement's snapshot and miss the signal that was just committed.
-- Cleared by every transition out of `executing` (outcome, reaper, release).
ALTER TABLE jobs ADD COLUMN late_signals text[];

-- cancelled_while: what a cancelled job was doing when the cancel took effect:
-- 'runnable', 'executing' (a cancel applied at the step's outcome or by the reaper),
-- 'awaiting_signal' or 'awaiting_children'. A retry of a job cancelled while it was
-- parked resumes its wait instead of running the step after it (docs/protocol.md).
ALTER TABLE jobs ADD COLUMN cancelled_while text
    CHECK (cancelled_while IN ('runnable', 'executing', 'awaiting_signal', 'awaiting_children'));

-- Only an executing job holds a lease token. Outcomes are fenced by the token alone
-- (by primary key and token, never through the partial index of executing rows, whose
-- size is the number of steps in flight), and this makes the token imply the status.
ALTER TABLE jobs ADD CONSTRAINT jobs_lease_token_iff_executing
    CHECK ((status = 'executing') = (lease_token IS NOT NULL)) NOT VALID;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_lease_token_iff_executing;
