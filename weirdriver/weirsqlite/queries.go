package weirsqlite

import "strings"

// The driver's statements. Parameters are numbered (?1, ?2...); times are
// microseconds since the Unix epoch, and "now" is always a parameter, read by
// the call after it holds the write lock (nowMicros).

// jobColumns is the select list every job query returns, in the order scanJob reads.
const jobColumns = `id, state, queue, kind, args, priority, attempt, max_attempts,
	scheduled_at, created_at, attempted_at, finalized_at, lease_token, lease_expires_at,
	attempted_by, errors, tags, metadata, unique_key, unique_states,
	release_count, cancel_requested_at, output, progress`

// stateBit is weirdriver.StateBit in SQL, word for word as in the predicate of
// weir_job_unique_idx (migrations/001_baseline.up.sql), so that the planner
// can match the two.
const stateBit = `CASE state
        WHEN 'scheduled' THEN 1
        WHEN 'available' THEN 2
        WHEN 'running' THEN 4
        WHEN 'retryable' THEN 8
        WHEN 'completed' THEN 16
        WHEN 'cancelled' THEN 32
        WHEN 'discarded' THEN 64
    END`

var fill = strings.NewReplacer(
	"{cols}", jobColumns,
	"{state_bit}", stateBit,
	// The outcome that applies: a requested cancel wins over what the worker says.
	"{eff}", "(CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancel' ELSE ?3 END)",
).Replace

// jobInsertHead starts a multi-row insert; insertRows adds the VALUES rows.
const jobInsertHead = `INSERT INTO weir_job (state, queue, kind, args, priority, max_attempts,
	scheduled_at, created_at, tags, metadata, unique_key, unique_states) VALUES `

var (
	// The job that holds unique key ?1 in one of its unique states, through
	// weir_job_unique_idx.
	jobUniqueHolder = fill(`SELECT {cols} FROM weir_job
WHERE unique_key = ?1 AND unique_key IS NOT NULL AND (unique_states & {state_bit}) <> 0`)

	// A unique insert's replace of the pending job holding its key: ?1 id, ?2
	// args, ?3 metadata, ?4 tags, ?5 priority, ?6 max attempts, ?7 scheduled
	// time, ?8 state. A job no longer pending is left as it is.
	jobReplace = fill(`UPDATE weir_job SET args = ?2, metadata = ?3, tags = ?4, priority = ?5,
	max_attempts = ?6, scheduled_at = ?7, state = ?8
WHERE id = ?1 AND state IN ('scheduled', 'available', 'retryable')
RETURNING {cols}`)

	jobGet   = fill(`SELECT {cols} FROM weir_job WHERE id = ?1`)
	jobState = `SELECT state FROM weir_job WHERE id = ?1`

	// Cancel: a job that is not running ends at once; a running job keeps its lease
	// and gets a cancel request that its client acts on. ?1 id, ?2 now.
	jobCancel = fill(`UPDATE weir_job SET
	state = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END,
	finalized_at = CASE WHEN state = 'running' THEN NULL ELSE ?2 END,
	cancel_requested_at = coalesce(cancel_requested_at, ?2)
WHERE id = ?1 AND state NOT IN ('completed', 'cancelled', 'discarded')
RETURNING {cols}`)

	// Retry: a job that is not running becomes available now, with one more attempt
	// allowed if it had used them all. ?1 id, ?2 now.
	jobRetry = fill(`UPDATE weir_job SET
	state = 'available',
	scheduled_at = ?2,
	finalized_at = NULL,
	cancel_requested_at = NULL,
	max_attempts = max(max_attempts, attempt + 1)
WHERE id = ?1 AND state <> 'running'
RETURNING {cols}`)

	jobDelete = fill(`DELETE FROM weir_job WHERE id = ?1 AND state <> 'running' RETURNING {cols}`)

	// Replace the metadata (?2, NULL: kept) and tags (?3, a JSON array; NULL:
	// kept) of job ?1 when it is not running.
	jobUpdate = fill(`UPDATE weir_job SET metadata = coalesce(?2, metadata), tags = coalesce(?3, tags)
WHERE id = ?1 AND state <> 'running'
RETURNING {cols}`)

	// Queues with jobs, by state, plus paused queues without jobs (state NULL).
	queueList = `WITH counts AS (SELECT queue, state, count(*) AS n, min(scheduled_at) AS oldest FROM weir_job GROUP BY queue, state),
settings AS (SELECT name, paused_at IS NOT NULL AS paused, coalesce(global_limit, 0) AS lim,
	coalesce(rate_limit, 0) AS rate, coalesce(rate_period_us, 0) AS period,
	coalesce(key_limit, 0) AS key_lim, coalesce(key_rate, 0) AS key_rate, coalesce(key_rate_period_us, 0) AS key_period,
	coalesce(limit_key, '') AS key FROM weir_queue
	WHERE paused_at IS NOT NULL OR global_limit IS NOT NULL OR rate_limit IS NOT NULL OR limit_key IS NOT NULL)
SELECT c.queue, c.state, c.n, c.oldest, coalesce(s.paused, 0), coalesce(s.lim, 0), coalesce(s.rate, 0), coalesce(s.period, 0),
	coalesce(s.key_lim, 0), coalesce(s.key_rate, 0), coalesce(s.key_period, 0), coalesce(s.key, '')
FROM counts c LEFT JOIN settings s ON s.name = c.queue
UNION ALL
SELECT name, NULL, 0, NULL, paused, lim, rate, period, key_lim, key_rate, key_period, key FROM settings
WHERE name NOT IN (SELECT queue FROM counts)
ORDER BY 1, 2`
	// ?1 name, ?2 now.
	queuePause = `INSERT INTO weir_queue (name, paused_at, updated_at) VALUES (?1, ?2, ?2)
ON CONFLICT (name) DO UPDATE SET
	paused_at = coalesce(weir_queue.paused_at, excluded.paused_at),
	updated_at = excluded.updated_at`
	queueResume = `UPDATE weir_queue SET paused_at = NULL, updated_at = ?2
WHERE name = ?1 AND paused_at IS NOT NULL`
	// ?1 name, ?2 limit (NULL: none), ?3 now.
	queueSetGlobalLimit = `INSERT INTO weir_queue (name, global_limit, updated_at) VALUES (?1, ?2, ?3)
ON CONFLICT (name) DO UPDATE SET global_limit = excluded.global_limit, updated_at = excluded.updated_at`
	// ?1 name, ?2 limit, ?3 period µs (NULL, NULL: none), ?4 now. The
	// limiter's state stays, as in weirpgx's queueSetRateLimitSQL.
	queueSetRateLimit = `INSERT INTO weir_queue (name, rate_limit, rate_period_us, updated_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (name) DO UPDATE SET rate_limit = excluded.rate_limit, rate_period_us = excluded.rate_period_us,
	updated_at = excluded.updated_at`
	// ?1 name, ?2 limit, ?3 rate, ?4 period µs (NULL: none), ?5 key (NULL:
	// neither), ?6 now.
	queueSetKeyLimit = `INSERT INTO weir_queue (name, key_limit, key_rate, key_rate_period_us, limit_key, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (name) DO UPDATE SET key_limit = excluded.key_limit, key_rate = excluded.key_rate,
	key_rate_period_us = excluded.key_rate_period_us, limit_key = excluded.limit_key, updated_at = excluded.updated_at`
	// ?1 name, ?2 key: a changed key forgets the queue's keys' limiters.
	keyRateForget = `DELETE FROM weir_key_rate WHERE queue = ?1
	AND NOT EXISTS (SELECT 1 FROM weir_queue WHERE name = ?1 AND limit_key IS ?2)`
	// ?1 queue, ?2 now: the limiters of the queue's keys whose time is ahead.
	keyRateTimes = `SELECT key, tat FROM weir_key_rate WHERE queue = ?1 AND tat > ?2`
	// ?1 queue, ?2 key, ?3 time.
	keyRateSet = `INSERT INTO weir_key_rate (queue, key, tat) VALUES (?1, ?2, ?3)
ON CONFLICT (queue, key) DO UPDATE SET tat = excluded.tat`
	// ?1 queue, ?2 now: forget the times that are past.
	keyRatePrune = `DELETE FROM weir_key_rate WHERE queue = ?1 AND tat <= ?2`
	// ?1 name, ?2 the claiming client, ?3 now: the queue's limits (none: no
	// row, or NULLs); with a global limit, whether the client holds a live
	// share of it (weir_queue_share), and, unless it does, what the limit's
	// count is: the live shares plus the running jobs of the clients without
	// one.
	queueLimits = `SELECT global_limit,
	global_limit IS NOT NULL AND EXISTS (SELECT 1 FROM weir_queue_share s WHERE s.queue = ?1 AND s.holder = ?2 AND s.expires_at >= ?3),
	CASE WHEN global_limit IS NULL
		OR EXISTS (SELECT 1 FROM weir_queue_share s WHERE s.queue = ?1 AND s.holder = ?2 AND s.expires_at >= ?3) THEN 0 ELSE
		(SELECT coalesce(sum(s.slots), 0) FROM weir_queue_share s WHERE s.queue = ?1 AND s.expires_at >= ?3)
		+ (SELECT count(*) FROM weir_job j WHERE j.queue = ?1 AND j.state = 'running' AND NOT EXISTS (
			SELECT 1 FROM weir_queue_share s WHERE s.queue = ?1 AND s.holder = j.attempted_by AND s.expires_at >= ?3)) END,
	rate_limit, rate_period_us, rate_tat, key_limit, key_rate, key_rate_period_us, limit_key
FROM weir_queue WHERE name = ?1 AND (global_limit IS NOT NULL OR rate_limit IS NOT NULL OR limit_key IS NOT NULL)`
	// QueueShare's statements, as weirpgx's. ?1 queue, ?2 now.
	queueShareExpire = `DELETE FROM weir_queue_share WHERE queue = ?1 AND expires_at < ?2`
	// ?1 queue, ?2 client: the queue's global limit (no row or NULL: none),
	// and the running jobs of the clients other than ?2 that hold no share.
	queueShareRead = `SELECT (SELECT global_limit FROM weir_queue WHERE name = ?1),
	(SELECT count(*) FROM weir_job j WHERE j.queue = ?1 AND j.state = 'running' AND j.attempted_by IS NOT ?2
		AND NOT EXISTS (SELECT 1 FROM weir_queue_share s WHERE s.queue = ?1 AND s.holder = j.attempted_by))`
	// ?1 queue, ?2 client: the other clients' shares.
	queueShareOthers = `SELECT holder, want, slots FROM weir_queue_share WHERE queue = ?1 AND holder <> ?2 ORDER BY holder`
	// ?1 queue, ?2 client, ?3 want, ?4 slots, ?5 expires at.
	queueShareWrite = `INSERT INTO weir_queue_share (queue, holder, want, slots, expires_at) VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (queue, holder) DO UPDATE SET want = excluded.want, slots = excluded.slots, expires_at = excluded.expires_at`
	queueShareDrop = `DELETE FROM weir_queue_share WHERE queue = ?1 AND holder = ?2`
	// A job's key under a key limit: the value, as text, of the field at
	// JSON path ?2 of its args (?3 'args') or metadata, '' when missing or
	// null.
	jobKeyExpr = `coalesce(CAST(json_extract(CASE ?3 WHEN 'args' THEN args ELSE metadata END, ?2) AS TEXT), '')`
	// ?1 queue, ?2 path, ?3 source: the queue's running jobs by key.
	queueRunningKeys = `SELECT ` + jobKeyExpr + `, count(*) FROM weir_job WHERE queue = ?1 AND state = 'running' GROUP BY 1`
	// ?1 queue, ?2 path, ?3 source, ?4 now: the queue's due jobs in claim
	// order with their keys, unless it is paused (as jobClaim).
	queueDueKeys = `SELECT id, ` + jobKeyExpr + ` FROM weir_job
WHERE state = 'available' AND queue = ?1 AND +scheduled_at <= ?4
	AND NOT EXISTS (SELECT 1 FROM weir_queue WHERE name = ?1 AND paused_at IS NOT NULL)
ORDER BY priority, scheduled_at, id`
	// ?1 name, ?2 the rate limiter's state.
	queueSetRateTAT = `UPDATE weir_queue SET rate_tat = ?2 WHERE name = ?1`
)

// The worker runtime's statements; docs/sqlite.md and docs/design/store-runtime.md
// describe them. Each runs in one BEGIN IMMEDIATE transaction, which holds the
// file's only write lock: what PostgreSQL gets from row locks and SKIP LOCKED,
// SQLite gets from running one writer at a time.
var (
	// Claim: the subquery walks weir_job_available_idx in claim order from
	// queue = ?1 and stops at ?2 rows; the update leases what it found. The unary
	// + keeps scheduled_at out of the index search: given ANALYZE statistics,
	// SQLite would otherwise skip-scan every queue's due jobs by scheduled_at and
	// sort them. Available jobs are nearly always due, so the filter costs little.
	// ?1 queue, ?2 max, ?3 now, ?4 lease µs, ?5 client id.
	jobClaim = fill(`UPDATE weir_job SET
	state = 'running',
	attempt = attempt + 1,
	lease_token = lease_token + 1,
	lease_expires_at = ?3 + ?4,
	attempted_at = ?3,
	attempted_by = ?5
WHERE id IN (
	SELECT id FROM weir_job
	WHERE state = 'available' AND queue = ?1 AND +scheduled_at <= ?3
		AND NOT EXISTS (SELECT 1 FROM weir_queue WHERE name = ?1 AND paused_at IS NOT NULL)
	ORDER BY priority, scheduled_at, id
	LIMIT ?2)
RETURNING {cols}`)

	// Claim the jobs of the JSON array ?1 still available, as jobClaim does.
	// ?2 now, ?3 lease µs, ?4 client id.
	jobClaimIDs = fill(`UPDATE weir_job SET
	state = 'running',
	attempt = attempt + 1,
	lease_token = lease_token + 1,
	lease_expires_at = ?2 + ?3,
	attempted_at = ?2,
	attempted_by = ?4
WHERE id IN (SELECT value FROM json_each(?1)) AND state = 'available'
RETURNING {cols}`)

	// Claim one job, as jobClaim does, if it is scheduled, available or
	// retryable. ?1 id, ?2 now, ?3 lease µs, ?4 client id.
	jobClaimID = fill(`UPDATE weir_job SET
	state = 'running',
	attempt = attempt + 1,
	lease_token = lease_token + 1,
	lease_expires_at = ?2 + ?3,
	attempted_at = ?2,
	attempted_by = ?4
WHERE id = ?1 AND state IN ('scheduled', 'available', 'retryable')
RETURNING {cols}`)

	// Finalize one outcome, fenced on (id, lease token, running). ?1 id, ?2 token,
	// ?3 outcome, ?4 due time (µs), ?5 now; the error entry: ?6 attempt (NULL:
	// the job's), ?7 time (text), ?8 message (NULL: none), ?9 trace (NULL: none);
	// ?10 output, written only by a completion that applies as one, and ?11
	// progress (JSON text, NULL: none).
	jobFinalize = fill(`UPDATE weir_job SET
	state = CASE {eff}
		WHEN 'completed' THEN 'completed'
		WHEN 'retry' THEN CASE WHEN ?4 <= ?5 THEN 'available' ELSE 'retryable' END
		WHEN 'snooze' THEN CASE WHEN ?4 <= ?5 THEN 'available' ELSE 'scheduled' END
		WHEN 'discard' THEN 'discarded'
		WHEN 'cancel' THEN 'cancelled'
		WHEN 'release' THEN 'available'
		WHEN 'return' THEN 'available'
	END,
	scheduled_at = CASE WHEN {eff} IN ('retry', 'snooze') THEN ?4 ELSE scheduled_at END,
	attempt = CASE WHEN {eff} IN ('snooze', 'release', 'return') THEN max(attempt - 1, 0) ELSE attempt END,
	finalized_at = CASE WHEN {eff} IN ('completed', 'discard', 'cancel') THEN ?5 END,
	lease_expires_at = NULL,
	release_count = release_count + CASE WHEN {eff} = 'release' THEN 1 ELSE 0 END,
	output = CASE WHEN {eff} = 'completed' AND ?10 IS NOT NULL THEN ?10 ELSE output END,
	progress = coalesce(?11, progress),
	errors = CASE
		WHEN ?8 IS NULL THEN errors
		WHEN ?9 IS NULL THEN json_insert(errors, '$[#]',
			json_object('attempt', coalesce(?6, attempt), 'at', ?7, 'error', ?8))
		ELSE json_insert(errors, '$[#]',
			json_object('attempt', coalesce(?6, attempt), 'at', ?7, 'error', ?8, 'trace', ?9))
	END
WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
RETURNING state, queue`)

	// The state of job ?1 if its lease token is ?2; no row if not.
	jobStateUnder = `SELECT state FROM weir_job WHERE id = ?1 AND lease_token = ?2`

	// Renew one lease, fenced; it changes only lease_expires_at and, when ?4
	// (JSON text) is not NULL, progress. ?1 id, ?2 token, ?3 the new expiry.
	jobRenew = `UPDATE weir_job SET lease_expires_at = ?3, progress = coalesce(?4, progress)
WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
RETURNING cancel_requested_at IS NOT NULL`

	// The earliest lease expiry of a running job (micros; NULL when none runs),
	// through weir_job_running_idx as rescue.
	jobNextExpiry = `SELECT min(lease_expires_at) FROM weir_job WHERE state = 'running'`

	// Rescue: expired leases through weir_job_running_idx, at most ?1. ?2 now,
	// ?3 now as text for the error entry, ?4 the error message.
	jobRescue = fill(`UPDATE weir_job SET
	state = CASE
		WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
		WHEN attempt >= max_attempts THEN 'discarded'
		ELSE 'retryable' END,
	scheduled_at = CASE
		WHEN cancel_requested_at IS NULL AND attempt < max_attempts THEN min(scheduled_at, ?2)
		ELSE scheduled_at END,
	finalized_at = CASE
		WHEN cancel_requested_at IS NULL AND attempt < max_attempts THEN NULL
		ELSE ?2 END,
	lease_expires_at = NULL,
	errors = json_insert(errors, '$[#]', json_object('attempt', attempt, 'at', ?3, 'error', ?4))
WHERE id IN (
	SELECT id FROM weir_job
	WHERE state = 'running' AND lease_expires_at < ?2
	ORDER BY id
	LIMIT ?1)
RETURNING {cols}`)

	// Schedule: due pending jobs through weir_job_pending_idx. ?1 limit, ?2 now.
	jobSchedule = `UPDATE weir_job SET state = 'available'
WHERE id IN (
	SELECT id FROM weir_job
	WHERE state IN ('scheduled', 'retryable') AND scheduled_at <= ?2
	ORDER BY scheduled_at
	LIMIT ?1)
RETURNING queue`

	// Prune: final jobs through weir_job_finalized_idx, bounded by the latest
	// cutoff (?4), then by the cutoff of each job's state (NULL: none).
	// ?1 completed, ?2 cancelled, ?3 discarded cutoffs, ?5 limit.
	jobPrune = `DELETE FROM weir_job WHERE id IN (
	SELECT id FROM weir_job
	WHERE finalized_at IS NOT NULL AND finalized_at < ?4
		AND CASE state
			WHEN 'completed' THEN finalized_at < ?1
			WHEN 'cancelled' THEN finalized_at < ?2
			WHEN 'discarded' THEN finalized_at < ?3
			ELSE 0 END
	ORDER BY finalized_at
	LIMIT ?5)`

	// Elect: insert, or take over an expired term, or renew our own. The upsert
	// returns a row only when it wrote one, that is when ?2 leads afterwards.
	// ?1 name, ?2 leader id, ?3 now, ?4 expiry.
	leaderElect = `INSERT INTO weir_leader (name, leader_id, elected_at, expires_at)
VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (name) DO UPDATE SET
	leader_id = excluded.leader_id,
	elected_at = CASE WHEN weir_leader.leader_id = excluded.leader_id AND weir_leader.expires_at >= ?3
		THEN weir_leader.elected_at ELSE ?3 END,
	expires_at = excluded.expires_at
WHERE weir_leader.expires_at < ?3 OR weir_leader.leader_id = excluded.leader_id
RETURNING leader_id`
	leaderResign = `DELETE FROM weir_leader WHERE name = ?1 AND leader_id = ?2`
	// The unexpired term of ?1 at ?2: leader id, start and expiry.
	leaderGet = `SELECT leader_id, elected_at, expires_at FROM weir_leader WHERE name = ?1 AND expires_at >= ?2`
)
