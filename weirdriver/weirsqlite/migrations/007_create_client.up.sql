-- weir:compatible
-- The client registry, as weirpgx's migration 010_create_client: one row per
-- running client, written at its start, refreshed every few seconds, deleted
-- at its stop, and deleted by the maintenance leader once stale. Informational
-- only. Times are microseconds since the Unix epoch; queues is a JSON array of
-- {"name", "max_workers"}.
CREATE TABLE weir_client (
    id TEXT NOT NULL PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    version TEXT NOT NULL,
    queues TEXT NOT NULL DEFAULT '[]',
    started_at INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,

    CONSTRAINT weir_client_id_check CHECK (length(CAST(id AS BLOB)) BETWEEN 1 AND 128),
    CONSTRAINT weir_client_host_check CHECK (length(CAST(host AS BLOB)) <= 255),
    CONSTRAINT weir_client_pid_check CHECK (pid >= 0),
    CONSTRAINT weir_client_version_check CHECK (length(CAST(version AS BLOB)) <= 128),
    CONSTRAINT weir_client_queues_check CHECK (json_valid(queues) AND json_type(queues) = 'array')
) STRICT;
