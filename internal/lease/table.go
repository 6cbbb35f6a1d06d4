// Package lease keeps the leases a client holds on the jobs it runs: the table of
// held jobs, which owns their local state, and the heartbeat that renews them.
package lease

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// state is where a job this client holds a lease on stands locally.
type state int

const (
	buffered   state = iota // claimed, waiting for a free worker
	running                 // its handler runs
	finalizing              // its handler returned; its outcome is being written
)

// Job is a job this client holds a lease on. Row, Token and Work are set when it
// is made and read-only after; its other fields are guarded by the table's mutex,
// and only the table's methods touch them.
type Job struct {
	Row   *weirtype.JobRow
	Token int64
	// Work runs the handler with the decoded args.
	Work func(ctx context.Context) error

	state state
	// deadline is the local lease deadline: when the last successful claim or
	// renewal was sent, on the monotonic clock, plus the lease duration minus a
	// safety margin. Past it, another worker may soon legally take the job.
	deadline time.Time
	// ctx and cancel are the handler's context and its cancel, set by
	// MarkRunning.
	ctx    *handlerContext
	cancel context.CancelCauseFunc
	// due is when the table cancels the handler for its timeout (zero: it
	// will not), in its list of attempts with that timeout (timeouts).
	due              time.Time
	timeout          time.Duration
	prevDue, nextDue *Job
	// lost is set when the lease is known to be gone (renewal found it stale, or
	// the deadline passed): the handler is cancelled and the outcome is not retried.
	lost bool
	// completedInTx is set when the handler completed the job in its own
	// transaction (weir.JobCompleteTx): from then on the job's fate is that
	// transaction's, and a lease that renewals find gone is not lost but, once
	// the transaction commits, ended.
	completedInTx bool
	// progress is the latest progress the handler recorded (weir.SetProgress);
	// progressSet counts the times it did, and progressSent is the count the
	// last write that carried it (a renewal or the outcome) was made from, so
	// that a value is sent again only once it changed.
	progress                  json.RawMessage
	progressSet, progressSent uint64
	// output is the output the handler recorded (weir.RecordOutput); nil when
	// none.
	output json.RawMessage
}

// jobKey keys the Job in the contexts its handler runs with.
type jobKey struct{}

// FromContext returns the job whose handler runs with ctx, or a context derived
// from it, or nil.
func FromContext(ctx context.Context) *Job {
	j, _ := ctx.Value(jobKey{}).(*Job)
	return j
}

// NewJob returns the lease on row that a claim sent at a time that makes
// deadline its local deadline took; work runs its handler. It waits for a free
// worker until MarkRunning.
func NewJob(row *weirtype.JobRow, work func(ctx context.Context) error, deadline time.Time) *Job {
	return &Job{Row: row, Token: row.LeaseToken, Work: work, state: buffered, deadline: deadline}
}

// Table holds every lease the client has, and owns their local state: every
// change to a held job goes through its methods, under its mutex.
//
// Lock order: a producer's mutex may be held when the table's is taken (the
// producer calls MarkRunning as it hands a job to a worker), never the reverse.
// While the table's mutex is held, lost is called, which may take the client's
// event mutex and log, and must not call back into the table. The completer's
// mutex is never held while the table's is taken, nor the reverse.
type Table struct {
	// lost is told of each lease found lost whose outcome is not being written
	// (for counting, logging and the event), with the table's mutex held.
	lost func(j *Job, why string)

	mu       sync.Mutex
	jobs     map[int64]*Job
	timeouts timeouts
}

// NewTable returns an empty table; lost is told of each lease found lost while
// its handler runs or waits.
func NewTable(lost func(j *Job, why string)) *Table {
	return &Table{lost: lost, jobs: map[int64]*Job{}}
}

// Add holds the leases of jobs a claim took.
func (t *Table) Add(jobs []*Job) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, j := range jobs {
		t.jobs[j.Row.ID] = j
	}
}

// Remove forgets j, unless the table already holds a newer lease on the same job.
func (t *Table) Remove(j *Job) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.jobs[j.Row.ID] == j {
		delete(t.jobs, j.Row.ID)
	}
	t.removeTimeoutLocked(j)
}

// MarkRunning moves a buffered job to running and gives it a context derived
// from base that the table can cancel, unless its lease was lost while it waited.
func (t *Table) MarkRunning(j *Job, base context.Context) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if j.lost {
		return false
	}
	j.state = running
	var inner context.Context
	inner, j.cancel = context.WithCancelCause(base)
	j.ctx = &handlerContext{Context: inner, job: j}
	return true
}

// Start returns the context j's handler runs with (set by MarkRunning),
// cancelled with weirtype.ErrJobTimeout once timeout passed (not positive:
// never). It is called as the handler starts; with a timeout, once.
func (t *Table) Start(j *Job, timeout time.Duration) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	if timeout > 0 && j.state == running {
		due := time.Now().Add(timeout)
		j.ctx = &handlerContext{Context: j.ctx.Context, job: j, deadline: due}
		t.addTimeoutLocked(j, timeout, due)
	}
	return j.ctx
}

// handlerContext is a handler's context: one cancelable context per attempt,
// cancelled by the table with a cause (at the attempt's timeout too:
// timeouts), that carries the job and reports the attempt's deadline. Where
// the standard library would stack a value, a cancelable context and a timer
// context (three allocations and two registrations with the parent, per job),
// it is one.
type handlerContext struct {
	context.Context // from context.WithCancelCause
	job             *Job
	deadline        time.Time // zero: no timeout
}

func (c *handlerContext) Deadline() (time.Time, bool) {
	d, ok := c.Context.Deadline()
	if !c.deadline.IsZero() && (!ok || c.deadline.Before(d)) {
		return c.deadline, true
	}
	return d, ok
}

// Err reports context.DeadlineExceeded when the timeout cancelled the
// attempt, as a context with a deadline does.
func (c *handlerContext) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == weirtype.ErrJobTimeout {
		return context.DeadlineExceeded
	}
	return err
}

func (c *handlerContext) Value(key any) any {
	if key == (jobKey{}) {
		return c.job
	}
	return c.Context.Value(key)
}

// Returned is what an attempt left when its handler returned.
type Returned struct {
	// CompletedInTx is set when the handler completed the job in its own
	// transaction (MarkCompletedInTx).
	CompletedInTx bool
	// Output is the output the handler recorded; nil when none.
	Output json.RawMessage
	// Progress is the progress the handler recorded that no renewal has
	// carried yet, for the outcome to write; nil when there is none.
	Progress json.RawMessage
}

// MarkReturned moves j to finalizing: its handler returned, or, for a buffered
// job given back, never ran. It returns what the attempt left for its outcome
// to write; from then on SetProgress and RecordOutput refuse j.
func (t *Table) MarkReturned(j *Job) Returned {
	t.mu.Lock()
	defer t.mu.Unlock()
	j.state = finalizing
	t.removeTimeoutLocked(j)
	if j.cancel != nil {
		j.cancel(context.Canceled) // release the context's resources
	}
	r := Returned{CompletedInTx: j.completedInTx, Output: j.output}
	if j.progressSet != j.progressSent {
		r.Progress, j.progressSent = j.progress, j.progressSet
	}
	return r
}

// SetProgress records v as the progress of j, whose handler runs, for the
// next renewal (or the outcome) to write. It returns false, recording
// nothing, when j's handler has returned.
func (t *Table) SetProgress(j *Job, v json.RawMessage) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if j.state != running {
		return false
	}
	j.progress = v
	j.progressSet++
	return true
}

// RecordOutput records v as the output of j, whose handler runs, for its
// completion to write; the last value recorded wins. It records nothing when
// j's handler has returned (runs is false) or completed the job in its own
// transaction, which wrote the output then (completedInTx).
func (t *Table) RecordOutput(j *Job, v json.RawMessage) (runs, completedInTx bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if j.state != running || j.completedInTx {
		return j.state == running, j.completedInTx
	}
	j.output = v
	return true, false
}

// Recorded returns the output and the latest progress that the handler of job
// id under lease token recorded (nil: none), for a completion in its own
// transaction (weir.JobCompleteTx) to write.
func (t *Table) Recorded(id, token int64) (output, progress json.RawMessage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.jobs[id]
	if j == nil || j.Token != token {
		return nil, nil
	}
	if j.progressSet > 0 {
		progress = j.progress
	}
	return j.output, progress
}

// Standing says how the table holds job id under lease token: held is whether
// its handler runs here under that token, valid whether the lease may still be
// written under.
func (t *Table) Standing(id, token int64, now time.Time) (held, valid bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.jobs[id]
	if j == nil || j.Token != token || j.state != running {
		return false, false
	}
	return true, !j.lost && now.Before(j.deadline)
}

// MarkCompletedInTx records that the handler of job id under lease token
// completed it in its own transaction.
func (t *Table) MarkCompletedInTx(id, token int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if j := t.jobs[id]; j != nil && j.Token == token {
		j.completedInTx = true
	}
}

// CancelRunning cancels every running handler with cause.
func (t *Table) CancelRunning(cause error) {
	t.cancelRunning(cause, func(*Job) bool { return true })
}

// CancelRunningIn cancels the running handlers of queue's jobs with cause.
func (t *Table) CancelRunningIn(queue string, cause error) {
	t.cancelRunning(cause, func(j *Job) bool { return j.Row.Queue == queue })
}

func (t *Table) cancelRunning(cause error, match func(*Job) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, j := range t.jobs {
		if j.state == running && match(j) {
			j.cancel(cause)
		}
	}
}

// Running returns the rows of the jobs whose handlers have not returned.
func (t *Table) Running() []*weirtype.JobRow {
	return t.running(func(*Job) bool { return true })
}

// RunningIn returns the rows of queue's jobs whose handlers have not returned.
func (t *Table) RunningIn(queue string) []*weirtype.JobRow {
	return t.running(func(j *Job) bool { return j.Row.Queue == queue })
}

func (t *Table) running(match func(*Job) bool) []*weirtype.JobRow {
	t.mu.Lock()
	defer t.mu.Unlock()
	var rows []*weirtype.JobRow
	for _, j := range t.jobs {
		if j.state == running && match(j) {
			rows = append(rows, j.Row)
		}
	}
	return rows
}

// IsRunning reports whether the handler of job id runs here.
func (t *Table) IsRunning(id int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.jobs[id]
	return j != nil && j.state == running
}

// Renewal is a snapshot of the leases held, for one renewal statement.
type Renewal struct {
	IDs, Tokens []int64
	// Progress runs parallel to IDs: the progress of each job that changed
	// since a write last carried it, nil for the others. It is nil when none
	// changed.
	Progress []json.RawMessage
	// sets runs parallel to Progress: the progressSet each entry was taken at.
	sets []uint64
}

// Snapshot returns the leases to renew at now, with the progress that changed
// since it was last sent. A lease whose handler returned (its outcome waits to
// be written) is left out while its local deadline is more than keep away: the
// outcome's write usually ends it first, and a renewal of the same row would
// only hold the row lock that write waits for.
//
// A lease past its local deadline is left out too, lost or not yet found so:
// the client gives it up (Expire), and a renewal would hold the job in the
// database for a whole lease more with no one working it. That happens when
// the process was frozen past the deadline: on waking, the heartbeat's tick
// may come before the deadline check.
func (t *Table) Snapshot(now time.Time, keep time.Duration) *Renewal {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := &Renewal{IDs: make([]int64, 0, len(t.jobs)), Tokens: make([]int64, 0, len(t.jobs))}
	for id, j := range t.jobs {
		if j.lost || !now.Before(j.deadline) || j.state == finalizing && j.deadline.Sub(now) > keep {
			continue
		}
		changed := j.progressSet != j.progressSent
		if changed && r.Progress == nil {
			r.Progress, r.sets = make([]json.RawMessage, len(r.IDs), cap(r.IDs)), make([]uint64, len(r.IDs), cap(r.IDs))
		}
		r.IDs = append(r.IDs, id)
		r.Tokens = append(r.Tokens, j.Token)
		if r.Progress != nil {
			var p json.RawMessage
			if changed {
				p = j.progress
			}
			r.Progress, r.sets = append(r.Progress, p), append(r.sets, j.progressSet)
		}
	}
	return r
}

// ApplyRenewal applies the result of renewal r sent at a time that makes
// deadline the renewed leases' new local deadline: it moves those deadlines,
// marks the progress it wrote as sent, cancels the handlers whose cancel an
// operator requested, and loses the leases the renewal found gone. A lease
// claimed again since the snapshot (another token) is left alone.
func (t *Table) ApplyRenewal(r *Renewal, res *weirdriver.JobRenewResult, deadline time.Time) {
	tokenOf := make(map[int64]int64, len(r.IDs))
	for i, id := range r.IDs {
		tokenOf[id] = r.Tokens[i]
	}
	var setOf map[int64]uint64
	if r.Progress != nil {
		setOf = make(map[int64]uint64)
		for i, p := range r.Progress {
			if p != nil {
				setOf[r.IDs[i]] = r.sets[i]
			}
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range res.Renewed {
		if j := t.jobs[id]; j != nil && j.Token == tokenOf[id] && !j.lost {
			j.deadline = deadline
			// The renewal wrote the progress it carried; a change since (or one
			// the outcome took already) stays as it is.
			if set, ok := setOf[id]; ok && set > j.progressSent {
				j.progressSent = set
			}
		}
	}
	for _, id := range res.CancelRequested {
		if j := t.jobs[id]; j != nil && j.cancel != nil {
			j.cancel(weirtype.ErrJobCancelRequested)
		}
	}
	for _, id := range res.Lost {
		// A job its handler completed in its own transaction is gone from the
		// renewal once that commits: ended, not lost.
		if j := t.jobs[id]; j != nil && j.Token == tokenOf[id] && !j.completedInTx {
			t.loseLocked(j, "renewal found the lease gone")
		}
	}
}

// Expire treats leases past their local deadline at now as lost.
func (t *Table) Expire(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, j := range t.jobs {
		// A job completed in its handler's transaction stays locked by it until
		// it ends, so no one else can take the job: nothing to cancel for.
		if !j.lost && !j.completedInTx && !now.Before(j.deadline) {
			t.loseLocked(j, "no renewal reached the database in time")
		}
	}
}

// loseLocked marks j's lease lost and cancels its handler. A buffered job is
// forgotten (MarkRunning then refuses it); a finalizing one is abandoned by the
// completer. t.mu is held.
func (t *Table) loseLocked(j *Job, why string) {
	j.lost = true
	if j.state == finalizing {
		// Most often its outcome was just written, which the completer will say;
		// if the lease was truly lost, the write comes back stale and is counted
		// there. Either way the outcome is no longer retried.
		return
	}
	t.lost(j, why)
	switch j.state {
	case running:
		j.cancel(weirtype.ErrLeaseLost)
	case buffered:
		delete(t.jobs, j.Row.ID)
	}
}

// Valid reports whether j's lease may still be written under.
func (t *Table) Valid(j *Job, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !j.lost && now.Before(j.deadline)
}
