package flow

import (
	"slices"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
)

const (
	budget   = 800 * time.Millisecond
	interval = 250 * time.Millisecond
)

// clock is a fake clock: it moves only when told.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// limits returns flow control on a fake clock, as New makes it for a queue
// declaring a global limit (shared) or a limit per key (keyed).
func limits(shared, keyed bool) (*Limits, *clock) {
	c := &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	l := New(Timing{Now: c.now, Budget: budget, Interval: interval}, shared, keyed)
	return &l, c
}

// shareAnswer is a QueueShare answer of a queue limited to 10.
func shareAnswer(fair, slots int) weirdriver.QueueShare {
	return weirdriver.QueueShare{Limit: 10, Fair: fair, Slots: slots}
}

// keyAnswer is a KeyShare answer under a limit per key of limit, keyed by
// args.customer.
func keyAnswer(limit, target int, held ...int) weirdriver.KeyShare {
	return weirdriver.KeyShare{Limit: limit, Key: "args.customer", Held: held, Target: target}
}

// The keys of the jobs below, and their buckets.
var (
	acme   = Holder("acme")
	globex = Holder("globex")
)

// holdShare renews the share of l and applies the answer fair: the share is
// trusted for the budget from now.
func holdShare(t *testing.T, l *Limits, running, fair int) {
	t.Helper()
	if _, err := l.Share.Apply(l.Share.Renew(running, 10), shareAnswer(fair, max(fair, running)), 10); err != nil {
		t.Fatal(err)
	}
}

// holdKeys renews the buckets of l and applies an answer holding held.
func holdKeys(t *testing.T, l *Limits, limit, target int, held ...int) Decision {
	t.Helper()
	d, err := l.Keys.Apply(l.Keys.Renew(10), keyAnswer(limit, target, held...))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestModelVariants replays, for each broken variant of the models of the
// global limit's shares (model/share.pml) and of the shares of a queue's keys
// (model/keyshare.pml) that has a line on the client's side, the step of the
// model's counterexample that the client takes: each case fails when that line
// of this package breaks the way the variant does.
//
// The other variants have no line here: NO_BUSY, COUNTED_TAKES_HELD (the
// database's taking of buckets and its counted claims), the database's halves
// of NO_KEEP, EARLY_EXPIRY, TRUST_PAST_EXPIRY and NO_LEGACY, limit.pml's
// NO_LOCK and STALE_COUNT (the counted claim's lock and count) and weir.pml's
// lease protocol are the drivers' and internal/lease's, and are tested there
// (docs/design/flow-control.md, docs/design/model.md).
func TestModelVariants(t *testing.T) {
	cases := []struct {
		variant string // model/check.sh's name of it
		model   string
		replay  func(t *testing.T)
	}{
		{
			// The renewal must keep the fair part the client may start up to
			// while it is in flight, not only the handlers running: with 1 of
			// a trusted fair part of 3 running, 2 more may start before the
			// answer, and the share written must hold them.
			variant: "KEEP_RUNNING", model: "share.pml",
			replay: func(t *testing.T) {
				l, _ := limits(true, false)
				holdShare(t, l, 0, 3)
				r := l.Share.Renew(1, 10)
				if most := l.Share.MaxRunning(10); most != 3 {
					t.Fatalf("while the renewal is in flight, %d handlers may run; want the fair part, 3", most)
				}
				if r.Keep != 3 {
					t.Fatalf("keep %d; want 3: the fair part, up to which handlers may start before the answer", r.Keep)
				}
			},
		},
		{
			// NO_KEEP writes the share below the handlers the client may be
			// running (the database's max(fair, keep): weirdriver.DivideShare
			// and the SQL). Its half here: the keep sent covers every handler
			// running, above a fair part that shrank, and once the share is no
			// longer trusted.
			variant: "NO_KEEP", model: "share.pml",
			replay: func(t *testing.T) {
				l, c := limits(true, false)
				holdShare(t, l, 0, 1) // the share shrank to 1 while 3 run
				if r := l.Share.Renew(3, 10); r.Keep != 3 {
					t.Fatalf("keep %d under a fair part of 1 with 3 running; want 3", r.Keep)
				}
				c.advance(budget)
				if r := l.Share.Renew(3, 10); r.Keep != 3 {
					t.Fatalf("keep %d of a lapsed share with 3 running; want 3", r.Keep)
				}
			},
		},
		{
			// EARLY_EXPIRY lets the database drop a share its client still
			// trusts. The client's half: it trusts the share for the budget
			// from the renewal's send, not from the answer (a slow answer
			// would stretch the trust past the database's lease), and starts
			// nothing once that lapsed.
			variant: "EARLY_EXPIRY", model: "share.pml",
			replay: func(t *testing.T) {
				l, c := limits(true, false)
				r := l.Share.Renew(0, 10)
				c.advance(budget / 2) // a slow answer
				if _, err := l.Share.Apply(r, shareAnswer(4, 4), 10); err != nil {
					t.Fatal(err)
				}
				if most := l.Share.MaxRunning(10); most != 4 {
					t.Fatalf("%d handlers may run within the trusted share; want 4", most)
				}
				c.advance(budget / 2)
				if most := l.Share.MaxRunning(10); most != 0 {
					t.Fatalf("%d handlers may run once the budget from the send ran out; want 0", most)
				}
			},
		},
		{
			// NO_LEGACY is the database's (a renewal not counting the running
			// jobs of clients without a share). The client's half is the
			// model's step where a counted claim is cut short: the jobs it
			// runs count as those of a client without a share until its share
			// is written, so until then it starts nothing beyond them, and its
			// first renewal asks to keep them.
			variant: "NO_LEGACY", model: "share.pml",
			replay: func(t *testing.T) {
				l, _ := limits(false, false)
				if most := l.Share.MaxRunning(10); most != 10 {
					t.Fatalf("%d handlers may run without a global limit; want MaxWorkers, 10", most)
				}
				l.Share.Want(2)
				if !l.Share.On() {
					t.Fatal("a claim cut short by the global limit did not turn the share on")
				}
				if most := l.Share.MaxRunning(10); most != 2 {
					t.Fatalf("%d handlers may run before the first share is written; want the 2 running", most)
				}
				if r := l.Share.Renew(2, 10); r.Keep != 2 {
					t.Fatalf("the first renewal keeps %d; want the 2 running", r.Keep)
				}
			},
		},
		{
			// A job claimed as holder must not start once its bucket is let
			// go (the answer says the client holds more than its part), nor
			// once the database no longer holds it: it goes back instead.
			variant: "START_UNHELD", model: "keyshare.pml",
			replay: func(t *testing.T) {
				l, c := limits(false, true)
				holdKeys(t, l, 1, 1, acme.Bucket)
				if start, _ := l.Keys.MayStart(acme, c.now()); !start {
					t.Fatal("a job of a held and trusted bucket may not start")
				}
				holdKeys(t, l, 1, 0, acme.Bucket) // more than its part: let go
				if start, back := l.Keys.MayStart(acme, c.now()); start || !back {
					t.Fatalf("a job of a bucket let go: start %v, give back %v; want false, true", start, back)
				}
				if !l.Keys.LetGo(acme) {
					t.Fatal("a job of a bucket let go is not to be given back")
				}
				holdKeys(t, l, 1, 1, acme.Bucket)
				holdKeys(t, l, 1, 1) // the database no longer holds it
				if start, back := l.Keys.MayStart(acme, c.now()); start || !back {
					t.Fatalf("a job of a bucket no longer held: start %v, give back %v; want false, true", start, back)
				}
			},
		},
		{
			// TRUST_PAST_EXPIRY lets the database expire a bucket its holder
			// still trusts. The client's half: it trusts its buckets for the
			// budget from the renewal's send, not from the answer; once that
			// lapsed it starts none of their jobs (they wait) and claims
			// counted.
			variant: "TRUST_PAST_EXPIRY", model: "keyshare.pml",
			replay: func(t *testing.T) {
				l, c := limits(false, true)
				r := l.Keys.Renew(10)
				c.advance(budget / 2) // a slow answer
				if _, err := l.Keys.Apply(r, keyAnswer(1, 1, acme.Bucket)); err != nil {
					t.Fatal(err)
				}
				if held := l.Keys.Held(); !slices.Equal(held, []int{acme.Bucket}) {
					t.Fatalf("held %v within the trust; want [%d]", held, acme.Bucket)
				}
				c.advance(budget / 2)
				if start, back := l.Keys.MayStart(acme, c.now()); start || back {
					t.Fatalf("past the trust: start %v, give back %v; want false, false (it waits)", start, back)
				}
				if held := l.Keys.Held(); held != nil {
					t.Fatalf("past the trust the claim is as holder of %v; want counted", held)
				}
			},
		},
		{
			// The holder counts its own handlers by key: under a limit of 1,
			// the second job of a key waits while the first runs, and starts
			// once it returned.
			variant: "NO_LOCAL_LIMIT", model: "keyshare.pml",
			replay: func(t *testing.T) {
				l, c := limits(false, true)
				holdKeys(t, l, 1, 2, acme.Bucket, globex.Bucket)
				l.Keys.Started(acme)
				if start, _ := l.Keys.MayStart(acme, c.now()); start {
					t.Fatal("a second job of a key at its limit of 1 may start")
				}
				if start, _ := l.Keys.MayStart(globex, c.now()); !start {
					t.Fatal("a job of another key may not start")
				}
				l.Keys.Ended(acme)
				if start, _ := l.Keys.MayStart(acme, c.now()); !start {
					t.Fatal("the key's next job may not start once its running one returned")
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.variant, tc.replay)
	}
}
