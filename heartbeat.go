package weir

import (
	"context"
	"sync"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// earlyRenewGap is the least time between the start of a renewal and an early
// one asked for by a cancel notification. Anyone can send those notifications, so
// a flood of them costs at most one renewal statement per gap; a genuine cancel
// reaches its handler within a gap plus a round trip.
const earlyRenewGap = 100 * time.Millisecond

// heartbeat renews every lease the client holds in one statement per interval,
// cancels handlers whose lease was lost or asked to cancel, and cancels handlers
// whose local lease deadline passed while the database could not be reached. On
// request (renewSoon) it renews early, so that an operator's cancel, which the
// renewal reports, stops its handler promptly.
//
// The renewal runs in a goroutine of the heartbeat's own, so that a renewal that
// hangs (the database is unreachable, a row is locked) never delays the deadline
// checks, which run four times per interval.
func (rt *runtime) heartbeat(ctx context.Context) {
	tick := time.NewTicker(rt.cfg.HeartbeatInterval)
	defer tick.Stop()
	check := time.NewTicker(max(rt.cfg.HeartbeatInterval/4, time.Millisecond))
	defer check.Stop()
	early := time.NewTimer(time.Hour)
	early.Stop()
	defer early.Stop()
	var (
		renewing  sync.WaitGroup
		done      = make(chan struct{}, 1)
		inFlight  bool
		lastStart time.Time
		// wanted is set when an early renewal was asked for and no renewal has
		// started since: one that was in flight may have read the job before
		// the cancel committed.
		wanted bool
	)
	defer renewing.Wait() // its context is ctx: it ends promptly after ctx does
	start := func() {
		inFlight, wanted, lastStart = true, false, time.Now()
		renewing.Go(func() {
			rt.renew(ctx)
			done <- struct{}{}
		})
	}
	startEarly := func() {
		if !wanted || inFlight {
			return
		}
		if wait := earlyRenewGap - time.Since(lastStart); wait > 0 {
			early.Reset(wait)
			return
		}
		start()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if !inFlight {
				start()
			}
		case <-rt.renewRequest:
			wanted = true
			startEarly()
		case <-early.C:
			startEarly()
		case <-done:
			inFlight = false
			startEarly()
		case now := <-check.C:
			rt.expireDeadlines(now)
		}
	}
}

// leaseBudget is how long after a claim or renewal is sent the client trusts the
// lease: the lease duration minus one heartbeat interval of margin, so that a
// handler is cancelled before the database lets another worker take its job.
func (rt *runtime) leaseBudget() time.Duration {
	return rt.cfg.LeaseDuration - rt.cfg.HeartbeatInterval
}

func (rt *runtime) renew(ctx context.Context) {
	// A slow renewal still helps as long as it lands while the leases are trusted;
	// the deadline checks run apart from it.
	ctx, cancel := context.WithTimeout(ctx, rt.leaseBudget())
	defer cancel()
	ids, tokens := rt.leases.snapshot()
	if len(ids) == 0 {
		return
	}
	sent := time.Now()
	rt.stats.renewals.Add(1)
	res, err := rt.exec.JobRenew(ctx, &weirdriver.JobRenewParams{
		IDs: ids, LeaseTokens: tokens, LeaseDuration: rt.cfg.LeaseDuration,
	})
	if err != nil {
		if ctx.Err() == nil || rt.hardCtx.Err() == nil {
			rt.logger.Warn("weir: renew leases", "leases", len(ids), "error", err)
		}
		return
	}
	deadline := sent.Add(rt.leaseBudget())
	tokenOf := make(map[int64]int64, len(ids))
	for i, id := range ids {
		tokenOf[id] = tokens[i]
	}
	rt.leases.mu.Lock()
	defer rt.leases.mu.Unlock()
	for _, id := range res.Renewed {
		if j := rt.leases.jobs[id]; j != nil && j.token == tokenOf[id] && !j.lost {
			j.deadline = deadline
		}
	}
	for _, id := range res.CancelRequested {
		if j := rt.leases.jobs[id]; j != nil && j.cancel != nil {
			j.cancel(ErrJobCancelRequested)
		}
	}
	for _, id := range res.Lost {
		if j := rt.leases.jobs[id]; j != nil && j.token == tokenOf[id] {
			rt.loseLocked(j, "renewal found the lease gone")
		}
	}
}

// expireDeadlines treats leases past their local deadline as lost.
func (rt *runtime) expireDeadlines(now time.Time) {
	rt.leases.mu.Lock()
	defer rt.leases.mu.Unlock()
	for _, j := range rt.leases.jobs {
		if !j.lost && !now.Before(j.deadline) {
			rt.loseLocked(j, "no renewal reached the database in time")
		}
	}
}

// loseLocked marks j's lease lost and cancels its handler. A buffered job is
// dropped from its producer's buffer; a finalizing one is abandoned by the
// completer. rt.leases.mu is held.
func (rt *runtime) loseLocked(j *heldJob, why string) {
	j.lost = true
	if j.state == heldFinalizing {
		// Most often its outcome was just written, which the completer will say;
		// if the lease was truly lost, the write comes back stale and is counted
		// there. Either way the outcome is no longer retried.
		return
	}
	rt.stats.leasesLost.Add(1)
	rt.logger.Warn("weir: lease lost", "job_id", j.row.ID, "lease_token", j.token, "reason", why)
	rt.events.emit(EventLeaseLost, j.row, nil, 0)
	switch j.state {
	case heldRunning:
		j.cancel(ErrLeaseLost)
	case heldBuffered:
		delete(rt.leases.jobs, j.row.ID)
	}
}
