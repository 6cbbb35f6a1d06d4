package weir_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirq/weir"
)

// TestRenewAndFinalizeDoNotDeadlock drains jobs while the client renews its
// leases every few milliseconds. A renewal and an outcome write each update
// many of the client's running rows in one statement; run at once, they
// deadlocked each other under load (SQLSTATE 40P01), costing retries and, with
// short leases, lost leases. A renewal now skips the rows that others hold
// locked (they are renewed next time), so it never waits for the outcome write.
func TestRenewAndFinalizeDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{maxConns: 10})
	const n = 20_000
	batch := make([]weir.InsertManyParams, 5000)
	for i := range batch {
		batch[i] = weir.InsertManyParams{Args: probeArgs{Name: "x"}}
	}
	for range n / len(batch) {
		if _, err := b.client.InsertMany(testCtx(t), batch); err != nil {
			t.Fatal(err)
		}
	}
	logs := &logRecorder{}
	c := b.start(t, &weir.Config{
		Workers:           probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }),
		Queues:            map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 200, Prefetch: 200}},
		HeartbeatInterval: 10 * time.Millisecond, // the least allowed
		LeaseDuration:     30 * time.Second,
		Logger:            slog.New(logs),
	})
	waitFor(t, 2*time.Minute, "the drain", func() bool { return c.Stats().Finalized >= n })
	if got := logs.matching("40P01"); len(got) > 0 {
		t.Fatalf("%d deadlocks, the first: %s", len(got), got[0])
	}
	if s := c.Stats(); s.StaleWrites != 0 || s.LeasesLost != 0 {
		t.Fatalf("stats %+v: no lease may be lost with a 30 s lease", s)
	}
}

// logRecorder is a slog.Handler that keeps every record as a line of text:
// "LEVEL message key=value ...".
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&sb, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, sb.String())
	l.mu.Unlock()
	return nil
}

// matching returns the lines that contain s.
func (l *logRecorder) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}
