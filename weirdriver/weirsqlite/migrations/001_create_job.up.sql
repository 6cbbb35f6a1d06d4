-- The job table and the indexes of the claim path, as in weirpgx's migration 1.
-- Times are integer microseconds since the Unix epoch (UTC), so that they sort
-- and compare as numbers; JSON columns are TEXT checked with json_valid.
-- AUTOINCREMENT keeps ids from ever being reused: a lease is fenced on
-- (id, lease_token), and a new job under a deleted job's id could otherwise
-- match an old owner's token.

CREATE TABLE weir_job (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    state TEXT NOT NULL DEFAULT 'available',
    queue TEXT NOT NULL,
    kind TEXT NOT NULL,
    args TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 2,
    attempt INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    scheduled_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    attempted_at INTEGER,
    finalized_at INTEGER,
    lease_token INTEGER NOT NULL DEFAULT 0,
    lease_expires_at INTEGER,
    attempted_by TEXT,
    errors TEXT NOT NULL DEFAULT '[]',
    tags TEXT NOT NULL DEFAULT '[]',
    metadata TEXT NOT NULL DEFAULT '{}',
    unique_key BLOB,
    unique_states INTEGER,
    release_count INTEGER NOT NULL DEFAULT 0,
    cancel_requested_at INTEGER,

    CONSTRAINT weir_job_state_check CHECK (state IN
        ('scheduled', 'available', 'running', 'retryable', 'completed', 'cancelled', 'discarded')),
    CONSTRAINT weir_job_priority_check CHECK (priority BETWEEN 1 AND 4),
    CONSTRAINT weir_job_max_attempts_check CHECK (max_attempts BETWEEN 1 AND 32767),
    CONSTRAINT weir_job_attempt_check CHECK (attempt BETWEEN 0 AND 32767),
    CONSTRAINT weir_job_queue_check CHECK (length(queue) BETWEEN 1 AND 128),
    CONSTRAINT weir_job_kind_check CHECK (length(kind) BETWEEN 1 AND 128),
    CONSTRAINT weir_job_args_check CHECK (json_valid(args) AND json_type(args) = 'object'),
    CONSTRAINT weir_job_metadata_check CHECK (json_valid(metadata) AND json_type(metadata) = 'object'),
    CONSTRAINT weir_job_errors_check CHECK (json_valid(errors) AND json_type(errors) = 'array'),
    CONSTRAINT weir_job_tags_check CHECK (json_valid(tags) AND json_type(tags) = 'array'),
    CONSTRAINT weir_job_finalized_check CHECK (
        (state IN ('completed', 'cancelled', 'discarded')) = (finalized_at IS NOT NULL)),
    CONSTRAINT weir_job_lease_check CHECK ((state = 'running') = (lease_expires_at IS NOT NULL)),
    CONSTRAINT weir_job_unique_check CHECK ((unique_key IS NULL) = (unique_states IS NULL)),
    CONSTRAINT weir_job_unique_states_check CHECK (unique_states BETWEEN 0 AND 127)
) STRICT;

-- The claim path: due jobs of a queue, by priority then scheduled time.
CREATE INDEX weir_job_available_idx ON weir_job (queue, priority, scheduled_at, id)
    WHERE state = 'available';

-- Promotion of scheduled and retryable jobs once due.
CREATE INDEX weir_job_pending_idx ON weir_job (scheduled_at)
    WHERE state IN ('scheduled', 'retryable');

-- Rescue scans running jobs only.
CREATE INDEX weir_job_running_idx ON weir_job (id) WHERE state = 'running';

-- Pruning of final jobs.
CREATE INDEX weir_job_finalized_idx ON weir_job (finalized_at)
    WHERE finalized_at IS NOT NULL;

-- unique_key is unique among the jobs whose state is in their unique_states. The
-- CASE is weirdriver.StateBit; the driver's look-ups repeat it word for word so
-- that SQLite's planner can use this index.
CREATE UNIQUE INDEX weir_job_unique_idx ON weir_job (unique_key)
    WHERE unique_key IS NOT NULL AND (unique_states & CASE state
        WHEN 'scheduled' THEN 1
        WHEN 'available' THEN 2
        WHEN 'running' THEN 4
        WHEN 'retryable' THEN 8
        WHEN 'completed' THEN 16
        WHEN 'cancelled' THEN 32
        WHEN 'discarded' THEN 64
    END) <> 0;
