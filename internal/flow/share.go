package flow

import (
	"fmt"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// Share is a client's share of its queue's global limit (model/share.pml):
// the client holds a share of the limit in the database, leased and renewed,
// and starts no more handlers at once than its fair part. A client that
// holds a share claims the queue's jobs without the limit's count; one
// without (before its first renewal, or when the limit was set while it
// ran) claims counted against the shares, and asks for one (Want) when
// such a claim is cut short.
type Share struct {
	t Timing
	// on is set while the queue has a global limit, as this client knows:
	// handlers start only within the share.
	on bool
	// fair is how many handlers may run at once (QueueShare.Fair).
	fair int
	// until is when the share can no longer be trusted: the last renewal's
	// send time plus the budget, before the database's lease ends.
	until time.Time
}

// On reports whether handlers keep within a share.
func (s *Share) On() bool { return s.on }

// MaxRunning is how many handlers may run at once: maxWorkers, and within a
// share its fair part while it is trusted, none once it is not.
func (s *Share) MaxRunning(maxWorkers int) int {
	if !s.on {
		return maxWorkers
	}
	if !s.t.Now().Before(s.until) {
		return 0
	}
	return min(maxWorkers, s.fair)
}

// Want is called when a claim said that the queue has a global limit and
// this client holds no share: from now on its handlers keep within one, and
// until the first renewal answers no handler starts beyond the running ones
// (their slots are asked for as Keep, and once the share is written they no
// longer count as jobs of a client without one).
func (s *Share) Want(running int) {
	if !s.on {
		s.on, s.fair, s.until = true, running, s.t.Now().Add(s.t.Budget)
	}
}

// ShareRequest is a renewal of a share to send.
type ShareRequest struct {
	// Want is the most handlers the client would run (its MaxWorkers); Keep
	// how many slots it may be using until the answer.
	Want, Keep int
	sent       time.Time
}

// Renew returns the renewal to send now, with running handlers and
// maxWorkers. It asks the database to keep what the client may be using
// until the answer: the handlers running, or, while the share is trusted,
// its fair part, up to which handlers may start meanwhile.
func (s *Share) Renew(running, maxWorkers int) ShareRequest {
	now := s.t.Now()
	keep := running
	if now.Before(s.until) {
		keep = max(keep, s.fair)
	}
	return ShareRequest{Want: maxWorkers, Keep: keep, sent: now}
}

// Apply takes the answer a to renewal r: the share's fair part is trusted
// for the budget from r's send. A queue without a global limit any more
// (Limit 0) keeps no share: the database's word wins. The Decision pokes
// when more handlers may run than before; it renews sooner while the
// database holds more slots than the fair part. A malformed answer is an
// error, and changes nothing: renew after Retry.
func (s *Share) Apply(r ShareRequest, a weirdriver.QueueShare, maxWorkers int) (Decision, error) {
	if a.Limit < 0 || a.Fair < 0 || a.Slots < 0 {
		return Decision{}, fmt.Errorf("share answer %+v: a negative limit, fair part or slots", a)
	}
	before := s.MaxRunning(maxWorkers)
	if a.Limit == 0 {
		s.on, s.fair, s.until = false, 0, time.Time{}
	} else {
		s.on, s.fair, s.until = true, a.Fair, r.sent.Add(s.t.Budget)
	}
	d := Decision{Next: s.t.Interval, Poke: s.MaxRunning(maxWorkers) > before}
	if a.Slots > a.Fair {
		d.Next = Shrink
	}
	return d, nil
}

// GiveUp is called when the client stops running the queue: with running
// handlers it keeps the share and reports false (the share lasts until its
// lease ends); otherwise it reports whether a share is to be given up in
// the database, and from now on starts nothing, whatever that write does:
// jobs claimed under the share were not counted against the limit.
func (s *Share) GiveUp(running int) bool {
	if !s.on || running > 0 {
		return false
	}
	s.fair, s.until = 0, time.Time{}
	return true
}
