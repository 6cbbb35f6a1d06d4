package weirpgx

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// jobColumns is the select list every job query returns, in the order scanJob reads.
// Tags come back as JSON so that the same scan serves pgx and database/sql.
const jobColumns = `id, state, queue, kind, args, priority, attempt, max_attempts,
	scheduled_at, created_at, attempted_at, finalized_at, lease_token, lease_expires_at,
	attempted_by, errors, to_jsonb(tags), metadata, unique_key, unique_states,
	release_count, cancel_requested_at`

// queries holds the driver's statements with the schema filled in.
type queries struct {
	schema         string
	job            string // the job table, qualified
	insertChannel  string
	controlChannel string

	jobInsert      string
	jobIDs         string
	notifyInsert   string
	notifyAsync    string
	jobInsertQuiet string
	jobGet         string
	jobCancel      string
	jobRetry       string
	jobDelete      string
	jobState       string
	queueList      string
	queuePause     string
	queueResume    string

	runtimeQueries
}

func newQueries(schema string) *queries {
	q := &queries{
		schema:         schema,
		job:            pgx.Identifier{schema, "weir_job"}.Sanitize(),
		insertChannel:  schema + ".weir_insert",
		controlChannel: schema + ".weir_control",
		runtimeQueries: newRuntimeQueries(schema),
	}
	fill := func(s string) string {
		return strings.NewReplacer(
			"{job}", q.job,
			"{queue}", pgx.Identifier{schema, "weir_queue"}.Sanitize(),
			"{seq}", pgx.Identifier{schema, "weir_job_id_seq"}.Sanitize(),
			"{state_bit}", pgx.Identifier{schema, "weir_state_bit"}.Sanitize(),
			"{args_key}", pgx.Identifier{schema, "weir_unique_args_key"}.Sanitize(),
			"{cols}", jobColumns,
		).Replace(s)
	}

	// One statement inserts every job and skips those whose unique key is taken
	// (returning the holder instead). $1 is a JSON array of jobs. jobInsertQuiet
	// is it alone, for inserts that commit on their own and leave notifying to
	// the notifier; jobInsert also queues a notification per queue with new
	// available jobs, delivered at commit, with $2 the channel.
	q.jobInsertQuiet = fill(`
WITH input AS (
	SELECT x.*, CASE WHEN x.scheduled_at > now() THEN 'scheduled' ELSE 'available' END AS state
	FROM jsonb_to_recordset($1::jsonb) AS x(
		ord integer, kind text, queue text, args jsonb, priority smallint,
		max_attempts smallint, scheduled_at timestamptz, tags text[], metadata jsonb,
		unique_key text, unique_states smallint, unique_by_args boolean)
),
inserted AS (
	INSERT INTO {job} (state, queue, kind, args, priority, max_attempts, scheduled_at,
		tags, metadata, unique_key, unique_states)
	SELECT state, queue, kind, args, priority, max_attempts, coalesce(scheduled_at, now()),
		coalesce(tags, '{}'), coalesce(metadata, '{}'),
		CASE WHEN unique_by_args THEN {args_key}(decode(unique_key, 'hex'), args)
			ELSE decode(unique_key, 'hex') END,
		unique_states
	FROM input
	ORDER BY ord
	ON CONFLICT (unique_key)
		WHERE unique_key IS NOT NULL AND (unique_states & {state_bit}(state)) <> 0
		DO UPDATE SET kind = EXCLUDED.kind
	RETURNING *, xmax <> 0 AS duplicate
)
SELECT {cols}, duplicate
FROM inserted`)
	q.jobInsert = q.jobInsertQuiet + `
WHERE CASE WHEN NOT duplicate AND state = 'available' THEN pg_notify($2, queue) IS NOT NULL ELSE true END`

	// Bulk inserts take their ids and the transaction's clock first, then COPY.
	q.jobIDs = fill(`SELECT now(), array(SELECT nextval('{seq}') FROM generate_series(1, $1::integer))`)
	q.notifyInsert = `SELECT count(pg_notify($1, q)) FROM unnest($2::text[]) AS q`
	// The notifier's statement, a transaction of its own that writes nothing
	// durable: its commit need not wait for a WAL flush (set_config(..., true)
	// lasts until the statement's implicit transaction ends, after its commit
	// record is written).
	q.notifyAsync = `SELECT set_config('synchronous_commit', 'off', true), count(pg_notify($1, q))
FROM unnest($2::text[]) AS q`

	q.jobGet = fill(`SELECT {cols} FROM {job} WHERE id = $1`)
	q.jobState = fill(`SELECT state FROM {job} WHERE id = $1`)

	// Cancel: a job that is not running ends at once; a running job keeps its lease
	// and gets a cancel request that its client acts on.
	q.jobCancel = fill(`
WITH updated AS (
	UPDATE {job} SET
		state = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END,
		finalized_at = CASE WHEN state = 'running' THEN NULL ELSE now() END,
		cancel_requested_at = CASE WHEN state = 'running' THEN coalesce(cancel_requested_at, now()) END
	WHERE id = $1 AND state NOT IN ('completed', 'cancelled', 'discarded')
	RETURNING *
)
SELECT {cols} FROM updated
WHERE CASE WHEN state = 'running' THEN pg_notify($2, 'cancel ' || id) IS NOT NULL ELSE true END`)

	// Retry: a job that is not running becomes available now, with one more attempt
	// allowed if it had used them all.
	q.jobRetry = fill(`
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
SELECT {cols} FROM updated WHERE pg_notify($2, queue) IS NOT NULL`)

	q.jobDelete = fill(`DELETE FROM {job} WHERE id = $1 AND state <> 'running' RETURNING {cols}`)
	// Queues with jobs, by state, plus paused queues without jobs (state NULL).
	q.queueList = fill(`
SELECT coalesce(c.queue, p.name), c.state, coalesce(c.n, 0), p.paused_at IS NOT NULL
FROM (SELECT queue, state, count(*) AS n FROM {job} GROUP BY queue, state) AS c
FULL JOIN (SELECT name, paused_at FROM {queue} WHERE paused_at IS NOT NULL) AS p ON p.name = c.queue
ORDER BY 1, 2`)
	q.queuePause = fill(`
WITH paused AS (
	INSERT INTO {queue} AS q (name, paused_at) VALUES ($1, now())
	ON CONFLICT (name) DO UPDATE SET paused_at = coalesce(q.paused_at, now()), updated_at = now()
	RETURNING name
)
SELECT pg_notify($2, 'pause ' || name) IS NOT NULL FROM paused`)
	// Resuming notifies the insert channel, so that workers of the queue wake.
	q.queueResume = fill(`
WITH resumed AS (
	UPDATE {queue} SET paused_at = NULL, updated_at = now()
	WHERE name = $1 AND paused_at IS NOT NULL
	RETURNING name
)
SELECT pg_notify($2, name) IS NOT NULL FROM resumed`)
	return q
}
