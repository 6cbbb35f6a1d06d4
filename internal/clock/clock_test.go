package clock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weirq/weir/internal/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var start = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// fired reports whether c holds a value, and which.
func fired(c <-chan time.Time) (time.Time, bool) {
	select {
	case at := <-c:
		return at, true
	default:
		return time.Time{}, false
	}
}

// TestFakeTimerFiresAtItsDeadline: a timer fires once the clock passed its
// deadline, with that deadline, and not before; Now moves with Advance.
func TestFakeTimerFiresAtItsDeadline(t *testing.T) {
	f := clock.NewFake(start)
	tm := f.NewTimer(time.Second)
	f.Advance(999 * time.Millisecond)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("the timer fired before its deadline")
	}
	f.Advance(time.Second)
	at, ok := fired(tm.C())
	if !ok || !at.Equal(start.Add(time.Second)) {
		t.Fatalf("fired %v %v, want at %v", ok, at, start.Add(time.Second))
	}
	if got := f.Now(); !got.Equal(start.Add(1999 * time.Millisecond)) {
		t.Fatalf("Now = %v after advancing 1.999 s", got)
	}
	if left := f.Armed(); len(left) != 0 {
		t.Fatalf("a timer that fired is still armed: %v", left)
	}
}

// TestFakeStopAndReset: a stopped timer does not fire and its unread value is
// dropped; Reset re-arms it from now and reports whether it was armed.
func TestFakeStopAndReset(t *testing.T) {
	f := clock.NewFake(start)
	tm := f.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer returned false")
	}
	f.Advance(time.Hour)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("a stopped timer fired")
	}
	if tm.Reset(time.Minute) {
		t.Fatal("Reset of a stopped timer returned true")
	}
	f.Advance(time.Minute) // fires; the value is left unread
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a timer that fired returned true")
	}
	if _, ok := fired(tm.C()); ok {
		t.Fatal("a value sent before Reset was received after it")
	}
	if left := f.Armed(); !slices.Equal(left, []time.Duration{time.Second}) {
		t.Fatalf("armed %v after Reset(1s), want [1s]", left)
	}
}

// TestFakeTicker: a ticker fires every period and, like time.Ticker, drops the
// ticks its reader missed; Stop disarms it.
func TestFakeTicker(t *testing.T) {
	f := clock.NewFake(start)
	tk := f.NewTicker(time.Second)
	f.Advance(3500 * time.Millisecond)
	at, ok := fired(tk.C())
	if !ok || !at.Equal(start.Add(time.Second)) {
		t.Fatalf("first tick %v %v, want the one at 1 s (later ones dropped unread)", ok, at)
	}
	if _, ok := fired(tk.C()); ok {
		t.Fatal("a ticker kept more than one unread tick")
	}
	if left := f.Armed(); !slices.Equal(left, []time.Duration{500 * time.Millisecond}) {
		t.Fatalf("armed %v, want the next tick in 500 ms", left)
	}
	tk.Stop()
	f.Advance(time.Hour)
	if _, ok := fired(tk.C()); ok {
		t.Fatal("a stopped ticker ticked")
	}
}

// TestFakeFiresInOrder: one Advance past several deadlines fires them earliest
// first, each when Now reads its deadline.
func TestFakeFiresInOrder(t *testing.T) {
	f := clock.NewFake(start)
	late, early := f.NewTimer(2*time.Second), f.NewTimer(time.Second)
	f.Advance(5 * time.Second)
	a, _ := fired(early.C())
	b, _ := fired(late.C())
	if !a.Equal(start.Add(time.Second)) || !b.Equal(start.Add(2*time.Second)) {
		t.Fatalf("fired at %v and %v", a, b)
	}
}

// TestFakeAwaitArmed: AwaitArmed returns once a goroutine arms a timer, with
// its duration, and fails when its context ends first.
func TestFakeAwaitArmed(t *testing.T) {
	f := clock.NewFake(start)
	go func() { f.NewTimer(3 * time.Second) }()
	left, err := f.AwaitArmed(t.Context(), 1)
	if err != nil || !slices.Equal(left, []time.Duration{3 * time.Second}) {
		t.Fatalf("AwaitArmed = %v, %v", left, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := f.AwaitArmed(ctx, 2); err == nil {
		t.Fatal("AwaitArmed returned without a second timer")
	}
}

// TestOr: a nil clock is the real one.
func TestOr(t *testing.T) {
	f := clock.NewFake(start)
	if clock.Or(f) != clock.Clock(f) || clock.Or(nil) != clock.Real {
		t.Fatal("Or does not keep a clock or replace nil by Real")
	}
	tm := clock.Real.NewTimer(time.Millisecond)
	<-tm.C()
	if tm.Stop() {
		t.Fatal("Stop of a real timer that fired returned true")
	}
}
