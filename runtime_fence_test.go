package weir_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirq/weir"
)

// expireLease makes a running job's lease lapse by the database clock, as if its
// worker had stopped renewing it long ago.
func (b *bundle) expireLease(t testing.TB, id int64) {
	t.Helper()
	tag, err := b.pool.Exec(testCtx(t), "UPDATE "+b.schema+".weir_job SET lease_expires_at = now() - interval '1 hour' WHERE id = $1 AND state = 'running'", id)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("expire lease of job %d: %v (%d rows)", id, err, tag.RowsAffected())
	}
}

// TestStaleWriteLosesAfterReclaim is G3: a lease expires, another client rescues
// and re-claims the job and completes it; when the first handler returns at last,
// its write changes nothing and is counted as stale.
func TestStaleWriteLosesAfterReclaim(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	g := newGate()
	slowCfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		g.started <- job.ID
		<-g.ch // ignores its context
		return errors.New("late failure from the first owner")
	}), map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 1}}) // no room to re-claim it itself
	// The first client renews rarely, so that the forced expiry stands until the
	// second client has rescued and re-claimed the job.
	slowCfg.HeartbeatInterval, slowCfg.LeaseDuration = 10*time.Second, 60*time.Second
	first := b.start(t, slowCfg)
	id := b.insertProbe(t, "contested", &weir.InsertOpts{MaxAttempts: 5})
	g.expectStarted(t)
	firstLease := b.job(t, id)

	var secondRuns atomic.Int32
	secondCfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		secondRuns.Add(1)
		return nil
	}), nil)
	secondCfg.ID = "second"
	b.expireLease(t, id)
	b.start(t, secondCfg)
	waitFor(t, 20*time.Second, "the second client to rescue and complete the job", func() bool {
		return b.job(t, id).State == weir.JobStateCompleted
	})
	won := b.job(t, id)
	g.open() // the first handler returns at last
	waitFor(t, 10*time.Second, "the stale write to be counted", func() bool {
		return first.Stats().StaleWrites == 1
	})
	after := b.job(t, id)
	if after.State != weir.JobStateCompleted || after.LeaseToken != won.LeaseToken || after.AttemptedBy != "second" ||
		after.LeaseToken <= firstLease.LeaseToken || secondRuns.Load() != 1 {
		t.Fatalf("job after the stale write: %+v (first lease %d)", after, firstLease.LeaseToken)
	}
	for _, e := range after.Errors {
		if strings.Contains(e.Error, "late failure") {
			t.Fatalf("the stale failure was recorded: %+v", after.Errors)
		}
	}
	if len(after.Errors) != 1 || !strings.Contains(after.Errors[0].Error, "lease expired") {
		t.Fatalf("errors %+v, want the rescue's entry only", after.Errors)
	}
}

// TestStopBudget is G4 and G1: Stop with a 500 ms budget and a handler that ignores
// its context returns within 600 ms and names the job; the job is rescued later and
// completes elsewhere.
func TestStopBudget(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	g := newGate()
	defer g.open()
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		g.started <- job.ID
		<-g.ch // ignores its context
		return nil
	}), nil)
	cfg.ShutdownReserve = 100 * time.Millisecond
	stuck := b.start(t, cfg)
	id := b.insertProbe(t, "stuck", nil)
	g.expectStarted(t)
	waitFor(t, 10*time.Second, "the only client to lead", stuck.IsLeader)

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	begin := time.Now()
	err := stuck.Stop(ctx)
	took := time.Since(begin)
	if took > 600*time.Millisecond {
		t.Errorf("Stop took %s with a 500ms budget", took)
	}
	if err == nil || !strings.Contains(err.Error(), "abandoned") || !strings.Contains(err.Error(), "probe") ||
		!strings.Contains(err.Error(), "job "+itoa(id)) {
		t.Fatalf("Stop's error %v does not name job %d", err, id)
	}
	// The handler used the whole budget, yet the client gave up its term in
	// the budget's tail: the next leader need not wait for it to lapse (G9).
	var terms int
	if err := b.pool.QueryRow(testCtx(t), "SELECT count(*) FROM "+b.schema+".weir_leader").Scan(&terms); err != nil {
		t.Fatal(err)
	}
	if terms != 0 {
		t.Errorf("after a Stop that used its whole budget, %d leader term(s) still held", terms)
	}

	// Another client rescues the job once its lease lapses, and completes it.
	var ran atomic.Int32
	b.start(t, fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		ran.Add(1)
		return nil
	}), nil))
	waitFor(t, 20*time.Second, "the abandoned job to be rescued and completed", func() bool {
		return b.job(t, id).State == weir.JobStateCompleted
	})
	if j := b.job(t, id); j.Attempt != 2 || ran.Load() != 1 {
		t.Fatalf("attempt %d, runs elsewhere %d", j.Attempt, ran.Load())
	}
}

// TestStopReleasesPrefetched checks that jobs claimed but not started go back to
// available with their attempt count unchanged.
func TestStopReleasesPrefetched(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	g := newGate()
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		g.started <- job.ID
		<-g.ch
		return nil
	}), map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 1, Prefetch: 5}})
	var ids []int64
	for range 6 {
		ids = append(ids, b.insertProbe(t, "p", nil))
	}
	c := b.start(t, cfg)
	startedID := g.expectStarted(t)
	waitFor(t, 10*time.Second, "six jobs claimed", func() bool {
		return b.count(t, "state = 'running'") == 6
	})
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(context.Background()) }()
	waitFor(t, 10*time.Second, "the prefetched jobs released", func() bool {
		return b.count(t, "state = 'available'") == 5
	})
	g.open()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		j := b.job(t, id)
		if id == startedID {
			if j.State != weir.JobStateCompleted {
				t.Errorf("running job %d: %s", id, j.State)
			}
			continue
		}
		if j.State != weir.JobStateAvailable || j.Attempt != 0 || j.ReleaseCount != 0 {
			t.Errorf("prefetched job %d: state %s attempt %d releases %d", id, j.State, j.Attempt, j.ReleaseCount)
		}
	}
	if s := c.Stats(); s.Released != 5 {
		t.Errorf("stats: %+v", s)
	}
}

// TestShutdownCancelReleases checks step 4: a handler cancelled at the soft deadline
// that returns an error is released, not failed, and the release is counted.
func TestShutdownCancelReleases(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	g := newGate()
	c := b.start(t, fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		g.started <- job.ID
		<-ctx.Done()
		return context.Cause(ctx)
	}), nil))
	id := b.insertProbe(t, "long", nil)
	g.expectStarted(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	j := b.job(t, id)
	if j.State != weir.JobStateAvailable || j.Attempt != 0 || j.ReleaseCount != 1 || len(j.Errors) != 0 {
		t.Fatalf("after shutdown: %+v", j)
	}
}

// TestLostLeaseCancelsHandler checks that a handler whose lease is lost is
// cancelled, with cause ErrLeaseLost, by the next renewal.
func TestLostLeaseCancelsHandler(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	g := newGate()
	causes := make(chan error, 1)
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		g.started <- job.ID
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil
	}), nil)
	c := b.start(t, cfg)
	id := b.insertProbe(t, "x", nil)
	g.expectStarted(t)
	// Another worker's claim: the token moves on.
	if _, err := b.pool.Exec(testCtx(t), "UPDATE "+b.schema+".weir_job SET lease_token = lease_token + 1 WHERE id = $1", id); err != nil {
		t.Fatal(err)
	}
	lostAt := time.Now()
	select {
	case cause := <-causes:
		if !errors.Is(cause, weir.ErrLeaseLost) {
			t.Fatalf("cause %v", cause)
		}
		// One interval until the next renewal, plus the renewal's own round trip.
		if took := time.Since(lostAt); took > cfg.HeartbeatInterval+200*time.Millisecond {
			t.Errorf("handler cancelled %s after the lease was lost; the heartbeat interval is %s", took, cfg.HeartbeatInterval)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler not cancelled")
	}
	waitFor(t, 5*time.Second, "the stale outcome to be counted", func() bool { return c.Stats().StaleWrites == 1 })
	if s := c.Stats(); s.LeasesLost != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestStopReportsLostOutcome: a handler returns during Stop, but its lease was
// taken meanwhile (here the token moves on, as when another worker re-claims
// the job), so its outcome comes back stale. The job may run again, and a
// graceful Stop must say so rather than return nil.
func TestStopReportsLostOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	g := newGate()
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		g.started <- job.ID
		<-g.ch // ignores its context
		return nil
	}), map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 1, Prefetch: 1}})
	// No renewal during the test: only the outcome write finds the lease gone.
	cfg.HeartbeatInterval, cfg.LeaseDuration = 10*time.Second, 60*time.Second
	c := b.start(t, cfg)
	released, unsubscribe := c.Subscribe(weir.EventJobReleased)
	defer unsubscribe()
	id := b.insertProbe(t, "lost", nil)
	g.expectStarted(t)
	// A second job waits in the prefetch buffer: Stop gives it back first, and
	// its release tells the test that Stop has begun.
	waiting := b.insertProbe(t, "waiting", nil)
	waitFor(t, 30*time.Second, "the second job to be prefetched", func() bool { return b.job(t, waiting).State == weir.JobStateRunning })
	tag, err := b.pool.Exec(testCtx(t), "UPDATE "+b.schema+".weir_job SET lease_token = lease_token + 1 WHERE id = $1", id)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("move the lease on: %v (%d rows)", err, tag.RowsAffected())
	}
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stopped <- c.Stop(ctx)
	}()
	select {
	case ev := <-released:
		if ev.Job.ID != waiting {
			t.Fatalf("job %d released, want the prefetched job %d", ev.Job.ID, waiting)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not give back the prefetched job")
	}
	g.open() // the handler returns during the stop
	err = <-stopped
	if err == nil || !strings.Contains(err.Error(), itoa(id)) || !strings.Contains(err.Error(), "may run again") {
		t.Fatalf("Stop: %v; want an error naming job %d as possibly run again", err, id)
	}
	if s := c.Stats(); s.StaleWrites != 1 {
		t.Fatalf("stats %+v, want one stale write", s)
	}
}
