package weirpgx

// The worker runtime's statements; docs/design/store-runtime.md describes each one and
// the index it runs on. Durations travel as microseconds:
// $n::bigint * interval '1 microsecond'.

// effectiveOutcome ({eff}) is the outcome that applies in jobFinalizeSQL: a
// requested cancel wins over what the worker says.
const effectiveOutcome = "(CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancel' ELSE i.outcome END)"

// nextToken ({token}) is a claim's new lease token: greater than the job's
// last one, and at least the claim's time in microseconds since 1970. The
// time keeps tokens apart across a failover to an asynchronous standby, whose
// copy of a job may lack the last claims the old primary made: the new
// primary's claims come later, so they do not hand out again a token the old
// primary gave (docs/operations.md, "A primary and a replica"). The claim's
// function weir_ready_claim (functions/weir_ready_claim.sql) has its own copy.
const nextToken = "greatest(j.lease_token + 1, (extract(epoch FROM now()) * 1000000)::bigint)"

// dueAt ({due}) is when a retried or snoozed job in jobFinalizeSQL becomes due.
const dueAt = "coalesce(i.scheduled_at, now())"

// stillRunning ({running}) is the fence's state test in the statements that
// find a client's jobs by id (outcomes, renewals): j.state = 'running' in a
// form that the planner cannot match to weir_job_running_idx's predicate, so
// that each job is read through the primary key. With the plain test the
// planner took the running index whenever the statistics said few jobs ran
// (they were taken on an idle queue, or before a burst), and hashed every
// running job, with the dead entries of those that had run, for each batch:
// a completion of 200 jobs while 5,000 ran read 3,900 buffers of them first
// (docs/design/store-runtime.md).
const stillRunning = "CASE WHEN j.state = 'running' THEN true ELSE false END"

// jobClaimSQL leases up to $2 due available jobs of queue $1, unless the queue
// is paused, for $3 µs to client $4, through weir_ready_claim. While the ready
// list is off it walks the job table's partial index of available jobs in
// claim order and locks the rows nobody else holds. While it is on (an old
// snapshot is held, whose kept entries of claimed jobs every walk of that
// index would pass over, or a queue has limits per key: docs/design/storage.md)
// it takes rows from the list in claim order (each segment's index: queue,
// priority, scheduled_at, job id, walked in order whatever the statistics),
// rows that nobody else holds, locked and deleted, and leases their jobs that
// are still available in that queue and due, by primary key; a row whose job
// is not (cancelled, deleted, claimed by id, moved) is a stale hint, deleted
// with the rest. The lease token is
// the function's copy of nextToken. A queue with a rate limit or limits per
// key, or with a global limit claimed by a client holding no share of it, is
// claimed under the queue's advisory claim lock, at most the limit less the
// live shares and the running jobs of clients without one, and what the rates
// admit. Returns the claimed jobs' jobColumns in claim order, then, when a
// limit cut the claim short, a row whose id is NULL, attempted_at the claim's
// time and scheduled_at, when the rate limit cut it, the time the next start is
// due. With $5, the buckets of the queue's keys the client holds, it claims as
// their holder, skipping the keys $6, and each job comes with its key; the row
// after the jobs then comes after every claim, its kind the words of what it
// says (capped, share, owned, keys).
const jobClaimSQL = `
SELECT {cols}, CASE WHEN c.id IS NOT NULL AND cardinality($5::integer[]) > 0 THEN {job_key}(p.src, p.path, c.args, c.metadata) END
FROM {ready_claim}($1, $2, $3, $4, $5, $6, false) AS c
	LEFT JOIN (SELECT q.key_source AS src, q.key_path AS path FROM {queue} q WHERE q.name = $1) p ON true
ORDER BY c.priority, c.scheduled_at, c.id`

// jobClaimIDSQL leases job $1 for $2 µs to client $3 as jobClaimSQL does, if it
// is scheduled, available or retryable.
const jobClaimIDSQL = `
UPDATE {job} j SET
	state = 'running',
	attempt = j.attempt + 1,
	lease_token = {token},
	lease_expires_at = now() + $2::bigint * interval '1 microsecond',
	attempted_at = now(),
	attempted_by = $3
WHERE j.id = $1 AND j.state IN ('scheduled', 'available', 'retryable')
RETURNING {cols}`

// jobFinalizeSQL writes a batch of outcomes: one fenced compare-and-set per
// input row, then one notification per queue that got available jobs back.
// $1..$8 and $10..$11 are parallel arrays (id, lease token, outcome, scheduled
// at, the error's attempt, time, message and trace, and the output and
// progress as JSON text), $9 the insert channel. The output is written only by
// a completion that applies as one, the progress by any outcome that carries
// it. Returns, per input row in order, its ordinal and whether it applied.
const jobFinalizeSQL = `
WITH input AS (
	SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::timestamptz[],
		$5::integer[], $6::timestamptz[], $7::text[], $8::text[], $10::text[], $11::text[])
		WITH ORDINALITY AS x(id, lease_token, outcome, scheduled_at,
			err_attempt, err_at, err_message, err_trace, output, progress, ord)
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
		output = CASE WHEN {eff} = 'completed' AND i.output IS NOT NULL THEN i.output::jsonb ELSE j.output END,
		progress = coalesce(i.progress::jsonb, j.progress),
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
	WHERE j.id = i.id AND j.lease_token = i.lease_token AND {running}
	RETURNING j.id, j.state, j.queue
),
notified AS (
	SELECT count(pg_notify($9, queue)) AS n
	FROM (SELECT DISTINCT queue FROM updated WHERE state = 'available') AS q
)
SELECT i.ord, u.id IS NOT NULL
FROM input i LEFT JOIN updated u ON u.id = i.id CROSS JOIN notified
ORDER BY i.ord`

// jobCompleteSQL is the finalize of a batch in which every outcome is a plain
// completion (no error, no schedule), the common case, in a statement that
// does half the work of the general one: two arrays in, no per-row outcome
// logic, no notification (no job goes back to available). The fence, the
// cancel rule and the output and progress rules are the general statement's.
// $1 ids, $2 tokens, $3 outputs, $4 progress (JSON text, NULL: none). Returns
// the ids that applied.
const jobCompleteSQL = `
UPDATE {job} j SET
	state = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'completed' END,
	finalized_at = now(),
	lease_expires_at = NULL,
	output = CASE WHEN j.cancel_requested_at IS NULL AND i.output IS NOT NULL THEN i.output::jsonb ELSE j.output END,
	progress = coalesce(i.progress::jsonb, j.progress)
FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[]) AS i(id, lease_token, output, progress)
WHERE j.id = i.id AND j.lease_token = i.lease_token AND {running}
RETURNING j.id`

// jobCompleteOneSQL is jobCompleteSQL for one job, inside a caller's
// transaction (weir.JobCompleteTx): $1 id, $2 lease token, $3 output, $4
// progress (JSON text, NULL: none). Returns the id if it applied.
const jobCompleteOneSQL = `
UPDATE {job} j SET
	state = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'completed' END,
	finalized_at = now(),
	lease_expires_at = NULL,
	output = CASE WHEN j.cancel_requested_at IS NULL AND $3::text IS NOT NULL THEN $3::text::jsonb ELSE j.output END,
	progress = coalesce($4::text::jsonb, j.progress)
WHERE j.id = $1::bigint AND j.lease_token = $2::bigint AND {running}
RETURNING j.id`

// jobStatesUnderSQL returns, per input row in order, the state of job $1[i]
// if its lease token is $2[i], else ”.
const jobStatesUnderSQL = `
SELECT coalesce((SELECT j.state FROM {job} j WHERE j.id = i.id AND j.lease_token = i.lease_token), '')
FROM unnest($1::bigint[], $2::bigint[]) WITH ORDINALITY AS i(id, lease_token, ord)
ORDER BY i.ord`

// jobRenewSQL extends leases by $3 µs with a fenced update of lease_expires_at
// and, where $4 (JSON text, parallel to $1) is not NULL, progress: no index
// holds either column, so that it can stay a HOT update. The rows are
// locked first with SKIP LOCKED: a renewal never waits for a row lock, so it
// cannot deadlock with the client's outcome writes (each updates many of the
// client's running rows, in whatever order its plan meets them) nor stall
// behind a long-held lock. $1 ids, $2 tokens. Returns, per input row in order,
// the id, whether it was renewed, whether its cancel is requested, and whether
// it was busy: skipped but still holding the lease on the statement's snapshot
// (a scalar subquery by primary key, read only for the leases not renewed: the
// planner may hash an EXISTS over the whole table).
const jobRenewSQL = `
WITH input AS (
	SELECT * FROM unnest($1::bigint[], $2::bigint[], $4::text[]) WITH ORDINALITY AS x(id, lease_token, progress, ord)
),
locked AS (
	SELECT j.id FROM {job} j JOIN input i ON i.id = j.id
	WHERE j.lease_token = i.lease_token AND {running}
	FOR NO KEY UPDATE OF j SKIP LOCKED
),
renewed AS (
	UPDATE {job} j SET lease_expires_at = now() + $3::bigint * interval '1 microsecond',
		progress = coalesce(i.progress::jsonb, j.progress)
	FROM input i
	WHERE j.id = ANY(ARRAY(SELECT id FROM locked)) AND i.id = j.id AND {running}
	RETURNING j.id, j.cancel_requested_at IS NOT NULL AS cancel_requested
)
SELECT i.id, r.id IS NOT NULL, coalesce(r.cancel_requested, false),
	r.id IS NULL AND coalesce((SELECT j.state = 'running' FROM {job} j
		WHERE j.id = i.id AND j.lease_token = i.lease_token), false)
FROM input i LEFT JOIN renewed r ON r.id = i.id
ORDER BY i.ord`

// jobRescueSQL takes back expired leases by the database clock, found through
// weir_job_running_idx, at most $1 per statement and none that another
// transaction holds locked (a worker finalizing or renewing it right now),
// recording error message $2. A job with attempts left keeps its scheduled
// time (it was due when claimed), so that it keeps its place in line instead of
// waiting behind the backlog. Returns the rescued jobs' jobColumns in id order.
const jobRescueSQL = `
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
			WHEN j.cancel_requested_at IS NULL AND j.attempt < j.max_attempts THEN least(j.scheduled_at, now())
			ELSE j.scheduled_at END,
		finalized_at = CASE
			WHEN j.cancel_requested_at IS NULL AND j.attempt < j.max_attempts THEN NULL
			ELSE now() END,
		lease_expires_at = NULL,
		errors = j.errors || jsonb_build_array(jsonb_build_object(
			'attempt', j.attempt, 'at', now(), 'error', $2::text))
	WHERE j.id = ANY(ARRAY(SELECT id FROM picked)) AND {running}
	RETURNING j.*
)
SELECT {cols} FROM rescued ORDER BY id`

// jobNextExpirySQL is how many microseconds until the earliest lease of a
// running job expires by the database clock (NULL when none runs), found
// through weir_job_running_idx, as rescue finds the expired ones.
const jobNextExpirySQL = `
SELECT (extract(epoch FROM min(lease_expires_at) - now()) * 1000000)::bigint
FROM {job} WHERE state = 'running'`

// jobScheduleSQL makes up to $1 due pending jobs available, through
// weir_job_pending_idx, then sends one notification per queue on $2, the insert
// channel. Returns how many jobs it changed and how many notifications it sent.
const jobScheduleSQL = `
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
SELECT (SELECT count(*) FROM promoted), (SELECT n FROM notified)`

// jobPruneSQL deletes up to $5 final jobs through weir_job_finalized_idx,
// bounded by the latest cutoff ($4), then by the cutoff of each job's state
// (NULL: none): $1 completed, $2 cancelled, $3 discarded. Returns nothing; the
// command tag counts the deleted rows.
const jobPruneSQL = `
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
DELETE FROM {job} WHERE id = ANY(ARRAY(SELECT id FROM doomed))`

// leaderElectSQL elects leader $2 of $1 for $3 µs: it inserts the term, or
// takes over an expired one, or renews its own. The upsert returns a row, the
// leader id, only when it wrote one, that is when $2 leads afterwards.
const leaderElectSQL = `
INSERT INTO {leader} AS l (name, leader_id, elected_at, expires_at)
VALUES ($1, $2, now(), now() + $3::bigint * interval '1 microsecond')
ON CONFLICT (name) DO UPDATE SET
	leader_id = EXCLUDED.leader_id,
	elected_at = CASE WHEN l.leader_id = EXCLUDED.leader_id AND l.expires_at >= now()
		THEN l.elected_at ELSE now() END,
	expires_at = EXCLUDED.expires_at
WHERE l.expires_at < now() OR l.leader_id = EXCLUDED.leader_id
RETURNING leader_id`

// leaderResignSQL ends the term of leader $2 of $1, if it holds it.
const leaderResignSQL = `DELETE FROM {leader} WHERE name = $1 AND leader_id = $2`

// leaderGetSQL returns the leader id, start and expiry of $1's unexpired
// term, or no row.
const leaderGetSQL = `SELECT leader_id, elected_at, expires_at FROM {leader} WHERE name = $1 AND expires_at >= now()`

// leaderTermLeftSQL is how many microseconds $1's unexpired term has left, or
// no row.
const leaderTermLeftSQL = `SELECT (extract(epoch FROM expires_at - now()) * 1000000)::bigint
FROM {leader} WHERE name = $1 AND expires_at >= now()`

// runtimeQueries are the worker runtime's statements, with the schema filled in.
type runtimeQueries struct {
	jobClaim       string
	jobClaimID     string
	jobFinalize    string
	jobComplete    string
	jobCompleteOne string
	jobStatesUnder string
	jobRenew       string
	jobRescue      string
	jobNextExpiry  string
	jobSchedule    string
	jobPrune       string
	leaderElect    string
	leaderResign   string
	leaderGet      string
	leaderTermLeft string
	shareLock      string
	shareExpire    string
	shareRead      string
	shareWrite     string
	shareDrop      string
	keyShare       keyShareQueries
}

// newRuntimeQueries fills the runtime's statements with fill (filler).
func newRuntimeQueries(fill func(string) string) runtimeQueries {
	return runtimeQueries{
		jobClaim:       fill(jobClaimSQL),
		jobClaimID:     fill(jobClaimIDSQL),
		jobFinalize:    fill(jobFinalizeSQL),
		jobComplete:    fill(jobCompleteSQL),
		jobCompleteOne: fill(jobCompleteOneSQL),
		jobStatesUnder: fill(jobStatesUnderSQL),
		jobRenew:       fill(jobRenewSQL),
		jobRescue:      fill(jobRescueSQL),
		jobNextExpiry:  fill(jobNextExpirySQL),
		jobSchedule:    fill(jobScheduleSQL),
		jobPrune:       fill(jobPruneSQL),
		leaderElect:    fill(leaderElectSQL),
		leaderResign:   fill(leaderResignSQL),
		leaderGet:      fill(leaderGetSQL),
		leaderTermLeft: fill(leaderTermLeftSQL),
		shareLock:      queueShareLockSQL,
		shareExpire:    fill(queueShareExpireSQL),
		shareRead:      fill(queueShareReadSQL),
		shareWrite:     fill(queueShareWriteSQL),
		shareDrop:      fill(queueShareDropSQL),
		keyShare:       newKeyShareQueries(fill),
	}
}
