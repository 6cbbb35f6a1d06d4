// Package weirotel traces and measures weir's jobs with OpenTelemetry.
//
// Each insert call gets a producer span, whose trace context each job carries
// in its metadata (under MetadataKey); each attempt gets a consumer span linked
// to it, so a trace follows a job from the code that inserted it to the worker
// that ran it, across processes. Metrics count inserts and attempts by outcome,
// time attempts and the wait for a worker, and read the queues' depth and the
// client's counters at each collection. docs/observability.md lists every span
// and metric.
//
// Wire it into a client's Config:
//
//	tel, err := weirotel.New(&weirotel.Config{TracerProvider: tp, MeterProvider: mp})
//	cfg := &weir.Config{
//		InsertMiddleware: []weir.InsertMiddleware{tel.InsertMiddleware()},
//		WorkerMiddleware: []weir.WorkerMiddleware{tel.WorkerMiddleware()},
//		Hooks:            []weir.Hook{tel.Hook()},
//	}
//	client, err := weir.NewClient(driver, cfg)
//	unregister, err := tel.Observe(client)
package weirotel

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// MetadataKey is the key of a job's metadata under which the insert span's
// trace context travels to the attempts: an object of the propagator's fields,
// such as {"traceparent": "00-…-01"}. The caller's other keys are kept.
const MetadataKey = "weirotel"

// ScopeName is the instrumentation scope of weirotel's tracer and meter.
const ScopeName = "github.com/weirq/weir/weirotel"

// Attribute keys of weir's own, next to the messaging semantic conventions'.
const (
	KindKey       = attribute.Key("weir.job.kind")
	AttemptKey    = attribute.Key("weir.job.attempt")
	PriorityKey   = attribute.Key("weir.job.priority")
	LeaseTokenKey = attribute.Key("weir.lease_token")
	DuplicateKey  = attribute.Key("weir.job.duplicate")
	// ReplacedKey says whether a unique insert replaced the job that held its
	// key (weir.UniqueReplace, weir.UniqueDebounce).
	ReplacedKey = attribute.Key("weir.job.replaced")
	// OutcomeKey is what became of an attempt, as its event tells (metrics).
	OutcomeKey = attribute.Key("weir.job.outcome")
	// ResultKey is what an attempt's handler returned (spans).
	ResultKey = attribute.Key("weir.attempt.result")
	// InterruptedKey is why an attempt's context ended before its handler
	// returned: the timeout, a lost lease, an operator's cancel, the shutdown.
	InterruptedKey = attribute.Key("weir.attempt.interrupted")
	StateKey       = attribute.Key("weir.job.state")
)

// Config says where weirotel's spans and metrics go. The zero value uses
// OpenTelemetry's global providers and W3C Trace Context.
type Config struct {
	// TracerProvider makes the spans; nil: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the instruments; nil: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator writes the insert span's context into a job's metadata and
	// reads it back for its attempts; nil: W3C Trace Context. Inserting and
	// working clients must use the same.
	Propagator propagation.TextMapPropagator
	// AttemptAsChild makes each attempt's span a child of its insert span, in
	// the insert's trace. Otherwise each attempt starts a trace of its own,
	// linked to the insert span: a job retried for days does not stretch the
	// inserting request's trace.
	AttemptAsChild bool
}

// Telemetry makes weir's spans and metrics. One Telemetry may serve any number
// of clients' middleware and hooks; Observe reads one client at a time.
type Telemetry struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	w3c        bool // propagator is W3C Trace Context alone
	asChild    bool
	meter      metric.Meter
	observing  atomic.Bool

	inserted metric.Int64Counter
	attempts metric.Int64Counter
	duration metric.Float64Histogram
	pickup   metric.Float64Histogram
	busy     metric.Int64ObservableUpDownCounter
	// overflowBusy counts the handlers running whose series is not kept
	// (series.busy).
	overflowBusy atomic.Int64

	queueJobs     metric.Int64ObservableGauge
	oldestAge     metric.Float64ObservableGauge
	rescued       metric.Int64ObservableCounter
	elections     metric.Int64ObservableCounter
	staleWrites   metric.Int64ObservableCounter
	leasesLost    metric.Int64ObservableCounter
	eventsDropped metric.Int64ObservableCounter

	// sets keeps the measurements' attribute sets by queue, kind and outcome.
	sets attrCache
}

// secondsBuckets bound the duration histograms: from 5 ms to an hour, since
// jobs run from a few milliseconds to many minutes. The SDK's default buckets
// are meant for milliseconds.
var secondsBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// New makes a Telemetry from cfg (nil: the defaults) and creates its
// instruments.
func New(cfg *Config) (*Telemetry, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	tp, mp, prop := cfg.TracerProvider, cfg.MeterProvider, cfg.Propagator
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	_, w3c := prop.(propagation.TraceContext)
	t := &Telemetry{
		tracer:     tp.Tracer(ScopeName),
		propagator: prop,
		w3c:        w3c,
		asChild:    cfg.AttemptAsChild,
		meter:      mp.Meter(ScopeName),
	}
	if err := t.instruments(); err != nil {
		return nil, fmt.Errorf("weirotel: creating the instruments: %w", err)
	}
	return t, nil
}

// instruments creates every instrument: the one definition of each metric,
// whichever exporter reads it.
func (t *Telemetry) instruments() error {
	m := t.meter
	var errs [12]error
	t.inserted, errs[0] = m.Int64Counter("weir.jobs.inserted", metric.WithUnit("{job}"),
		metric.WithDescription("Jobs inserted, by queue and kind; a unique job's duplicate is not counted."))
	t.attempts, errs[1] = m.Int64Counter("weir.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts ended, by queue, kind and outcome, as the client's events tell."))
	t.duration, errs[2] = m.Float64Histogram("weir.attempt.duration", metric.WithUnit("s"),
		metric.WithDescription("How long attempts' handlers ran, by queue, kind and outcome."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	t.pickup, errs[3] = m.Float64Histogram("weir.pickup.latency", metric.WithUnit("s"),
		metric.WithDescription("From when a job was due (its scheduled time) to when its handler started, by queue and kind."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	t.busy, errs[4] = m.Int64ObservableUpDownCounter("weir.handlers.busy", metric.WithUnit("{handler}"),
		metric.WithDescription("Handlers running now, by queue and kind (past 10,000 queue and kind pairs, the rest without attributes)."))
	t.queueJobs, errs[5] = m.Int64ObservableGauge("weir.queue.jobs", metric.WithUnit("{job}"),
		metric.WithDescription("Jobs in each queue by state, read by the leader at each collection."))
	t.oldestAge, errs[6] = m.Float64ObservableGauge("weir.queue.oldest_available.age", metric.WithUnit("s"),
		metric.WithDescription("How long each queue's oldest available job has waited for a worker (0: none waits), read by the leader."))
	t.rescued, errs[7] = m.Int64ObservableCounter("weir.jobs.rescued", metric.WithUnit("{job}"),
		metric.WithDescription("Jobs rescued from expired leases while this client led."))
	t.elections, errs[8] = m.Int64ObservableCounter("weir.leader.elections", metric.WithUnit("{election}"),
		metric.WithDescription("Leader terms this client won."))
	t.staleWrites, errs[9] = m.Int64ObservableCounter("weir.stale_writes", metric.WithUnit("{write}"),
		metric.WithDescription("Fenced writes that matched no row: the lease had been lost."))
	t.leasesLost, errs[10] = m.Int64ObservableCounter("weir.leases.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases this client found lost."))
	t.eventsDropped, errs[11] = m.Int64ObservableCounter("weir.events.dropped", metric.WithUnit("{event}"),
		metric.WithDescription("Events not delivered to a full hook queue or subscription; weir.attempts misses as many."))
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}
	_, err := m.RegisterCallback(t.observeBusy, t.busy)
	return err
}

// observeBusy reads the handlers running by queue and kind at a collection.
func (t *Telemetry) observeBusy(_ context.Context, o metric.Observer) error {
	t.sets.sets.Range(func(k, v any) bool {
		if s := v.(*series); k.(setKey).outcome == "" && s.worked.Load() {
			o.ObserveInt64(t.busy, s.busy.Load(), s.observe...)
		}
		return true
	})
	if n := t.overflowBusy.Load(); n != 0 {
		o.ObserveInt64(t.busy, n)
	}
	return nil
}
