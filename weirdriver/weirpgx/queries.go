package weirpgx

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The driver's statements are the constants below, in runtime_queries.go and in
// migrate.go, written with placeholders that filler replaces for the driver's
// schema: {schema} is the schema; {job}, {queue}, {leader}, {migration}, {seq},
// {state_bit} and {args_key} name weir's tables, sequence and functions there,
// qualified; {cols} is jobColumns; {eff} and {due} are fragments of the
// runtime's finalize.

// jobColumns is the select list every job query returns, in the order scanJob reads.
// Tags come back as JSON so that the same scan serves pgx and database/sql.
const jobColumns = `id, state, queue, kind, args, priority, attempt, max_attempts,
	scheduled_at, created_at, attempted_at, finalized_at, lease_token, lease_expires_at,
	attempted_by, errors, to_jsonb(tags), metadata, unique_key, unique_states,
	release_count, cancel_requested_at, output, progress`

// jobInsertQuietSQL inserts every job in one statement. A job whose unique key
// is taken is not inserted: the holder is returned instead, changed first when
// the job's on_conflict (weirdriver.UniqueOnConflict) asks it and the holder is
// pending. ON CONFLICT DO UPDATE locks the holder and reads its latest version,
// so a holder that a claim took meanwhile is seen running and left as it is. It
// serves inserts that commit on their own and leave notifying to the notifier.
// $1 is a JSON array of jobs (insertInput), each of another unique key. Returns
// jobColumns, whether the row is a duplicate and whether it was replaced, in
// input order.
const jobInsertQuietSQL = `
WITH input AS (
	SELECT x.*, CASE WHEN x.scheduled_at > now() THEN 'scheduled' ELSE 'available' END AS state,
		CASE WHEN x.unique_by_args THEN {args_key}(decode(x.unique_key, 'hex'), coalesce(x.key_args, x.args))
			ELSE decode(x.unique_key, 'hex') END AS key
	FROM jsonb_to_recordset($1::jsonb) AS x(
		ord integer, kind text, queue text, args jsonb, priority smallint,
		max_attempts smallint, scheduled_at timestamptz, tags text[], metadata jsonb,
		unique_key text, unique_states smallint, unique_by_args boolean, key_args jsonb,
		on_conflict smallint)
),
inserted AS (
	INSERT INTO {job} AS j (state, queue, kind, args, priority, max_attempts, scheduled_at,
		tags, metadata, unique_key, unique_states)
	SELECT state, queue, kind, args, priority, max_attempts, coalesce(scheduled_at, now()),
		coalesce(tags, '{}'), coalesce(metadata, '{}'), key, unique_states
	FROM input
	ORDER BY ord
	ON CONFLICT (unique_key)
		WHERE unique_key IS NOT NULL AND (unique_states & {state_bit}(state)) <> 0
		DO UPDATE SET (kind, args, metadata, tags, priority, max_attempts, scheduled_at, state) = (
			SELECT j.kind,
				CASE WHEN m.replace THEN EXCLUDED.args ELSE j.args END,
				CASE WHEN m.replace THEN EXCLUDED.metadata ELSE j.metadata END,
				CASE WHEN m.replace THEN EXCLUDED.tags ELSE j.tags END,
				CASE WHEN m.replace THEN EXCLUDED.priority ELSE j.priority END,
				CASE WHEN m.replace THEN EXCLUDED.max_attempts ELSE j.max_attempts END,
				CASE WHEN m.debounce THEN EXCLUDED.scheduled_at ELSE j.scheduled_at END,
				CASE WHEN NOT m.debounce THEN j.state
					WHEN EXCLUDED.scheduled_at <= now() THEN 'available'
					WHEN j.state = 'retryable' THEN 'retryable'
					ELSE 'scheduled' END
			FROM (SELECT p.mode <> 0 AND p.pending AS replace, p.mode = 2 AND p.pending AS debounce
				FROM (SELECT coalesce((SELECT i.on_conflict FROM input AS i WHERE i.key = EXCLUDED.unique_key LIMIT 1), 0) AS mode,
					j.state IN ('scheduled', 'available', 'retryable') AS pending) AS p) AS m)
	RETURNING *, xmax <> 0 AS duplicate
),
result AS (
	SELECT *, CASE WHEN duplicate AND state IN ('scheduled', 'available', 'retryable')
		THEN coalesce((SELECT i.on_conflict FROM input AS i WHERE i.key = inserted.unique_key LIMIT 1), 0) <> 0
		ELSE false END AS replaced
	FROM inserted
)
SELECT {cols}, duplicate, replaced
FROM result`

// jobInsertSQL is jobInsertQuietSQL that also queues a notification per queue
// with new or replaced available jobs, delivered at commit. $1 the jobs, $2 the
// insert channel. Returns what jobInsertQuietSQL does.
const jobInsertSQL = jobInsertQuietSQL + `
WHERE CASE WHEN (NOT duplicate OR replaced) AND state = 'available' THEN pg_notify($2, queue) IS NOT NULL ELSE true END`

// jobInsertOneRowSQL inserts one job without a unique key, the commonest
// insert, with a plain INSERT, which runs at the rate of a bare INSERT of the
// same row, where jobInsertQuietSQL, with its JSON input and conflict arm,
// runs at 0.83–0.88 of it (BenchmarkInsertStatements). $1 queue, $2 kind, $3
// args, $4 priority, $5 scheduled_at (NULL: now), $6 max_attempts, $7 tags
// (NULL: none), $8 metadata (NULL: {}).
const jobInsertOneRowSQL = `
INSERT INTO {job} (state, queue, kind, args, priority, max_attempts, scheduled_at, tags, metadata)
VALUES (CASE WHEN $5::timestamptz > now() THEN 'scheduled' ELSE 'available' END, $1, $2, $3, $4, $6,
	coalesce($5, now()), coalesce($7::text[], '{}'), coalesce($8::jsonb, '{}'))`

// jobInsertOneQuietSQL is jobInsertQuietSQL for one job without a unique key
// (jobInsertOneRowSQL's parameters). Returns what jobInsertQuietSQL does.
const jobInsertOneQuietSQL = jobInsertOneRowSQL + `
RETURNING {cols}, false, false`

// jobInsertOneSQL is jobInsertOneQuietSQL that also queues a notification when
// the job is available, delivered at commit; $9 is the insert channel.
const jobInsertOneSQL = `WITH inserted AS (` + jobInsertOneRowSQL + `
	RETURNING *
)
SELECT {cols}, false, false FROM inserted
WHERE CASE WHEN state = 'available' THEN pg_notify($9, queue) IS NOT NULL ELSE true END`

// jobIDsSQL reserves ids for a bulk insert, which takes them and the
// transaction's clock first, then copies. $1 how many. Returns now() and the ids.
const jobIDsSQL = `SELECT now(), array(SELECT nextval('{seq}') FROM generate_series(1, $1::integer))`

// notifyInsertSQL sends one notification per queue, at commit. $1 the insert
// channel, $2 the queues. Returns how many it sent.
const notifyInsertSQL = `SELECT count(pg_notify($1, q)) FROM unnest($2::text[]) AS q`

// notifyAsyncSQL is the notifier's notifyInsertSQL, a transaction of its own that
// writes nothing durable: its commit need not wait for a WAL flush
// (set_config(..., true) lasts until the statement's implicit transaction ends,
// after its commit record is written). Parameters and result as notifyInsertSQL's.
const notifyAsyncSQL = `SELECT set_config('synchronous_commit', 'off', true), count(pg_notify($1, q))
FROM unnest($2::text[]) AS q`

// jobGetSQL returns the jobColumns of job $1.
const jobGetSQL = `SELECT {cols} FROM {job} WHERE id = $1`

// jobUpdateSQL replaces the metadata ($2, NULL: kept) and tags ($3, NULL:
// kept) of job $1 when it is not running. Returns the job's jobColumns
// afterwards, or no row when the job is missing or running.
const jobUpdateSQL = `
WITH updated AS (
	UPDATE {job} SET
		metadata = coalesce($2::jsonb, metadata),
		tags = coalesce($3::text[], tags)
	WHERE id = $1 AND state <> 'running'
	RETURNING *
)
SELECT {cols} FROM updated`

// jobStateSQL returns the state of job $1.
const jobStateSQL = `SELECT state FROM {job} WHERE id = $1`

// jobCancelSQL cancels job $1: a job that is not running ends at once; a running
// job keeps its lease and gets a cancel request that its client acts on, sent on
// $2, the control channel. Returns the job's jobColumns afterwards, or no row
// when the job is missing or final.
const jobCancelSQL = `
WITH updated AS (
	UPDATE {job} SET
		state = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END,
		finalized_at = CASE WHEN state = 'running' THEN NULL ELSE now() END,
		cancel_requested_at = CASE WHEN state = 'running' THEN coalesce(cancel_requested_at, now()) END
	WHERE id = $1 AND state NOT IN ('completed', 'cancelled', 'discarded')
	RETURNING *
)
SELECT {cols} FROM updated
WHERE CASE WHEN state = 'running' THEN pg_notify($2, 'cancel ' || id) IS NOT NULL ELSE true END`

// jobRetrySQL makes job $1, when it is not running, available now, with one more
// attempt allowed if it had used them all, and notifies its queue on $2, the
// insert channel. Returns the job's jobColumns afterwards, or no row when the job
// is missing or running.
const jobRetrySQL = `
WITH updated AS (
	UPDATE {job} SET
		state = 'available',
		scheduled_at = now(),
		finalized_at = NULL,
		cancel_requested_at = NULL,
		max_attempts = greatest(max_attempts, attempt + 1)
	WHERE id = $1 AND state <> 'running'
	RETURNING *
)
SELECT {cols} FROM updated WHERE pg_notify($2, queue) IS NOT NULL`

// jobDeleteSQL deletes job $1 when it is not running. Returns its jobColumns, or
// no row when the job is missing or running.
const jobDeleteSQL = `DELETE FROM {job} WHERE id = $1 AND state <> 'running' RETURNING {cols}`

// queueSettings are the queues that are paused or limited, with
// the columns queueListSQL and queueCountsSQL show.
const queueSettings = `(SELECT name, paused_at, global_limit, rate_limit, rate_period_us, key_limit, key_rate,
	key_rate_period_us, key_source || '.' || array_to_string(key_path, '.') AS key FROM {queue}
	WHERE paused_at IS NOT NULL OR global_limit IS NOT NULL OR rate_limit IS NOT NULL OR key_source IS NOT NULL)`

// queueListSQL counts jobs by queue and state, and lists paused or limited
// queues without jobs (state NULL). Returns name, state, count, the group's
// earliest scheduled time, false (no count is a sample's: the columns of
// queueCountsSQL), paused, the global limit (0: none) and the rate limit and
// its period in µs (0: none), and the limits per key (0: none) and their
// key, ordered by name and state.
const queueListSQL = `
SELECT coalesce(c.queue, p.name), c.state, coalesce(c.n, 0), c.oldest, false, p.paused_at IS NOT NULL,
	coalesce(p.global_limit, 0), coalesce(p.rate_limit, 0), coalesce(p.rate_period_us, 0),
	coalesce(p.key_limit, 0), coalesce(p.key_rate, 0), coalesce(p.key_rate_period_us, 0), coalesce(p.key, '')
FROM (SELECT queue, state, count(*) AS n, min(scheduled_at) AS oldest FROM {job} GROUP BY queue, state) AS c
FULL JOIN ` + queueSettings + ` AS p ON p.name = c.queue
ORDER BY 1, 2`

// queueSetRateLimitSQL sets queue $1's rate limit to $2 jobs per $3 µs (NULL
// and NULL: none), and notifies $4, the insert channel, so that the queue's
// workers claim again. The limiter's state stays: the next start is due when
// it was, so that setting a limit again (every client's Start does) grants no
// burst.
const queueSetRateLimitSQL = `
WITH settings AS (
	INSERT INTO {queue} AS q (name, rate_limit, rate_period_us) VALUES ($1, $2, $3)
	ON CONFLICT (name) DO UPDATE SET rate_limit = excluded.rate_limit, rate_period_us = excluded.rate_period_us,
		updated_at = now()
	RETURNING name
)
SELECT pg_notify($4, name) IS NOT NULL FROM settings`

// queueSetKeyLimitSQL sets queue $1's limits per key, $2 running (NULL:
// none) and $3 per $4 µs started (NULL: none), on the field path $6 of
// source $5 (weir_queue_set_key), and notifies $7, the insert
// channel, so that the queue's workers claim again.
const queueSetKeyLimitSQL = `
SELECT {schema}.weir_queue_set_key($1, $2, $3, $4, $5, $6), pg_notify($7, $1) IS NOT NULL`

// queueSetGlobalLimitSQL sets queue $1's global limit to $2 (NULL: none) and
// notifies $3, the insert channel, so that the queue's workers claim again.
const queueSetGlobalLimitSQL = `
WITH settings AS (
	INSERT INTO {queue} AS q (name, global_limit) VALUES ($1, $2)
	ON CONFLICT (name) DO UPDATE SET global_limit = excluded.global_limit, updated_at = now()
	RETURNING name
)
SELECT pg_notify($3, name) IS NOT NULL FROM settings`

// queuePauseSQL pauses queue $1, keeping the time of an earlier pause, and sends
// "pause <name>" on $2, the control channel.
const queuePauseSQL = `
WITH paused AS (
	INSERT INTO {queue} AS q (name, paused_at) VALUES ($1, now())
	ON CONFLICT (name) DO UPDATE SET paused_at = coalesce(q.paused_at, now()), updated_at = now()
	RETURNING name
)
SELECT pg_notify($2, 'pause ' || name) IS NOT NULL FROM paused`

// queueResumeSQL resumes queue $1 when it is paused and notifies $2, the insert
// channel, so that the queue's workers wake.
const queueResumeSQL = `
WITH resumed AS (
	UPDATE {queue} SET paused_at = NULL, updated_at = now()
	WHERE name = $1 AND paused_at IS NOT NULL
	RETURNING name
)
SELECT pg_notify($2, name) IS NOT NULL FROM resumed`

// queries holds the driver's statements with the schema filled in.
type queries struct {
	schema         string
	job            string // the job table, qualified
	migration      string // the migration table, qualified
	insertChannel  string
	controlChannel string

	jobInsert      string
	jobIDs         string
	notifyInsert   string
	notifyAsync    string
	jobInsertQuiet string
	jobInsertOne   string
	jobInsertOneQ  string
	jobGet         string
	jobCancel      string
	jobRetry       string
	jobDelete      string
	jobUpdate      string
	jobState       string
	queueList      string
	queuePause     string
	queueResume    string
	queueSetLimit  string
	queueSetRate   string
	queueSetKey    string

	readySegments string
	readyLive     string // {segment}: the segment's table, qualified
	readyMove     string // the same
	readyRepair   string

	readyMode        string
	readyModeLock    string
	readyModeRead    string
	readyModeSet     string
	readyLockers     string
	readyLockersLeft string
	readyProbeQueues string
	readyProbeRange  string
	readyProbe       string
	readyClear       string // {segment}: the segment's table, qualified

	// QueueListEstimated's (dashboard.go).
	jobSize            string
	queueCountsExact   string
	queueCountsSampled string
	estimate           estimateSizes
	jobThroughput      string

	runtimeQueries
	migrationQueries
	periodicQueries
	clientQueries
}

func newQueries(schema string) *queries {
	fill := filler(schema)
	return &queries{
		schema:         schema,
		job:            pgx.Identifier{schema, "weir_job"}.Sanitize(),
		migration:      pgx.Identifier{schema, "weir_migration"}.Sanitize(),
		insertChannel:  schema + ".weir_insert",
		controlChannel: schema + ".weir_control",

		jobInsert:      fill(jobInsertSQL),
		jobIDs:         fill(jobIDsSQL),
		notifyInsert:   fill(notifyInsertSQL),
		notifyAsync:    fill(notifyAsyncSQL),
		jobInsertQuiet: fill(jobInsertQuietSQL),
		jobInsertOne:   fill(jobInsertOneSQL),
		jobInsertOneQ:  fill(jobInsertOneQuietSQL),
		jobGet:         fill(jobGetSQL),
		jobCancel:      fill(jobCancelSQL),
		jobRetry:       fill(jobRetrySQL),
		jobDelete:      fill(jobDeleteSQL),
		jobUpdate:      fill(jobUpdateSQL),
		jobState:       fill(jobStateSQL),
		queueList:      fill(queueListSQL),
		queuePause:     fill(queuePauseSQL),
		queueResume:    fill(queueResumeSQL),
		queueSetLimit:  fill(queueSetGlobalLimitSQL),
		queueSetRate:   fill(queueSetRateLimitSQL),
		queueSetKey:    fill(queueSetKeyLimitSQL),
		readySegments:  fill(readySegmentsSQL),
		readyLive:      fill(readyLiveSQL),
		readyMove:      fill(readyMoveSQL),
		readyRepair:    fill(readyRepairSQL),

		readyMode:        fill(readyModeSQL),
		readyModeLock:    readyModeLockSQL,
		readyModeRead:    fill(readyModeReadSQL),
		readyModeSet:     fill(readyModeSetSQL),
		readyLockers:     fill(readyLockersSQL),
		readyLockersLeft: fill(readyLockersLeftSQL),
		readyProbeQueues: fill(readyProbeQueuesSQL),
		readyProbeRange:  fill(readyProbeRangeSQL),
		readyProbe:       fill(readyProbeSQL),
		readyClear:       fill(readyClearSQL),

		jobSize:            fill(jobSizeSQL),
		queueCountsExact:   fill(fmt.Sprintf(queueCountsSQL, queueFinalExact)),
		queueCountsSampled: fill(fmt.Sprintf(queueCountsSQL, queueFinalSampled)),
		estimate:           defaultEstimateSizes,
		jobThroughput:      fill(jobThroughputSQL),

		runtimeQueries:   newRuntimeQueries(fill),
		migrationQueries: newMigrationQueries(fill),
		periodicQueries:  newPeriodicQueries(fill),
		clientQueries:    newClientQueries(fill),
	}
}

// filler returns the function that fills a statement's placeholders for schema.
func filler(schema string) func(string) string {
	ident := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	return strings.NewReplacer(
		"{schema}", pgx.Identifier{schema}.Sanitize(),
		"{job}", ident("weir_job"),
		"{queue}", ident("weir_queue"),
		"{leader}", ident("weir_leader"),
		"{periodic}", ident("weir_periodic"),
		"{ready}", ident("weir_ready"),
		"{ready_claim}", ident("weir_ready_claim"),
		"{client}", ident("weir_client"),
		"{share}", ident("weir_queue_share"),
		"{key_share}", ident("weir_key_share"),
		"{key_holder}", ident("weir_key_holder"),
		"{key_bucket}", ident("weir_key_bucket"),
		"{job_key}", ident("weir_job_key"),
		"{migration}", ident("weir_migration"),
		"{seq}", ident("weir_job_id_seq"),
		"{state_bit}", ident("weir_state_bit"),
		"{args_key}", ident("weir_unique_args_key"),
		"{cols}", jobColumns,
		"{eff}", effectiveOutcome,
		"{due}", dueAt,
		"{token}", nextToken,
		"{running}", stillRunning,
	).Replace
}
