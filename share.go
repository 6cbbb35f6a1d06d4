package weir

import (
	"context"
	"log/slog"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// A queue's global limit is kept by shares (docs/design/flow-control.md): each
// client that runs the queue holds a share of the limit in the database,
// leased like a job and renewed every shareInterval, and starts no more
// handlers at once than its share's Fair. A client that holds a share claims
// the queue's jobs without the limit's count, so that it prefetches as a
// queue without a limit does; a client without one (before its first
// renewal, or when the limit was set while it ran) claims as before, counted
// against the shares, and asks for one when such a claim is cut short.

// maxShareInterval bounds how long a share goes unrenewed: shares move between
// clients (one joins, one leaves, the limit changes) at renewals.
const maxShareInterval = 250 * time.Millisecond

// Renewal delays: after a failed renewal, and while the database holds more
// slots than the client may use (it kept the handlers it ran): those end
// within a few milliseconds under load, and the next renewal gives the rest
// back to the other clients.
const (
	shareRetry  = 100 * time.Millisecond
	shareShrink = 10 * time.Millisecond
)

// shareState is a producer's share of its queue's global limit; p.mu guards it.
type shareState struct {
	// on is set while the queue has a global limit (as this client knows):
	// handlers start only within the share.
	on bool
	// fair is how many handlers may run at once (QueueShare.Fair).
	fair int
	// until is when the share can no longer be trusted: the last renewal's
	// send time plus the lease budget, before the database's lease ends.
	until time.Time
}

// maxRunningLocked is how many handlers may run at once: MaxWorkers, and
// within a share its fair part while it can be trusted. p.mu is held.
func (p *producer) maxRunningLocked() int {
	if !p.share.on {
		return p.cfg.MaxWorkers
	}
	if !time.Now().Before(p.share.until) {
		return 0
	}
	return min(p.cfg.MaxWorkers, p.share.fair)
}

// wantShare is called when a claim said that the queue has a global limit and
// this client holds no share. Until the first renewal answers, no handler
// starts beyond those running: the share is asked to keep them, and once it
// is written they no longer count as jobs of a client without one.
func (p *producer) wantShare() {
	p.mu.Lock()
	if !p.share.on {
		p.share = shareState{on: true, fair: p.running, until: time.Now().Add(p.leaseBudget)}
	}
	p.mu.Unlock()
	select {
	case p.shareWake <- struct{}{}:
	default:
	}
}

// renewLoop calls renew while on reports true, at once and then when renew
// says, or when wake is signalled, until ctx ends (the producer's loop ends
// with it): the share loop and the key loop.
func (p *producer) renewLoop(ctx context.Context, wake <-chan struct{}, on func() bool, renew func(context.Context) time.Duration) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-timer.C:
		}
		p.mu.Lock()
		yes := on()
		p.mu.Unlock()
		if yes {
			timer.Reset(renew(ctx))
		}
	}
}

// renewShare renews the share once and returns when to renew it next. It asks
// the database to keep what the client may be using until the answer: the
// handlers running, or, while the share is trusted, its fair part, up to
// which handlers may start meanwhile.
func (p *producer) renewShare(ctx context.Context) time.Duration {
	p.mu.Lock()
	keep := p.running
	if time.Now().Before(p.share.until) {
		keep = max(keep, p.share.fair)
	}
	want := p.cfg.MaxWorkers
	p.mu.Unlock()
	sent := time.Now()
	rctx, cancel := context.WithTimeout(ctx, p.leaseBudget)
	s, err := p.exec.QueueShare(rctx, &weirdriver.QueueShareParams{
		Queue: p.queue, ClientID: p.clientID, Want: want, Keep: keep, Lease: p.leaseDuration,
	})
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			p.limited.log(slog.LevelError, "weir: renew the share of a queue's global limit", p.queue,
				slog.String("queue", p.queue), slog.Any("error", err))
		}
		return shareRetry
	}
	p.mu.Lock()
	before := p.maxRunningLocked()
	if s.Limit == 0 {
		p.share = shareState{} // the limit was removed: the database's value wins
	} else {
		p.share = shareState{on: true, fair: s.Fair, until: sent.Add(p.leaseBudget)}
	}
	p.startBufferedLocked()
	grew := p.maxRunningLocked() > before
	giveBack := p.takeGiveBackLocked()
	p.mu.Unlock()
	p.giveBack(giveBack)
	if grew {
		p.poke() // room to claim into; an unchanged share claims nothing more
	}
	if s.Slots > s.Fair {
		return shareShrink
	}
	return p.shareInterval
}

// giveUpShare deletes the share once no handler of the producer runs (Stop,
// or the queue's removal), so that the other clients need not wait for its
// lease to end. A share not given up (ctx ended, or the write failed) lasts
// until its lease ends; the running jobs of the client then count as those
// of a client without one.
func (p *producer) giveUpShare(ctx context.Context) {
	p.mu.Lock()
	on, running := p.share.on, p.running
	p.mu.Unlock()
	if !on || running > 0 {
		return
	}
	// Nothing starts from here on, whatever the write does: jobs claimed
	// under the share were not counted against the limit.
	p.mu.Lock()
	p.share = shareState{on: true}
	p.mu.Unlock()
	if _, err := p.exec.QueueShare(ctx, &weirdriver.QueueShareParams{
		Queue: p.queue, ClientID: p.clientID, Lease: p.leaseDuration,
	}); err != nil && ctx.Err() == nil {
		p.limited.log(slog.LevelWarn, "weir: give up the share of a queue's global limit", p.queue,
			slog.String("queue", p.queue), slog.Any("error", err))
	}
}
