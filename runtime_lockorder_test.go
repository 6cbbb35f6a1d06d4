package weir_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	const app = "weir-lockorder"
	b := setup(t, &setupOpts{maxConns: 10, appName: app})
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
	// A run alone takes seconds; a CI run once timed out here, so a slow run
	// logs its progress and a timeout says where the client stood. Each
	// completion's event wakes the wait (events may be dropped, so the stats,
	// counted before the event is sent, say how far the drain is).
	completed, unsubscribe := c.Subscribe(weir.EventJobCompleted)
	defer unsubscribe()
	began := time.Now()
	progress := time.NewTicker(10 * time.Second)
	defer progress.Stop()
	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	for c.Stats().Finalized < n {
		select {
		case <-completed:
		case <-progress.C:
			t.Logf("draining: %+v", c.Stats())
		case <-deadline.C:
			t.Fatalf("timed out after 2m waiting for the drain: stats %+v; %s", c.Stats(), b.sessions(t, app))
		}
	}
	t.Logf("drained %d jobs in %s: %+v", n, time.Since(began).Round(time.Millisecond), c.Stats())
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

// sessions describes, for a failure message, the job states of b's schema and
// what the database sessions named app are doing. It opens a connection of its
// own, since b's pool may be the thing that is stuck.
func (b *bundle) sessions(t testing.TB, app string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig.Copy())
	if err != nil {
		return "no connection to describe the sessions: " + err.Error()
	}
	defer conn.Close(context.Background())
	var states, activity string
	err = conn.QueryRow(ctx, `SELECT coalesce(string_agg(state || ': ' || n, ', '), 'none')
		FROM (SELECT state, count(*) AS n FROM `+b.schema+`.weir_job GROUP BY state) s`).Scan(&states)
	if err != nil {
		return "job states: " + err.Error()
	}
	err = conn.QueryRow(ctx, `SELECT coalesce(string_agg(format('[%s %s/%s %ss: %s]', state, wait_event_type,
			wait_event, extract(epoch FROM now() - query_start)::int, left(regexp_replace(query, '\s+', ' ', 'g'), 60)), ' '), 'none')
		FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&activity)
	if err != nil {
		return "jobs " + states + "; sessions: " + err.Error()
	}
	return "jobs " + states + "; sessions " + activity
}

// TestClaimsPauseWhileOutcomesWait: when outcomes wait to be written faster
// than they are written, the client stops claiming at a bounded backlog
// (completer.MaxBacklog) instead of claiming every job it can run: each claimed
// job holds a lease every renewal covers, and a job whose outcome is not yet
// written runs again after a crash. Here a row lock held by the test stops the
// outcome writes; once it is released, every job completes.
func TestClaimsPauseWhileOutcomesWait(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const (
		backlog = 2 * 2000 // completer.MaxBacklog
		rest    = backlog + 3000
		slots   = 100 + 100 // MaxWorkers + Prefetch
	)
	blocker := b.insertProbe(t, "blocker", nil) // the first job claimed
	batch := make([]weir.InsertManyParams, rest)
	for i := range batch {
		batch[i] = weir.InsertManyParams{Args: probeArgs{Name: "x"}}
	}
	if _, err := b.client.InsertMany(testCtx(t), batch); err != nil {
		t.Fatal(err)
	}

	// The blocker's handler waits until the test holds its row locked: the
	// outcome write that includes it then waits, and every outcome after it.
	tx, err := b.pool.Begin(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	locked := make(chan struct{})
	var handled atomic.Int64
	logs := &logRecorder{}
	c := b.start(t, &weir.Config{
		Workers: probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
			if job.ID == blocker {
				if _, err := tx.Exec(ctx, `SELECT 1 FROM `+b.schema+`.weir_job WHERE id = $1 FOR UPDATE`, job.ID); err != nil {
					return err
				}
				close(locked)
			}
			handled.Add(1)
			return nil
		}),
		Queues: map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 100, Prefetch: 100}},
		Logger: slog.New(logs),
	})
	<-locked
	waitFor(t, time.Minute, "claims to pause", func() bool {
		return len(logs.matching("claims pause")) > 0
	})
	// Once paused, the client runs what it had claimed and claims no more.
	var claimed int
	waitFor(t, time.Minute, "every job claimed to be handled", func() bool {
		claimed = b.count(t, "state <> 'available'")
		return int(handled.Load()) == claimed
	})
	// Claims paused at the backlog: what was claimed is the backlog, the
	// outcomes written before the blocker's, and at most one claim of jobs
	// whose handlers ran while it filled.
	if written := c.Stats().Finalized; claimed > int(written)+backlog+slots {
		t.Fatalf("%d jobs claimed with %d outcomes written: more than the backlog of %d and %d slots",
			claimed, written, backlog, slots)
	}
	if claimed >= rest {
		t.Fatalf("every job (%d) was claimed", claimed)
	}
	if err := tx.Commit(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "every job to complete", func() bool {
		return b.count(t, "state = 'completed'") == rest+1
	})
	if s := c.Stats(); s.StaleWrites != 0 || s.LeasesLost != 0 || s.Abandoned != 0 {
		t.Fatalf("stats %+v: no lease may be lost", s)
	}
}
