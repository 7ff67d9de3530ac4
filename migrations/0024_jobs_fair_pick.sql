-- 0024 (fair share): the fair claim's index (0022).
CREATE INDEX jobs_fair_pick ON jobs (queue, fairness_key, priority, eligible_at, id)
    WHERE status = 'runnable' AND fairness_key IS NOT NULL;
