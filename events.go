package weir

import (
	"context"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// EventKind says what happened to a job.
type EventKind string

const (
	EventJobStarted   EventKind = "job_started"
	EventJobCompleted EventKind = "job_completed"
	EventJobFailed    EventKind = "job_failed" // the attempt failed; the job will retry
	EventJobSnoozed   EventKind = "job_snoozed"
	EventJobCancelled EventKind = "job_cancelled"
	EventJobDiscarded EventKind = "job_discarded"
	EventJobReleased  EventKind = "job_released" // given back by a graceful stop
	EventLeaseLost    EventKind = "lease_lost"
	EventStaleWrite   EventKind = "stale_write"
)

// Event is something that happened to a job in this client. Job is the row as the
// client knew it then; do not modify it.
type Event struct {
	Kind     EventKind
	Job      *JobRow
	Err      error         // the attempt's error, for failures
	Duration time.Duration // how long the handler ran, once it returned
}

// Hook is called for each event. A client runs its hooks one at a time, in
// order, in one goroutine of its own, fed by a queue of 1,000 events: a slow hook
// delays the hooks after it, never the client. When the queue is full, events are
// dropped and counted (Stats().EventsDropped). A hook's panic is recovered: the
// first is logged with its stack, every one is counted (Stats().HookPanics). Stop
// lets the queue drain within its budget and then stops the goroutine; a hook
// still running at the deadline is left to return by itself, and events still
// queued then are dropped.
type Hook func(*Event)

// Subscribe returns a channel of the client's events of the given kinds (all kinds
// when none are given) and a function that ends the subscription. Delivery is best
// effort: when the channel's buffer (1,000 events) is full, events are dropped.
// The channel is closed when the subscription ends and when the client stops.
func (c *Client) Subscribe(kinds ...EventKind) (<-chan *Event, func()) {
	return c.events.subscribe(kinds)
}

// eventQueueSize bounds a subscription's buffer and the hooks' queue.
const eventQueueSize = 1000

// eventBus fans events out to subscribers and hooks without ever blocking.
type eventBus struct {
	mu      sync.Mutex
	subs    map[*subscription]struct{}
	hooks   []Hook
	dropped atomic.Int64

	// hookQ feeds the hook dispatcher while the client runs; nil otherwise.
	hookQ      chan *Event
	hookDone   chan struct{} // closed when the dispatcher returned
	hookQuit   atomic.Bool   // set when Stop's budget ran out: drop what is queued
	hookPanics atomic.Int64
	logger     *slog.Logger
}

type subscription struct {
	ch    chan *Event
	kinds map[EventKind]bool // nil: every kind
}

func (b *eventBus) subscribe(kinds []EventKind) (<-chan *Event, func()) {
	sub := &subscription{ch: make(chan *Event, eventQueueSize)}
	if len(kinds) > 0 {
		sub.kinds = map[EventKind]bool{}
		for _, k := range kinds {
			sub.kinds[k] = true
		}
	}
	b.mu.Lock()
	if b.subs == nil {
		b.subs = map[*subscription]struct{}{}
	}
	b.subs[sub] = struct{}{}
	b.mu.Unlock()
	return sub.ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := b.subs[sub]; ok { // not yet closed by the client's stop
			delete(b.subs, sub)
			close(sub.ch)
		}
	}
}

// emit publishes an event. It builds nothing when nobody listens, since it runs
// for every job.
func (b *eventBus) emit(kind EventKind, job *JobRow, err error, ran time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.subs) == 0 && b.hookQ == nil {
		return
	}
	ev := &Event{Kind: kind, Job: job, Err: err, Duration: ran}
	for sub := range b.subs {
		if sub.kinds != nil && !sub.kinds[ev.Kind] {
			continue
		}
		select {
		case sub.ch <- ev:
		default:
			b.dropped.Add(1)
		}
	}
	if b.hookQ != nil {
		select {
		case b.hookQ <- ev:
		default:
			b.dropped.Add(1)
		}
	}
}

// startHooks starts the hook dispatcher, if there are hooks. Its owner is the
// runtime: stopHooks stops it.
func (b *eventBus) startHooks(logger *slog.Logger) {
	if len(b.hooks) == 0 {
		return
	}
	q, done := make(chan *Event, eventQueueSize), make(chan struct{})
	b.mu.Lock()
	b.hookQ, b.hookDone, b.logger = q, done, logger
	b.hookQuit.Store(false)
	b.mu.Unlock()
	go func() {
		defer close(done)
		for ev := range q {
			if b.hookQuit.Load() {
				b.dropped.Add(1)
				continue
			}
			for _, h := range b.hooks {
				b.runHook(h, ev)
			}
		}
	}()
}

func (b *eventBus) runHook(h Hook, ev *Event) {
	defer func() {
		if p := recover(); p != nil {
			// A hook's panic must not take the process down, nor flood the log.
			if b.hookPanics.Add(1) == 1 {
				b.logger.Error("weir: a hook panicked (logged once; Stats().HookPanics counts them)",
					"event", ev.Kind, "panic", p, "stack", string(debug.Stack()))
			}
		}
	}()
	h(ev)
}

// stop closes every subscription and stops the hooks (stopHooks): the client
// stopped.
func (b *eventBus) stop(ctx context.Context) {
	b.mu.Lock()
	for sub := range b.subs {
		close(sub.ch)
	}
	clear(b.subs)
	b.mu.Unlock()
	b.stopHooks(ctx)
}

// stopHooks lets the hooks' queue drain until ctx ends; then events still queued
// are dropped, and a hook still running is left to return by itself.
func (b *eventBus) stopHooks(ctx context.Context) {
	b.mu.Lock()
	q, done := b.hookQ, b.hookDone
	b.hookQ = nil
	b.mu.Unlock()
	if q == nil {
		return
	}
	close(q)
	select {
	case <-done:
	case <-ctx.Done():
		b.hookQuit.Store(true)
		b.logger.Warn("weir: stop: hooks had not caught up by the deadline; the events left are dropped")
	}
}
