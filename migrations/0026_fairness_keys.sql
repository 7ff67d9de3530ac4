-- 0026 (fair share): A key's settings in a fair queue: its weight (its turns in each round, default 1) and
-- its cap (at most max_in_flight of its steps executing at once; NULL: none). A key
-- without a row has weight 1 and no cap: keys need not be declared.
CREATE TABLE fairness_keys (
    queue         text NOT NULL,
    key           text NOT NULL,
    weight        integer NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000),
    max_in_flight integer CHECK (max_in_flight > 0),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, key)
);
