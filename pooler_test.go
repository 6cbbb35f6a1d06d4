package weir_test

import (
	"context"
	"errors"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir"
	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
)

// TestPollOnly runs the poll-only runtime checks straight against PostgreSQL.
func TestPollOnly(t *testing.T) {
	t.Parallel()
	pollOnlySuite(t, "")
}

// TestThroughPgBouncer runs the poll-only runtime checks through a PgBouncer
// in transaction mode that resets every server connection after each
// transaction (dbtest.PgBouncer): a statement of weir's that relied on session
// state (a named prepared statement, a session advisory lock, a SET) fails
// here, and no notification reaches a client. Each subtest fails if a
// poll-only client sends a LISTEN (listenSpy): through the pooler it would
// fail silently, so nothing else would show it.
func TestThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pollOnlySuite(t, dbtest.PgBouncer(t))
}

// pollOnlyConfig is fastConfig with Config.PollOnly.
func pollOnlyConfig(workers *weir.Workers) *weir.Config {
	cfg := fastConfig(workers, nil)
	cfg.PollOnly = true
	return cfg
}

// listenRE matches SQL that holds a LISTEN statement (and not UNLISTEN).
var listenRE = regexp.MustCompile(`(?i)(^|;)\s*LISTEN\s`)

// listenSpy counts the LISTEN statements that the connections of a pool send,
// a listener's included (it hijacks one of the pool's): installed as their
// pgx tracer, it sees the SQL of every Exec, Query and batched query, through
// a pooler as straight to the server.
type listenSpy struct{ listens atomic.Int32 }

// tracing makes s the tracer of the pool's connections.
func (s *listenSpy) tracing(c *pgxpool.Config) { c.ConnConfig.Tracer = s }

func (s *listenSpy) saw(sql string) {
	if listenRE.MatchString(sql) {
		s.listens.Add(1)
	}
}

func (s *listenSpy) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	s.saw(data.SQL)
	return ctx
}

func (s *listenSpy) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *listenSpy) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (s *listenSpy) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	s.saw(data.SQL)
}

func (s *listenSpy) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// pollOnlySuite is a representative subset of the runtime's checks with
// poll-only clients on url ("" for dbtest's server). Each subtest's bundle
// client (b.client) is not started: its inserts are another client's, found
// by the poll. Each subtest fails if its clients sent a LISTEN, seen by a
// listenSpy on their pool's connections.
func pollOnlySuite(t *testing.T, url string) {
	opts := func(t *testing.T) *setupOpts {
		spy := &listenSpy{}
		// Registered before the clients start, so it runs after they stop.
		t.Cleanup(func() {
			if n := spy.listens.Load(); n > 0 {
				t.Errorf("a poll-only client sent %d LISTEN statements", n)
			}
		})
		return &setupOpts{url: url, pool: spy.tracing}
	}

	t.Run("ListenSpySeesListener", func(t *testing.T) {
		t.Parallel()
		spy := &listenSpy{}
		b := setup(t, &setupOpts{url: url, pool: spy.tracing})
		b.start(t, fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error { return nil }), nil))
		waitFor(t, 30*time.Second, "a listening client's LISTEN", func() bool { return spy.listens.Load() > 0 })
	})

	t.Run("WorkRetrySnooze", func(t *testing.T) {
		t.Parallel()
		b := setup(t, opts(t))
		var once sync.Map
		cfg := pollOnlyConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
			_, again := once.LoadOrStore(job.ID, true)
			switch job.Args.Name {
			case "fail-once":
				if !again {
					return errors.New("first attempt fails")
				}
			case "snooze":
				if !again {
					return weir.JobSnooze(10 * time.Millisecond)
				}
			case "always-fail":
				return errors.New("nope")
			}
			return nil
		}))
		cfg.RetryPolicy = weir.ExponentialBackoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond}
		c := b.start(t, cfg)
		want := map[int64]weir.JobState{}
		for name, state := range map[string]weir.JobState{"ok": weir.JobStateCompleted, "fail-once": weir.JobStateCompleted,
			"snooze": weir.JobStateCompleted, "always-fail": weir.JobStateDiscarded} {
			want[b.insertProbe(t, name, &weir.InsertOpts{MaxAttempts: 2})] = state // another client's insert
		}
		res, err := c.InsertMany(testCtx(t), []weir.InsertManyParams{{Args: probeArgs{Name: "ok"}}}) // its own
		if err != nil {
			t.Fatal(err)
		}
		want[res[0].Job.ID] = weir.JobStateCompleted
		waitFor(t, 30*time.Second, "every job to end", func() bool {
			for id, state := range want {
				if b.job(t, id).State != state {
					return false
				}
			}
			return true
		})
	})

	if url == "" {
		t.Run("NoListenConnection", func(t *testing.T) {
			t.Parallel()
			listening := func(b *bundle, app string) bool {
				var n int
				if err := b.pool.QueryRow(testCtx(t), `SELECT count(*) FROM pg_stat_activity
					WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n > 0
			}
			noop := probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error { return nil })
			// The check sees a listening client's connection.
			app := "weir-test-" + dbtest.SchemaName(t)
			listener := setup(t, &setupOpts{appName: app + "-listens"})
			listener.start(t, fastConfig(noop, nil))
			waitFor(t, 30*time.Second, "a listening client's LISTEN", func() bool { return listening(listener, app+"-listens") })

			b := setup(t, &setupOpts{appName: app})
			c := b.start(t, pollOnlyConfig(noop))
			res, err := c.Insert(testCtx(t), probeArgs{Name: "x"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, 30*time.Second, "the job to run", func() bool { return b.job(t, res.Job.ID).State == weir.JobStateCompleted })
			if listening(b, app) {
				t.Fatal("a poll-only client holds a LISTEN connection")
			}
		})
	}

	t.Run("LocalInsertWakes", func(t *testing.T) {
		t.Parallel()
		b := setup(t, opts(t))
		cfg := pollOnlyConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error { return nil }))
		cfg.FetchPollInterval = time.Hour // only the client's own insert can wake it
		c := b.start(t, cfg)
		waitFor(t, 10*time.Second, "the first claim", func() bool { return c.Stats().Claims > 0 })
		res, err := c.Insert(testCtx(t), probeArgs{Name: "own"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the client's own insert to run", func() bool {
			return b.job(t, res.Job.ID).State == weir.JobStateCompleted
		})
	})

	// cancelled starts a client whose handlers wait for their cancel and
	// report its cause.
	cancelled := func(t *testing.T, b *bundle, cfg *weir.Config) (*weir.Client, *gate, chan error) {
		g, causes := newGate(), make(chan error, 1)
		cfg.Workers = probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
			g.started <- job.ID
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil
		})
		return b.start(t, cfg), g, causes
	}
	waitCancelled := func(t *testing.T, b *bundle, id int64, causes chan error) {
		t.Helper()
		select {
		case cause := <-causes:
			if !errors.Is(cause, weir.ErrJobCancelRequested) {
				t.Fatalf("cause %v", cause)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("handler not cancelled")
		}
		waitFor(t, 10*time.Second, "job cancelled", func() bool { return b.job(t, id).State == weir.JobStateCancelled })
	}

	t.Run("CancelByAnotherClient", func(t *testing.T) {
		t.Parallel()
		b := setup(t, opts(t))
		_, g, causes := cancelled(t, b, pollOnlyConfig(nil))
		id := b.insertProbe(t, "x", nil)
		g.expectStarted(t)
		if _, err := b.client.JobCancel(testCtx(t), id); err != nil { // found at the next heartbeat
			t.Fatal(err)
		}
		waitCancelled(t, b, id, causes)
	})

	t.Run("CancelByItself", func(t *testing.T) {
		t.Parallel()
		b := setup(t, opts(t))
		cfg := pollOnlyConfig(nil)
		// No heartbeat for 20 minutes: only the in-process wake cancels in time.
		cfg.HeartbeatInterval, cfg.LeaseDuration = 20*time.Minute, time.Hour
		c, g, causes := cancelled(t, b, cfg)
		id := b.insertProbe(t, "x", nil)
		g.expectStarted(t)
		if _, err := c.JobCancel(testCtx(t), id); err != nil {
			t.Fatal(err)
		}
		waitCancelled(t, b, id, causes)
	})

	t.Run("Unique", func(t *testing.T) {
		t.Parallel()
		b := setup(t, opts(t))
		uniq := &weir.InsertOpts{Unique: weir.UniqueOpts{ByArgs: true}}
		first, err := b.client.Insert(testCtx(t), probeArgs{Name: "u"}, uniq)
		if err != nil {
			t.Fatal(err)
		}
		second, err := b.client.Insert(testCtx(t), probeArgs{Name: "u"}, uniq)
		if err != nil {
			t.Fatal(err)
		}
		if !second.Duplicate || second.Job.ID != first.Job.ID {
			t.Fatalf("second unique insert: duplicate %v, id %d (first %d)", second.Duplicate, second.Job.ID, first.Job.ID)
		}
	})

	t.Run("GracefulStop", func(t *testing.T) {
		t.Parallel()
		b := setup(t, opts(t))
		g := newGate()
		var runs atomic.Int32
		c := b.start(t, pollOnlyConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
			runs.Add(1)
			g.started <- job.ID
			<-g.ch
			return nil
		})))
		id := b.insertProbe(t, "x", nil)
		g.expectStarted(t)
		stopped := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			stopped <- c.Stop(ctx)
		}()
		g.open() // the handler returns while Stop drains
		if err := <-stopped; err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if j := b.job(t, id); j.State != weir.JobStateCompleted || j.Attempt != 1 {
			t.Fatalf("after Stop: state %s attempt %d", j.State, j.Attempt)
		}
		// A second client runs its own job and never this one again.
		sentinel := b.insertProbe(t, "sentinel", nil)
		b.start(t, pollOnlyConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
			runs.Add(1)
			return nil
		})))
		waitFor(t, 30*time.Second, "the sentinel to run", func() bool {
			return b.job(t, sentinel).State == weir.JobStateCompleted
		})
		if n := runs.Load(); n != 2 {
			t.Fatalf("%d runs, want 2 (the job once, the sentinel once)", n)
		}
	})

	t.Run("RescueAfterLeaseLoss", func(t *testing.T) {
		t.Parallel()
		b := setup(t, opts(t))
		id := b.insertProbe(t, "x", &weir.InsertOpts{MaxAttempts: 5})
		// A client that claimed it and died: its lease ends at once.
		claimed, _, err := b.driver.Executor().JobClaim(testCtx(t), &weirdriver.JobClaimParams{
			Queue: weir.DefaultQueue, Max: 1, ClientID: "lost", LeaseDuration: time.Microsecond})
		if err != nil || len(claimed) != 1 || claimed[0].ID != id {
			t.Fatalf("claim: %v, %v", claimed, err)
		}
		cfg := pollOnlyConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error { return nil }))
		cfg.RetryPolicy = weir.ExponentialBackoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond}
		c := b.start(t, cfg)
		waitFor(t, 30*time.Second, "the lost job rescued and run", func() bool {
			return b.job(t, id).State == weir.JobStateCompleted
		})
		if c.Stats().Rescued == 0 {
			t.Error("the client did not count the rescue")
		}
	})

	t.Run("Periodic", func(t *testing.T) {
		t.Parallel()
		b := setup(t, opts(t))
		ran := make(chan int64, 100)
		cfg := pollOnlyConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
			ran <- job.ID
			return nil
		}))
		cfg.PeriodicJobs = []weir.PeriodicJob{{Name: "tick", Schedule: "* * * * * *",
			Args: func() (weir.JobArgs, *weir.InsertOpts) { return probeArgs{Name: "periodic"}, nil }}}
		b.start(t, cfg)
		for range 2 {
			select {
			case <-ran:
			case <-time.After(30 * time.Second):
				t.Fatal("no periodic job ran")
			}
		}
	})

	t.Run("LeaderElection", func(t *testing.T) {
		t.Parallel()
		b := setup(t, opts(t))
		noop := func(ctx context.Context, job *weir.Job[probeArgs]) error { return nil }
		clients := []*weir.Client{b.start(t, pollOnlyConfig(probeWorkers(noop))), b.start(t, pollOnlyConfig(probeWorkers(noop)))}
		leader := -1
		waitFor(t, 30*time.Second, "one leader", func() bool {
			a, b := clients[0].IsLeader(), clients[1].IsLeader()
			if a && b {
				t.Fatal("two leaders")
			}
			leader = map[bool]int{true: 0, false: 1}[a]
			return a || b
		})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := clients[leader].Stop(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the other client to lead", func() bool { return clients[1-leader].IsLeader() })
	})
}
