package weir

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/weirq/weir/internal/completer"
	"github.com/weirq/weir/internal/flow"
	"github.com/weirq/weir/internal/lease"
	"github.com/weirq/weir/weirdriver"
)

// A queue's limit per key is kept, on PostgreSQL, by shares of its keys
// (docs/design/flow-control.md, "How key shares keep them"): the keys fall into
// weirdriver.KeyBuckets buckets, and each client that runs the queue holds
// some of them in the database, leased and renewed as a share of a global
// limit is. What the buckets held allow is internal/flow's (flow.Keys);
// this file sends their renewals and gives back the jobs of buckets let go.

// keyedOf reports whether cfg asks for buckets of its keys from the start: a
// limit per key without a rate.
func keyedOf(cfg QueueConfig) bool {
	return cfg.KeyLimit.Limit > 0 && cfg.KeyLimit.Rate == (RateLimit{}) && cfg.RateLimit == (RateLimit{})
}

// skipKeysLocked returns the keys of which weirdriver.KeyDepth jobs claimed
// as holder wait in the buffer: a claim as holder passes them over. p.mu is
// held.
func (p *producer) skipKeysLocked() []string {
	waiting := map[string]int{}
	for _, b := range p.buffer {
		if b.Bucket >= 0 {
			waiting[b.Key]++
		}
	}
	return p.flow.Keys.Skip(waiting)
}

// wantKeys is called when a claim said that the queue's keys may be held and
// this client holds none.
func (p *producer) wantKeys() {
	p.mu.Lock()
	p.flow.Keys.Want()
	p.mu.Unlock()
	select {
	case p.keyWake <- struct{}{}:
	default:
	}
}

// renewKeys renews the client's buckets once, releasing those let go,
// carries out flow's decision, and returns when to renew next. The buffered
// jobs of buckets let go go back to the queue.
func (p *producer) renewKeys(ctx context.Context) time.Duration {
	p.mu.Lock()
	req := p.flow.Keys.Renew(p.cfg.MaxWorkers)
	p.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, p.leaseBudget)
	s, err := p.exec.KeyShare(rctx, &weirdriver.KeyShareParams{
		Queue: p.queue, ClientID: p.clientID, Release: req.Release, Lease: p.leaseDuration, Want: req.Want,
	})
	cancel()
	var d flow.Decision
	if err == nil {
		p.mu.Lock()
		if d, err = p.flow.Keys.Apply(req, s); err == nil {
			p.giveBackLetGoLocked()
			p.startBufferedLocked()
		}
		p.unlockGivingBack()
	}
	if err != nil {
		if ctx.Err() == nil {
			p.limited.log(slog.LevelError, "weir: renew the buckets of a queue's keys", p.queue,
				slog.String("queue", p.queue), slog.Any("error", err))
		}
		p.mu.Lock()
		d = p.flow.Keys.Failed() // claim counted meanwhile
		p.mu.Unlock()
	}
	if d.Poke {
		p.poke()
	}
	return d.Next
}

// giveBackLetGoLocked moves the buffered jobs of buckets let go to giveBack,
// whether or not a worker is free: while they are leased, no other client can
// take the bucket. p.mu is held.
func (p *producer) giveBackLetGoLocked() {
	p.buffer = slices.DeleteFunc(p.buffer, func(b buffered) bool {
		if p.flow.Keys.LetGo(b.Job) {
			p.giveBack = append(p.giveBack, b.job)
			return true
		}
		return false
	})
}

// takeGiveBackLocked returns the jobs to give back and forgets them. p.mu is
// held.
func (p *producer) takeGiveBackLocked() []*lease.Job {
	jobs := p.giveBack
	p.giveBack = nil
	return jobs
}

// giveBackJobs gives jobs that never started back to the queue, fenced and
// without spending an attempt, through the completer.
func (p *producer) giveBackJobs(jobs []*lease.Job) {
	for _, j := range jobs {
		p.leases.MarkReturned(j) // it never ran; mark it finalizing
		p.submit(&completer.Finalization{Job: j, Params: weirdriver.JobFinalizeParams{
			ID: j.Row.ID, LeaseToken: j.Token, Outcome: weirdriver.OutcomeReturn,
		}, Prefetched: true})
	}
}

// giveUpKeys lets every bucket go in the database (Stop, or the queue's
// removal), so that the other clients need not wait for their leases to
// end. Buckets not given up last until their lease ends.
func (p *producer) giveUpKeys(ctx context.Context) {
	p.mu.Lock()
	on := p.flow.Keys.GiveUp()
	p.mu.Unlock()
	if !on {
		return
	}
	if _, err := p.exec.KeyShare(ctx, &weirdriver.KeyShareParams{
		Queue: p.queue, ClientID: p.clientID, GiveUp: true, Lease: p.leaseDuration,
	}); err != nil && ctx.Err() == nil {
		p.limited.log(slog.LevelWarn, "weir: give up the buckets of a queue's keys", p.queue,
			slog.String("queue", p.queue), slog.Any("error", err))
	}
}
