package clock

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Fake is a Clock for tests that stands still until Advance moves it. Its
// timers and tickers fire as Advance passes their deadlines, earliest first.
// AwaitArmed returns once the code under test waits on enough of them, so that
// a test moves the clock only when the code is waiting: a signal, not a sleep.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	armed   []*fakeTimer
	changed chan struct{} // closed, and replaced, when a timer is armed
}

// NewFake returns a fake clock that reads start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// fakeTimer is a timer, or a ticker when period is set, of a Fake.
type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	at     time.Time // the next deadline, while armed
	period time.Duration
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires once the clock has moved d on.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armLocked(t, d)
	return t
}

// NewTicker returns a ticker that fires each time the clock has moved d on;
// like a time.Ticker, it drops the ticks its reader is too slow for.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	t := &fakeTimer{f: f, c: make(chan time.Time, 1), period: d}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armLocked(t, d)
	return fakeTicker{t}
}

// Advance moves the clock d on, firing each timer and ticker whose deadline it
// passes, at that deadline, earliest first.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	end := f.now.Add(d)
	for {
		i := f.earliestLocked()
		if i < 0 || f.armed[i].at.After(end) {
			break
		}
		t := f.armed[i]
		f.now = t.at
		select {
		case t.c <- t.at:
		default: // a ticker whose last tick is still unread
		}
		if t.period > 0 {
			t.at = t.at.Add(t.period)
		} else {
			f.armed = slices.Delete(f.armed, i, i+1)
		}
	}
	f.now = end
}

// Armed returns how long each armed timer and ticker has left until it fires,
// shortest first.
func (f *Fake) Armed() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.armedLocked()
}

// AwaitArmed waits until at least n timers and tickers are armed, and returns
// Armed then; it fails only when ctx ends first.
func (f *Fake) AwaitArmed(ctx context.Context, n int) ([]time.Duration, error) {
	for {
		f.mu.Lock()
		if len(f.armed) >= n {
			left := f.armedLocked()
			f.mu.Unlock()
			return left, nil
		}
		changed := f.changed
		f.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

func (f *Fake) armedLocked() []time.Duration {
	left := make([]time.Duration, len(f.armed))
	for i, t := range f.armed {
		left[i] = t.at.Sub(f.now)
	}
	slices.Sort(left)
	return left
}

// earliestLocked returns the index of the armed timer due first, or -1.
func (f *Fake) earliestLocked() int {
	at := -1
	for i, t := range f.armed {
		if at < 0 || t.at.Before(f.armed[at].at) {
			at = i
		}
	}
	return at
}

// armLocked sets t to fire d from now, draining a value it sent before.
func (f *Fake) armLocked(t *fakeTimer, d time.Duration) {
	select {
	case <-t.c:
	default:
	}
	t.at = f.now.Add(d)
	if !slices.Contains(f.armed, t) {
		f.armed = append(f.armed, t)
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// disarmLocked stops t and drains a value it sent; it reports whether t was
// armed.
func (f *Fake) disarmLocked(t *fakeTimer) bool {
	select {
	case <-t.c:
	default:
	}
	i := slices.Index(f.armed, t)
	if i < 0 {
		return false
	}
	f.armed = slices.Delete(f.armed, i, i+1)
	return true
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.f.disarmLocked(t)
}

// fakeTicker is a fakeTimer seen as a Ticker.
type fakeTicker struct{ t *fakeTimer }

func (k fakeTicker) C() <-chan time.Time { return k.t.c }
func (k fakeTicker) Stop()               { k.t.Stop() }

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := slices.Contains(t.f.armed, t)
	t.f.armLocked(t, d)
	return was
}
