package weir

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// earlyRenewGap is the least time between the start of a renewal and an early
// one asked for by a cancel notification. Anyone can send those notifications, so
// a flood of them costs at most one renewal statement per gap; a genuine cancel
// reaches its handler within a gap plus a round trip.
const earlyRenewGap = 100 * time.Millisecond

// heartbeatDeps is what the heartbeat works with.
type heartbeatDeps struct {
	exec   weirdriver.Executor
	leases *leaseTable
	logger *slog.Logger
	// interval is how often every lease is renewed; leaseDuration how long a
	// renewal holds a lease (the database's clock).
	interval      time.Duration
	leaseDuration time.Duration
	// renewals counts renewal statements sent.
	renewals *atomic.Int64
	// hard ends when Stop's budget runs out: a renewal cut then is not logged.
	hard context.Context
}

// heartbeat renews every lease the client holds in one statement per interval,
// cancels handlers whose lease was lost or asked to cancel, and cancels handlers
// whose local lease deadline passed while the database could not be reached. On
// request (renewSoon) it renews early, so that an operator's cancel, which the
// renewal reports, stops its handler promptly.
//
// The renewal runs in a goroutine of the heartbeat's own, so that a renewal that
// hangs (the database is unreachable, a row is locked) never delays the deadline
// checks, which run four times per interval.
type heartbeat struct {
	heartbeatDeps
	// request (capacity 1) asks for an early renewal.
	request chan struct{}
}

func newHeartbeat(deps heartbeatDeps) *heartbeat {
	return &heartbeat{heartbeatDeps: deps, request: make(chan struct{}, 1)}
}

// run renews leases until ctx ends.
func (h *heartbeat) run(ctx context.Context) {
	tick := time.NewTicker(h.interval)
	defer tick.Stop()
	check := time.NewTicker(max(h.interval/4, time.Millisecond))
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
			h.renew(ctx)
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
		case <-h.request:
			wanted = true
			startEarly()
		case <-early.C:
			startEarly()
		case <-done:
			inFlight = false
			startEarly()
		case now := <-check.C:
			h.leases.expire(now)
		}
	}
}

// leaseBudget is how long after a claim or renewal is sent the client trusts the
// lease: the lease duration minus one heartbeat interval of margin, so that a
// handler is cancelled before the database lets another worker take its job.
func (h *heartbeat) leaseBudget() time.Duration {
	return h.leaseDuration - h.interval
}

func (h *heartbeat) renew(ctx context.Context) {
	// A slow renewal still helps as long as it lands while the leases are trusted;
	// the deadline checks run apart from it.
	ctx, cancel := context.WithTimeout(ctx, h.leaseBudget())
	defer cancel()
	ids, tokens := h.leases.snapshot()
	if len(ids) == 0 {
		return
	}
	sent := time.Now()
	h.renewals.Add(1)
	res, err := h.exec.JobRenew(ctx, &weirdriver.JobRenewParams{
		IDs: ids, LeaseTokens: tokens, LeaseDuration: h.leaseDuration,
	})
	if err != nil {
		if ctx.Err() == nil || h.hard.Err() == nil {
			h.logger.Warn("weir: renew leases", "leases", len(ids), "error", err)
		}
		return
	}
	h.leases.applyRenewal(ids, tokens, res, sent.Add(h.leaseBudget()))
}

// renewSoon asks the heartbeat for an early renewal, which reports the running
// jobs whose cancel was requested. It never blocks; requests coalesce.
func (h *heartbeat) renewSoon() {
	select {
	case h.request <- struct{}{}:
	default:
	}
}
