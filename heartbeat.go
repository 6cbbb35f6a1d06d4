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
func (e *engine) heartbeat(ctx context.Context) {
	tick := time.NewTicker(e.cfg.HeartbeatInterval)
	defer tick.Stop()
	check := time.NewTicker(max(e.cfg.HeartbeatInterval/4, time.Millisecond))
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
			e.renew(ctx)
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
		case <-e.renewRequest:
			wanted = true
			startEarly()
		case <-early.C:
			startEarly()
		case <-done:
			inFlight = false
			startEarly()
		case now := <-check.C:
			e.leases.expire(now)
		}
	}
}

// leaseBudget is how long after a claim or renewal is sent the client trusts the
// lease: the lease duration minus one heartbeat interval of margin, so that a
// handler is cancelled before the database lets another worker take its job.
func (e *engine) leaseBudget() time.Duration {
	return e.cfg.LeaseDuration - e.cfg.HeartbeatInterval
}

func (e *engine) renew(ctx context.Context) {
	// A slow renewal still helps as long as it lands while the leases are trusted;
	// the deadline checks run apart from it.
	ctx, cancel := context.WithTimeout(ctx, e.leaseBudget())
	defer cancel()
	ids, tokens := e.leases.snapshot()
	if len(ids) == 0 {
		return
	}
	sent := time.Now()
	e.stats.renewals.Add(1)
	res, err := e.exec.JobRenew(ctx, &weirdriver.JobRenewParams{
		IDs: ids, LeaseTokens: tokens, LeaseDuration: e.cfg.LeaseDuration,
	})
	if err != nil {
		if ctx.Err() == nil || e.hardCtx.Err() == nil {
			e.logger.Warn("weir: renew leases", "leases", len(ids), "error", err)
		}
		return
	}
	e.leases.applyRenewal(ids, tokens, res, sent.Add(e.leaseBudget()))
}

// leaseLost counts, logs and publishes a lease found lost while its handler runs
// or waits. The lease table calls it with its mutex held.
func (e *engine) leaseLost(j *heldJob, why string) {
	e.stats.leasesLost.Add(1)
	e.logger.Warn("weir: lease lost", "job_id", j.row.ID, "lease_token", j.token, "reason", why)
	e.events.emit(EventLeaseLost, j.row, nil, 0)
}

// renewSoon asks the heartbeat for an early renewal, which reports the running
// jobs whose cancel was requested. It never blocks; requests coalesce.
func (e *engine) renewSoon() {
	select {
	case e.renewRequest <- struct{}{}:
	default:
	}
}
