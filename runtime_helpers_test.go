package weir_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir"
)

// probeArgs is the job kind of the runtime tests; handlers are set per test.
type probeArgs struct {
	Name string `json:"name"`
}

func (probeArgs) Kind() string { return "probe" }

type probeFunc = func(ctx context.Context, job *weir.Job[probeArgs]) error

func probeWorkers(f probeFunc) *weir.Workers {
	w := weir.NewWorkers()
	weir.AddWorker(w, weir.WorkFunc(f))
	return w
}

// fastConfig is a runtime config with short intervals, for tests. The rescue
// interval, which is also the election interval, leaves each maintenance
// batch 500 ms: at 100 ms, a machine loaded by the whole suite under the race
// detector failed elections and batches one after another.
func fastConfig(workers *weir.Workers, queues map[string]weir.QueueConfig) *weir.Config {
	if queues == nil {
		queues = map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 10}}
	}
	return &weir.Config{
		Workers:           workers,
		Queues:            queues,
		HeartbeatInterval: 100 * time.Millisecond,
		LeaseDuration:     time.Second,
		RescueInterval:    250 * time.Millisecond,
		FetchPollInterval: 100 * time.Millisecond,
	}
}

// start makes a client on b's driver with cfg, starts it, and stops it at cleanup.
func (b *bundle) start(t testing.TB, cfg *weir.Config) *weir.Client {
	t.Helper()
	return b.startTuned(t, cfg, nil)
}

// startTuned is start, calling tune (if not nil) on the client before Start.
func (b *bundle) startTuned(t testing.TB, cfg *weir.Config, tune func(*weir.Client)) *weir.Client {
	t.Helper()
	c, err := weir.NewClient(b.driver, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if tune != nil {
		tune(c)
	}
	if err := c.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

// waitFor polls cond every few milliseconds until it holds, failing the test after
// timeout. It observes the database; it never stands in for a signal the code
// could give.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// job reads a job, failing the test on error.
func (b *bundle) job(t testing.TB, id int64) *weir.JobRow {
	t.Helper()
	j, err := b.client.JobGet(testCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// insertProbe inserts a probe job and returns its id.
func (b *bundle) insertProbe(t testing.TB, name string, opts *weir.InsertOpts) int64 {
	t.Helper()
	res, err := b.client.Insert(testCtx(t), probeArgs{Name: name}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res.Job.ID
}

// gate lets tests hold handlers and release them.
type gate struct {
	once    sync.Once
	ch      chan struct{}
	started chan int64
}

func newGate() *gate {
	return &gate{ch: make(chan struct{}), started: make(chan int64, 1000)}
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// expectStarted waits for a handler to report its job id.
func (g *gate) expectStarted(t testing.TB) int64 {
	t.Helper()
	select {
	case id := <-g.started:
		return id
	case <-time.After(30 * time.Second):
		t.Fatal("no handler started")
		return 0
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// waitForFinalizeBlockedBy waits until an outcome write (the finalize statement,
// or the one for batches of completions only, recognised by their text) waits
// for a lock that tx holds.
func (b *bundle) waitForFinalizeBlockedBy(t testing.TB, tx pgx.Tx) {
	t.Helper()
	var pid int
	if err := tx.QueryRow(testCtx(t), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the outcome write to wait for the lock", func() bool {
		var waiting bool
		err := b.pool.QueryRow(testCtx(t), `SELECT count(*) > 0 FROM pg_stat_activity
			WHERE $1 = ANY(pg_blocking_pids(pid))
				AND (query LIKE '%lease_token, outcome%' OR query LIKE '%finalized_at = now(),%')`, pid).Scan(&waiting)
		return err == nil && waiting
	})
}

// lockRow holds job id's row lock in a transaction of its own, so that writes to
// the job wait, until the test rolls it back (at cleanup at the latest).
func (b *bundle) lockRow(t testing.TB, id int64) pgx.Tx {
	t.Helper()
	lock, err := b.pool.Begin(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Rollback(context.Background()) })
	if _, err := lock.Exec(testCtx(t), "SELECT 1 FROM "+b.schema+".weir_job WHERE id = $1 FOR UPDATE", id); err != nil {
		t.Fatal(err)
	}
	return lock
}
