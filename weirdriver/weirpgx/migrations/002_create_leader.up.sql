-- Leader election: one row per elected role (such as maintenance), held by one
-- client until expires_at (database clock) unless renewed. Names are
-- unqualified: the migrator runs this with search_path set to weir's schema.

CREATE TABLE weir_leader (
    name text PRIMARY KEY,
    leader_id text NOT NULL,
    elected_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,

    CONSTRAINT weir_leader_name_check CHECK (char_length(name) BETWEEN 1 AND 128)
);
