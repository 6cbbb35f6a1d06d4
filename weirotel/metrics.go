package weirotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirtype"
)

// outcomes names the outcome of the events that end an attempt.
var outcomes = map[weir.EventKind]string{
	weir.EventJobCompleted: "completed",
	weir.EventJobFailed:    "retried",
	weir.EventJobSnoozed:   "snoozed",
	weir.EventJobCancelled: "cancelled",
	weir.EventJobDiscarded: "discarded",
	weir.EventJobReleased:  "released",
	weir.EventLeaseLost:    "lease_lost",
	weir.EventStaleWrite:   "stale_write",
}

// Hook returns the hook that counts attempts by outcome and records how long
// their handlers ran. The events carry the outcome as written, which the
// worker middleware cannot know. An event dropped under overload is counted in
// the client's Stats().EventsDropped (and the weir.events.dropped metric), not
// here.
func (t *Telemetry) Hook() weir.Hook {
	return func(ev *weir.Event) {
		outcome, ok := outcomes[ev.Kind]
		if !ok || ev.Job == nil {
			return // job_started: the worker middleware measures starts
		}
		s := t.sets.get(setKey{queue: ev.Job.Queue, kind: ev.Job.Kind, outcome: outcome})
		ctx := context.Background()
		t.attempts.Add(ctx, 1, s.add...)
		// A job given back before it started, a lost lease and a stale write
		// come with no handler's time.
		if ev.Duration > 0 {
			t.duration.Record(ctx, ev.Duration.Seconds(), s.record...)
		}
	}
}

// queueListTimeout bounds the queue listing of one collection, so that a
// database that does not answer delays a scrape, not blocks it.
const queueListTimeout = 5 * time.Second

// Observe registers the observable instruments read from c at each
// collection: its counters (Stats) and, only while c leads, the queues' depth
// and oldest available job's age, read with QueueListEstimated, so that of N
// processes only one queries, and a large table is not counted whole at every
// collection. A Telemetry observes one client at a time;
// unregister ends it.
func (t *Telemetry) Observe(c *weir.Client) (unregister func() error, err error) {
	if c == nil {
		return nil, errors.New("weirotel: Observe: the client is nil")
	}
	if !t.observing.CompareAndSwap(false, true) {
		return nil, errors.New("weirotel: Observe: this Telemetry observes a client already; unregister it first")
	}
	counters, err := t.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := c.Stats()
		o.ObserveInt64(t.rescued, s.Rescued)
		o.ObserveInt64(t.elections, s.LeaderElections)
		o.ObserveInt64(t.staleWrites, s.StaleWrites)
		o.ObserveInt64(t.leasesLost, s.LeasesLost)
		o.ObserveInt64(t.eventsDropped, s.EventsDropped)
		return nil
	}, t.rescued, t.elections, t.staleWrites, t.leasesLost, t.eventsDropped)
	if err != nil {
		t.observing.Store(false)
		return nil, fmt.Errorf("weirotel: Observe: %w", err)
	}
	queues, err := t.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		return t.observeQueues(ctx, c, o)
	}, t.queueJobs, t.oldestAge)
	if err != nil {
		t.observing.Store(false)
		return nil, errors.Join(fmt.Errorf("weirotel: Observe: %w", err), counters.Unregister())
	}
	var once sync.Once
	return func() (err error) {
		once.Do(func() {
			err = errors.Join(counters.Unregister(), queues.Unregister())
			t.observing.Store(false)
		})
		return err
	}, nil
}

// observeQueues observes every queue's jobs by state and oldest available
// job's age, if c leads. Every state is observed, zero too, so that a series
// does not vanish when its queue empties.
func (t *Telemetry) observeQueues(ctx context.Context, c *weir.Client, o metric.Observer) error {
	if !c.IsLeader() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, queueListTimeout)
	defer cancel()
	queues, err := c.QueueListEstimated(ctx)
	if err != nil {
		return fmt.Errorf("weirotel: reading the queues: %w", err)
	}
	now := time.Now()
	for _, q := range queues {
		queue := semconv.MessagingDestinationName(q.Name)
		for _, state := range weirtype.JobStates() {
			o.ObserveInt64(t.queueJobs, q.Counts[state], metric.WithAttributes(queue, StateKey.String(string(state))))
		}
		var age float64
		if !q.OldestAvailableAt.IsZero() {
			age = max(now.Sub(q.OldestAvailableAt).Seconds(), 0)
		}
		o.ObserveFloat64(t.oldestAge, age, metric.WithAttributes(queue))
	}
	return nil
}
