package weirotel

import (
	"sync"
	"sync/atomic"

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

// attrCache keeps the metric attribute sets already built, so that an attempt
// records its measurements without building (sorting and allocating) a set
// each time.
type attrCache struct {
	sets sync.Map // setKey → metric.MeasurementOption
	n    atomic.Int64
}

// get returns the measurement option for k, building and keeping it the first
// time while the cache has room.
func (c *attrCache) get(k setKey) metric.MeasurementOption {
	if v, ok := c.sets.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	opt := build(k)
	if c.n.Load() < maxCachedSets {
		if _, loaded := c.sets.LoadOrStore(k, opt); !loaded {
			c.n.Add(1)
		}
	}
	return opt
}

// build makes the measurement option of k's attributes.
func build(k setKey) metric.MeasurementOption {
	if k.outcome == "" {
		return metric.WithAttributes(semconv.MessagingDestinationName(k.queue), KindKey.String(k.kind))
	}
	return metric.WithAttributes(semconv.MessagingDestinationName(k.queue), KindKey.String(k.kind), OutcomeKey.String(k.outcome))
}
