package weir

import (
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

// Hook is called for each event, in a goroutine of its own that nothing waits for:
// hooks are best effort and never delay the client or its shutdown.
type Hook func(*Event)

// Subscribe returns a channel of the client's events of the given kinds (all kinds
// when none are given) and a function that ends the subscription. Delivery is best
// effort: when the channel's buffer (1,000 events) is full, events are dropped.
func (c *Client) Subscribe(kinds ...EventKind) (<-chan *Event, func()) {
	return c.events.subscribe(kinds)
}

// eventBus fans events out to subscribers and hooks without ever blocking.
type eventBus struct {
	mu      sync.Mutex
	subs    map[*subscription]struct{}
	hooks   []Hook
	dropped atomic.Int64
}

type subscription struct {
	ch    chan *Event
	kinds map[EventKind]bool // nil: every kind
}

func (b *eventBus) subscribe(kinds []EventKind) (<-chan *Event, func()) {
	sub := &subscription{ch: make(chan *Event, 1000)}
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
	var once sync.Once
	return sub.ch, func() {
		once.Do(func() {
			b.mu.Lock()
			delete(b.subs, sub)
			b.mu.Unlock()
		})
	}
}

// emit publishes an event. It builds nothing when nobody listens, since it runs
// for every job.
func (b *eventBus) emit(kind EventKind, job *JobRow, err error, ran time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.subs) == 0 && len(b.hooks) == 0 {
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
	for _, h := range b.hooks {
		go runHook(h, ev) // detached by contract: hooks never delay the runtime
	}
}

func runHook(h Hook, ev *Event) {
	defer func() { _ = recover() }() // a hook's panic must not take the process down
	h(ev)
}
