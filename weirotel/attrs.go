package weirotel

import (
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// maxCachedSets bounds the attribute sets a Telemetry keeps: queues and kinds
// come from job rows, which anyone who can insert a job (from SQL too) names,
// so their number has no bound of its own. Past it, sets are built per call.
const maxCachedSets = 10_000

// setKey names a metric attribute set: a queue, a kind and, for attempts, an
// outcome.
type setKey struct{ queue, kind, outcome string }

// series is what a queue and kind (and outcome) share across their attempts:
// the metric attribute set and the attempt span's name and attributes.
type series struct {
	// add and record hold the attribute set as the instruments' variadic
	// options, so that passing them allocates nothing.
	add      []metric.AddOption
	record   []metric.RecordOption
	observe  []metric.ObserveOption
	spanName string
	queue    attribute.KeyValue
	kind     attribute.KeyValue
	// busy counts the handlers of this queue and kind running now, read at
	// each collection (weir.handlers.busy): an atomic add per start and end
	// instead of two measurements through the SDK. busy of a series that is
	// not kept (past maxCachedSets) is not read: overflowBusy counts those.
	busy   atomic.Int64
	worked atomic.Bool // a handler of this series ran: busy is reported
	cached bool
}

// attrCache keeps the series already built, so that an attempt records its
// measurements without building (sorting and allocating) a set each time.
type attrCache struct {
	sets sync.Map // setKey → *series
	n    atomic.Int64
}

// get returns the series of k, building and keeping it the first time while
// the cache has room.
func (c *attrCache) get(k setKey) *series {
	if v, ok := c.sets.Load(k); ok {
		return v.(*series)
	}
	s := build(k)
	if c.n.Load() < maxCachedSets {
		s.cached = true
		if v, loaded := c.sets.LoadOrStore(k, s); loaded {
			return v.(*series)
		}
		c.n.Add(1)
	}
	return s
}

// build makes the series of k.
func build(k setKey) *series {
	s := &series{
		spanName: "process " + k.queue,
		queue:    semconv.MessagingDestinationName(k.queue),
		kind:     KindKey.String(k.kind),
	}
	opt := metric.WithAttributes(s.queue, s.kind)
	if k.outcome != "" {
		opt = metric.WithAttributes(s.queue, s.kind, OutcomeKey.String(k.outcome))
	}
	s.add, s.record, s.observe = []metric.AddOption{opt}, []metric.RecordOption{opt}, []metric.ObserveOption{opt}
	return s
}
