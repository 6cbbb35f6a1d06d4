package weir

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// records is a slog.Handler that keeps every record.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec.Clone())
	r.mu.Unlock()
	return nil
}

// lines returns each record as "LEVEL message key=value...".
func (r *records) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.recs))
	for i, rec := range r.recs {
		var sb strings.Builder
		fmt.Fprintf(&sb, "%s %s", rec.Level, rec.Message)
		rec.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&sb, " %s=%v", a.Key, a.Value)
			return true
		})
		out[i] = sb.String()
	}
	return out
}

// TestLogLimiter checks, on an injected clock, that the limiter logs at most its
// limit of lines per key and second, then one summary of the lines it held back,
// per key, when that key logs again after the second or at flush.
func TestLogLimiter(t *testing.T) {
	t.Parallel()
	rec := &records{}
	now := time.Unix(1_000_000, 0)
	l := newLogLimiter(slog.New(rec), func() time.Time { return now }, 3)

	for i := range 10 {
		l.log(slog.LevelWarn, "failed", "a", "i", i)
	}
	l.log(slog.LevelWarn, "failed", "b", "i", 0)  // another key has its own budget
	l.log(slog.LevelError, "failed", "a", "i", 0) // and so has another level
	want := []string{
		"WARN failed i=0", "WARN failed i=1", "WARN failed i=2",
		"WARN failed i=0", "ERROR failed i=0",
	}
	if got := rec.lines(); !slices.Equal(got, want) {
		t.Fatalf("first second:\n got %q\nwant %q", got, want)
	}

	now = now.Add(999 * time.Millisecond) // still the same second
	l.log(slog.LevelWarn, "failed", "a", "i", 10)
	if got := rec.lines(); len(got) != len(want) {
		t.Fatalf("a line past the limit within the second was logged: %q", got[len(want):])
	}

	now = now.Add(time.Millisecond) // the next second: a summary, then the line
	l.log(slog.LevelWarn, "failed", "a", "i", 11)
	want = append(want, "WARN weir: suppressed similar lines message=failed key=a suppressed=8", "WARN failed i=11")
	if got := rec.lines(); !slices.Equal(got, want) {
		t.Fatalf("next second:\n got %q\nwant %q", got, want)
	}

	for i := range 5 {
		l.log(slog.LevelWarn, "failed", "b", "i", i)
	}
	l.flush()
	want = append(want, "WARN failed i=0", "WARN failed i=1", "WARN failed i=2",
		"WARN weir: suppressed similar lines message=failed key=b suppressed=2")
	if got := rec.lines(); !slices.Equal(got, want) {
		t.Fatalf("flush:\n got %q\nwant %q", got, want)
	}
	l.flush()
	if got := rec.lines(); len(got) != len(want) {
		t.Fatalf("a second flush logged again: %q", got[len(want):])
	}
}

// TestLogLimiterManyKeys checks that keys chosen by others cannot grow the
// limiter without bound: past logLimiterMaxKeys fresh keys, the rest share one
// budget.
func TestLogLimiterManyKeys(t *testing.T) {
	t.Parallel()
	rec := &records{}
	now := time.Unix(1_000_000, 0)
	l := newLogLimiter(slog.New(rec), func() time.Time { return now }, 1)
	for i := range 3 * logLimiterMaxKeys {
		l.log(slog.LevelWarn, "m", fmt.Sprint(i))
	}
	if n := len(l.keys); n > logLimiterMaxKeys+1 {
		t.Fatalf("%d keys tracked", n)
	}
	if n := len(rec.lines()); n != logLimiterMaxKeys+1 {
		t.Fatalf("%d lines logged, want %d (one per key, then one for all the rest)", n, logLimiterMaxKeys+1)
	}
	now = now.Add(time.Second)
	l.log(slog.LevelWarn, "m", "new")
	if n := len(l.keys); n != 1 {
		t.Fatalf("%d keys tracked after their second ended, want 1", n)
	}
	last := rec.lines()[len(rec.lines())-2:]
	if !strings.Contains(last[0], "suppressed similar lines message=m suppressed=1999") {
		t.Fatalf("no summary for the shared budget: %q", last)
	}
}
