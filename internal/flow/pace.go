package flow

import (
	"time"

	"github.com/weirq/weir/weirdriver"
)

// Backoff of a queue at its global limit: a claim cut short by the limit is
// tried again after LimitRetryMin, doubling to LimitRetryMax (and never later
// than the poll interval), unless an outcome written by this client frees a
// slot first. Slots freed by other clients are found by these retries.
const (
	LimitRetryMin = 5 * time.Millisecond
	LimitRetryMax = 100 * time.Millisecond
)

// FailRetry is the longest wait after a failed claim (a dropped connection).
const FailRetry = time.Second

// Pace is the claim loop's backoff while the queue's limits cut its claims
// short. The loop owns it; it needs no lock.
type Pace struct {
	retry time.Duration
}

// Next is what the claim loop does after a claim: claim again after Wait,
// or sooner when woken. While AtLimit, a handler's return does not wake it
// (its job holds its slot until its outcome is written); while AtSlots (the
// global limit cut the claim short, not a rate), a written outcome of the
// queue's jobs does.
type Next struct {
	Wait             time.Duration
	AtLimit, AtSlots bool
}

// After returns what to do after a claim that said lim, and whether it
// filled every free slot (full) or failed, given the poll interval.
func (p *Pace) After(poll time.Duration, lim weirdriver.ClaimLimit, full, failed bool) Next {
	wait := poll
	switch {
	case failed:
		wait = min(wait, FailRetry)
	case lim.Wait > 0:
		wait = min(wait, lim.Wait) // the rate limit admits the next job then
	case lim.Limited:
		p.retry = min(max(2*p.retry, LimitRetryMin), LimitRetryMax)
		wait = min(wait, p.retry)
	case full:
		wait = 0 // there may be more at once
	}
	if !lim.Limited || lim.Wait > 0 {
		p.retry = 0
	}
	return Next{Wait: wait, AtLimit: lim.Limited, AtSlots: lim.Limited && lim.Wait == 0}
}
