package flow

import (
	"fmt"
	"slices"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// Keys is a client's hold on buckets of its queue's keys, which keep the
// queue's limit per key (model/keyshare.pml; docs/design/flow-control.md,
// "How key shares keep them"): the keys fall into weirdriver.KeyBuckets
// buckets, and each client that runs the queue holds some of them in the
// database, leased and renewed as a share is. A bucket is taken only while
// none of its jobs runs, so the jobs of a held bucket run in its holder
// alone: the holder claims them without the limit's count, with its
// prefetch, and starts a job only while fewer than the limit of its key run
// in it. A client that holds no bucket claims counted.
type Keys struct {
	t Timing
	// on is set while the client asks for buckets: its queue has a limit
	// per key and no rate limit, as far as it knows; tried once it has
	// asked (Plan claims nothing before).
	on, tried bool
	// limit is the most handlers of one key; key the field keys are read
	// from, as the database last said.
	limit int
	key   string
	// held are the buckets the client holds and may start jobs of, until
	// until (the last renewal's send time plus the budget); target is how
	// many it should hold.
	held   [weirdriver.KeyBuckets]bool
	nheld  int
	target int
	until  time.Time
	// settle is how many renewals are still to be sent Grow apart (Settle).
	settle int
	// release are buckets let go here, to delete at the next renewal.
	release []int
	// running counts the handlers running by key, of jobs claimed as
	// holder.
	running map[string]int
}

// Grow is how soon a client renews when it holds fewer buckets than its
// part: buckets come free as the others let theirs go and their jobs end.
const Grow = 50 * time.Millisecond

// Settle is how many renewals a client sends Grow apart after its first
// answer and after each answer that moved its part: clients of a fleet
// mostly start together, and a client that took every bucket at its first
// renewal learns of the others that joined meanwhile at its next one, not a
// whole renewal interval later.
const Settle = 4

// On reports whether the client asks for buckets.
func (k *Keys) On() bool { return k.on }

// Want is called when a claim said that the queue's keys may be held and
// this client holds none: it asks for buckets from now on.
func (k *Keys) Want() { k.on = true }

// Held returns the buckets the client holds and trusts, ascending; nil when
// it trusts none.
func (k *Keys) Held() []int {
	if k.nheld == 0 || !k.t.Now().Before(k.until) {
		return nil
	}
	held := make([]int, 0, k.nheld)
	for b, h := range k.held {
		if h {
			held = append(held, b)
		}
	}
	return held
}

// Skip returns the keys a claim as holder passes over, given how many jobs
// of each key claimed as holder wait in the buffer: those of which
// weirdriver.KeyDepth wait.
func (k *Keys) Skip(waiting map[string]int) []string {
	depth := weirdriver.KeyDepth(k.limit)
	var skip []string
	for key, n := range waiting {
		if n >= depth {
			skip = append(skip, key)
		}
	}
	return skip
}

// LetGo reports whether j was claimed as holder of a bucket the client no
// longer holds: it must never start, and goes back to the queue.
func (k *Keys) LetGo(j Job) bool { return j.Bucket >= 0 && !k.held[j.Bucket] }

// MayStart reports whether buffered job j may start at now, and whether it
// must go back to the queue instead (LetGo). A job claimed counted holds
// its slot in the database and starts; one claimed as holder starts while
// the client trusts its buckets and runs fewer than the limit of j's key.
func (k *Keys) MayStart(j Job, now time.Time) (start, giveBack bool) {
	if j.Bucket < 0 {
		return true, false
	}
	if k.LetGo(j) {
		return false, true
	}
	return now.Before(k.until) && k.running[j.Key] < k.limit, false
}

// Started counts j's handler, which started.
func (k *Keys) Started(j Job) {
	if j.Bucket >= 0 {
		k.running[j.Key]++
	}
}

// Ended counts off j's handler, which returned.
func (k *Keys) Ended(j Job) {
	if j.Bucket < 0 {
		return
	}
	if k.running[j.Key]--; k.running[j.Key] <= 0 {
		delete(k.running, j.Key)
	}
}

// KeyRequest is a renewal of the buckets to send.
type KeyRequest struct {
	// Release are the buckets let go here; Want is the client's MaxWorkers
	// (the buckets are divided in proportion to it).
	Release []int
	Want    int
	sent    time.Time
}

// Renew returns the renewal to send now, with maxWorkers.
func (k *Keys) Renew(maxWorkers int) KeyRequest {
	return KeyRequest{Release: slices.Clone(k.release), Want: maxWorkers, sent: k.t.Now()}
}

// Failed is called when a renewal failed: the client claims counted
// meanwhile, and, if that was its first, claims at once.
func (k *Keys) Failed() Decision {
	first := !k.tried
	k.tried = true
	return Decision{Next: Retry, Poke: first}
}

// Apply takes the answer a to renewal r. The buckets held are trusted for
// the budget from r's send; a client holding more than its part lets the
// highest go at once (LetGo: their buffered jobs go back to the queue, and
// the bucket is taken by another client once its running jobs here have
// ended) and releases them at its next renewal, Shrink later. A queue
// whose keys cannot be held any more (Limit 0), or that was re-keyed, drops
// the buckets. The Decision pokes when the client holds more buckets than
// before, or on the first answer of a queue that cannot be held. A
// malformed answer is an error and changes nothing: the owner calls Failed.
func (k *Keys) Apply(r KeyRequest, a weirdriver.KeyShare) (Decision, error) {
	if err := checkKeyShare(a); err != nil {
		return Decision{}, err
	}
	first := !k.tried
	k.tried = true
	k.release = slices.DeleteFunc(k.release, func(b int) bool { return slices.Contains(r.Release, b) })
	grew := first
	if a.Limit == 0 {
		k.forget()
		k.on = false
	} else {
		grew = k.hold(r, a, first)
	}
	d := Decision{Next: k.t.Interval, Poke: grew}
	switch {
	case len(k.release) > 0:
		d.Next = Shrink
	case k.on && (k.nheld < k.target || k.settle > 0):
		d.Next = Grow
	}
	k.settle = max(k.settle-1, 0)
	return d, nil
}

// hold takes the buckets of answer a to r, keeping no more than the part
// (the highest go), and reports whether the client holds more than before.
func (k *Keys) hold(r KeyRequest, a weirdriver.KeyShare, first bool) bool {
	if a.Key != k.key {
		// Re-keyed: the database dropped the buckets of the old keys (the
		// answer holds those taken since).
		k.forget()
	}
	if first || a.Target != k.target {
		k.settle = Settle
	}
	k.limit, k.key, k.target = a.Limit, a.Key, a.Target
	var held [weirdriver.KeyBuckets]bool
	for _, b := range a.Held {
		held[b] = true
	}
	grew := len(a.Held) > k.nheld
	k.held, k.nheld = held, len(a.Held)
	k.until = r.sent.Add(k.t.Budget)
	for b := weirdriver.KeyBuckets - 1; b >= 0 && k.nheld > k.target; b-- {
		if k.held[b] {
			k.held[b] = false
			k.nheld--
			k.release = append(k.release, b)
		}
	}
	return grew
}

// GiveUp is called when the client stops running the queue: it lets every
// bucket go, asks for none any more, and reports whether the database may
// hold any for it, to give up there.
func (k *Keys) GiveUp() bool {
	on := k.on || k.nheld > 0 || len(k.release) > 0
	k.forget()
	k.on = false
	return on
}

// forget lets every bucket go here that the database no longer holds:
// nothing is left to release, and a release sent later could delete a
// bucket taken again meanwhile.
func (k *Keys) forget() {
	k.held, k.nheld = [weirdriver.KeyBuckets]bool{}, 0
	k.release = nil
}

// checkKeyShare checks an answer of KeyShare: a limit and a target in
// range, distinct buckets in range.
func checkKeyShare(a weirdriver.KeyShare) error {
	if a.Limit < 0 {
		return fmt.Errorf("key share answer: limit %d is negative", a.Limit)
	}
	if a.Limit == 0 {
		return nil // nothing is held: Held and Target say nothing
	}
	if a.Target < 0 || a.Target > weirdriver.KeyBuckets {
		return fmt.Errorf("key share answer: target %d is out of range 0 to %d", a.Target, weirdriver.KeyBuckets)
	}
	var seen [weirdriver.KeyBuckets]bool
	for _, b := range a.Held {
		if b < 0 || b >= weirdriver.KeyBuckets {
			return fmt.Errorf("key share answer: bucket %d is out of range 0 to %d", b, weirdriver.KeyBuckets-1)
		}
		if seen[b] {
			return fmt.Errorf("key share answer: bucket %d is held twice", b)
		}
		seen[b] = true
	}
	return nil
}
