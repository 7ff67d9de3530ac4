-- 0002: API keys. Only a SHA-256 of each key is stored; the key is shown once.
CREATE TABLE api_keys (
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                 text NOT NULL,
    -- The first characters of the key, to recognise it in listings.
    prefix               text NOT NULL,
    hash                 bytea NOT NULL UNIQUE,
    scope                text NOT NULL CHECK (scope IN ('admin', 'read')),
    created_at           timestamptz NOT NULL DEFAULT now(),
    last_used_at         timestamptz,
    revoked_at           timestamptz
);
