package main

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/internal/weirbench"
)

// countSpans is a span exporter that counts the spans it is given by name.
type countSpans struct {
	mu    sync.Mutex
	names map[string]int
}

func (c *countSpans) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range spans {
		c.names[s.Name()]++
	}
	return nil
}

func (c *countSpans) Shutdown(context.Context) error { return nil }

// byName is a copy of the counts.
func (c *countSpans) byName() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.names)
}

// TestRiverTelemetry checks that river-otel's clients have otelriver's
// middleware on both sides: with every trace sampled, each insert call makes
// an insert span and each job worked a work span, all exported once the
// client is closed.
func TestRiverTelemetry(t *testing.T) {
	ctx := t.Context()
	spans := &countSpans{names: map[string]int{}}
	sys := riverWithTelemetry(otelSDK{sample: 1, metrics: true, spans: spans})
	if sys.Name() != "river-otel" {
		t.Errorf("name %q, want river-otel", sys.Name())
	}
	sys.schema = dbtest.Schema(t)
	pool := dbtest.Pool(t, nil)
	if err := sys.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	const n = 11
	var started atomic.Int64
	done := make(chan struct{})
	c, err := sys.Open(pool, weirbench.ClientConfig{Work: true, Settings: weirbench.Defaults, OnStart: func(int64) {
		if started.Add(1) == n {
			close(done)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	closer := c.(*riverClient)
	defer closer.Close()
	insertAndStart(t, c, n)
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%d of %d jobs started in a minute", started.Load(), n)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if got := c.Completed(); got != n {
		t.Errorf("%d completions counted, want %d", got, n)
	}
	closer.Close() // flushes the batched spans
	// One insert span per call (InsertMany, then Insert), one work span per job.
	got := spans.byName()
	if got["river.insert_many"] != 2 {
		t.Errorf("%d river.insert_many spans, want 2 (spans by name: %v)", got["river.insert_many"], got)
	}
	if got["river.work"] != n {
		t.Errorf("%d river.work spans, want %d (spans by name: %v)", got["river.work"], n, got)
	}
}
