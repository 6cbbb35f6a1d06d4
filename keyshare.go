package weir

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/weirq/weir/internal/completer"
	"github.com/weirq/weir/internal/lease"
	"github.com/weirq/weir/weirdriver"
)

// A queue's limit per key is kept, on PostgreSQL, by shares of its keys
// (docs/design/flow-control.md, "How key shares keep them"): the keys fall into
// weirdriver.KeyBuckets buckets, and each client that runs the queue holds
// some of them in the database, leased and renewed as a share of a global
// limit is. A bucket is taken only while none of its jobs runs, so the jobs
// of a held bucket run in its holder alone: the holder claims them without
// the limit's count, with its prefetch, and starts a job only while fewer
// than the limit of its key run in it. A client that holds no bucket claims
// as before, counted, and the counted claims pass over held buckets' jobs.

// keyGrow is how soon a client renews when it holds fewer buckets than its
// part: buckets come free as the others let theirs go and their jobs end.
const keyGrow = 50 * time.Millisecond

// keySettle is how many renewals a client sends keyGrow apart after its
// first answer and after each answer that moved its part: clients of a
// fleet mostly start together, and a client that took every bucket at its
// first renewal learns of the others that joined meanwhile at its next one,
// not a whole renewal interval later.
const keySettle = 4

// keyState is a producer's hold on buckets of its queue's keys; p.mu guards
// it.
type keyState struct {
	// on is set while the client asks for buckets: its queue has a limit
	// per key and no rate limit, as far as it knows; tried once it has asked
	// (the producer claims nothing before: a counted claim of a queue whose
	// buckets it is about to hold would take turns with the others' for
	// nothing).
	on, tried bool
	// limit is the most handlers of one key; key the field keys are read
	// from, as the database last said.
	limit int
	key   string
	// held are the buckets the client holds and may start jobs of, until
	// until (the last renewal's send time plus the lease budget); target
	// is how many it should hold.
	held   [weirdriver.KeyBuckets]bool
	nheld  int
	target int
	until  time.Time
	// settle is how many renewals are still to be sent keyGrow apart
	// (keySettle).
	settle int
	// release are buckets let go here, to delete at the next renewal.
	release []int
	// running counts the handlers running by key, of jobs claimed as
	// holder; runningJob is the key of each of those jobs.
	running    map[string]int
	runningJob map[*lease.Job]string
	// giveBack are buffered jobs of buckets let go: they never start, and
	// go back to the queue through the completer.
	giveBack []*lease.Job
}

// buffered is a job claimed and not started: bucket is the bucket of its
// key when it was claimed as holder of that bucket, and -1 otherwise.
type buffered struct {
	job    *lease.Job
	key    string
	bucket int
}

// keyedOf reports whether cfg asks for buckets of its keys from the start: a
// limit per key without a rate.
func keyedOf(cfg QueueConfig) bool {
	return cfg.KeyLimit.Limit > 0 && cfg.KeyLimit.Rate == (RateLimit{}) && cfg.RateLimit == (RateLimit{})
}

// heldBucketsLocked returns the buckets the client holds and trusts, ascending.
// p.mu is held.
func (p *producer) heldBucketsLocked() []int {
	if p.keys.nheld == 0 || !time.Now().Before(p.keys.until) {
		return nil
	}
	held := make([]int, 0, p.keys.nheld)
	for b, h := range p.keys.held {
		if h {
			held = append(held, b)
		}
	}
	return held
}

// skipKeysLocked returns the keys of which weirdriver.KeyDepth jobs claimed
// as holder wait in the buffer: a claim as holder passes them over. p.mu is
// held.
func (p *producer) skipKeysLocked() []string {
	waiting := map[string]int{}
	for _, b := range p.buffer {
		if b.bucket >= 0 {
			waiting[b.key]++
		}
	}
	depth := weirdriver.KeyDepth(p.keys.limit)
	var skip []string
	for k, n := range waiting {
		if n >= depth {
			skip = append(skip, k)
		}
	}
	return skip
}

// mayStartLocked reports whether buffered job b may start now, and whether
// it must go back to the queue instead (its bucket was let go). p.mu is held.
func (p *producer) mayStartLocked(b buffered, now time.Time) (start, giveBack bool) {
	if b.bucket < 0 {
		return true, false // claimed counted: it holds its slot in the database
	}
	if !p.keys.held[b.bucket] {
		return false, true
	}
	return now.Before(p.keys.until) && p.keys.running[b.key] < p.keys.limit, false
}

// wantKeys is called when a claim said that the queue's keys may be held and
// this client holds none.
func (p *producer) wantKeys() {
	p.mu.Lock()
	p.keys.on = true
	p.mu.Unlock()
	select {
	case p.keyWake <- struct{}{}:
	default:
	}
}

// renewKeys renews the client's buckets once, releasing those let go, and
// returns when to renew next. When it holds more than its part, it lets the
// rest go at once: their buffered jobs go back to the queue, and the bucket
// is taken by another client once its running jobs here have ended.
func (p *producer) renewKeys(ctx context.Context) time.Duration {
	p.mu.Lock()
	release := slices.Clone(p.keys.release)
	want := p.cfg.MaxWorkers // the buckets are divided in proportion to it
	p.mu.Unlock()
	sent := time.Now()
	rctx, cancel := context.WithTimeout(ctx, p.leaseBudget)
	s, err := p.exec.KeyShare(rctx, &weirdriver.KeyShareParams{
		Queue: p.queue, ClientID: p.clientID, Release: release, Lease: p.leaseDuration, Want: want,
	})
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			p.limited.log(slog.LevelError, "weir: renew the buckets of a queue's keys", p.queue,
				slog.String("queue", p.queue), slog.Any("error", err))
		}
		p.mu.Lock()
		first := !p.keys.tried
		p.keys.tried = true // claim counted meanwhile
		p.mu.Unlock()
		if first {
			p.poke()
		}
		return shareRetry
	}
	p.mu.Lock()
	first := !p.keys.tried
	p.keys.tried = true
	p.keys.release = slices.DeleteFunc(p.keys.release, func(b int) bool { return slices.Contains(release, b) })
	grew := first
	if s.Limit == 0 {
		// The queue's keys cannot be held (no limit per key, or a rate
		// limit): the database dropped every bucket, and every claim is
		// counted.
		p.forgetKeysLocked()
		p.keys.on = false
	} else {
		if s.Key != p.keys.key {
			// Re-keyed: the database dropped the buckets of the old keys (the
			// answer holds those taken since).
			p.forgetKeysLocked()
		}
		if first || s.Target != p.keys.target {
			p.keys.settle = keySettle
		}
		p.keys.limit, p.keys.key, p.keys.target = s.Limit, s.Key, s.Target
		var held [weirdriver.KeyBuckets]bool
		for _, b := range s.Held {
			held[b] = true
		}
		grew = len(s.Held) > p.keys.nheld
		p.keys.held, p.keys.nheld = held, len(s.Held)
		p.keys.until = sent.Add(p.leaseBudget)
		// Hold no more than the part: let the highest buckets go.
		for b := weirdriver.KeyBuckets - 1; b >= 0 && p.keys.nheld > p.keys.target; b-- {
			if p.keys.held[b] {
				p.keys.held[b] = false
				p.keys.nheld--
				p.keys.release = append(p.keys.release, b)
			}
		}
	}
	// Give back the buffered jobs of buckets let go now, whether or not a
	// worker is free: while they are leased, no other client can take the
	// bucket.
	now := time.Now()
	p.buffer = slices.DeleteFunc(p.buffer, func(b buffered) bool {
		if _, back := p.mayStartLocked(b, now); back {
			p.keys.giveBack = append(p.keys.giveBack, b.job)
			return true
		}
		return false
	})
	p.startBufferedLocked()
	next := p.shareInterval
	switch {
	case len(p.keys.release) > 0:
		next = shareShrink
	case p.keys.on && (p.keys.nheld < p.keys.target || p.keys.settle > 0):
		next = keyGrow
	}
	p.keys.settle = max(p.keys.settle-1, 0)
	giveBack := p.takeGiveBackLocked()
	p.mu.Unlock()
	p.giveBack(giveBack)
	if grew {
		p.poke()
	}
	return next
}

// forgetKeysLocked lets every bucket go here that the database no longer
// holds: nothing is left to release, and a release sent later could delete a
// bucket taken again meanwhile. p.mu is held.
func (p *producer) forgetKeysLocked() {
	p.keys.held, p.keys.nheld = [weirdriver.KeyBuckets]bool{}, 0
	p.keys.release = nil
}

// takeGiveBackLocked returns the jobs to give back and forgets them. p.mu is
// held.
func (p *producer) takeGiveBackLocked() []*lease.Job {
	jobs := p.keys.giveBack
	p.keys.giveBack = nil
	return jobs
}

// giveBack gives jobs that never started back to the queue, fenced and
// without spending an attempt, through the completer.
func (p *producer) giveBack(jobs []*lease.Job) {
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
	on := p.keys.on || p.keys.nheld > 0 || len(p.keys.release) > 0
	p.forgetKeysLocked() // GiveUp deletes them all
	p.keys.on = false
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
