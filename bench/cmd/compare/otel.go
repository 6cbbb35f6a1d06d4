package main

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirq/weir"
	"github.com/weirq/weir/internal/weirbench"
	"github.com/weirq/weir/weirotel"
)

// otelCollectEvery is how often the metric reader collects in the telemetry
// variants: each collection runs the observable callbacks (weir-otel's: one
// queue listing on the leader) and exports to nothing, as a real reader would
// export somewhere.
const otelCollectEvery = 10 * time.Second

// otelSDK is the OpenTelemetry SDK that weir-otel and river-otel run on, the
// same for both so that what each one's telemetry costs compares: spans
// sampled at sample and sent through a batcher to spans, metrics collected
// every otelCollectEvery and exported to nothing. It measures what tracing
// and metrics cost the client, not what a backend costs.
type otelSDK struct {
	// sample is the fraction of traces sampled: 1 samples every one.
	sample float64
	// metrics false makes the meter provider OpenTelemetry's no-op one: the
	// instruments record nothing.
	metrics bool
	// spans receives the sampled spans; nil: an exporter that drops them.
	spans sdktrace.SpanExporter
}

// providers makes a tracer provider and a meter provider for one client, and
// the function that shuts them down, flushing the spans still batched.
func (o otelSDK) providers() (trace.TracerProvider, metric.MeterProvider, func()) {
	spans := o.spans
	if spans == nil {
		spans = dropSpans{}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.TraceIDRatioBased(o.sample)), sdktrace.WithBatcher(spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(dropMetrics{}, sdkmetric.WithInterval(otelCollectEvery))))
	shutdown := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
		_ = mp.Shutdown(ctx)
	}
	if !o.metrics {
		return tp, metricnoop.NewMeterProvider(), shutdown
	}
	return tp, mp, shutdown
}

// weirWithTelemetry is weir with weirotel's insert and worker middleware, hook
// and observers on sdk.
//
// parts says which of weirotel's parts are on: "insert" (the insert
// middleware, which also puts the trace context in each job's metadata),
// "worker" (the worker middleware), "hook" and "observe".
func weirWithTelemetry(cfg weirbench.WeirConfig, parts map[string]bool, sdk otelSDK) weirbench.System {
	cfg.Name = "weir-otel"
	cfg.Configure = func(wcfg *weir.Config) func(*weir.Client) (func(), error) {
		tp, meters, shutdown := sdk.providers()
		tel, err := weirotel.New(&weirotel.Config{TracerProvider: tp, MeterProvider: meters})
		if err != nil {
			shutdown()
			return func(*weir.Client) (func(), error) { return nil, err }
		}
		if parts["insert"] {
			wcfg.InsertMiddleware = append([]weir.InsertMiddleware{tel.InsertMiddleware()}, wcfg.InsertMiddleware...)
		}
		if parts["worker"] {
			wcfg.WorkerMiddleware = append([]weir.WorkerMiddleware{tel.WorkerMiddleware()}, wcfg.WorkerMiddleware...)
		}
		if parts["hook"] {
			wcfg.Hooks = append(wcfg.Hooks, tel.Hook())
		}
		return func(c *weir.Client) (func(), error) {
			if !parts["observe"] {
				return shutdown, nil
			}
			unregister, err := tel.Observe(c)
			if err != nil {
				shutdown()
				return nil, err
			}
			return func() { _ = unregister(); shutdown() }, nil
		}
	}
	return weirbench.Weir(cfg)
}

// riverWithTelemetry is River, with the settings of the river system, and
// otelriver's middleware on sdk, installed as a plugin as its documentation
// has it: a span and metrics for each insert call and each job worked, and
// River's fetch metrics through its hook. Trace propagation is left off, as
// otelriver has it by default (river.go), though weirotel always carries the
// trace context in each job's metadata: River is not charged for work its
// users must ask for.
func riverWithTelemetry(sdk otelSDK) *riverSystem {
	return &riverSystem{name: "river-otel", schema: riverSchema, otel: &sdk}
}

// dropSpans is a span exporter that drops what it is given.
type dropSpans struct{}

func (dropSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropSpans) Shutdown(context.Context) error                             { return nil }

// dropMetrics is a metric exporter that drops what it is given.
type dropMetrics struct{}

func (dropMetrics) Temporality(k sdkmetric.InstrumentKind) metricdata.Temporality {
	return sdkmetric.DefaultTemporalitySelector(k)
}

func (dropMetrics) Aggregation(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	return sdkmetric.DefaultAggregationSelector(k)
}
func (dropMetrics) Export(context.Context, *metricdata.ResourceMetrics) error { return nil }
func (dropMetrics) ForceFlush(context.Context) error                          { return nil }
func (dropMetrics) Shutdown(context.Context) error                            { return nil }

// weirWithNoopMiddleware is weir with one worker middleware that only calls the
// next handler: what the middleware chain itself costs.
func weirWithNoopMiddleware(cfg weirbench.WeirConfig) weirbench.System {
	cfg.Name = "weir-mw"
	cfg.Configure = func(wcfg *weir.Config) func(*weir.Client) (func(), error) {
		wcfg.WorkerMiddleware = append(wcfg.WorkerMiddleware, func(next weir.WorkHandler) weir.WorkHandler {
			return func(ctx context.Context, job *weir.JobRow) error { return next(ctx, job) }
		})
		return nil
	}
	return weirbench.Weir(cfg)
}

// deepStack is the stack weir-deep's middleware uses before each handler.
const deepStack = 8 << 10

// weirWithDeepHandler is weir with one worker middleware that uses deepStack
// bytes of stack before it calls the next handler: a no-op job with the call
// depth of a handler that does real work (a driver's query, a client's
// request), so that W1 measures what the workers' stacks cost.
func weirWithDeepHandler(cfg weirbench.WeirConfig) weirbench.System {
	cfg.Name = "weir-deep"
	cfg.Configure = func(wcfg *weir.Config) func(*weir.Client) (func(), error) {
		wcfg.WorkerMiddleware = append(wcfg.WorkerMiddleware, func(next weir.WorkHandler) weir.WorkHandler {
			return func(ctx context.Context, job *weir.JobRow) error {
				useStack(deepStack)
				return next(ctx, job)
			}
		})
		return nil
	}
	return weirbench.Weir(cfg)
}

// useStack uses at least n bytes of stack.
//
//go:noinline
func useStack(n int) byte {
	var frame [512]byte
	frame[n%len(frame)] = byte(n)
	if n <= len(frame) {
		return frame[0]
	}
	return useStack(n-len(frame)) + frame[1]
}
