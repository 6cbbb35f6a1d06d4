package flow

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// TestPlan: how much a claim asks for, and as holder of which buckets.
func TestPlan(t *testing.T) {
	load := Load{MaxWorkers: 10, Prefetch: 5, Running: 3, Buffered: 4}
	keyed := load
	keyed.KeyLimit = true
	cases := []struct {
		name  string
		setup func(t *testing.T, l *Limits)
		load  Load
		want  Claim
	}{
		{"no limit: MaxWorkers and Prefetch less what runs and waits", nil, load, Claim{Room: 8}},
		{"a share not yet written: nothing", func(t *testing.T, l *Limits) { l.Share.on = true }, load, Claim{}},
		{"within a share of 6", func(t *testing.T, l *Limits) { holdShare(t, l, 0, 6) }, load, Claim{Room: 4}},
		{"asking for buckets, before the first answer: nothing", func(t *testing.T, l *Limits) { l.Keys.Want() }, keyed, Claim{}},
		{"a failed first renewal: counted, without prefetch", func(t *testing.T, l *Limits) {
			l.Keys.Want()
			l.Keys.Failed()
		}, keyed, Claim{Room: 3}},
		{"holding buckets: as their holder, with prefetch", func(t *testing.T, l *Limits) {
			l.Keys.Want()
			holdKeys(t, l, 1, 2, globex.Bucket, acme.Bucket)
		}, keyed, Claim{Room: 8, Buckets: slices.Sorted(slices.Values([]int{acme.Bucket, globex.Bucket}))}},
		{"holding none of a limit the database told: counted, without prefetch", func(t *testing.T, l *Limits) {
			l.Keys.Want()
			holdKeys(t, l, 1, 2)
		}, load, Claim{Room: 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := limits(false, false)
			if tc.setup != nil {
				tc.setup(t, l)
			}
			if got := l.Plan(tc.load); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Plan(%+v) = %+v; want %+v", tc.load, got, tc.want)
			}
		})
	}
}

// TestKeysRenewals: when the buckets are renewed next, and what the
// renewals release.
func TestKeysRenewals(t *testing.T) {
	l, _ := limits(false, true)
	// The first answer, holding fewer than the part: fast renewals, and no
	// poke (nothing is held).
	d := holdKeys(t, l, 1, 2)
	if d != (Decision{Next: Grow}) {
		t.Fatalf("first answer holding none of 2: %+v; want Grow, no poke", d)
	}
	// Buckets gained: poke; then Settle renewals Grow apart in all after the
	// first answer, and the steady interval.
	want := []Decision{{Next: Grow, Poke: true}, {Next: Grow}, {Next: Grow}, {Next: interval}, {Next: interval}}
	for i, w := range want {
		if d := holdKeys(t, l, 1, 2, acme.Bucket, globex.Bucket); d != w {
			t.Fatalf("answer %d holding the part: %+v; want %+v", i+2, d, w)
		}
	}
	// The part shrinks to 1: the highest bucket is let go, released by the
	// next renewal, Shrink later; a moved part settles again.
	high, low := max(acme.Bucket, globex.Bucket), min(acme.Bucket, globex.Bucket)
	if d := holdKeys(t, l, 1, 1, acme.Bucket, globex.Bucket); d.Next != Shrink {
		t.Fatalf("holding 2 of a part of 1: next %v; want Shrink", d.Next)
	}
	if held := l.Keys.Held(); !slices.Equal(held, []int{low}) {
		t.Fatalf("held %v; want the lowest, [%d]", held, low)
	}
	r := l.Keys.Renew(10)
	if !slices.Equal(r.Release, []int{high}) {
		t.Fatalf("the renewal releases %v; want [%d]", r.Release, high)
	}
	// A bucket let go while that renewal is in flight is released by the
	// next one, not forgotten.
	l.Keys.release = append(l.Keys.release, 63)
	if d, err := l.Keys.Apply(r, keyAnswer(1, 1, low)); err != nil || d.Next != Shrink {
		t.Fatalf("Apply: %+v, %v; want Shrink for the bucket still to release", d, err)
	}
	if r := l.Keys.Renew(10); !slices.Equal(r.Release, []int{63}) {
		t.Fatalf("the next renewal releases %v; want [63]", r.Release)
	}
}

// TestKeysDropped: a queue re-keyed, or whose keys can no longer be held,
// drops the buckets here as the database did, with nothing left to release.
func TestKeysDropped(t *testing.T) {
	l, c := limits(false, true)
	holdKeys(t, l, 1, 2, acme.Bucket, globex.Bucket)
	r := l.Keys.Renew(10)
	l.Keys.release = append(l.Keys.release, 63) // let go while r is in flight
	rekeyed := keyAnswer(1, 1, acme.Bucket)
	rekeyed.Key = "args.region"
	d, err := l.Keys.Apply(r, rekeyed)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Poke {
		t.Fatal("re-keyed, a bucket of the new keys held: no poke")
	}
	if r := l.Keys.Renew(10); len(r.Release) != 0 {
		t.Fatalf("re-keyed, the renewal releases %v; want nothing", r.Release)
	}
	d, err = l.Keys.Apply(l.Keys.Renew(10), weirdriver.KeyShare{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Keys.On() || l.Keys.Held() != nil || d != (Decision{Next: interval}) {
		t.Fatalf("limit removed: on %v, held %v, %+v; want off, none, the steady interval", l.Keys.On(), l.Keys.Held(), d)
	}
	if start, back := l.Keys.MayStart(acme, c.now()); start || !back {
		t.Fatalf("a buffered job of a dropped bucket: start %v, give back %v; want false, true", start, back)
	}
	// The first answer of a queue that cannot be held pokes: the client,
	// which claimed nothing before it, claims counted at once.
	l, _ = limits(false, true)
	if d, _ := l.Keys.Apply(l.Keys.Renew(10), weirdriver.KeyShare{}); !d.Poke {
		t.Fatal("the first answer of keys that cannot be held does not poke")
	}
}

// TestKeysFailedAndGiveUp: a failed renewal, and giving the buckets up.
func TestKeysFailedAndGiveUp(t *testing.T) {
	l, _ := limits(false, true)
	if d := l.Keys.Failed(); d != (Decision{Next: Retry, Poke: true}) {
		t.Fatalf("first renewal failed: %+v; want Retry and a poke", d)
	}
	if d := l.Keys.Failed(); d != (Decision{Next: Retry}) {
		t.Fatalf("second renewal failed: %+v; want Retry", d)
	}
	holdKeys(t, l, 1, 1, acme.Bucket)
	if !l.Keys.GiveUp() || l.Keys.On() || l.Keys.Held() != nil {
		t.Fatal("giving up held buckets: not reported, or still on or holding")
	}
	if l.Keys.GiveUp() {
		t.Fatal("giving up again reports buckets to give up")
	}
}

// TestSkip: a claim as holder passes over the keys of which KeyDepth jobs
// wait.
func TestSkip(t *testing.T) {
	l, _ := limits(false, true)
	holdKeys(t, l, 2, 1, acme.Bucket)
	depth := weirdriver.KeyDepth(2)
	skip := l.Keys.Skip(map[string]int{"acme": depth, "globex": depth - 1, "initech": depth + 1})
	slices.Sort(skip)
	if !slices.Equal(skip, []string{"acme", "initech"}) {
		t.Fatalf("skip %v; want [acme initech]", skip)
	}
}

// TestShareAnswers: what a share's answer decides.
func TestShareAnswers(t *testing.T) {
	l, c := limits(true, false)
	d, err := l.Share.Apply(l.Share.Renew(0, 10), shareAnswer(4, 4), 10)
	if err != nil || d != (Decision{Next: interval, Poke: true}) {
		t.Fatalf("first share of 4: %+v, %v; want the interval and a poke", d, err)
	}
	d, _ = l.Share.Apply(l.Share.Renew(4, 10), shareAnswer(4, 4), 10)
	if d != (Decision{Next: interval}) {
		t.Fatalf("an unchanged share: %+v; want the interval, no poke", d)
	}
	d, _ = l.Share.Apply(l.Share.Renew(4, 10), shareAnswer(2, 4), 10)
	if d != (Decision{Next: Shrink}) || l.Share.MaxRunning(10) != 2 {
		t.Fatalf("a share cut to 2 holding 4 slots: %+v, %d may run; want Shrink, 2", d, l.Share.MaxRunning(10))
	}
	if l.Share.GiveUp(1) || l.Share.MaxRunning(10) != 2 {
		t.Fatal("a share was given up with a handler running")
	}
	if !l.Share.GiveUp(0) || l.Share.MaxRunning(10) != 0 {
		t.Fatal("giving up a share: not reported, or handlers may still start")
	}
	c.advance(time.Millisecond)
	d, _ = l.Share.Apply(l.Share.Renew(0, 10), weirdriver.QueueShare{}, 10)
	if l.Share.On() || l.Share.MaxRunning(10) != 10 || !d.Poke {
		t.Fatalf("the limit removed: on %v, %d may run, %+v; want off, 10, a poke", l.Share.On(), l.Share.MaxRunning(10), d)
	}
}

// TestBadAnswers: a malformed answer is an error naming what is wrong, and
// changes nothing.
func TestBadAnswers(t *testing.T) {
	keys := []struct {
		answer weirdriver.KeyShare
		want   string
	}{
		{weirdriver.KeyShare{Limit: -1}, "limit -1"},
		{keyAnswer(1, 65), "target 65"},
		{keyAnswer(1, -1), "target -1"},
		{keyAnswer(1, 2, 3, 64), "bucket 64"},
		{keyAnswer(1, 2, -1), "bucket -1"},
		{keyAnswer(1, 2, 3, 3), "bucket 3 is held twice"},
	}
	for _, tc := range keys {
		// Before the first answer, and holding two buckets of a part of
		// one, with the other to release.
		fresh, _ := limits(false, true)
		holding, _ := limits(false, true)
		holdKeys(t, holding, 1, 1, acme.Bucket, globex.Bucket)
		for _, l := range []*Limits{fresh, holding} {
			r := l.Keys.Renew(10)
			before := l.Keys
			before.release = slices.Clone(before.release)
			if _, err := l.Keys.Apply(r, tc.answer); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Apply(%+v) = %v; want an error naming %q", tc.answer, err, tc.want)
			}
			before.t, l.Keys.t = Timing{}, Timing{}
			if !reflect.DeepEqual(before, l.Keys) {
				t.Errorf("Apply(%+v) changed the keys: %+v; was %+v", tc.answer, l.Keys, before)
			}
		}
	}
	shares := []struct {
		answer weirdriver.QueueShare
		want   string
	}{
		{weirdriver.QueueShare{Limit: -1}, "negative"},
		{weirdriver.QueueShare{Limit: 4, Fair: -1}, "negative"},
		{weirdriver.QueueShare{Limit: 4, Slots: -1}, "negative"},
	}
	for _, tc := range shares {
		l, _ := limits(true, false)
		holdShare(t, l, 0, 3)
		before := l.Share
		if _, err := l.Share.Apply(l.Share.Renew(0, 10), tc.answer, 10); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Apply(%+v) = %v; want an error naming %q", tc.answer, err, tc.want)
		}
		before.t, l.Share.t = Timing{}, Timing{}
		if !reflect.DeepEqual(before, l.Share) {
			t.Errorf("Apply(%+v) changed the share: %+v; was %+v", tc.answer, l.Share, before)
		}
	}
}

// TestNewRejectsBadTiming: New refuses a timing it could not keep, naming
// what is wrong.
func TestNewRejectsBadTiming(t *testing.T) {
	now := func() time.Time { return time.Time{} }
	for _, tc := range []struct {
		timing Timing
		want   string
	}{
		{Timing{Budget: budget, Interval: interval}, "Now is nil"},
		{Timing{Now: now, Interval: interval}, "Budget 0s"},
		{Timing{Now: now, Budget: budget, Interval: -time.Second}, "Interval -1s"},
	} {
		func() {
			defer func() {
				if r, _ := recover().(string); !strings.Contains(r, tc.want) {
					t.Errorf("New(%+v) panicked with %q; want it to name %q", tc.timing, r, tc.want)
				}
			}()
			New(tc.timing, true, true)
		}()
	}
}

// TestPace: how long the claim loop waits after each claim, and the backoff
// while the global limit cuts the claims short.
func TestPace(t *testing.T) {
	const poll = time.Second
	limited := weirdriver.ClaimLimit{Limited: true}
	rated := weirdriver.ClaimLimit{Limited: true, Wait: 30 * time.Millisecond}
	steps := []struct {
		name   string
		poll   time.Duration
		lim    weirdriver.ClaimLimit
		full   bool
		failed bool
		want   Next
	}{
		{"found some", poll, weirdriver.ClaimLimit{}, false, false, Next{Wait: poll}},
		{"filled every slot: at once", poll, weirdriver.ClaimLimit{}, true, false, Next{}},
		{"at the limit: the backoff starts", poll, limited, false, false, Next{Wait: LimitRetryMin, AtLimit: true, AtSlots: true}},
		{"still: it doubles", poll, limited, false, false, Next{Wait: 2 * LimitRetryMin, AtLimit: true, AtSlots: true}},
		{"a rate: its wait", poll, rated, false, false, Next{Wait: rated.Wait, AtLimit: true}},
		{"at the limit again: the backoff starts over", poll, limited, false, false, Next{Wait: LimitRetryMin, AtLimit: true, AtSlots: true}},
		{"failed: within FailRetry", 5 * time.Second, weirdriver.ClaimLimit{}, true, true, Next{Wait: FailRetry}},
		{"failed on a short poll: the poll", poll / 10, weirdriver.ClaimLimit{}, false, true, Next{Wait: poll / 10}},
	}
	var p Pace
	for _, s := range steps {
		if got := p.After(s.poll, s.lim, s.full, s.failed); got != s.want {
			t.Fatalf("%s: %+v; want %+v", s.name, got, s.want)
		}
	}
	// The backoff stops doubling at LimitRetryMax, and never exceeds the poll.
	p = Pace{}
	var got Next
	for range 10 {
		got = p.After(poll, limited, false, false)
	}
	if got.Wait != LimitRetryMax {
		t.Fatalf("backoff after 10 claims at the limit: %v; want %v", got.Wait, LimitRetryMax)
	}
	if got = p.After(LimitRetryMin, limited, false, false); got.Wait != LimitRetryMin {
		t.Fatalf("backoff under a poll of %v: %v; want the poll", LimitRetryMin, got.Wait)
	}
}
