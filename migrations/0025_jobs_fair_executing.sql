-- 0025 (fair share): a key's steps in flight (0022).
CREATE INDEX jobs_fair_executing ON jobs (queue, fairness_key)
    WHERE status = 'executing' AND fairness_key IS NOT NULL;
