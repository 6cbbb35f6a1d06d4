package weir

import (
	"context"
	"sync"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// heldState is where a job this client holds a lease on stands locally.
type heldState int

const (
	heldBuffered   heldState = iota // claimed, waiting for a free worker
	heldRunning                     // its handler runs
	heldFinalizing                  // its handler returned; its outcome is being written
)

// heldJob is a job this client holds a lease on. Its fields after row and token
// are guarded by the lease table's mutex, and only the table's methods touch them.
type heldJob struct {
	row   *JobRow
	token int64
	// work runs the handler with the decoded args (prepare).
	work func(ctx context.Context) error

	state heldState
	// deadline is the local lease deadline: when the last successful claim or
	// renewal was sent, on the monotonic clock, plus the lease duration minus a
	// safety margin. Past it, another worker may soon legally take the job.
	deadline time.Time
	// ctx and cancel are the handler's context and its cancel; set when it starts.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// lost is set when the lease is known to be gone (renewal found it stale, or
	// the deadline passed): the handler is cancelled and the outcome is not retried.
	lost bool
}

// leaseTable holds every lease the client has, and owns their local state: every
// change to a held job goes through its methods, under its mutex.
//
// Lock order: a producer's mutex may be held when the table's is taken
// (startBufferedLocked calls markRunning), never the reverse. While the table's
// mutex is held, lost is called, which takes the event bus's mutex and logs;
// neither calls back into the table. The completer's mutex is never held while
// the table's is taken, nor the reverse.
type leaseTable struct {
	// lost is told of each lease found lost whose outcome is not being written
	// (for counting, logging and the event), with the table's mutex held.
	lost func(j *heldJob, why string)

	mu   sync.Mutex
	jobs map[int64]*heldJob
}

func newLeaseTable(lost func(j *heldJob, why string)) *leaseTable {
	return &leaseTable{lost: lost, jobs: map[int64]*heldJob{}}
}

func (t *leaseTable) add(jobs []*heldJob) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, j := range jobs {
		t.jobs[j.row.ID] = j
	}
}

// remove forgets j, unless the table already holds a newer lease on the same job.
func (t *leaseTable) remove(j *heldJob) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.jobs[j.row.ID] == j {
		delete(t.jobs, j.row.ID)
	}
}

// markRunning moves a buffered job to running and gives it a context derived
// from base that the table can cancel, unless its lease was lost while it waited.
func (t *leaseTable) markRunning(j *heldJob, base context.Context) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if j.lost {
		return false
	}
	j.state = heldRunning
	j.ctx, j.cancel = context.WithCancelCause(base)
	return true
}

// handlerContext returns the context j's handler runs with (set by markRunning).
func (t *leaseTable) handlerContext(j *heldJob) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	return j.ctx
}

// markReturned moves j to finalizing: its handler returned, or, for a buffered
// job given back, never ran.
func (t *leaseTable) markReturned(j *heldJob) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j.state = heldFinalizing
	if j.cancel != nil {
		j.cancel(context.Canceled) // release the context's resources
	}
}

// cancelRunning cancels every running handler with cause.
func (t *leaseTable) cancelRunning(cause error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, j := range t.jobs {
		if j.state == heldRunning {
			j.cancel(cause)
		}
	}
}

// running returns the rows of the jobs whose handlers have not returned.
func (t *leaseTable) running() []*JobRow {
	t.mu.Lock()
	defer t.mu.Unlock()
	var rows []*JobRow
	for _, j := range t.jobs {
		if j.state == heldRunning {
			rows = append(rows, j.row)
		}
	}
	return rows
}

// isRunning reports whether the handler of job id runs here.
func (t *leaseTable) isRunning(id int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.jobs[id]
	return j != nil && j.state == heldRunning
}

// snapshot returns the ids and tokens of every lease held.
func (t *leaseTable) snapshot() (ids, tokens []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids = make([]int64, 0, len(t.jobs))
	tokens = make([]int64, 0, len(t.jobs))
	for id, j := range t.jobs {
		if !j.lost {
			ids = append(ids, id)
			tokens = append(tokens, j.token)
		}
	}
	return ids, tokens
}

// applyRenewal applies the result of a renewal of the leases ids and tokens
// (a snapshot) sent at a time that makes deadline the renewed leases' new local
// deadline: it moves those deadlines, cancels the handlers whose cancel an
// operator requested, and loses the leases the renewal found gone. A lease
// claimed again since the snapshot (another token) is left alone.
func (t *leaseTable) applyRenewal(ids, tokens []int64, res *weirdriver.JobRenewResult, deadline time.Time) {
	tokenOf := make(map[int64]int64, len(ids))
	for i, id := range ids {
		tokenOf[id] = tokens[i]
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range res.Renewed {
		if j := t.jobs[id]; j != nil && j.token == tokenOf[id] && !j.lost {
			j.deadline = deadline
		}
	}
	for _, id := range res.CancelRequested {
		if j := t.jobs[id]; j != nil && j.cancel != nil {
			j.cancel(ErrJobCancelRequested)
		}
	}
	for _, id := range res.Lost {
		if j := t.jobs[id]; j != nil && j.token == tokenOf[id] {
			t.loseLocked(j, "renewal found the lease gone")
		}
	}
}

// expire treats leases past their local deadline at now as lost.
func (t *leaseTable) expire(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, j := range t.jobs {
		if !j.lost && !now.Before(j.deadline) {
			t.loseLocked(j, "no renewal reached the database in time")
		}
	}
}

// loseLocked marks j's lease lost and cancels its handler. A buffered job is
// forgotten (markRunning then refuses it); a finalizing one is abandoned by the
// completer. t.mu is held.
func (t *leaseTable) loseLocked(j *heldJob, why string) {
	j.lost = true
	if j.state == heldFinalizing {
		// Most often its outcome was just written, which the completer will say;
		// if the lease was truly lost, the write comes back stale and is counted
		// there. Either way the outcome is no longer retried.
		return
	}
	t.lost(j, why)
	switch j.state {
	case heldRunning:
		j.cancel(ErrLeaseLost)
	case heldBuffered:
		delete(t.jobs, j.row.ID)
	}
}

// valid reports whether j's lease may still be written under.
func (t *leaseTable) valid(j *heldJob, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !j.lost && now.Before(j.deadline)
}
