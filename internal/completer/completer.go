// Package completer writes the outcomes of a client's jobs in batches, each one
// fenced statement, and tracks every outcome until it is written, found stale or
// abandoned, so that a client's Stop can drain them all.
package completer

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirq/weir/internal/clock"
	"github.com/weirq/weir/internal/lease"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// Finalization is the tracked write of one job's outcome.
type Finalization struct {
	Job    *lease.Job
	Params weirdriver.JobFinalizeParams
	Err    error         // the attempt's error, for events
	Ran    time.Duration // how long the handler ran
	// Prefetched is set for a job given back before its handler started.
	Prefetched bool
	// CompletedInTx is set when the handler completed its job in its own
	// transaction: a write that then matches nothing is checked against the
	// row, which that transaction, if it committed, ended under the same lease.
	CompletedInTx bool
	// EndedInTx is set when the check found it so: the outcome is the one the
	// handler's transaction wrote (Params.Outcome is set to it).
	EndedInTx bool
}

// maxBatch bounds one finalize statement.
const maxBatch = 2000

// MaxBacklog is how many outcomes may wait to be written before the client
// stops claiming (Full): two batches, one being written and one waiting. Without
// the bound a completer slower than the handlers grows its backlog without end,
// and with it the heartbeat's renewal, which covers every lease until its outcome
// is written: renewals of ten thousand rows held the row locks the outcome writes
// waited for, and a loaded machine drained slower and slower.
const MaxBacklog = 2 * maxBatch

// Config is what a completer works with.
type Config struct {
	Exec   weirdriver.Executor
	Leases *lease.Table
	// Warn logs a failed write that will be retried, and a backlog that pauses
	// claims (Full); the client rate-limits it.
	Warn func(msg string, attrs ...any)
	// LeaseBudget is how long after a claim or renewal is sent a lease is trusted:
	// a write that takes longer is cut.
	LeaseBudget time.Duration
	// Finalized counts outcomes written, and Released the prefetched jobs among
	// them given back.
	Finalized, Released *atomic.Int64
	// Written is told of each outcome written; Stale of each write that matched
	// nothing (the lease had been lost).
	Written, Stale func(*Finalization)
	// Abandoned is told of each outcome given up on, and why: its lease could no
	// longer be trusted, Stop's budget ran out, or it came after the completer
	// closed. Rescue takes those jobs.
	Abandoned func(f *Finalization, why string)
	// Room is called when the backlog falls below MaxBacklog after Full said it
	// was full: claims may resume.
	Room func()
	// Clock times the retries of a failed write and tells whether a lease may
	// still be trusted. Default: clock.Real.
	Clock clock.Clock
}

// Completer writes outcomes in batches, each batch one fenced statement. Every
// finalization submitted is tracked until it is written, found stale, or abandoned
// because its lease can no longer be trusted; Stop drains them all before it stops
// the heartbeat.
type Completer struct {
	cfg Config

	mu      sync.Mutex
	queue   []*Finalization
	pending int  // submitted and not yet resolved
	closed  bool // no more submissions (after Stop)
	// stopping is set when Stop begins; from then on the jobs whose handler ran
	// but whose outcome was not written (abandoned, stale, or dropped after the
	// completer closed) are kept in unwritten, for Stop's error: those jobs may
	// run again, and a graceful stop must say so.
	stopping  bool
	unwritten []int64
	// full is set when Full found the backlog at MaxBacklog; resolve then calls
	// Room once it falls below.
	full    bool
	more    chan struct{} // capacity 1: the queue has work
	drained chan struct{} // closed when pending falls to 0, if someone waits
}

// New returns a completer; Run runs it.
func New(cfg Config) *Completer {
	cfg.Clock = clock.Or(cfg.Clock)
	return &Completer{cfg: cfg, more: make(chan struct{}, 1)}
}

// Submit queues f for writing. After the completer closed (an abandoned handler
// that returned after Stop), f is dropped: its lease is no longer renewed and
// rescue takes the job.
func (c *Completer) Submit(f *Finalization) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.noteUnwritten(f)
		c.cfg.Abandoned(f, "the client had stopped")
		return
	}
	c.queue = append(c.queue, f)
	c.pending++
	c.mu.Unlock()
	select {
	case c.more <- struct{}{}:
	default:
	}
}

// BeginStop starts keeping the jobs whose outcome goes unwritten.
func (c *Completer) BeginStop() {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
}

// noteUnwritten keeps f's job when Stop has begun and its handler ran (a job
// given back before it started cannot run twice because of it).
func (c *Completer) noteUnwritten(f *Finalization) {
	if f.Prefetched {
		return
	}
	c.mu.Lock()
	if c.stopping {
		c.unwritten = append(c.unwritten, f.Job.Row.ID)
	}
	c.mu.Unlock()
}

// UnwrittenJobs returns the jobs kept by noteUnwritten.
func (c *Completer) UnwrittenJobs() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.unwritten)
}

// resolve marks finalizations as done.
func (c *Completer) resolve(n int) {
	c.mu.Lock()
	c.pending -= n
	if c.pending == 0 && c.drained != nil {
		close(c.drained)
		c.drained = nil
	}
	room := c.full && c.pending < MaxBacklog
	if room {
		c.full = false
	}
	c.mu.Unlock()
	if room && c.cfg.Room != nil {
		c.cfg.Room()
	}
}

// Full reports whether MaxBacklog outcomes wait to be written: the client then
// claims nothing until Room is called.
func (c *Completer) Full() bool {
	c.mu.Lock()
	became := c.pending >= MaxBacklog && !c.full
	if became {
		c.full = true
	}
	full, pending := c.full, c.pending
	c.mu.Unlock()
	if became {
		c.cfg.Warn("weir: handlers finish faster than their outcomes are written; claims pause until the backlog is written",
			slog.Int("outcomes", pending))
	}
	return full
}

// WaitDrained returns when every submitted finalization is resolved, or ctx ends.
func (c *Completer) WaitDrained(ctx context.Context) error {
	c.mu.Lock()
	if c.pending == 0 {
		c.mu.Unlock()
		return nil
	}
	if c.drained == nil {
		c.drained = make(chan struct{})
	}
	drained := c.drained
	c.mu.Unlock()
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close refuses further submissions.
func (c *Completer) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

// Run writes batches until ctx ends; then it abandons what is left.
func (c *Completer) Run(ctx context.Context) {
	var retry []*Finalization // a batch whose write failed, waiting to be retried
	backoff := 10 * time.Millisecond
	for {
		if len(retry) == 0 {
			select {
			case <-ctx.Done():
				c.abandonAll()
				return
			case <-c.more:
			}
		}
		// A first write goes out even under a lease known lost: it is fenced, and a
		// stale write is counted. A retry goes out only while the lease is valid.
		retry = c.dropInvalid(retry)
		c.mu.Lock()
		n := min(len(c.queue), maxBatch-len(retry))
		batch := append(retry, c.queue[:n]...)
		c.queue = c.queue[n:]
		if len(c.queue) > 0 {
			select {
			case c.more <- struct{}{}:
			default:
			}
		}
		c.mu.Unlock()
		retry = nil
		if len(batch) == 0 {
			continue
		}
		if err := c.write(ctx, batch); err != nil {
			if ctx.Err() != nil {
				c.abandon(batch, "stop budget ran out")
				c.abandonAll()
				return
			}
			c.cfg.Warn("weir: write outcomes; retrying", slog.Int("jobs", len(batch)), slog.Any("error", err))
			retry = batch
			t := c.cfg.Clock.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				c.abandon(batch, "stop budget ran out")
				c.abandonAll()
				return
			case <-t.C():
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
	}
}

// dropInvalid abandons the finalizations whose lease can no longer be trusted, so
// that a failing write is not retried past the point where rescue may take over.
func (c *Completer) dropInvalid(batch []*Finalization) []*Finalization {
	now := c.cfg.Clock.Now()
	kept := batch[:0]
	var dropped []*Finalization
	for _, f := range batch {
		if c.cfg.Leases.Valid(f.Job, now) {
			kept = append(kept, f)
		} else {
			dropped = append(dropped, f)
		}
	}
	if len(dropped) > 0 {
		c.abandon(dropped, "lease lost or expired before the outcome was written")
	}
	return kept
}

// write runs one finalize statement for batch and resolves it.
func (c *Completer) write(ctx context.Context, batch []*Finalization) error {
	params := make([]*weirdriver.JobFinalizeParams, len(batch))
	for i, f := range batch {
		params[i] = &f.Params
	}
	// A write that hangs (the database or the network stalled) is cut when the
	// leases could no longer be trusted anyway; it is then retried only for the
	// leases still trusted (dropInvalid) and the rest are abandoned.
	wctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseBudget)
	applied, err := c.cfg.Exec.JobFinalize(wctx, params)
	cancel()
	if err != nil {
		return err
	}
	ended, checkErr := c.endedInTx(ctx, batch, applied)
	for i, f := range batch {
		c.cfg.Leases.Remove(f.Job)
		switch {
		case applied[i] || ended[i] != "":
			if ended[i] != "" {
				f.EndedInTx, f.Params.Outcome = true, ended[i]
			}
			c.cfg.Finalized.Add(1)
			if f.Prefetched {
				c.cfg.Released.Add(1)
			}
			c.cfg.Written(f)
		case f.CompletedInTx && checkErr != nil:
			c.noteUnwritten(f)
			c.cfg.Abandoned(f, "could not read whether the handler's transaction completed the job: "+checkErr.Error())
		default:
			c.noteUnwritten(f)
			c.cfg.Stale(f)
		}
	}
	c.resolve(len(batch))
	return nil
}

// endedInTx reads, for the jobs of batch whose handler completed them in its
// own transaction and whose write matched nothing, whether that transaction
// ended them: the outcome it wrote, per job of batch ("" for none).
func (c *Completer) endedInTx(ctx context.Context, batch []*Finalization, applied []bool) ([]weirdriver.Outcome, error) {
	ended := make([]weirdriver.Outcome, len(batch))
	var at, ids, tokens []int64
	for i, f := range batch {
		if f.CompletedInTx && !applied[i] {
			at = append(at, int64(i))
			ids, tokens = append(ids, f.Params.ID), append(tokens, f.Params.LeaseToken)
		}
	}
	if len(ids) == 0 {
		return ended, nil
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseBudget)
	defer cancel()
	states, err := c.cfg.Exec.JobStatesUnder(rctx, ids, tokens)
	if err != nil {
		return ended, err
	}
	for k, state := range states {
		switch state {
		case weirtype.JobStateCompleted:
			ended[at[k]] = weirdriver.OutcomeCompleted
		case weirtype.JobStateCancelled:
			ended[at[k]] = weirdriver.OutcomeCancel
		}
	}
	return ended, nil
}

func (c *Completer) abandon(batch []*Finalization, why string) {
	for _, f := range batch {
		c.cfg.Leases.Remove(f.Job)
		c.noteUnwritten(f)
		c.cfg.Abandoned(f, why)
	}
	c.resolve(len(batch))
}

func (c *Completer) abandonAll() {
	c.mu.Lock()
	rest := c.queue
	c.queue = nil
	c.closed = true
	c.mu.Unlock()
	if len(rest) > 0 {
		c.abandon(rest, "stop budget ran out")
	}
}
