package weir

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// finalization is the tracked write of one job's outcome.
type finalization struct {
	job    *heldJob
	params weirdriver.JobFinalizeParams
	err    error         // the attempt's error, for events
	ran    time.Duration // how long the handler ran
	// prefetched is set for a job given back before its handler started.
	prefetched bool
}

// completerMaxBatch bounds one finalize statement.
const completerMaxBatch = 2000

// completerDeps is what the completer works with.
type completerDeps struct {
	exec   weirdriver.Executor
	leases *leaseTable
	logger *slog.Logger
	// leaseBudget is how long after a claim or renewal is sent a lease is trusted:
	// a write that takes longer is cut.
	leaseBudget time.Duration
	// finalized counts outcomes written, released the prefetched jobs among them
	// given back, and abandoned the outcomes not written.
	finalized, released, abandoned *atomic.Int64
	// written is told of each outcome written; stale of each write that matched
	// nothing (the lease had been lost).
	written, stale func(*finalization)
}

// completer writes outcomes in batches, each batch one fenced statement. Every
// finalization submitted is tracked until it is written, found stale, or abandoned
// because its lease can no longer be trusted; Stop drains them all before it stops
// the heartbeat.
type completer struct {
	completerDeps

	mu      sync.Mutex
	queue   []*finalization
	pending int  // submitted and not yet resolved
	closed  bool // no more submissions (after Stop)
	// stopping is set when Stop begins; from then on the jobs whose handler ran
	// but whose outcome was not written (abandoned, stale, or dropped after the
	// completer closed) are kept in unwritten, for Stop's error: those jobs may
	// run again, and a graceful stop must say so.
	stopping  bool
	unwritten []int64
	more      chan struct{} // capacity 1: the queue has work
	drained   chan struct{} // closed when pending falls to 0, if someone waits
}

func newCompleter(deps completerDeps) *completer {
	return &completer{completerDeps: deps, more: make(chan struct{}, 1)}
}

// submit queues f for writing. After the completer closed (an abandoned handler
// that returned after Stop), f is dropped: its lease is no longer renewed and
// rescue takes the job.
func (c *completer) submit(f *finalization) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.noteUnwritten(f)
		c.abandoned.Add(1)
		c.logger.Warn("weir: outcome dropped after stop; rescue will take the job",
			"job_id", f.job.row.ID, "lease_token", f.job.token)
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

// beginStop starts keeping the jobs whose outcome goes unwritten.
func (c *completer) beginStop() {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
}

// noteUnwritten keeps f's job when Stop has begun and its handler ran (a job
// given back before it started cannot run twice because of it).
func (c *completer) noteUnwritten(f *finalization) {
	if f.prefetched {
		return
	}
	c.mu.Lock()
	if c.stopping {
		c.unwritten = append(c.unwritten, f.job.row.ID)
	}
	c.mu.Unlock()
}

// unwrittenJobs returns the jobs kept by noteUnwritten.
func (c *completer) unwrittenJobs() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.unwritten)
}

// resolve marks finalizations as done.
func (c *completer) resolve(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending -= n
	if c.pending == 0 && c.drained != nil {
		close(c.drained)
		c.drained = nil
	}
}

// waitDrained returns when every submitted finalization is resolved, or ctx ends.
func (c *completer) waitDrained(ctx context.Context) error {
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

// close refuses further submissions.
func (c *completer) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

// loop writes batches until ctx ends; then it abandons what is left.
func (c *completer) loop(ctx context.Context) {
	var retry []*finalization // a batch whose write failed, waiting to be retried
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
		n := min(len(c.queue), completerMaxBatch-len(retry))
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
			c.logger.Warn("weir: write outcomes; retrying", "jobs", len(batch), "error", err)
			retry = batch
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				c.abandon(batch, "stop budget ran out")
				c.abandonAll()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
	}
}

// dropInvalid abandons the finalizations whose lease can no longer be trusted, so
// that a failing write is not retried past the point where rescue may take over.
func (c *completer) dropInvalid(batch []*finalization) []*finalization {
	now := time.Now()
	kept := batch[:0]
	var dropped []*finalization
	for _, f := range batch {
		if c.leases.valid(f.job, now) {
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
func (c *completer) write(ctx context.Context, batch []*finalization) error {
	params := make([]*weirdriver.JobFinalizeParams, len(batch))
	for i, f := range batch {
		params[i] = &f.params
	}
	// A write that hangs (the database or the network stalled) is cut when the
	// leases could no longer be trusted anyway; it is then retried only for the
	// leases still trusted (dropInvalid) and the rest are abandoned.
	wctx, cancel := context.WithTimeout(ctx, c.leaseBudget)
	applied, err := c.exec.JobFinalize(wctx, params)
	cancel()
	if err != nil {
		return err
	}
	for i, f := range batch {
		c.leases.remove(f.job)
		if applied[i] {
			c.finalized.Add(1)
			if f.prefetched {
				c.released.Add(1)
			}
			c.written(f)
			continue
		}
		c.noteUnwritten(f)
		c.stale(f)
	}
	c.resolve(len(batch))
	return nil
}

func (c *completer) abandon(batch []*finalization, why string) {
	for _, f := range batch {
		c.leases.remove(f.job)
		c.noteUnwritten(f)
		c.abandoned.Add(1)
		c.logger.Warn("weir: outcome abandoned; rescue will take the job", "job_id", f.job.row.ID,
			"lease_token", f.job.token, "outcome", f.params.Outcome, "reason", why)
	}
	c.resolve(len(batch))
}

func (c *completer) abandonAll() {
	c.mu.Lock()
	rest := c.queue
	c.queue = nil
	c.closed = true
	c.mu.Unlock()
	if len(rest) > 0 {
		c.abandon(rest, "stop budget ran out")
	}
}
