-- weir:compatible
-- The client registry: one row per running client, which the client writes
-- when it starts, refreshes every few seconds and deletes when it stops; the
-- maintenance leader deletes the rows of clients that stopped refreshing
-- (crashed or cut off). It is for operators (weir clients, the dashboard):
-- nothing that claims, renews or finalizes jobs reads it. id is the client's
-- instance id, the one it writes to weir_job.attempted_by; queues is a JSON
-- array of {"name", "max_workers"}. A weir that does not know the table never
-- touches it.
CREATE TABLE weir_client (
    id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    version text NOT NULL,
    queues jsonb NOT NULL DEFAULT '[]',
    started_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT weir_client_id_check CHECK (octet_length(id) BETWEEN 1 AND 128),
    CONSTRAINT weir_client_host_check CHECK (octet_length(host) <= 255),
    CONSTRAINT weir_client_pid_check CHECK (pid >= 0),
    CONSTRAINT weir_client_version_check CHECK (octet_length(version) <= 128),
    CONSTRAINT weir_client_queues_check CHECK (jsonb_typeof(queues) = 'array')
);
