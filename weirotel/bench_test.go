package weirotel_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirotel"
)

// BenchmarkAttempt measures what weirotel adds to one attempt on the SDK: the
// worker middleware around a handler that does nothing, and the hook's
// handling of the attempt's outcome event. No database: it is the client's
// CPU per job that telemetry costs, which the bench module's weir-otel
// system measures end to end.
//
// "sampled" records every span; "unsampled" none, as a sampler that keeps
// one trace in many costs most attempts.
func BenchmarkAttempt(b *testing.B) {
	b.Run("sampled", func(b *testing.B) { benchmarkAttempt(b, sdktrace.AlwaysSample()) })
	b.Run("unsampled", func(b *testing.B) { benchmarkAttempt(b, sdktrace.NeverSample()) })
}

func benchmarkAttempt(b *testing.B, sampler sdktrace.Sampler) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	tel, err := weirotel.New(&weirotel.Config{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	meta := json.RawMessage(`{"tenant":"acme","weirotel":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`)
	job := &weir.JobRow{ID: 42, Kind: "email.send", Queue: "default", Attempt: 1, MaxAttempts: 25, Priority: 2,
		ScheduledAt: time.Now(), LeaseToken: 7, Metadata: meta, Args: json.RawMessage(`{}`)}
	h := tel.WorkerMiddleware()(func(context.Context, *weir.JobRow) error { return nil })
	hook := tel.Hook()
	ev := &weir.Event{Kind: weir.EventJobCompleted, Job: job, Duration: time.Millisecond}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := h(ctx, job); err != nil {
			b.Fatal(err)
		}
		hook(ev)
	}
}
