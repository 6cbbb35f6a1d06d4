package weirpgx

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// The worker runtime's statements; the SQL is in runtime_queries.go.

// The columns of jobColumns that the claim's limit row fills in.
const (
	colKind        = 3
	colScheduledAt = 8
	colAttemptedAt = 10
)

func (e *executor) JobClaim(ctx context.Context, p *weirdriver.JobClaimParams) (_ []*weirtype.JobRow, lim weirdriver.ClaimLimit, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckClaim(p); err != nil {
		return nil, lim, fmt.Errorf("claim jobs: %w", err)
	}
	buckets := make([]int32, len(p.KeyBuckets))
	for i, b := range p.KeyBuckets {
		buckets[i] = int32(b)
	}
	r, err := e.db.Query(ctx, e.q.jobClaim, p.Queue, p.Max, p.LeaseDuration.Microseconds(), p.ClientID,
		buckets, p.SkipKeys)
	if err != nil {
		return nil, lim, fmt.Errorf("claim jobs: %w", err)
	}
	defer r.Close()
	var (
		jobs []*weirtype.JobRow
		keys []string
		key  *string
	)
	sc := newJobScanner(&key)
	for r.Next() {
		// The row without an id after the jobs says whether a limit cut the
		// claim, when the rate limit admits the next job, and what else the
		// client should know (its kind's words).
		if raw := r.RawValues(); len(raw) > 0 && raw[0] == nil {
			vals, err := r.Values()
			if err != nil {
				return nil, lim, fmt.Errorf("claim jobs: %w", err)
			}
			kind, _ := vals[colKind].(string)
			for _, word := range strings.Fields(kind) {
				switch word {
				case "capped":
					lim.Limited = true
				case "share":
					lim.Share = true
				case "owned":
					lim.Owned = true
				case "keys":
					lim.KeyShare = true
				}
			}
			due, dueOK := vals[colScheduledAt].(time.Time)
			at, atOK := vals[colAttemptedAt].(time.Time)
			if dueOK && atOK && due.After(at) {
				lim.Wait = due.Sub(at)
			}
			continue
		}
		job, err := sc.scan(r)
		if err != nil {
			return nil, lim, fmt.Errorf("claim jobs: %w", err)
		}
		jobs = append(jobs, job)
		if key != nil {
			keys = append(keys, *key)
		}
	}
	if err := r.Err(); err != nil {
		return nil, lim, fmt.Errorf("claim jobs: %w", err)
	}
	if lim.Owned {
		if len(keys) != len(jobs) {
			return nil, lim, fmt.Errorf("claim jobs: %d jobs claimed as key holder came with %d keys", len(jobs), len(keys))
		}
		lim.Keys = keys
	}
	return jobs, lim, nil
}

func (e *executor) JobClaimID(ctx context.Context, p *weirdriver.JobClaimIDParams) (_ *weirtype.JobRow, _ bool, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckClaimID(p); err != nil {
		return nil, false, fmt.Errorf("claim job %d: %w", p.ID, err)
	}
	r, err := e.db.Query(ctx, e.q.jobClaimID, p.ID, p.LeaseDuration.Microseconds(), p.ClientID)
	if err != nil {
		return nil, false, fmt.Errorf("claim job %d: %w", p.ID, err)
	}
	jobs, err := collectJobs(r, "claim job")
	r.Close()
	if err != nil {
		return nil, false, err
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
	if allPlainCompletions(params) {
		return e.jobComplete(ctx, params)
	}
	n := len(params)
	var (
		ids        = make([]int64, n)
		tokens     = make([]int64, n)
		outcomes   = make([]string, n)
		scheduled  = make([]pgtype.Timestamptz, n)
		errAttempt = make([]pgtype.Int4, n)
		errAt      = make([]pgtype.Timestamptz, n)
		errMessage = make([]pgtype.Text, n)
		errTrace   = make([]pgtype.Text, n)
		output     = make([]pgtype.Text, n)
		progress   = make([]pgtype.Text, n)
	)
	for i, p := range params {
		ids[i], tokens[i], outcomes[i] = p.ID, p.LeaseToken, string(p.Outcome)
		output[i], progress[i] = jsonText(p.Output), jsonText(p.Progress)
		if !p.ScheduledAt.IsZero() {
			scheduled[i] = pgtype.Timestamptz{Time: weirdriver.ClampTime(p.ScheduledAt), Valid: true}
		}
		if ae := p.Error; ae != nil {
			errMessage[i] = pgtype.Text{String: ae.Error, Valid: true}
			errTrace[i] = pgtype.Text{String: ae.Trace, Valid: ae.Trace != ""}
			errAttempt[i] = pgtype.Int4{Int32: int32(ae.Attempt), Valid: ae.Attempt != 0}
			errAt[i] = pgtype.Timestamptz{Time: ae.At, Valid: !ae.At.IsZero()}
		}
	}
	r, err := e.db.Query(ctx, e.q.jobFinalize, ids, tokens, outcomes, scheduled,
		errAttempt, errAt, errMessage, errTrace, e.q.insertChannel, output, progress)
	if err != nil {
		return nil, fmt.Errorf("finalize jobs: %w", err)
	}
	defer r.Close()
	applied := make([]bool, n)
	got := 0
	for r.Next() {
		var (
			ord int64
			ok  bool
		)
		if err := r.Scan(&ord, &ok); err != nil {
			return nil, fmt.Errorf("finalize jobs: %w", err)
		}
		if ord < 1 || ord > int64(n) {
			return nil, fmt.Errorf("finalize jobs: row %d out of range", ord)
		}
		applied[ord-1] = ok
		got++
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("finalize jobs: %w", err)
	}
	if got != n {
		return nil, fmt.Errorf("finalize jobs: got %d rows back for %d outcomes", got, n)
	}
	return applied, nil
}

// allPlainCompletions reports whether every outcome is a completion with no
// error and no schedule, which jobComplete writes.
func allPlainCompletions(params []*weirdriver.JobFinalizeParams) bool {
	for _, p := range params {
		if p.Outcome != weirdriver.OutcomeCompleted || p.Error != nil || !p.ScheduledAt.IsZero() {
			return false
		}
	}
	return true
}

// jobComplete is JobFinalize for a batch of plain completions. The statement
// returns the ids it applied to; params holds each id once (CheckFinalize).
func (e *executor) jobComplete(ctx context.Context, params []*weirdriver.JobFinalizeParams) ([]bool, error) {
	n := len(params)
	ids, tokens := make([]int64, n), make([]int64, n)
	output, progress := make([]pgtype.Text, n), make([]pgtype.Text, n)
	at := make(map[int64]int, n)
	for i, p := range params {
		ids[i], tokens[i] = p.ID, p.LeaseToken
		output[i], progress[i] = jsonText(p.Output), jsonText(p.Progress)
		at[p.ID] = i
	}
	r, err := e.db.Query(ctx, e.q.jobComplete, ids, tokens, output, progress)
	if err != nil {
		return nil, fmt.Errorf("finalize jobs: %w", err)
	}
	defer r.Close()
	applied := make([]bool, n)
	var id int64
	for r.Next() {
		if err := r.Scan(&id); err != nil {
			return nil, fmt.Errorf("finalize jobs: %w", err)
		}
		i, ok := at[id]
		if !ok || applied[i] {
			return nil, fmt.Errorf("finalize jobs: job %d came back unasked or twice", id)
		}
		applied[i] = true
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("finalize jobs: %w", err)
	}
	return applied, nil
}

// JobComplete implements weirdriver.Inserter: one fenced completion, in the
// transaction e runs in (or alone on the pool).
func (e *executor) JobComplete(ctx context.Context, p *weirdriver.JobCompleteParams) (_ bool, err error) {
	defer func() { err = schemaErr(err) }()
	var got int64
	err = e.db.QueryRow(ctx, e.q.jobCompleteOne, p.ID, p.LeaseToken, jsonText(p.Output), jsonText(p.Progress)).Scan(&got)
	return completed(err)
}

// jsonText is a JSON value as a text parameter: NULL when unset.
func jsonText(b json.RawMessage) pgtype.Text {
	return pgtype.Text{String: string(b), Valid: len(b) > 0}
}

// completed reads the result of jobCompleteOneSQL: no row is a stale write.
func completed(err error) (bool, error) {
	switch {
	case errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("complete job: %w", err)
	}
	return true, nil
}

// JobStatesUnder implements weirdriver.Executor.
func (e *executor) JobStatesUnder(ctx context.Context, ids, tokens []int64) (_ []weirtype.JobState, err error) {
	defer func() { err = schemaErr(err) }()
	if len(ids) != len(tokens) {
		return nil, fmt.Errorf("job states: %d ids and %d tokens", len(ids), len(tokens))
	}
	r, err := e.db.Query(ctx, e.q.jobStatesUnder, ids, tokens)
	if err != nil {
		return nil, fmt.Errorf("job states: %w", err)
	}
	states, err := pgx.CollectRows(r, pgx.RowTo[weirtype.JobState])
	if err != nil {
		return nil, fmt.Errorf("job states: %w", err)
	}
	if len(states) != len(ids) {
		return nil, fmt.Errorf("job states: got %d rows back for %d jobs", len(states), len(ids))
	}
	return states, nil
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
	// Every renewal sends the progress array, NULLs where nothing changed: one
	// statement text and one plan, whatever the batch holds.
	progress := make([]pgtype.Text, len(p.IDs))
	for i, b := range p.Progress {
		progress[i] = jsonText(b)
	}
	r, err := e.db.Query(ctx, e.q.jobRenew, p.IDs, p.LeaseTokens, p.LeaseDuration.Microseconds(), progress)
	if err != nil {
		return nil, fmt.Errorf("renew leases: %w", err)
	}
	defer r.Close()
	for r.Next() {
		var (
			id                             int64
			renewed, cancelRequested, busy bool
		)
		if err := r.Scan(&id, &renewed, &cancelRequested, &busy); err != nil {
			return nil, fmt.Errorf("renew leases: %w", err)
		}
		switch {
		case busy:
			res.Busy = append(res.Busy, id)
		case !renewed:
			res.Lost = append(res.Lost, id)
		case cancelRequested:
			res.Renewed = append(res.Renewed, id)
			res.CancelRequested = append(res.CancelRequested, id)
		default:
			res.Renewed = append(res.Renewed, id)
		}
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("renew leases: %w", err)
	}
	if got := len(res.Renewed) + len(res.Lost) + len(res.Busy); got != len(p.IDs) {
		return nil, fmt.Errorf("renew leases: got %d rows back for %d leases", got, len(p.IDs))
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
	r, err := e.db.Query(ctx, e.q.jobRescue, p.Limit, msg)
	if err != nil {
		return nil, fmt.Errorf("rescue jobs: %w", err)
	}
	defer r.Close()
	return collectJobs(r, "rescue jobs")
}

func (e *executor) JobNextExpiry(ctx context.Context) (_ time.Duration, _ bool, err error) {
	defer func() { err = schemaErr(err) }()
	var us pgtype.Int8
	if err := e.db.QueryRow(ctx, e.q.jobNextExpiry).Scan(&us); err != nil {
		return 0, false, fmt.Errorf("next lease expiry: %w", err)
	}
	return time.Duration(us.Int64) * time.Microsecond, us.Valid, nil
}

func (e *executor) JobSchedule(ctx context.Context, limit int) (_ int, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckSchedule(limit); err != nil {
		return 0, fmt.Errorf("schedule jobs: %w", err)
	}
	var promoted, queues int64
	if err := e.db.QueryRow(ctx, e.q.jobSchedule, limit, e.q.insertChannel).Scan(&promoted, &queues); err != nil {
		return 0, fmt.Errorf("schedule jobs: %w", err)
	}
	return int(promoted), nil
}

func (e *executor) JobPrune(ctx context.Context, p *weirdriver.JobPruneParams) (_ int, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckPrune(p); err != nil {
		return 0, fmt.Errorf("prune jobs: %w", err)
	}
	var latest time.Time
	cutoff := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		if t.After(latest) {
			latest = t
		}
		return &t
	}
	completed, cancelled, discarded := cutoff(p.CompletedBefore), cutoff(p.CancelledBefore), cutoff(p.DiscardedBefore)
	if latest.IsZero() {
		return 0, nil
	}
	tag, err := e.db.Exec(ctx, e.q.jobPrune, completed, cancelled, discarded, latest, p.Limit)
	if err != nil {
		return 0, fmt.Errorf("prune jobs: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

func (e *executor) LeaderElect(ctx context.Context, p *weirdriver.LeaderElectParams) (_ bool, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckLeaderElect(p); err != nil {
		return false, fmt.Errorf("elect leader: %w", err)
	}
	var leader string
	err = e.db.QueryRow(ctx, e.q.leaderElect, p.Name, p.LeaderID, p.TTL.Microseconds()).Scan(&leader)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("elect leader of %s: %w", p.Name, err)
	}
	return leader == p.LeaderID, nil
}

func (e *executor) LeaderResign(ctx context.Context, name, leaderID string) (err error) {
	defer func() { err = schemaErr(err) }()
	if _, err := e.db.Exec(ctx, e.q.leaderResign, name, leaderID); err != nil {
		return fmt.Errorf("resign leadership of %s: %w", name, err)
	}
	return nil
}

func (e *executor) LeaderGet(ctx context.Context, name string) (_ *weirtype.LeaderRow, err error) {
	defer func() { err = schemaErr(err) }()
	var l weirtype.LeaderRow
	err = e.db.QueryRow(ctx, e.q.leaderGet, name).Scan(&l.ID, &l.ElectedAt, &l.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("get leader of %s: %w", name, weirdriver.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get leader of %s: %w", name, err)
	}
	return &l, nil
}

func (e *executor) LeaderTermLeft(ctx context.Context, name string) (_ time.Duration, _ bool, err error) {
	defer func() { err = schemaErr(err) }()
	var us int64
	err = e.db.QueryRow(ctx, e.q.leaderTermLeft, name).Scan(&us)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("leader term of %s: %w", name, err)
	}
	return time.Duration(us) * time.Microsecond, true, nil
}

// collectJobs reads rows of jobColumns.
func collectJobs(r rows, what string) ([]*weirtype.JobRow, error) {
	var jobs []*weirtype.JobRow
	sc := newJobScanner()
	for r.Next() {
		job, err := sc.scan(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		jobs = append(jobs, job)
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return jobs, nil
}
