package weir

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// countingHandler is a slog handler that keeps each record's level and message.
type countingHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r)
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func (h *countingHandler) count(level slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.records {
		if r.Level == level {
			n++
		}
	}
	return n
}

// TestHookDispatcher: a client's hooks run in one goroutine of its own, one at a
// time and in the order of the events; a panicking hook is counted every time and
// logged once; stop lets the queue drain before it returns. (Hooks used to run in
// a goroutine per hook per event that nothing awaited.)
func TestHookDispatcher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu      sync.Mutex
			seen    []int64
			running int
			overlap bool
		)
		record := func(ev *Event) {
			mu.Lock()
			running++
			overlap = overlap || running > 1
			mu.Unlock()
			time.Sleep(time.Millisecond) // a slow hook (fake time in the bubble)
			mu.Lock()
			running--
			seen = append(seen, ev.Job.ID)
			mu.Unlock()
		}
		panicky := func(ev *Event) {
			if ev.Job.ID%2 == 1 {
				panic("hook bug")
			}
		}
		logs := &countingHandler{}
		b := &eventBus{hooks: []Hook{record, panicky}}
		b.startHooks(slog.New(logs))
		for id := range int64(10) {
			b.emit(EventJobCompleted, &JobRow{ID: id}, nil, 0)
		}
		b.stop(context.Background())

		if overlap {
			t.Error("two hook calls ran at once")
		}
		for i, id := range seen {
			if id != int64(i) {
				t.Fatalf("hooks saw %v, want 0..9 in order", seen)
			}
		}
		if len(seen) != 10 {
			t.Errorf("stop returned with %d of 10 events delivered", len(seen))
		}
		if got := b.hookPanics.Load(); got != 5 {
			t.Errorf("hookPanics = %d, want 5", got)
		}
		if got := logs.count(slog.LevelError); got != 1 {
			t.Errorf("%d panic lines logged, want 1", got)
		}
		b.emit(EventJobCompleted, &JobRow{ID: 99}, nil, 0) // after stop: goes nowhere
		if len(seen) != 10 || b.dropped.Load() != 0 {
			t.Errorf("an event after stop reached the hooks (%d) or was counted dropped (%d)", len(seen), b.dropped.Load())
		}
	})
}

// TestHookStopKeepsBudget: a hook that blocks cannot hold stop past its
// context; the events still queued are dropped and counted, and the dispatcher
// returns once the blocked hook does.
func TestHookStopKeepsBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		b := &eventBus{hooks: []Hook{func(*Event) { <-release }}}
		b.startHooks(slog.New(&countingHandler{}))
		for id := range int64(3) {
			b.emit(EventJobCompleted, &JobRow{ID: id}, nil, 0)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		b.stop(ctx)
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("stop returned after %v, want its budget of 1s", waited)
		}
		close(release)
		<-b.hookDone
		if got := b.dropped.Load(); got != 2 {
			t.Errorf("dropped = %d, want the 2 events queued behind the blocked hook", got)
		}
	})
}

// TestHookQueueBounded: when the hooks fall behind by a whole queue, further
// events are dropped and counted instead of piling up.
func TestHookQueueBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		b := &eventBus{hooks: []Hook{func(*Event) { <-release }}}
		b.startHooks(slog.New(&countingHandler{}))
		b.emit(EventJobCompleted, &JobRow{ID: 0}, nil, 0)
		synctest.Wait() // the dispatcher holds event 0 in the blocked hook
		for id := range int64(eventQueueSize + 5) {
			b.emit(EventJobCompleted, &JobRow{ID: id + 1}, nil, 0)
		}
		if got := b.dropped.Load(); got != 5 {
			t.Errorf("dropped = %d, want 5", got)
		}
		close(release)
		b.stop(context.Background())
	})
}

// TestSubscriptionClosed: a subscription's channel is closed when it is ended,
// and when the client stops; ending it after the stop is harmless.
func TestSubscriptionClosed(t *testing.T) {
	b := &eventBus{}
	ch, end := b.subscribe(nil)
	end()
	if _, ok := <-ch; ok {
		t.Fatal("channel open after the subscription ended")
	}
	end() // twice is harmless

	ch, end = b.subscribe([]EventKind{EventJobCompleted})
	b.emit(EventJobCompleted, &JobRow{ID: 1}, nil, 0)
	b.stop(context.Background())
	if ev, ok := <-ch; !ok || ev.Job.ID != 1 {
		t.Fatal("the event sent before the stop was lost")
	}
	if _, ok := <-ch; ok {
		t.Fatal("channel open after the client stopped")
	}
	end()
}
