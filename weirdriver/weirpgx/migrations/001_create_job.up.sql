-- The job table and the indexes of the claim path. Names are unqualified: the
-- migrator runs this with search_path set to weir's schema.

CREATE SEQUENCE weir_job_id_seq;

CREATE TABLE weir_job (
    id bigint PRIMARY KEY DEFAULT nextval('weir_job_id_seq'),
    state text NOT NULL DEFAULT 'available',
    queue text NOT NULL,
    kind text NOT NULL,
    args jsonb NOT NULL,
    priority smallint NOT NULL DEFAULT 2,
    attempt smallint NOT NULL DEFAULT 0,
    max_attempts smallint NOT NULL,
    scheduled_at timestamptz NOT NULL DEFAULT now(),
    created_at timestamptz NOT NULL DEFAULT now(),
    attempted_at timestamptz,
    finalized_at timestamptz,
    lease_token bigint NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    attempted_by text,
    errors jsonb NOT NULL DEFAULT '[]',
    tags text[] NOT NULL DEFAULT '{}',
    metadata jsonb NOT NULL DEFAULT '{}',
    unique_key bytea,
    unique_states smallint,
    release_count integer NOT NULL DEFAULT 0,
    cancel_requested_at timestamptz,

    CONSTRAINT weir_job_state_check CHECK (state IN
        ('scheduled', 'available', 'running', 'retryable', 'completed', 'cancelled', 'discarded')),
    CONSTRAINT weir_job_priority_check CHECK (priority BETWEEN 1 AND 4),
    CONSTRAINT weir_job_max_attempts_check CHECK (max_attempts >= 1),
    CONSTRAINT weir_job_attempt_check CHECK (attempt >= 0),
    CONSTRAINT weir_job_queue_check CHECK (char_length(queue) BETWEEN 1 AND 128),
    CONSTRAINT weir_job_kind_check CHECK (char_length(kind) BETWEEN 1 AND 128),
    CONSTRAINT weir_job_args_check CHECK (jsonb_typeof(args) = 'object'),
    CONSTRAINT weir_job_metadata_check CHECK (jsonb_typeof(metadata) = 'object'),
    CONSTRAINT weir_job_finalized_check CHECK (
        (state IN ('completed', 'cancelled', 'discarded')) = (finalized_at IS NOT NULL)),
    CONSTRAINT weir_job_lease_check CHECK ((state = 'running') = (lease_expires_at IS NOT NULL)),
    CONSTRAINT weir_job_unique_check CHECK ((unique_key IS NULL) = (unique_states IS NULL))
) WITH (fillfactor = 90);

ALTER SEQUENCE weir_job_id_seq OWNED BY weir_job.id;

-- The bit of a state in unique_states; the order is weirdriver.StateBit's.
CREATE FUNCTION weir_state_bit(state text) RETURNS smallint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE state
        WHEN 'scheduled' THEN 1
        WHEN 'available' THEN 2
        WHEN 'running' THEN 4
        WHEN 'retryable' THEN 8
        WHEN 'completed' THEN 16
        WHEN 'cancelled' THEN 32
        WHEN 'discarded' THEN 64
    END;

-- The claim path: due jobs of a queue, by priority then scheduled time.
CREATE INDEX weir_job_available_idx ON weir_job (queue, priority, scheduled_at, id)
    WHERE state = 'available';

-- Promotion of scheduled and retryable jobs once due.
CREATE INDEX weir_job_pending_idx ON weir_job (scheduled_at)
    WHERE state IN ('scheduled', 'retryable');

-- Rescue scans running jobs only; the key is stable so that a renewal, which
-- changes only lease_expires_at, stays a HOT update.
CREATE INDEX weir_job_running_idx ON weir_job (id) WHERE state = 'running';

-- Pruning and operator listings of final jobs.
CREATE INDEX weir_job_finalized_idx ON weir_job (finalized_at)
    WHERE finalized_at IS NOT NULL;

CREATE UNIQUE INDEX weir_job_unique_idx ON weir_job (unique_key)
    WHERE unique_key IS NOT NULL AND (unique_states & weir_state_bit(state)) <> 0;
