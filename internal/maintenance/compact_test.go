package maintenance_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
)

// lockedMsg is the warning about a segment of the ready list that stays locked.
const lockedMsg = "weir: maintenance: a segment of the ready list is locked by another transaction; " +
	"claims slow down while it holds the lock and a snapshot is held open"

// records keeps the records a service logs, and signals each.
type records struct {
	mu     sync.Mutex
	list   []slog.Record
	logged chan struct{} // capacity 1
}

func newRecords() *records { return &records{logged: make(chan struct{}, 1)} }

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.list = append(r.list, rec)
	r.mu.Unlock()
	select {
	case r.logged <- struct{}{}:
	default:
	}
	return nil
}

// with returns the records whose message is msg.
func (r *records) with(msg string) []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []slog.Record
	for _, rec := range r.list {
		if rec.Message == msg {
			out = append(out, rec)
		}
	}
	return out
}

// await waits until a record with msg is logged, and returns it.
func (r *records) await(t *testing.T, msg string) slog.Record {
	t.Helper()
	limit := time.NewTimer(waitLimit)
	defer limit.Stop()
	for {
		if recs := r.with(msg); len(recs) > 0 {
			return recs[0]
		}
		select {
		case <-r.logged:
		case <-limit.C:
			t.Fatalf("no %q within %v", msg, waitLimit)
		}
	}
}

// stepClock is a clock that stands still until the test moves it, and
// signals each time it is read.
type stepClock struct {
	mu     sync.Mutex
	at     time.Time
	looked chan struct{}
}

func newStepClock() *stepClock {
	return &stepClock{at: time.Unix(1_000_000, 0), looked: make(chan struct{}, 100)}
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	at := c.at
	c.mu.Unlock()
	select {
	case c.looked <- struct{}{}:
	default:
	}
	return at
}

func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	c.at = c.at.Add(d)
	c.mu.Unlock()
}

// awaitLook waits until the clock is read.
func (c *stepClock) awaitLook(t *testing.T, what string) {
	t.Helper()
	limit := time.NewTimer(waitLimit)
	defer limit.Stop()
	select {
	case <-c.looked:
	case <-limit.C:
		t.Fatalf("no %s within %v", what, waitLimit)
	}
}

// dueSegment makes a segment of the ready list due for compaction (a
// thousand rows and more, all claimed), makes its statistics visible, and
// returns its table.
func dueSegment(t *testing.T, b *bundle) string {
	t.Helper()
	ctx := t.Context()
	// One connection, so that its statistics can be flushed at once.
	pool := dbtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	d, err := weirpgx.New(pool, &weirpgx.Config{Schema: b.schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.ReadyListOn(ctx); err != nil {
		t.Fatal(err)
	}
	exec := d.Executor()
	params := make([]*weirdriver.JobInsertParams, 2000)
	for i := range params {
		params[i] = &weirdriver.JobInsertParams{Kind: "k", Queue: "q", Args: json.RawMessage(`{}`), Priority: 1, MaxAttempts: 3}
	}
	if _, err := exec.JobInsert(ctx, params); err != nil {
		t.Fatal(err)
	}
	var seg int
	if err := pool.QueryRow(ctx, "SELECT DISTINCT seg FROM "+pgx.Identifier{b.schema, "weir_ready"}.Sanitize()).Scan(&seg); err != nil {
		t.Fatalf("the rows of one insert are in one segment: %v", err)
	}
	jobs, _, err := exec.JobClaim(ctx, &weirdriver.JobClaimParams{Queue: "q", Max: len(params), ClientID: "c", LeaseDuration: time.Hour})
	if err != nil || len(jobs) != len(params) {
		t.Fatalf("claimed %d jobs: %v", len(jobs), err)
	}
	if _, err := pool.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		t.Fatal(err)
	}
	return pgx.Identifier{b.schema, "weir_ready_" + strconv.Itoa(seg)}.Sanitize()
}

// holdSegment locks table as a transaction left open does: a REPEATABLE READ
// transaction that read it, until release is called (or the test ends).
func holdSegment(t *testing.T, table string) (release func()) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dbtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(t.Context(), "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), "SELECT count(*) FROM "+table); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := conn.Exec(t.Context(), "COMMIT"); err != nil {
			t.Fatal(err)
		}
	}
}

// filenode returns table's file node, which a TRUNCATE changes.
func filenode(t *testing.T, b *bundle, table string) int64 {
	t.Helper()
	var n int64
	if err := b.pool.QueryRow(t.Context(), "SELECT pg_relation_filenode($1::regclass)::bigint", table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCompactWarnsWhileSegmentStaysLocked: a segment that a transaction left
// open keeps locked is not warned about when a compaction first finds it
// locked, but when one finds it locked again, over ten seconds (by the
// service's clock) after the first, with how long. (That it warns once per
// run is TestBusyWatch's.)
func TestCompactWarnsWhileSegmentStaysLocked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	holdSegment(t, dueSegment(t, b))
	clk, logs := newStepClock(), newRecords()
	cfg := taskConfig(t, "compact-held")
	cfg.Logger, cfg.Now = slog.New(logs), clk.now
	start(t, b.exec, cfg)
	clk.awaitLook(t, "compaction that found the segment locked")
	clk.advance(time.Minute)
	rec := logs.await(t, lockedMsg)
	var lockedFor time.Duration
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "locked_for" {
			lockedFor = a.Value.Duration()
		}
		return true
	})
	if rec.Level != slog.LevelWarn || lockedFor != time.Minute {
		t.Fatalf("%v with locked_for %v, want WARN after a minute: the second compaction that found the segment locked", rec.Level, lockedFor)
	}
}

// TestCompactDoesNotWarnForABriefLock: a segment locked when a compaction
// comes, as a claim in flight locks it, and free at the next compaction,
// which empties it, is not warned about, however late the next one comes.
func TestCompactDoesNotWarnForABriefLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	table := dueSegment(t, b)
	release := holdSegment(t, table)
	before := filenode(t, b, table)
	clk, logs := newStepClock(), newRecords()
	cfg := taskConfig(t, "compact-brief")
	cfg.Logger, cfg.Now = slog.New(logs), clk.now
	s := start(t, b.exec, cfg)
	clk.awaitLook(t, "compaction that found the segment locked")
	release()
	clk.advance(time.Minute)
	tick := time.NewTicker(10 * time.Millisecond) // observes the database, which signals nothing
	defer tick.Stop()
	limit := time.NewTimer(waitLimit)
	defer limit.Stop()
	for filenode(t, b, table) == before {
		select {
		case <-tick.C:
		case <-limit.C:
			t.Fatalf("segment %s not compacted within %v of its release", table, waitLimit)
		}
	}
	stop(t, s)
	if recs := logs.with(lockedMsg); len(recs) != 0 {
		t.Fatalf("warned %d times about a segment locked at one compaction only", len(recs))
	}
}
