package weir

import (
	"context"
	"sync"
	"time"
)

// heldState is where a job this client holds a lease on stands locally.
type heldState int

const (
	heldBuffered   heldState = iota // claimed, waiting for a free worker
	heldRunning                     // its handler runs
	heldFinalizing                  // its handler returned; its outcome is being written
)

// heldJob is a job this client holds a lease on. Its fields after row and token
// are guarded by the lease table's mutex.
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

// leaseTable holds every lease the client has, for the heartbeat.
type leaseTable struct {
	mu   sync.Mutex
	jobs map[int64]*heldJob
}

func newLeaseTable() *leaseTable {
	return &leaseTable{jobs: map[int64]*heldJob{}}
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

// valid reports whether j's lease may still be written under.
func (t *leaseTable) valid(j *heldJob, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !j.lost && now.Before(j.deadline)
}
