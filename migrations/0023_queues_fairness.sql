-- 0023 (fair share, docs/fairness.md): No CHECK on fairness (the API allows 'none' and 'round_robin'): Citus refuses ADD COLUMN
-- with a constraint on its reference table queues, and propagates an ADD CONSTRAINT by
-- the migration's whole text. The round robin's position is shared by every process (the
-- fair claim locks the queue row first, so that its claims are serialised and this stays
-- exact): the key the last claim stopped in, and the turns it has left there (0: over).
ALTER TABLE queues
    ADD COLUMN fairness text NOT NULL DEFAULT 'none',
    ADD COLUMN fair_cursor text,
    ADD COLUMN fair_credit integer NOT NULL DEFAULT 0;
