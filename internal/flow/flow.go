// Package flow is a producer's flow control of one queue
// (docs/design/flow-control.md): its share of the queue's global limit
// (Share), its buckets of the queue's keys (Keys), and the pace of its claims
// while a limit cuts them short (Pace). It does no I/O, reads the time only
// from the clock it is given, and has no lock: its owner, the producer,
// guards a Limits with its own lock and does the I/O. A renewal goes in
// three steps: Renew says what to send; the owner sends it; Apply takes the
// answer and returns a Decision, which the owner carries out.
//
// The models of model/share.pml and model/keyshare.pml
// (docs/design/model.md) check the protocols these steps are part of;
// flow_test.go replays each of their broken variants that has a line here.
package flow

import (
	"fmt"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// Clock tells the time: time.Now in the runtime, a fake one in tests.
type Clock func() time.Time

// Timing is how flow control reads and trusts the time.
type Timing struct {
	Now Clock
	// Budget is how long after a renewal is sent its answer is trusted (the
	// lease budget): less than the lease the database holds from when it
	// runs the renewal, so that the client stops trusting a share or a
	// bucket before the database lets another client have it.
	Budget time.Duration
	// Interval is how often a share or the buckets are renewed in steady
	// state.
	Interval time.Duration
}

// Renewal delays: after a failed renewal, and while the database holds
// more than the client may use (slots of a share it kept for the handlers
// it ran, buckets it lets go): those handlers end within a few milliseconds
// under load, and the next renewal gives the rest back to the other clients.
const (
	Retry  = 100 * time.Millisecond
	Shrink = 10 * time.Millisecond
)

// Decision is what the owner does after a renewal: renew again after Next;
// and, if Poke, claim at once, since there is room to claim into.
type Decision struct {
	Next time.Duration
	Poke bool
}

// Limits is a producer's flow control of one queue. Its owner guards it.
type Limits struct {
	Share Share
	Keys  Keys
	now   Clock
}

// New returns the flow control of a queue whose handlers keep within a
// share of a global limit from the start (shared: it declares one) and which
// asks for buckets of its keys from the start (keyed: it declares a limit
// per key and no rate). It panics if t has no clock or a budget or interval
// that is not positive: the producer derives them from a checked Config.
func New(t Timing, shared, keyed bool) Limits {
	switch {
	case t.Now == nil:
		panic("flow.New: Timing.Now is nil")
	case t.Budget <= 0:
		panic(fmt.Sprintf("flow.New: Timing.Budget %v is not positive", t.Budget))
	case t.Interval <= 0:
		panic(fmt.Sprintf("flow.New: Timing.Interval %v is not positive", t.Interval))
	}
	return Limits{
		Share: Share{t: t, on: shared},
		Keys:  Keys{t: t, on: keyed, running: map[string]int{}},
		now:   t.Now,
	}
}

// Now is the time by the clock of l.
func (l *Limits) Now() time.Time { return l.now() }

// Load is what a producer runs and holds of its queue when it claims.
type Load struct {
	// MaxWorkers and Prefetch are the queue's settings; KeyLimit says
	// whether it declares a limit per key.
	MaxWorkers, Prefetch int
	KeyLimit             bool
	// Running are the handlers running, Buffered the jobs claimed and not
	// started.
	Running, Buffered int
}

// Claim is what the next claim asks for: at most Room jobs (none if Room
// is not positive), as holder of Buckets (ascending), or counted if there
// are none.
type Claim struct {
	Room    int
	Buckets []int
}

// Plan returns what the next claim asks for. A claim as holder of buckets
// prefetches; a counted claim of a queue limited per key does not: a
// prefetched job would hold its key's slot while it waited. Nothing is
// claimed while the share allows no handler, nor, while the client asks for
// buckets, before its first renewal answered: a counted claim of a queue
// whose buckets it is about to hold would take turns with the others' for
// nothing.
func (l *Limits) Plan(q Load) Claim {
	buckets := l.Keys.Held()
	prefetch := q.Prefetch
	if len(buckets) == 0 && (q.KeyLimit || l.Keys.limit > 0) {
		prefetch = 0
	}
	room := 0
	if most := l.Share.MaxRunning(q.MaxWorkers); most > 0 && (!l.Keys.on || l.Keys.tried) {
		room = most + prefetch - q.Running - q.Buffered
	}
	return Claim{Room: room, Buckets: buckets}
}

// Job is a claimed job as flow control sees it: Key is the key it was
// claimed under as holder of the key's bucket, Bucket that bucket; Bucket
// is -1 for a job claimed counted.
type Job struct {
	Key    string
	Bucket int
}

// Counted is a job claimed counted: it holds its slot of the limits in the
// database, and starts whenever a worker is free.
var Counted = Job{Bucket: -1}

// Holder is a job of key claimed as holder of key's bucket.
func Holder(key string) Job { return Job{Key: key, Bucket: weirdriver.KeyBucket(key)} }
