-- weir's schema (docs/design/schema.md). Names are unqualified: the migrator
-- runs this with search_path set to weir's schema. Each function's body lives
-- in its own file under functions/, which "-- weir:install" lines put here.

-- The jobs. Times are in the years 1..9999 UTC, what RFC 3339, and so JSON,
-- can write: every time a row holds is readable by a client. output is what
-- the attempt that completed the job recorded (weir.RecordOutput), written
-- with the completion; progress the latest checkpoint a handler recorded
-- (weir.SetProgress), written with renewals and outcomes under the lease and
-- handed to the next attempt. No index holds either, so a renewal that writes
-- progress can stay a HOT update.
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
    output jsonb,
    progress jsonb,

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
    CONSTRAINT weir_job_unique_check CHECK ((unique_key IS NULL) = (unique_states IS NULL)),
    CONSTRAINT weir_job_scheduled_at_check CHECK (scheduled_at >= '0001-01-01 00:00:00+00' AND scheduled_at < '10000-01-01 00:00:00+00'),
    CONSTRAINT weir_job_created_at_check CHECK (created_at >= '0001-01-01 00:00:00+00' AND created_at < '10000-01-01 00:00:00+00'),
    CONSTRAINT weir_job_attempted_at_check CHECK (attempted_at >= '0001-01-01 00:00:00+00' AND attempted_at < '10000-01-01 00:00:00+00'),
    CONSTRAINT weir_job_finalized_at_check CHECK (finalized_at >= '0001-01-01 00:00:00+00' AND finalized_at < '10000-01-01 00:00:00+00'),
    CONSTRAINT weir_job_lease_expires_at_check CHECK (lease_expires_at >= '0001-01-01 00:00:00+00' AND lease_expires_at < '10000-01-01 00:00:00+00'),
    CONSTRAINT weir_job_cancel_requested_at_check CHECK (cancel_requested_at >= '0001-01-01 00:00:00+00' AND cancel_requested_at < '10000-01-01 00:00:00+00')
) WITH (fillfactor = 90);

ALTER SEQUENCE weir_job_id_seq OWNED BY weir_job.id;

-- weir:install functions/weir_state_bit.sql

-- The claim path by id (JobClaimID and operators): due jobs of a queue, by
-- priority then scheduled time.
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

-- Leader election: one row per elected role (such as maintenance), held by one
-- client until expires_at (database clock) unless renewed.
CREATE TABLE weir_leader (
    name text PRIMARY KEY,
    leader_id text NOT NULL,
    elected_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,

    CONSTRAINT weir_leader_name_check CHECK (char_length(name) BETWEEN 1 AND 128)
);

-- Queue settings shared by every client; a queue has a row once an operator
-- paused it or set its limits (docs/flow-control.md), NULL when it has none.
--
-- global_limit: at most that many of its jobs running across every client.
-- rate_limit per rate_period_us microseconds: at most that many of its jobs
-- started per period, spread evenly; rate_tat is the limiter's state, the
-- generic cell rate algorithm's theoretical arrival time: when the next start
-- is due if starts came evenly, one every T = period/limit. A claim admits
-- k = floor((now - max(tat, now)) / T) + B jobs, B the burst (2 + what 10 ms
-- of the rate allows, weirdriver.RateBurst), and moves tat on by T for each
-- job it leased.
--
-- key_limit, key_rate per key_rate_period_us: the same per key, a job's key
-- being the value, as text, of the field key_path of its args or metadata
-- (key_source), '' when the field is missing or null (weir_job_key).
CREATE TABLE weir_queue (
    name text PRIMARY KEY,
    paused_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    global_limit integer,
    rate_limit integer,
    rate_period_us bigint,
    rate_tat timestamptz,
    key_limit integer,
    key_source text,
    key_path text[],
    key_rate integer,
    key_rate_period_us bigint,
    CONSTRAINT weir_queue_name_check CHECK (char_length(name) BETWEEN 1 AND 128),
    CONSTRAINT weir_queue_global_limit_check CHECK (global_limit BETWEEN 1 AND 1000000),
    CONSTRAINT weir_queue_rate_check CHECK (
        (rate_limit IS NULL AND rate_period_us IS NULL)
        OR (rate_limit BETWEEN 1 AND 1000000 AND rate_period_us BETWEEN 1000 AND 86400000000)),
    CONSTRAINT weir_queue_key_limit_check CHECK (
        (key_limit IS NULL AND key_rate IS NULL AND key_rate_period_us IS NULL
            AND key_source IS NULL AND key_path IS NULL)
        OR (key_source IN ('args', 'metadata') AND cardinality(key_path) BETWEEN 1 AND 8
            AND (key_limit IS NOT NULL OR key_rate IS NOT NULL)
            AND (key_limit IS NULL OR key_limit BETWEEN 1 AND 1000000)
            AND ((key_rate IS NULL AND key_rate_period_us IS NULL)
                OR (key_rate BETWEEN 1 AND 1000000 AND key_rate_period_us BETWEEN 1000 AND 86400000000))))
);

-- weir:install functions/weir_unique_prefix.sql
-- weir:install functions/weir_unique_args_key.sql
-- weir:install functions/weir_enqueue.sql

-- Periodic jobs: one row per schedule, which the maintenance leader registers
-- from its Config.PeriodicJobs and fires. A fire inserts the slot's job and moves
-- next_run_at in one transaction that holds the row, so each slot fires once
-- (docs/periodic.md). A schedule the leader does not declare is marked
-- orphaned_at and kept until an operator deletes it.
CREATE TABLE weir_periodic (
    name text PRIMARY KEY,
    spec text NOT NULL,
    time_zone text NOT NULL,
    next_run_at timestamptz NOT NULL,
    last_run_at timestamptz,
    last_job_id bigint,
    declared_by text NOT NULL,
    declared_at timestamptz NOT NULL DEFAULT now(),
    paused_at timestamptz,
    orphaned_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT weir_periodic_name_check CHECK (char_length(name) BETWEEN 1 AND 128)
);

-- The client registry: one row per running client, which the client writes
-- when it starts, refreshes every few seconds and deletes when it stops; the
-- maintenance leader deletes the rows of clients that stopped refreshing
-- (crashed or cut off). It is for operators (weir clients, the dashboard):
-- nothing that claims, renews or finalizes jobs reads it. id is the client's
-- instance id, the one it writes to weir_job.attempted_by; queues is a JSON
-- array of {"name", "max_workers"}.
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

-- The ready list: one row per available job, the path claims walk instead of
-- the job table (docs/design/storage.md). A claim deletes the rows it takes;
-- the maintenance leader truncates segments whose rows are mostly gone, which
-- removes their dead entries even while an old snapshot is held, where VACUUM
-- could not. A row is a hint: a claim checks the job itself, so a row whose job
-- is no longer available (cancelled, deleted, claimed by id) is only skipped.
-- key is a hint of the job's key in a queue with limits per key (NULL in
-- others), indexed for a skip scan over the keys and by bucket; it only finds
-- rows: the claim counts each job under the key of its own args.
--
-- Triggers on weir_job write the rows, so that every writer (weir_enqueue, SQL
-- of the user's own) keeps the list complete: an insert of available jobs, and
-- an update that makes a job available or moves an available job in the claim
-- order.
CREATE TABLE weir_ready (
    seg smallint NOT NULL,
    queue text NOT NULL,
    priority smallint NOT NULL,
    scheduled_at timestamptz NOT NULL,
    job_id bigint NOT NULL,
    key text
) PARTITION BY LIST (seg);

CREATE TABLE weir_ready_0 PARTITION OF weir_ready FOR VALUES IN (0);
CREATE TABLE weir_ready_1 PARTITION OF weir_ready FOR VALUES IN (1);
CREATE TABLE weir_ready_2 PARTITION OF weir_ready FOR VALUES IN (2);
CREATE TABLE weir_ready_3 PARTITION OF weir_ready FOR VALUES IN (3);

CREATE INDEX weir_ready_claim_idx ON weir_ready (queue, priority, scheduled_at, job_id);
CREATE INDEX weir_ready_key_idx ON weir_ready (queue, key, priority, scheduled_at, job_id) WHERE key IS NOT NULL;

-- weir:install functions/weir_ready_seg.sql
-- weir:install functions/weir_job_key.sql
-- weir:install functions/weir_key_bucket.sql

-- A holder's claim reads the head of each of its buckets in claim order.
CREATE INDEX weir_ready_bucket_idx ON weir_ready (queue, weir_key_bucket(key), priority, scheduled_at, job_id)
    WHERE key IS NOT NULL;

-- weir:install functions/weir_ready_inserted.sql

CREATE TRIGGER weir_job_ready_insert AFTER INSERT ON weir_job
    REFERENCING NEW TABLE AS weir_inserted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION weir_ready_inserted();

-- weir:install functions/weir_ready_updated.sql

CREATE TRIGGER weir_job_ready_update AFTER UPDATE OF state, queue, priority, scheduled_at ON weir_job
    FOR EACH ROW
    WHEN (NEW.state = 'available' AND (OLD.state <> 'available' OR OLD.queue <> NEW.queue
        OR OLD.priority <> NEW.priority OR OLD.scheduled_at <> NEW.scheduled_at))
    EXECUTE FUNCTION weir_ready_updated();

-- Where a queue's last skip scan over its keys stopped (weir_ready_claim): the
-- next starts after it, so that, a bounded number of keys at a time, every key
-- is visited in turn. Only claims write it, under the queue's claim lock.
CREATE TABLE weir_key_scan (
    queue text PRIMARY KEY,
    after text NOT NULL
);

-- The rate limiter of each key of a queue with a rate limit per key: the
-- generic cell rate algorithm's time, as rate_tat is the queue's. A key
-- without a row, or whose time is past, may start its burst.
CREATE TABLE weir_key_rate (
    queue text NOT NULL,
    key text NOT NULL,
    tat timestamptz NOT NULL,
    PRIMARY KEY (queue, key)
);

-- Shares of a queue's global limit (docs/design/flow-control.md). A client that runs
-- a limited queue holds a share: how many of the queue's handlers it may run at
-- once, leased like a job (expires_at) and renewed every few hundred
-- milliseconds, written only under the lock the queue's limited claims take
-- (QueueShare in weirpgx). A client's share is its fair part of the limit (by
-- what each client wants: its MaxWorkers) as far as the room the other shares
-- and the running jobs of clients without one leave, but never less than the
-- slots it says it may be using. A client with a share claims without counting
-- the limit and keeps its handlers within its share; one without claims under
-- the lock, counting the live shares and the running jobs of clients without
-- one.
CREATE TABLE weir_queue_share (
    queue text NOT NULL,
    holder text NOT NULL,
    want integer NOT NULL CHECK (want BETWEEN 1 AND 1000000),
    slots integer NOT NULL CHECK (slots BETWEEN 0 AND 1000000),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (queue, holder)
);

-- Shares of a queue's keys. A queue limited per key, without a rate limit,
-- divides its keys into 64 buckets (weir_key_bucket), and each client that runs
-- the queue holds some of them, leased like a job and renewed every few hundred
-- milliseconds (KeyShare in weirpgx), under the lock the queue's limited claims
-- take. A bucket is taken only while no job of its keys runs, by any client; a
-- holder claims its buckets' jobs without the lock or the count and keeps each
-- key within its limit itself. A claim by a client that holds no bucket is
-- counted under the lock and passes over the jobs of held buckets.
CREATE TABLE weir_key_share (
    queue text NOT NULL,
    bucket integer NOT NULL CHECK (bucket BETWEEN 0 AND 63),
    holder text NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (queue, bucket)
);

-- The clients that want buckets of a queue's keys, each leased as its buckets
-- are, and what each wants (its MaxWorkers for the queue; NULL counts as the
-- others' mean): the buckets are divided in proportion, one each first
-- (weirdriver.KeyPart).
CREATE TABLE weir_key_holder (
    queue text NOT NULL,
    holder text NOT NULL,
    expires_at timestamptz NOT NULL,
    want integer CHECK (want BETWEEN 1 AND 1000000),
    PRIMARY KEY (queue, holder)
);

-- weir:install functions/weir_queue_set_key.sql
-- weir:install functions/weir_ready_claim.sql
