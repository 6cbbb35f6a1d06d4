package weir_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir"
	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
)

// TestCancelDuringFailureWrite checks that when Stop's budget runs out while a
// failure is being written, the job holds either the whole failure or an untouched
// lease that rescue then takes, never half an outcome.
func TestCancelDuringFailureWrite(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	g := newGate()
	c := b.start(t, fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		g.started <- job.ID
		<-g.ch
		return errors.New("handler failure")
	}), nil))
	id := b.insertProbe(t, "fails", nil)
	g.expectStarted(t)
	claimed := b.job(t, id)

	lock := b.lockRow(t, id)
	g.open()
	b.waitForFinalizeBlockedBy(t, lock)
	stopCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err := c.Stop(stopCtx)
	if err == nil || !strings.Contains(err.Error(), "not written") {
		t.Fatalf("Stop: %v, want an error about unwritten outcomes", err)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	j := b.job(t, id)
	switch {
	case j.State == weir.JobStateRunning && j.LeaseToken == claimed.LeaseToken && len(j.Errors) == 0 && j.Attempt == 1:
		// The write was cut: the lease is untouched and rescue will take the job.
	case (j.State == weir.JobStateRetryable || j.State == weir.JobStateAvailable) && len(j.Errors) == 1 &&
		j.Errors[0].Error == "handler failure" && j.LeaseExpiresAt == nil:
		// The write won the race: the whole failure is recorded.
		t.Log("the failure write completed before the cancel")
	default:
		t.Fatalf("half an outcome: %+v", j)
	}

	// Rescue (or the retry) brings the job to an end elsewhere.
	b.start(t, fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error { return nil }), nil))
	b.expireLeaseIfRunning(t, id)
	waitFor(t, 20*time.Second, "the job to complete", func() bool { return b.job(t, id).State == weir.JobStateCompleted })
}

func (b *bundle) expireLeaseIfRunning(t testing.TB, id int64) {
	t.Helper()
	if _, err := b.pool.Exec(testCtx(t), "UPDATE "+b.schema+".weir_job SET lease_expires_at = now() - interval '1 hour' WHERE id = $1 AND state = 'running'", id); err != nil {
		t.Fatal(err)
	}
}

// TestConnectionsKilled is G1 under dropped connections: every backend of a
// working client is terminated, the LISTEN connection with them; the client
// recovers by itself, wakes on notifications again, and every job completes.
func TestConnectionsKilled(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	app := "weir-kill-" + b.schema
	pool := dbtest.Pool(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = app })
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: b.schema})
	if err != nil {
		t.Fatal(err)
	}
	var done sync.Map
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		done.Store(job.ID, true)
		return nil
	}), nil)
	cfg.FetchPollInterval = time.Hour // only notifications wake the producer
	c, err := weir.NewClient(driver, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())

	listening := func() bool {
		var n int
		err := b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND query LIKE 'LISTEN%'`, app).Scan(&n)
		return err == nil && n > 0
	}
	waitFor(t, 10*time.Second, "the listener", listening)
	insertMany := func(n int) {
		params := make([]weir.InsertManyParams, n)
		for i := range params {
			params[i] = weir.InsertManyParams{Args: probeArgs{Name: "k"}}
		}
		if _, err := b.client.InsertMany(ctx, params); err != nil {
			t.Fatal(err)
		}
	}
	insertMany(300)
	var killed int
	if err := b.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1`, app).Scan(&killed); err != nil || killed == 0 {
		t.Fatalf("terminated %d backends: %v", killed, err)
	}
	waitFor(t, 20*time.Second, "the listener to reconnect", listening)
	insertMany(300)
	waitFor(t, 30*time.Second, "every job to complete", func() bool {
		return b.count(t, "state = 'completed'") == 600
	})
	if n := b.count(t, "state <> 'completed'"); n != 0 {
		t.Fatalf("%d jobs not completed", n)
	}
}

// TestConcurrencyLimits is G7: no more handlers of a queue run at once in a client
// than its MaxWorkers, under load, and the client fills them. The handlers of
// a queue wait until every job the client claimed of it runs and at least its
// limit of them do: without prefetch a client claims only for free workers,
// so those that run then are all it would run at once.
func TestConcurrencyLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	limits := map[string]int{"a": 3, "b": 2}
	var (
		mu      sync.Mutex
		running = map[string]int{}
		peak    = map[string]int{}
		// full[q] is closed once the handlers of q ran at once as said above.
		full = map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	)
	workers := probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		mu.Lock()
		running[job.Queue]++
		peak[job.Queue] = max(peak[job.Queue], running[job.Queue])
		mu.Unlock()
		select {
		case <-full[job.Queue]:
		case <-ctx.Done():
		}
		mu.Lock()
		running[job.Queue]--
		mu.Unlock()
		return nil
	})
	queues := map[string]weir.QueueConfig{}
	for q, n := range limits {
		queues[q] = weir.QueueConfig{MaxWorkers: n, Prefetch: -1}
		params := make([]weir.InsertManyParams, 150)
		for i := range params {
			params[i] = weir.InsertManyParams{Args: probeArgs{}, InsertOpts: &weir.InsertOpts{Queue: q}}
		}
		if _, err := b.client.InsertMany(testCtx(t), params); err != nil {
			t.Fatal(err)
		}
	}
	b.start(t, fastConfig(workers, queues))
	for q, n := range limits {
		waitFor(t, 30*time.Second, "the claimed jobs of queue "+q+" to run", func() bool {
			mu.Lock()
			r := running[q]
			mu.Unlock()
			return r >= n && r == b.count(t, "queue = $1 AND state = 'running'", q)
		})
		close(full[q])
	}
	waitFor(t, 60*time.Second, "every job to complete", func() bool { return b.count(t, "state = 'completed'") == 300 })
	mu.Lock()
	defer mu.Unlock()
	for q, n := range limits {
		if peak[q] != n {
			t.Errorf("queue %s: %d handlers at once, limit %d", q, peak[q], n)
		}
	}
}

// TestOneLeader is G6 at the client level: of three clients exactly one leads, and
// another takes over when it stops.
func TestOneLeader(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var clients []*weir.Client
	for range 3 {
		clients = append(clients, b.start(t, fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }), nil)))
	}
	leader := func() (*weir.Client, int) {
		var l *weir.Client
		n := 0
		for _, c := range clients {
			if c.IsLeader() {
				l, n = c, n+1
			}
		}
		return l, n
	}
	waitFor(t, 10*time.Second, "a leader", func() bool { _, n := leader(); return n == 1 })
	first, _ := leader()
	if err := first.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a new leader", func() bool {
		l, n := leader()
		return n == 1 && l != first
	})
}

// TestLeaderCountSamples samples leadership while clients start and stop, and
// checks that two never lead at once.
func TestLeaderCountSamples(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var (
		clients []*weir.Client
		worst   atomic.Int32
	)
	for range 3 {
		clients = append(clients, b.start(t, fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }), nil)))
	}
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
			n := int32(0)
			for _, c := range clients {
				if c.IsLeader() {
					n++
				}
			}
			if n > worst.Load() {
				worst.Store(n)
			}
		}
	})
	for _, c := range clients[:2] {
		waitFor(t, 10*time.Second, "some leader", func() bool {
			for _, c := range clients {
				if c.IsLeader() {
					return true
				}
			}
			return false
		})
		if err := c.Stop(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the last client to lead", clients[2].IsLeader)
	close(stopSampling)
	sampler.Wait()
	if worst.Load() > 1 {
		t.Fatalf("%d clients led at once", worst.Load())
	}
}

// TestUnreachableCancelsBeforeExpiry checks the local lease deadline: when no
// renewal reaches the database (here a row lock holds them all back), the handler
// is cancelled before the lease expires by the database clock, so that no other
// worker may yet legally start the job.
func TestUnreachableCancelsBeforeExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	g := newGate()
	cancelled := make(chan time.Time, 1)
	causes := make(chan error, 1)
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		g.started <- job.ID
		<-ctx.Done()
		cancelled <- time.Now()
		causes <- context.Cause(ctx)
		return nil
	}), nil)
	b.start(t, cfg)
	id := b.insertProbe(t, "x", nil)
	g.expectStarted(t)

	lock := b.lockRow(t, id)
	var at time.Time
	select {
	case at = <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("handler not cancelled while renewals could not get through")
	}
	if cause := <-causes; !errors.Is(cause, weir.ErrLeaseLost) {
		t.Fatalf("cause %v", cause)
	}
	// No renewal got through while the lock was held, so the row's expiry, read
	// under the lock before any outcome can be written, is the one the handler had
	// to beat.
	var expires time.Time
	if err := lock.QueryRow(ctx, "SELECT lease_expires_at FROM "+b.schema+".weir_job WHERE id = $1", id).Scan(&expires); err != nil {
		t.Fatal(err)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if !at.Before(expires) {
		t.Fatalf("handler cancelled at %s, not before its lease expired at %s", at, expires)
	}
}

// TestHooksAndUnknownKind checks that hooks see events, and that a job of a kind
// this client has no worker for fails its attempt with a clear error.
func TestHooksAndUnknownKind(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seen := make(chan *weir.Event, 100)
	cfg := fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }), nil)
	cfg.Hooks = []weir.Hook{func(ev *weir.Event) { seen <- ev }}
	c, err := weir.NewClient(b.driver, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	res, err := b.client.Insert(testCtx(t), weir.RawArgs{KindName: "nobody", JSON: []byte(`{}`)}, &weir.InsertOpts{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	probe := b.insertProbe(t, "ok", nil)
	waitFor(t, 10*time.Second, "both jobs to end", func() bool {
		return b.job(t, res.Job.ID).State == weir.JobStateDiscarded && b.job(t, probe).State == weir.JobStateCompleted
	})
	if j := b.job(t, res.Job.ID); len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, `no worker for kind "nobody"`) {
		t.Fatalf("unknown kind: %+v", j.Errors)
	}
	kinds := map[weir.EventKind]bool{}
	timeout := time.After(10 * time.Second)
	for !kinds[weir.EventJobCompleted] || !kinds[weir.EventJobDiscarded] || !kinds[weir.EventJobStarted] {
		select {
		case ev := <-seen:
			kinds[ev.Kind] = true
		case <-timeout:
			t.Fatalf("hook saw %v", kinds)
		}
	}
}

// deafDriver is a driver whose listener never connects, so that only polling and
// the client's own wake-ups find new jobs.
type deafDriver struct{ *weirpgx.Driver }

func (deafDriver) Listen(context.Context, ...string) (weirdriver.Listener, error) {
	return nil, errors.New("listening disabled by the test")
}

// TestLocalInsertWakes checks that jobs inserted by a started client wake its own
// producers at once, with no notification and no poll to help.
func TestLocalInsertWakes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ran := make(chan int64, 10)
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		ran <- job.ID
		return nil
	}), nil)
	cfg.FetchPollInterval = time.Hour
	cfg.Logger = slog.New(slog.DiscardHandler)
	c, err := weir.NewClient(deafDriver{b.driver}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	first := b.insertProbe(t, "before start", nil)
	if err := c.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	// The first poll claims the job inserted before Start; its handler's return
	// asks for one more claim. After those two, the producer sleeps for an hour.
	if got := <-ran; got != first {
		t.Fatalf("ran %d, want %d", got, first)
	}
	waitFor(t, 10*time.Second, "the producer to go idle", func() bool { return c.Stats().Claims >= 2 })
	for _, insert := range []func() int64{
		func() int64 {
			res, err := c.Insert(testCtx(t), probeArgs{Name: "one"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			return res.Job.ID
		},
		func() int64 {
			res, err := c.InsertMany(testCtx(t), []weir.InsertManyParams{{Args: probeArgs{Name: "many"}}})
			if err != nil {
				t.Fatal(err)
			}
			return res[0].Job.ID
		},
	} {
		id := insert()
		select {
		case got := <-ran:
			if got != id {
				t.Fatalf("ran job %d, want %d", got, id)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a job inserted by the running client did not wake it")
		}
	}
}
