-- Leader election: one row per elected role (such as maintenance), held by one
-- client until expires_at (microseconds since the Unix epoch) unless renewed.

CREATE TABLE weir_leader (
    name TEXT PRIMARY KEY,
    leader_id TEXT NOT NULL,
    elected_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,

    CONSTRAINT weir_leader_name_check CHECK (length(name) BETWEEN 1 AND 128)
) STRICT;
