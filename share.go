package weir

import (
	"context"
	"log/slog"
	"time"

	"github.com/weirq/weir/internal/flow"
	"github.com/weirq/weir/weirdriver"
)

// A queue's global limit is kept by shares (docs/design/flow-control.md): each
// client that runs the queue holds a share of the limit in the database,
// leased like a job and renewed every shareInterval. What a share allows is
// internal/flow's (flow.Share); this file sends its renewals.

// maxShareInterval bounds how long a share goes unrenewed: shares move between
// clients (one joins, one leaves, the limit changes) at renewals.
const maxShareInterval = 250 * time.Millisecond

// wantShare is called when a claim said that the queue has a global limit and
// this client holds no share (flow.Share.Want): it renews at once.
func (p *producer) wantShare() {
	p.mu.Lock()
	p.flow.Share.Want(p.running)
	p.mu.Unlock()
	select {
	case p.shareWake <- struct{}{}:
	default:
	}
}

// renewLoop calls renew while on reports true, at once and then when renew
// says, or when wake is signalled, until ctx ends (the producer's loop ends
// with it): the share loop and the key loop. on is called with p.mu held.
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

// renewShare renews the share once, carries out flow's decision, and
// returns when to renew it next.
func (p *producer) renewShare(ctx context.Context) time.Duration {
	p.mu.Lock()
	req := p.flow.Share.Renew(p.running, p.cfg.MaxWorkers)
	p.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, p.leaseBudget)
	s, err := p.exec.QueueShare(rctx, &weirdriver.QueueShareParams{
		Queue: p.queue, ClientID: p.clientID, Want: req.Want, Keep: req.Keep, Lease: p.leaseDuration,
	})
	cancel()
	var d flow.Decision
	if err == nil {
		p.mu.Lock()
		if d, err = p.flow.Share.Apply(req, s, p.cfg.MaxWorkers); err == nil {
			p.startBufferedLocked()
		}
		p.unlockGivingBack()
	}
	if err != nil {
		if ctx.Err() == nil {
			p.limited.log(slog.LevelError, "weir: renew the share of a queue's global limit", p.queue,
				slog.String("queue", p.queue), slog.Any("error", err))
		}
		return flow.Retry
	}
	if d.Poke {
		p.poke() // room to claim into; an unchanged share claims nothing more
	}
	return d.Next
}

// giveUpShare deletes the share once no handler of the producer runs (Stop,
// or the queue's removal), so that the other clients need not wait for its
// lease to end. A share not given up (ctx ended, or the write failed) lasts
// until its lease ends; the running jobs of the client then count as those
// of a client without one.
func (p *producer) giveUpShare(ctx context.Context) {
	p.mu.Lock()
	giveUp := p.flow.Share.GiveUp(p.running)
	p.mu.Unlock()
	if !giveUp {
		return
	}
	if _, err := p.exec.QueueShare(ctx, &weirdriver.QueueShareParams{
		Queue: p.queue, ClientID: p.clientID, Lease: p.leaseDuration,
	}); err != nil && ctx.Err() == nil {
		p.limited.log(slog.LevelWarn, "weir: give up the share of a queue's global limit", p.queue,
			slog.String("queue", p.queue), slog.Any("error", err))
	}
}
