package weirpgx

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// runtimeQueries are the worker runtime's statements, with the schema filled in.
// docs/store-runtime.md describes each one and the index it runs on.
type runtimeQueries struct {
	jobClaim     string
	jobFinalize  string
	jobComplete  string
	jobRenew     string
	jobRescue    string
	jobSchedule  string
	jobPrune     string
	leaderElect  string
	leaderResign string
	leaderGet    string
}

// newRuntimeQueries builds the statements for schema. Durations travel as
// microseconds: $n::bigint * interval '1 microsecond'.
func newRuntimeQueries(schema string) runtimeQueries {
	fill := strings.NewReplacer(
		"{job}", pgx.Identifier{schema, "weir_job"}.Sanitize(),
		"{leader}", pgx.Identifier{schema, "weir_leader"}.Sanitize(),
		"{queue}", pgx.Identifier{schema, "weir_queue"}.Sanitize(),
		"{cols}", jobColumns,
		// The outcome that applies: a requested cancel wins over what the worker says.
		"{eff}", "(CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancel' ELSE i.outcome END)",
		"{due}", "coalesce(i.scheduled_at, now())",
	).Replace
	var q runtimeQueries

	// Claim: the inner select walks weir_job_available_idx (queue, priority,
	// scheduled_at, id) in order, locks up to $2 rows that nobody else holds, and
	// the update leases them. $1 queue, $2 max, $3 lease µs, $4 client id.
	//
	// This and the other batch statements hand the picked ids to the write as an
	// array (id = ANY(ARRAY(...))) rather than a join, so that the write always
	// looks them up by key: with a join the planner may hash the whole table when
	// it expects many rows.
	q.jobClaim = fill(`
WITH picked AS (
	SELECT id FROM {job}
	WHERE state = 'available' AND queue = $1 AND scheduled_at <= now()
		AND NOT EXISTS (SELECT 1 FROM {queue} WHERE name = $1 AND paused_at IS NOT NULL)
	ORDER BY priority, scheduled_at, id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
),
claimed AS (
	UPDATE {job} j SET
		state = 'running',
		attempt = j.attempt + 1,
		lease_token = j.lease_token + 1,
		lease_expires_at = now() + $3::bigint * interval '1 microsecond',
		attempted_at = now(),
		attempted_by = $4
	WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
	RETURNING j.*
)
SELECT {cols} FROM claimed ORDER BY priority, scheduled_at, id`)

	// Finalize: one fenced compare-and-set per input row, then one notification per
	// queue that got available jobs back. Rows come back in input order with
	// whether each applied. $1..$8 are parallel arrays, $9 the insert channel.
	q.jobFinalize = fill(`
WITH input AS (
	SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::timestamptz[],
		$5::integer[], $6::timestamptz[], $7::text[], $8::text[])
		WITH ORDINALITY AS x(id, lease_token, outcome, scheduled_at,
			err_attempt, err_at, err_message, err_trace, ord)
),
updated AS (
	UPDATE {job} j SET
		state = CASE {eff}
			WHEN 'completed' THEN 'completed'
			WHEN 'retry' THEN CASE WHEN {due} <= now() THEN 'available' ELSE 'retryable' END
			WHEN 'snooze' THEN CASE WHEN {due} <= now() THEN 'available' ELSE 'scheduled' END
			WHEN 'discard' THEN 'discarded'
			WHEN 'cancel' THEN 'cancelled'
			WHEN 'release' THEN 'available'
			WHEN 'return' THEN 'available'
		END,
		scheduled_at = CASE WHEN {eff} IN ('retry', 'snooze') THEN {due} ELSE j.scheduled_at END,
		attempt = CASE WHEN {eff} IN ('snooze', 'release', 'return') THEN greatest(j.attempt - 1, 0) ELSE j.attempt END,
		finalized_at = CASE WHEN {eff} IN ('completed', 'discard', 'cancel') THEN now() END,
		lease_expires_at = NULL,
		release_count = j.release_count + CASE WHEN {eff} = 'release' THEN 1 ELSE 0 END,
		errors = CASE WHEN i.err_message IS NULL THEN j.errors
			ELSE j.errors || jsonb_build_array(
				jsonb_build_object(
					'attempt', coalesce(i.err_attempt, j.attempt),
					'at', coalesce(i.err_at, now()),
					'error', i.err_message)
				|| CASE WHEN coalesce(i.err_trace, '') = '' THEN '{}'::jsonb
					ELSE jsonb_build_object('trace', i.err_trace) END)
		END
	FROM input i
	WHERE j.id = i.id AND j.lease_token = i.lease_token AND j.state = 'running'
	RETURNING j.id, j.state, j.queue
),
notified AS (
	SELECT count(pg_notify($9, queue)) AS n
	FROM (SELECT DISTINCT queue FROM updated WHERE state = 'available') AS q
)
SELECT i.ord, u.id IS NOT NULL
FROM input i LEFT JOIN updated u ON u.id = i.id CROSS JOIN notified
ORDER BY i.ord`)

	// Complete: the finalize of a batch in which every outcome is a plain
	// completion (no error, no schedule), the common case, in a statement that
	// does half the work of the general one: two arrays in, no per-row outcome
	// logic, no notification (no job goes back to available), and the applied
	// ids out. The fence and the cancel rule are the general statement's.
	// $1 ids, $2 tokens.
	q.jobComplete = fill(`
UPDATE {job} j SET
	state = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'completed' END,
	finalized_at = now(),
	lease_expires_at = NULL
FROM unnest($1::bigint[], $2::bigint[]) AS i(id, lease_token)
WHERE j.id = i.id AND j.lease_token = i.lease_token AND j.state = 'running'
RETURNING j.id`)

	// Renew: a fenced update of lease_expires_at only, which no index holds, so
	// that it can stay a HOT update. The rows are locked first with SKIP LOCKED:
	// a renewal never waits for a row lock, so it cannot deadlock with the
	// client's outcome writes (each updates many of the client's running rows,
	// in whatever order its plan meets them) nor stall behind a long-held lock.
	// A row that was skipped but still holds the lease on the statement's
	// snapshot is reported busy. $1 ids, $2 tokens, $3 lease µs.
	q.jobRenew = fill(`
WITH input AS (
	SELECT * FROM unnest($1::bigint[], $2::bigint[]) WITH ORDINALITY AS x(id, lease_token, ord)
),
locked AS (
	SELECT j.id FROM {job} j JOIN input i ON i.id = j.id
	WHERE j.lease_token = i.lease_token AND j.state = 'running'
	FOR NO KEY UPDATE OF j SKIP LOCKED
),
renewed AS (
	UPDATE {job} j SET lease_expires_at = now() + $3::bigint * interval '1 microsecond'
	WHERE j.id = ANY(ARRAY(SELECT id FROM locked)) AND j.state = 'running'
	RETURNING j.id, j.cancel_requested_at IS NOT NULL AS cancel_requested
)
SELECT i.id, r.id IS NOT NULL, coalesce(r.cancel_requested, false),
	r.id IS NULL AND EXISTS (SELECT 1 FROM {job} j
		WHERE j.id = i.id AND j.lease_token = i.lease_token AND j.state = 'running')
FROM input i LEFT JOIN renewed r ON r.id = i.id
ORDER BY i.ord`)

	// Rescue: expired leases by the database clock, found through
	// weir_job_running_idx, at most $1 per statement and none that another
	// transaction holds locked (a worker finalizing or renewing it right now).
	// $2 is the error message.
	q.jobRescue = fill(`
WITH picked AS (
	SELECT id FROM {job}
	WHERE state = 'running' AND lease_expires_at < now()
	ORDER BY id
	LIMIT $1
	FOR UPDATE SKIP LOCKED
),
rescued AS (
	UPDATE {job} j SET
		state = CASE
			WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
			WHEN j.attempt >= j.max_attempts THEN 'discarded'
			ELSE 'retryable' END,
		scheduled_at = CASE
			WHEN j.cancel_requested_at IS NULL AND j.attempt < j.max_attempts THEN now()
			ELSE j.scheduled_at END,
		finalized_at = CASE
			WHEN j.cancel_requested_at IS NULL AND j.attempt < j.max_attempts THEN NULL
			ELSE now() END,
		lease_expires_at = NULL,
		errors = j.errors || jsonb_build_array(jsonb_build_object(
			'attempt', j.attempt, 'at', now(), 'error', $2::text))
	WHERE j.id = ANY(ARRAY(SELECT id FROM picked)) AND j.state = 'running'
	RETURNING j.*
)
SELECT {cols} FROM rescued ORDER BY id`)

	// Schedule: due pending jobs through weir_job_pending_idx, then one
	// notification per queue. $1 limit, $2 the insert channel.
	q.jobSchedule = fill(`
WITH due AS (
	SELECT id FROM {job}
	WHERE state IN ('scheduled', 'retryable') AND scheduled_at <= now()
	ORDER BY scheduled_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED
),
promoted AS (
	UPDATE {job} j SET state = 'available'
	WHERE j.id = ANY(ARRAY(SELECT id FROM due)) AND j.state IN ('scheduled', 'retryable')
	RETURNING j.queue
),
notified AS (
	SELECT count(pg_notify($2, queue)) AS n FROM (SELECT DISTINCT queue FROM promoted) AS q
)
SELECT (SELECT count(*) FROM promoted), (SELECT n FROM notified)`)

	// Prune: final jobs through weir_job_finalized_idx, bounded by the latest
	// cutoff ($4), then by the cutoff of each job's state (NULL: none).
	// $1 completed, $2 cancelled, $3 discarded cutoffs, $5 limit.
	q.jobPrune = fill(`
WITH doomed AS (
	SELECT id FROM {job}
	WHERE finalized_at IS NOT NULL AND finalized_at < $4
		AND CASE state
			WHEN 'completed' THEN finalized_at < $1
			WHEN 'cancelled' THEN finalized_at < $2
			WHEN 'discarded' THEN finalized_at < $3
			ELSE false END
	ORDER BY finalized_at
	LIMIT $5
	FOR UPDATE SKIP LOCKED
)
DELETE FROM {job} WHERE id = ANY(ARRAY(SELECT id FROM doomed))`)

	// Elect: insert, or take over an expired term, or renew our own. The upsert
	// returns a row only when it wrote one, that is when $2 leads afterwards.
	// $1 name, $2 leader id, $3 TTL µs.
	q.leaderElect = fill(`
INSERT INTO {leader} AS l (name, leader_id, elected_at, expires_at)
VALUES ($1, $2, now(), now() + $3::bigint * interval '1 microsecond')
ON CONFLICT (name) DO UPDATE SET
	leader_id = EXCLUDED.leader_id,
	elected_at = CASE WHEN l.leader_id = EXCLUDED.leader_id AND l.expires_at >= now()
		THEN l.elected_at ELSE now() END,
	expires_at = EXCLUDED.expires_at
WHERE l.expires_at < now() OR l.leader_id = EXCLUDED.leader_id
RETURNING leader_id`)
	q.leaderResign = fill(`DELETE FROM {leader} WHERE name = $1 AND leader_id = $2`)
	q.leaderGet = fill(`SELECT leader_id, expires_at FROM {leader} WHERE name = $1 AND expires_at >= now()`)
	return q
}
