package weirsqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// The worker runtime's statements; the SQL is in queries.go. Each call is one
// write transaction (or a savepoint in the executor's transaction), so a batch
// applies whole or not at all.

// errorTimeLayout formats the time of an error entry as PostgreSQL's jsonb does
// a timestamptz: RFC 3339 with microseconds.
const errorTimeLayout = "2006-01-02T15:04:05.999999Z07:00"

func errorTime(us int64) string { return fromMicros(us).Format(errorTimeLayout) }

func (e *executor) JobClaim(ctx context.Context, p *weirdriver.JobClaimParams) (_ []*weirtype.JobRow, lim weirdriver.ClaimLimit, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckClaim(p); err != nil {
		return nil, lim, fmt.Errorf("claim jobs: %w", err)
	}
	var jobs []*weirtype.JobRow
	err = e.write(ctx, func(w *write) error {
		lim = weirdriver.ClaimLimit{} // a retried write starts afresh
		// One writer at a time: the running jobs counted here are all there
		// are until this claim commits, and the rate limiter's state is ours.
		n := p.Max
		var (
			global, rate, periodUS, tat sql.NullInt64
			keyed                       keyLimits
			shared                      sql.NullBool
			busy                        int64
		)
		err := w.q.QueryRowContext(ctx, queueLimits, p.Queue, p.ClientID, w.now).Scan(&global, &shared, &busy, &rate, &periodUS, &tat,
			&keyed.limit, &keyed.rate, &keyed.periodUS, &keyed.key)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		}
		// A client holding a share keeps its handlers within it: the limit
		// is not counted for its claims.
		if global.Valid && !shared.Bool && global.Int64-busy < int64(n) {
			lim.Limited, lim.Share = true, true
			n = int(max(global.Int64-busy, 0))
		}
		// The rate limit, as weirpgx's weir_ready_claim keeps it, in
		// microseconds.
		var t float64
		var burst int
		if rate.Valid {
			t = float64(periodUS.Int64) / float64(rate.Int64)
			burst = weirdriver.RateBurst(int(rate.Int64), time.Duration(periodUS.Int64)*time.Microsecond)
			tat.Int64 = max(tat.Int64, w.now)
			if k := max(int(math.Floor(float64(w.now-tat.Int64)/t))+burst, 0); k < n {
				lim.Limited = true
				n = k
			}
		}
		switch {
		case n > 0 && keyed.key.Valid:
			ids, keyLim, err := keyed.pick(ctx, w, p.Queue, n)
			if err != nil {
				return err
			}
			lim.Limited = lim.Limited || keyLim.Limited
			if lim.Wait == 0 {
				lim.Wait = keyLim.Wait
			}
			rows, err := w.q.QueryContext(ctx, jobClaimIDs, ids, w.now, p.LeaseDuration.Microseconds(), p.ClientID)
			if err != nil {
				return err
			}
			if jobs, err = collectJobs(rows); err != nil {
				return err
			}
		case n > 0:
			rows, err := w.q.QueryContext(ctx, jobClaim, p.Queue, n, w.now, p.LeaseDuration.Microseconds(), p.ClientID)
			if err != nil {
				return err
			}
			if jobs, err = collectJobs(rows); err != nil {
				return err
			}
		}
		if rate.Valid {
			tat.Int64 += int64(math.Round(float64(len(jobs)) * t))
			if _, err := w.q.ExecContext(ctx, queueSetRateTAT, p.Queue, tat.Int64); err != nil {
				return err
			}
			if lim.Limited {
				if due := tat.Int64 - int64(math.Round(float64(burst-1)*t)); due > w.now {
					lim.Wait = time.Duration(due-w.now) * time.Microsecond
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, weirdriver.ClaimLimit{}, fmt.Errorf("claim jobs: %w", err)
	}
	// RETURNING promises no order; the claim's is priority, scheduled time, id.
	slices.SortFunc(jobs, func(a, b *weirtype.JobRow) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), a.ScheduledAt.Compare(b.ScheduledAt), cmp.Compare(a.ID, b.ID))
	})
	return jobs, lim, nil
}

// keyLimits are a queue's limits per key, as weir_queue holds them.
type keyLimits struct {
	limit, rate, periodUS sql.NullInt64
	key                   sql.NullString
}

// pick returns, as a JSON array, the ids of at most n due jobs of queue that
// its limits per key admit, and whether they passed over any job (with, when
// a key's rate did, how long until it admits its next). It counts the
// queue's running jobs by key and reads its keys' rate limiters, then walks
// its due jobs in claim order, taking each while its key has a free slot and
// its rate admits one, as weirpgx's weir_ready_claim does; it stores the
// limiters of the keys it took. In the write transaction, no other claim
// interleaves. The walk reads as many jobs as come before the n it takes.
func (k keyLimits) pick(ctx context.Context, w *write, queue string, n int) (ids string, lim weirdriver.ClaimLimit, err error) {
	source, path, err := weirdriver.ParseKey(k.key.String)
	if err != nil {
		return "", lim, fmt.Errorf("queue %s has a corrupt limit key: %w", queue, err)
	}
	jsonPath := "$"
	for _, f := range path {
		jsonPath += `."` + f + `"` // ParseKey admits no quote or backslash
	}
	running, err := queryMap[int](ctx, w, queueRunningKeys, queue, jsonPath, source)
	if err != nil {
		return "", lim, err
	}
	var (
		tick  float64 // µs between two starts of a key
		burst int
		tats  = map[string]int64{} // the limiter's time of keys ahead of now
	)
	if k.rate.Valid {
		tick = float64(k.periodUS.Int64) / float64(k.rate.Int64)
		burst = weirdriver.RateBurst(int(k.rate.Int64), time.Duration(k.periodUS.Int64)*time.Microsecond)
		if tats, err = queryMap[int64](ctx, w, keyRateTimes, queue, w.now); err != nil {
			return "", lim, err
		}
	}
	rows, err := w.q.QueryContext(ctx, queueDueKeys, queue, jsonPath, source, w.now)
	if err != nil {
		return "", lim, err
	}
	defer rows.Close()
	picked := make([]int64, 0, n)
	taken := map[string]bool{}
	var due int64 // the earliest next start of a key its rate held back
	for len(picked) < n && rows.Next() {
		var id int64
		var key string
		if err := rows.Scan(&id, &key); err != nil {
			return "", lim, err
		}
		if k.limit.Valid && int64(running[key]) >= k.limit.Int64 {
			lim.Limited = true
			continue
		}
		if k.rate.Valid {
			t := max(tats[key], w.now)
			if next := t - int64(math.Round(float64(burst-1)*tick)); next > w.now {
				lim.Limited = true
				if due == 0 || next < due {
					due = next
				}
				continue
			}
			tats[key] = t + int64(math.Round(tick))
		}
		running[key]++
		taken[key] = true
		picked = append(picked, id)
	}
	if err := rows.Err(); err != nil {
		return "", lim, err
	}
	if k.rate.Valid {
		for key := range taken {
			if _, err := w.q.ExecContext(ctx, keyRateSet, queue, key, tats[key]); err != nil {
				return "", lim, err
			}
		}
		if _, err := w.q.ExecContext(ctx, keyRatePrune, queue, w.now); err != nil {
			return "", lim, err
		}
	}
	if due > 0 {
		lim.Wait = time.Duration(due-w.now) * time.Microsecond
	}
	b, err := json.Marshal(picked)
	return string(b), lim, err
}

// queryMap runs a statement of (key, value) rows and returns them by key.
func queryMap[V any](ctx context.Context, w *write, stmt string, args ...any) (map[string]V, error) {
	rows, err := w.q.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]V{}
	for rows.Next() {
		var key string
		var v V
		if err := rows.Scan(&key, &v); err != nil {
			return nil, err
		}
		out[key] = v
	}
	return out, rows.Err()
}

func (e *executor) JobClaimID(ctx context.Context, p *weirdriver.JobClaimIDParams) (_ *weirtype.JobRow, _ bool, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckClaimID(p); err != nil {
		return nil, false, fmt.Errorf("claim job %d: %w", p.ID, err)
	}
	var jobs []*weirtype.JobRow
	err = e.write(ctx, func(w *write) error {
		rows, err := w.q.QueryContext(ctx, jobClaimID, p.ID, w.now, p.LeaseDuration.Microseconds(), p.ClientID)
		if err != nil {
			return err
		}
		jobs, err = collectJobs(rows)
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("claim job %d: %w", p.ID, err)
	}
	if len(jobs) == 1 {
		return jobs[0], true, nil
	}
	job, err := e.JobGet(ctx, p.ID)
	if err != nil {
		return nil, false, fmt.Errorf("claim job %d: %w", p.ID, err)
	}
	return job, false, nil
}

func (e *executor) JobFinalize(ctx context.Context, params []*weirdriver.JobFinalizeParams) (_ []bool, err error) {
	defer func() { err = schemaErr(err) }()
	if len(params) == 0 {
		return nil, nil
	}
	if err := weirdriver.CheckFinalize(params); err != nil {
		return nil, fmt.Errorf("finalize jobs: %w", err)
	}
	applied := make([]bool, len(params))
	err = e.write(ctx, func(w *write) error {
		var queues []string
		stmt, err := w.q.PrepareContext(ctx, jobFinalize)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for i, p := range params {
			due := w.now
			if !p.ScheduledAt.IsZero() {
				due = weirdriver.ClampTime(p.ScheduledAt).UnixMicro()
			}
			var errAttempt, errAt, errMessage, errTrace any
			if ae := p.Error; ae != nil {
				errMessage, errAt = ae.Error, errorTime(w.now)
				if ae.Trace != "" {
					errTrace = ae.Trace
				}
				if ae.Attempt != 0 {
					errAttempt = ae.Attempt
				}
				if !ae.At.IsZero() {
					errAt = errorTime(ae.At.UnixMicro())
				}
			}
			var state, queue string
			err := stmt.QueryRowContext(ctx, p.ID, p.LeaseToken, string(p.Outcome), due, w.now,
				errAttempt, errAt, errMessage, errTrace, jsonText(p.Output), jsonText(p.Progress)).Scan(&state, &queue)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				continue // stale: the row is untouched
			case err != nil:
				return err
			}
			applied[i] = true
			if state == string(weirtype.JobStateAvailable) {
				queues = append(queues, queue)
			}
		}
		w.notifyQueues(queues)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("finalize jobs: %w", err)
	}
	return applied, nil
}

func (e *executor) JobRenew(ctx context.Context, p *weirdriver.JobRenewParams) (_ *weirdriver.JobRenewResult, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckRenew(p); err != nil {
		return nil, fmt.Errorf("renew leases: %w", err)
	}
	res := &weirdriver.JobRenewResult{}
	if len(p.IDs) == 0 {
		return res, nil
	}
	err = e.write(ctx, func(w *write) error {
		*res = weirdriver.JobRenewResult{}
		stmt, err := w.q.PrepareContext(ctx, jobRenew)
		if err != nil {
			return err
		}
		defer stmt.Close()
		expires := w.now + p.LeaseDuration.Microseconds()
		for i, id := range p.IDs {
			var (
				cancelRequested bool
				progress        any
			)
			if len(p.Progress) > 0 {
				progress = jsonText(p.Progress[i])
			}
			err := stmt.QueryRowContext(ctx, id, p.LeaseTokens[i], expires, progress).Scan(&cancelRequested)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				res.Lost = append(res.Lost, id)
			case err != nil:
				return err
			default:
				res.Renewed = append(res.Renewed, id)
				if cancelRequested {
					res.CancelRequested = append(res.CancelRequested, id)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("renew leases: %w", err)
	}
	return res, nil
}

func (e *executor) JobRescue(ctx context.Context, p *weirdriver.JobRescueParams) (_ []*weirtype.JobRow, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckRescue(p); err != nil {
		return nil, fmt.Errorf("rescue jobs: %w", err)
	}
	msg := p.Error
	if msg == "" {
		msg = weirdriver.DefaultRescueError
	}
	var jobs []*weirtype.JobRow
	err = e.write(ctx, func(w *write) error {
		rows, err := w.q.QueryContext(ctx, jobRescue, p.Limit, w.now, errorTime(w.now), msg)
		if err != nil {
			return err
		}
		jobs, err = collectJobs(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rescue jobs: %w", err)
	}
	slices.SortFunc(jobs, func(a, b *weirtype.JobRow) int { return cmp.Compare(a.ID, b.ID) })
	return jobs, nil
}

func (e *executor) JobNextExpiry(ctx context.Context) (_ time.Duration, _ bool, err error) {
	defer func() { err = schemaErr(err) }()
	var us sql.NullInt64
	if err := e.reader().QueryRowContext(ctx, jobNextExpiry).Scan(&us); err != nil {
		return 0, false, fmt.Errorf("next lease expiry: %w", err)
	}
	return time.Duration(us.Int64-nowMicros()) * time.Microsecond, us.Valid, nil
}

func (e *executor) JobSchedule(ctx context.Context, limit int) (_ int, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckSchedule(limit); err != nil {
		return 0, fmt.Errorf("schedule jobs: %w", err)
	}
	promoted := 0
	err = e.write(ctx, func(w *write) error {
		rows, err := w.q.QueryContext(ctx, jobSchedule, limit, w.now)
		if err != nil {
			return err
		}
		defer rows.Close()
		var queues []string
		promoted = 0
		for rows.Next() {
			var queue string
			if err := rows.Scan(&queue); err != nil {
				return err
			}
			promoted++
			queues = append(queues, queue)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		w.notifyQueues(queues)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("schedule jobs: %w", err)
	}
	return promoted, nil
}

func (e *executor) JobPrune(ctx context.Context, p *weirdriver.JobPruneParams) (_ int, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckPrune(p); err != nil {
		return 0, fmt.Errorf("prune jobs: %w", err)
	}
	var latest int64
	some := false
	cutoff := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		us := t.UnixMicro()
		if !some || us > latest {
			latest, some = us, true
		}
		return us
	}
	completed, cancelled, discarded := cutoff(p.CompletedBefore), cutoff(p.CancelledBefore), cutoff(p.DiscardedBefore)
	if !some {
		return 0, nil
	}
	var n int64
	err = e.write(ctx, func(w *write) error {
		res, err := w.q.ExecContext(ctx, jobPrune, completed, cancelled, discarded, latest, p.Limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune jobs: %w", err)
	}
	return int(n), nil
}

func (e *executor) LeaderElect(ctx context.Context, p *weirdriver.LeaderElectParams) (_ bool, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckLeaderElect(p); err != nil {
		return false, fmt.Errorf("elect leader: %w", err)
	}
	var leader string
	err = e.write(ctx, func(w *write) error {
		err := w.q.QueryRowContext(ctx, leaderElect, p.Name, p.LeaderID, w.now, w.now+p.TTL.Microseconds()).Scan(&leader)
		if errors.Is(err, sql.ErrNoRows) {
			leader = ""
			return nil
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("elect leader of %s: %w", p.Name, err)
	}
	return leader == p.LeaderID, nil
}

func (e *executor) LeaderResign(ctx context.Context, name, leaderID string) (err error) {
	defer func() { err = schemaErr(err) }()
	err = e.write(ctx, func(w *write) error {
		_, err := w.q.ExecContext(ctx, leaderResign, name, leaderID)
		return err
	})
	if err != nil {
		return fmt.Errorf("resign leadership of %s: %w", name, err)
	}
	return nil
}

func (e *executor) LeaderGet(ctx context.Context, name string) (_ *weirtype.LeaderRow, err error) {
	defer func() { err = schemaErr(err) }()
	var (
		leader           string
		elected, expires int64
	)
	err = e.reader().QueryRowContext(ctx, leaderGet, name, nowMicros()).Scan(&leader, &elected, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("get leader of %s: %w", name, weirdriver.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get leader of %s: %w", name, err)
	}
	return &weirtype.LeaderRow{ID: leader, ElectedAt: fromMicros(elected), ExpiresAt: fromMicros(expires)}, nil
}

func (e *executor) LeaderTermLeft(ctx context.Context, name string) (_ time.Duration, _ bool, err error) {
	defer func() { err = schemaErr(err) }()
	now := nowMicros()
	var (
		leader           string
		elected, expires int64
	)
	err = e.reader().QueryRowContext(ctx, leaderGet, name, now).Scan(&leader, &elected, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("leader term of %s: %w", name, err)
	}
	return time.Duration(expires-now) * time.Microsecond, true, nil
}

// JobComplete implements weirdriver.Inserter: JobFinalize's completion of one
// job, in the executor's transaction (the caller's, through UnwrapTx).
func (e *executor) JobComplete(ctx context.Context, p *weirdriver.JobCompleteParams) (bool, error) {
	applied, err := e.JobFinalize(ctx, []*weirdriver.JobFinalizeParams{{
		ID: p.ID, LeaseToken: p.LeaseToken, Outcome: weirdriver.OutcomeCompleted, Output: p.Output, Progress: p.Progress,
	}})
	if err != nil {
		return false, fmt.Errorf("complete job: %w", err)
	}
	return applied[0], nil
}

// JobStatesUnder implements weirdriver.Executor.
func (e *executor) JobStatesUnder(ctx context.Context, ids, tokens []int64) (_ []weirtype.JobState, err error) {
	defer func() { err = schemaErr(err) }()
	if len(ids) != len(tokens) {
		return nil, fmt.Errorf("job states: %d ids and %d tokens", len(ids), len(tokens))
	}
	states := make([]weirtype.JobState, len(ids))
	q := e.reader()
	for i, id := range ids {
		err := q.QueryRowContext(ctx, jobStateUnder, id, tokens[i]).Scan(&states[i])
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return nil, fmt.Errorf("job states: %w", err)
		}
	}
	return states, nil
}

// jsonText is a JSON value as a text parameter: NULL when unset.
func jsonText(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// QueueShare deletes the queue's shares whose lease ran out, reads the limit,
// the others' shares and the running jobs of clients without one, and writes
// the client's share, in one write transaction (weirdriver.Executor).
func (e *executor) QueueShare(ctx context.Context, p *weirdriver.QueueShareParams) (_ weirdriver.QueueShare, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckQueueShare(p); err != nil {
		return weirdriver.QueueShare{}, fmt.Errorf("share of queue %q: %w", p.Queue, err)
	}
	var share weirdriver.QueueShare
	err = e.write(ctx, func(w *write) error {
		share = weirdriver.QueueShare{}
		if _, err := w.q.ExecContext(ctx, queueShareExpire, p.Queue, w.now); err != nil {
			return err
		}
		var (
			limit  sql.NullInt64
			legacy int64
		)
		if err := w.q.QueryRowContext(ctx, queueShareRead, p.Queue, p.ClientID).Scan(&limit, &legacy); err != nil {
			return err
		}
		if !limit.Valid || p.Want == 0 {
			share.Limit = int(limit.Int64)
			_, err := w.q.ExecContext(ctx, queueShareDrop, p.Queue, p.ClientID)
			return err
		}
		rows, err := w.q.QueryContext(ctx, queueShareOthers, p.Queue, p.ClientID)
		if err != nil {
			return err
		}
		var others []weirdriver.ShareOf
		for rows.Next() {
			var o weirdriver.ShareOf
			if err := rows.Scan(&o.ClientID, &o.Want, &o.Slots); err != nil {
				rows.Close()
				return err
			}
			others = append(others, o)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		share = weirdriver.DivideShare(int(limit.Int64), int(legacy), others, p)
		_, err = w.q.ExecContext(ctx, queueShareWrite, p.Queue, p.ClientID, p.Want, share.Slots, w.now+p.Lease.Microseconds())
		return err
	})
	if err != nil {
		return weirdriver.QueueShare{}, fmt.Errorf("share of queue %q: %w", p.Queue, err)
	}
	return share, nil
}

// KeyShare holds no bucket of any queue's keys: on SQLite every claim of a
// queue limited per key is counted, in the file's single write transaction,
// which is where the shares of keys would save PostgreSQL its lock
// (weirdriver.Executor). It checks the request and answers Limit 0.
func (e *executor) KeyShare(_ context.Context, p *weirdriver.KeyShareParams) (weirdriver.KeyShare, error) {
	if err := weirdriver.CheckKeyShare(p); err != nil {
		return weirdriver.KeyShare{}, fmt.Errorf("keys of queue %q: %w", p.Queue, err)
	}
	return weirdriver.KeyShare{}, nil
}
