-- weir's schema on SQLite, the same tables as weirpgx's baseline where SQLite
-- has their use (docs/sqlite.md). Times are integer microseconds since the
-- Unix epoch (UTC), so that they sort and compare as numbers; JSON columns are
-- TEXT checked with json_valid.

-- The jobs. AUTOINCREMENT keeps ids from ever being reused: a lease is fenced
-- on (id, lease_token), and a new job under a deleted job's id could otherwise
-- match an old owner's token. output and progress are nullable JSON text.
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
    output TEXT
        CONSTRAINT weir_job_output_check CHECK (output IS NULL OR json_valid(output)),
    progress TEXT
        CONSTRAINT weir_job_progress_check CHECK (progress IS NULL OR json_valid(progress)),

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

-- Leader election: one row per elected role (such as maintenance), held by one
-- client until expires_at unless renewed.
CREATE TABLE weir_leader (
    name TEXT PRIMARY KEY,
    leader_id TEXT NOT NULL,
    elected_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,

    CONSTRAINT weir_leader_name_check CHECK (length(name) BETWEEN 1 AND 128)
) STRICT;

-- Queue settings shared by every client (docs/flow-control.md; NULL: none):
-- paused_at; global_limit, at most that many of its jobs running across every
-- client; rate_limit per rate_period_us microseconds, at most that many
-- started per period, spread evenly, with rate_tat the limiter's state;
-- key_limit and key_rate per key_rate_period_us, the same per key, a job's key
-- being the value, as text, of the field limit_key names ("args.customer_id",
-- "metadata.tenant"), '' when missing or null. The claim, one writer at a
-- time, counts the running jobs, keeps the limiters, and claims at most what
-- they allow.
CREATE TABLE weir_queue (
    name TEXT PRIMARY KEY,
    paused_at INTEGER,
    updated_at INTEGER NOT NULL,
    global_limit INTEGER
        CONSTRAINT weir_queue_global_limit_check CHECK (global_limit BETWEEN 1 AND 1000000),
    rate_limit INTEGER
        CONSTRAINT weir_queue_rate_limit_check CHECK (rate_limit BETWEEN 1 AND 1000000),
    rate_period_us INTEGER
        CONSTRAINT weir_queue_rate_period_check CHECK (rate_period_us BETWEEN 1000 AND 86400000000),
    rate_tat INTEGER,
    key_limit INTEGER
        CONSTRAINT weir_queue_key_limit_check CHECK (key_limit BETWEEN 1 AND 1000000),
    key_rate INTEGER
        CONSTRAINT weir_queue_key_rate_check CHECK (key_rate BETWEEN 1 AND 1000000),
    key_rate_period_us INTEGER
        CONSTRAINT weir_queue_key_rate_period_check CHECK (key_rate_period_us BETWEEN 1000 AND 86400000000),
    limit_key TEXT
        CONSTRAINT weir_queue_limit_key_check CHECK ((limit_key IS NULL) = (key_limit IS NULL AND key_rate IS NULL)
            AND (key_rate IS NULL) = (key_rate_period_us IS NULL)),
    CONSTRAINT weir_queue_name_check CHECK (length(name) BETWEEN 1 AND 128)
) STRICT;

-- Periodic jobs: one row per schedule, which the maintenance leader registers
-- from its Config.PeriodicJobs and fires (docs/periodic.md).
CREATE TABLE weir_periodic (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    time_zone TEXT NOT NULL,
    next_run_at INTEGER NOT NULL,
    last_run_at INTEGER,
    last_job_id INTEGER,
    declared_by TEXT NOT NULL,
    declared_at INTEGER NOT NULL,
    paused_at INTEGER,
    orphaned_at INTEGER,
    created_at INTEGER NOT NULL,

    CONSTRAINT weir_periodic_name_check CHECK (length(name) BETWEEN 1 AND 128)
) STRICT;

-- The client registry: one row per running client, written at its start,
-- refreshed every few seconds, deleted at its stop, and deleted by the
-- maintenance leader once stale. Informational only. queues is a JSON array of
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

-- Each key's rate limiter: its theoretical arrival time.
CREATE TABLE weir_key_rate (
    queue TEXT NOT NULL,
    key TEXT NOT NULL,
    tat INTEGER NOT NULL,
    PRIMARY KEY (queue, key)
);

-- Shares of a queue's global limit: how many of the queue's handlers a client
-- may run at once, leased until expires_at. Written by QueueShare alone, in a
-- write transaction; a client holding a live share claims the queue's jobs
-- without the limit's count, and the count of a client without one is the live
-- shares plus the running jobs of the clients without one.
CREATE TABLE weir_queue_share (
    queue TEXT NOT NULL,
    holder TEXT NOT NULL,
    want INTEGER NOT NULL CHECK (want BETWEEN 1 AND 1000000),
    slots INTEGER NOT NULL CHECK (slots BETWEEN 0 AND 1000000),
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (queue, holder)
);
