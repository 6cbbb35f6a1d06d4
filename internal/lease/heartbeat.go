package lease

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

// HeartbeatConfig is what a heartbeat works with.
type HeartbeatConfig struct {
	Exec   weirdriver.Executor
	Leases *Table
	// Warn logs a failed renewal; the client rate-limits it, since a renewal
	// that fails may fail every interval until the database is back.
	Warn func(msg string, attrs ...any)
	// Interval is how often every lease is renewed; LeaseDuration how long a
	// renewal holds a lease (the database's clock).
	Interval      time.Duration
	LeaseDuration time.Duration
	// Renewals counts renewal statements sent.
	Renewals *atomic.Int64
	// Hard ends when Stop's budget runs out: a renewal cut then is not logged.
	Hard context.Context
}

// Heartbeat renews every lease the client holds in one statement per interval,
// cancels handlers whose lease was lost or asked to cancel, and cancels handlers
// whose local lease deadline passed while the database could not be reached. On
// request (RenewSoon) it renews early, so that an operator's cancel, which the
// renewal reports, stops its handler promptly.
//
// The renewal runs in a goroutine of the heartbeat's own, so that a renewal that
// hangs (the database is unreachable, a row is locked) never delays the deadline
// checks, which run four times per interval.
type Heartbeat struct {
	cfg HeartbeatConfig
	// request (capacity 1) asks for an early renewal.
	request chan struct{}
}

// NewHeartbeat returns a heartbeat; Run runs it.
func NewHeartbeat(cfg HeartbeatConfig) *Heartbeat {
	return &Heartbeat{cfg: cfg, request: make(chan struct{}, 1)}
}

// Run renews leases until ctx ends.
func (h *Heartbeat) Run(ctx context.Context) {
	tick := time.NewTicker(h.cfg.Interval)
	defer tick.Stop()
	check := time.NewTicker(max(h.cfg.Interval/4, time.Millisecond))
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
			h.cfg.Leases.Expire(now)
		}
	}
}

// Budget is how long after a claim or renewal is sent the client trusts the
// lease: the lease duration minus one heartbeat interval of margin, so that a
// handler is cancelled before the database lets another worker take its job.
func (h *Heartbeat) Budget() time.Duration {
	return h.cfg.LeaseDuration - h.cfg.Interval
}

func (h *Heartbeat) renew(ctx context.Context) {
	// A slow renewal still helps as long as it lands while the leases are trusted;
	// the deadline checks run apart from it.
	ctx, cancel := context.WithTimeout(ctx, h.Budget())
	defer cancel()
	// A lease whose outcome waits is renewed only once less than half its
	// budget and an interval are left: the next renewal, an interval away,
	// still comes with half the budget to spare.
	snap := h.cfg.Leases.Snapshot(time.Now(), h.Budget()/2+h.cfg.Interval)
	if len(snap.IDs) == 0 {
		return
	}
	sent := time.Now()
	h.cfg.Renewals.Add(1)
	// The progress handlers recorded since the last renewal rides in the same
	// fenced statement: no statement of its own, and nothing written for a
	// lease that is gone.
	res, err := h.cfg.Exec.JobRenew(ctx, &weirdriver.JobRenewParams{
		IDs: snap.IDs, LeaseTokens: snap.Tokens, LeaseDuration: h.cfg.LeaseDuration, Progress: snap.Progress,
	})
	if err != nil {
		if ctx.Err() == nil || h.cfg.Hard.Err() == nil {
			h.cfg.Warn("weir: renew leases", slog.Int("leases", len(snap.IDs)), slog.Any("error", err))
		}
		return
	}
	h.cfg.Leases.ApplyRenewal(snap, res, sent.Add(h.Budget()))
}

// RenewSoon asks the heartbeat for an early renewal, which reports the running
// jobs whose cancel was requested. It never blocks; requests coalesce.
func (h *Heartbeat) RenewSoon() {
	select {
	case h.request <- struct{}{}:
	default:
	}
}
