package weir_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir"
)

func TestStartBadConfig(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	workers := probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil })
	for name, cfg := range map[string]*weir.Config{
		"lease under 3 heartbeats": {Workers: workers, Queues: map[string]weir.QueueConfig{"q": {MaxWorkers: 1}},
			HeartbeatInterval: time.Second, LeaseDuration: 2 * time.Second},
		"negative heartbeat": {HeartbeatInterval: -time.Second},
		"zero workers":       {Queues: map[string]weir.QueueConfig{"q": {MaxWorkers: 0}}},
		"bad queue name":     {Queues: map[string]weir.QueueConfig{"a b": {MaxWorkers: 1}}},
		"negative poll":      {FetchPollInterval: -1},
		"negative reserve":   {ShutdownReserve: -1},
		"negative lease":     {LeaseDuration: -time.Second},
		"negative rescue":    {RescueInterval: -time.Second},
	} {
		if _, err := weir.NewClient(b.driver, cfg); !errors.Is(err, weir.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	noQueues, err := weir.NewClient(b.driver, &weir.Config{Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	if err := noQueues.Start(testCtx(t)); !errors.Is(err, weir.ErrInvalid) {
		t.Errorf("start without queues: %v", err)
	}
	unmigrated := setup(t, &setupOpts{noMigrate: true})
	c, err := weir.NewClient(unmigrated.driver, fastConfig(workers, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(testCtx(t)); !errors.Is(err, weir.ErrNotMigrated) {
		t.Errorf("start on an unmigrated schema: %v", err)
	}
}

// TestRunJobsEndToEnd works jobs with each outcome a handler can give.
func TestRunJobsEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var failedOnce sync.Map
	workers := probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		switch job.Args.Name {
		case "ok":
			return nil
		case "fail-once":
			if _, loaded := failedOnce.LoadOrStore(job.ID, true); !loaded {
				return errors.New("first attempt fails")
			}
			return nil
		case "always-fail":
			return errors.New("nope")
		case "panic":
			panic("boom")
		case "cancel":
			return weir.JobCancel(errors.New("not wanted"))
		case "discard":
			return weir.JobDiscard(errors.New("bad args"))
		case "snooze":
			if job.Attempt == 1 && job.ReleaseCount == 0 && len(job.Errors) == 0 {
				if _, loaded := failedOnce.LoadOrStore(job.ID, true); !loaded {
					return weir.JobSnooze(10 * time.Millisecond)
				}
			}
			return nil
		}
		return fmt.Errorf("unknown probe %q", job.Args.Name)
	})
	cfg := fastConfig(workers, nil)
	cfg.RetryPolicy = weir.ExponentialBackoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond}
	ids := map[string]int64{}
	for _, name := range []string{"ok", "fail-once", "always-fail", "panic", "cancel", "discard", "snooze"} {
		ids[name] = b.insertProbe(t, name, &weir.InsertOpts{MaxAttempts: 2})
	}
	c, err := weir.NewClient(b.driver, cfg)
	if err != nil {
		t.Fatal(err)
	}
	events, unsubscribe := c.Subscribe()
	defer unsubscribe()
	if err := c.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	want := map[string]weir.JobState{
		"ok": weir.JobStateCompleted, "fail-once": weir.JobStateCompleted, "always-fail": weir.JobStateDiscarded,
		"panic": weir.JobStateDiscarded, "cancel": weir.JobStateCancelled, "discard": weir.JobStateDiscarded,
		"snooze": weir.JobStateCompleted,
	}
	waitFor(t, 30*time.Second, "every probe to end", func() bool {
		for name, id := range ids {
			if b.job(t, id).State != want[name] {
				return false
			}
		}
		return true
	})
	if j := b.job(t, ids["fail-once"]); j.Attempt != 2 || len(j.Errors) != 1 || j.Errors[0].Error != "first attempt fails" {
		t.Errorf("fail-once: attempt %d errors %+v", j.Attempt, j.Errors)
	}
	if j := b.job(t, ids["panic"]); len(j.Errors) != 2 || !strings.Contains(j.Errors[0].Error, "boom") ||
		!strings.Contains(j.Errors[0].Trace, "goroutine") {
		t.Errorf("panic: errors %+v", j.Errors)
	}
	if j := b.job(t, ids["snooze"]); j.Attempt != 1 {
		t.Errorf("snooze spent an attempt: attempt %d", j.Attempt)
	}
	if j := b.job(t, ids["cancel"]); len(j.Errors) != 1 || j.FinalizedAt == nil {
		t.Errorf("cancel: %+v", j)
	}
	// Events arrive for each outcome.
	seen := map[weir.EventKind]int{}
	timeout := time.After(10 * time.Second)
	for seen[weir.EventJobCompleted] < 3 || seen[weir.EventJobDiscarded] < 3 || seen[weir.EventJobCancelled] < 1 ||
		seen[weir.EventJobFailed] < 3 || seen[weir.EventJobSnoozed] < 1 {
		select {
		case ev := <-events:
			seen[ev.Kind]++
		case <-timeout:
			t.Fatalf("events seen: %v", seen)
		}
	}
}

// TestCancelRunningJob checks that an operator's cancel stops a running handler
// with cause ErrJobCancelRequested, and the job ends cancelled whatever it returns.
func TestCancelRunningJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	g := newGate()
	causes := make(chan error, 1)
	b.start(t, fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		g.started <- job.ID
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil // claims success; the cancel still wins
	}), nil))
	id := b.insertProbe(t, "x", nil)
	g.expectStarted(t)
	if _, err := b.client.JobCancel(testCtx(t), id); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, weir.ErrJobCancelRequested) {
			t.Fatalf("cause %v", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler not cancelled")
	}
	waitFor(t, 10*time.Second, "job cancelled", func() bool { return b.job(t, id).State == weir.JobStateCancelled })
}

// TestAwaRegression is G2: a handler returns while Stop drains and its outcome
// write is held by a row lock; after the lock is released and Stop returns, the
// job is completed under its original lease, and a second client runs it zero more
// times.
func TestAwaRegression(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	g := newGate()
	first := b.start(t, fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		g.started <- job.ID
		<-g.ch
		return nil
	}), nil))
	id := b.insertProbe(t, "awa", nil)
	g.expectStarted(t)
	claimed := b.job(t, id)

	// Hold the job's row so that the outcome write waits.
	lock := b.lockRow(t, id)

	stopped := make(chan error, 1)
	go func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stopped <- first.Stop(stopCtx)
	}()
	g.open() // the handler returns while Stop drains
	b.waitForFinalizeBlockedBy(t, lock)
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned while an outcome was unwritten: %v", err)
	default:
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Stop: %v", err)
	}
	done := b.job(t, id)
	if done.State != weir.JobStateCompleted || done.LeaseToken != claimed.LeaseToken || done.Attempt != 1 {
		t.Fatalf("after Stop: state %s token %d (claimed with %d) attempt %d", done.State, done.LeaseToken, claimed.LeaseToken, done.Attempt)
	}

	// A second client with a short lease, rescuing often, never runs it again.
	var runs sync.Map
	sentinel := b.insertProbe(t, "sentinel", nil)
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		n, _ := runs.LoadOrStore(job.ID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		return nil
	}), nil)
	cfg.LeaseDuration, cfg.RescueInterval = 300*time.Millisecond, 20*time.Millisecond
	second := b.start(t, cfg)
	waitFor(t, 10*time.Second, "the second client to work and lead", func() bool {
		return b.job(t, sentinel).State == weir.JobStateCompleted && second.IsLeader()
	})
	if err := second.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ran := runs.Load(id); ran {
		t.Fatal("the completed job ran again on the second client")
	}
	if j := b.job(t, id); j.State != weir.JobStateCompleted || j.LeaseToken != claimed.LeaseToken {
		t.Fatalf("job changed after the second client: %+v", j)
	}
}

// TestQueuePause checks that a paused queue claims nothing on a running client, and
// that resuming it wakes the client at once (the poll interval here is an hour).
func TestQueuePause(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ran := make(chan int64, 10)
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		ran <- job.ID
		return nil
	}), nil)
	cfg.FetchPollInterval = time.Hour
	c := b.start(t, cfg)
	waitFor(t, 10*time.Second, "the first poll", func() bool { return c.Stats().Claims >= 1 })
	if err := b.client.QueuePause(testCtx(t), weir.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	before := c.Stats().Claims
	id := b.insertProbe(t, "paused", nil)
	// The insert's notification wakes the producer; its claim finds the queue paused.
	waitFor(t, 10*time.Second, "a claim after the insert", func() bool { return c.Stats().Claims > before })
	if j := b.job(t, id); j.State != weir.JobStateAvailable {
		t.Fatalf("job in a paused queue is %s", j.State)
	}
	if err := b.client.QueueResume(testCtx(t), weir.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ran:
		if got != id {
			t.Fatalf("ran %d, want %d", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("resume did not wake the client")
	}
	for _, name := range []string{"", "bad name"} {
		if err := b.client.QueuePause(testCtx(t), name); !errors.Is(err, weir.ErrInvalid) {
			t.Errorf("pause %q: %v", name, err)
		}
	}
}

// touchyArgs fails to decode as its mode says: with an error or a panic.
type touchyArgs struct {
	Mode string `json:"mode"`
}

func (touchyArgs) Kind() string { return "touchy" }

func (a *touchyArgs) UnmarshalJSON(b []byte) error {
	type plain touchyArgs
	if err := json.Unmarshal(b, (*plain)(a)); err != nil {
		return err
	}
	switch a.Mode {
	case "error":
		return errors.New("cannot read these args")
	case "panic":
		panic("args blew up")
	}
	return nil
}

// TestArgsDecodeFailures: args that fail to decode, with an error or a panic in
// UnmarshalJSON, fail the attempt with that error (the panic with its stack),
// never reach the handler, and leave the client working.
func TestArgsDecodeFailures(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var ran sync.Map
	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(func(_ context.Context, job *weir.Job[touchyArgs]) error {
		ran.Store(job.Args.Mode, true)
		return nil
	}))
	ids := map[string]int64{}
	for _, mode := range []string{"error", "panic", "fine"} {
		res, err := b.client.Insert(testCtx(t), touchyArgs{Mode: mode}, &weir.InsertOpts{MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		ids[mode] = res.Job.ID
	}
	c, err := weir.NewClient(b.driver, fastConfig(workers, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	want := map[string]weir.JobState{"error": weir.JobStateDiscarded, "panic": weir.JobStateDiscarded, "fine": weir.JobStateCompleted}
	waitFor(t, 30*time.Second, "every job to end", func() bool {
		for mode, id := range ids {
			if b.job(t, id).State != want[mode] {
				return false
			}
		}
		return true
	})
	if j := b.job(t, ids["error"]); len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "cannot read these args") {
		t.Errorf("error: errors %+v", j.Errors)
	}
	if j := b.job(t, ids["panic"]); len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "args blew up") ||
		!strings.Contains(j.Errors[0].Trace, "UnmarshalJSON") {
		t.Errorf("panic: errors %+v", j.Errors)
	}
	for _, mode := range []string{"error", "panic"} {
		if _, ok := ran.Load(mode); ok {
			t.Errorf("the handler ran with args that did not decode (%s)", mode)
		}
	}
}

// TestStartAfterStop checks that a stopped client says so when started again,
// rather than claiming to be running, and that a running one says it is.
func TestStartAfterStop(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := b.start(t, fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }), nil))
	if err := c.Start(testCtx(t)); !errors.Is(err, weir.ErrAlreadyStarted) {
		t.Fatalf("second Start while running: %v, want ErrAlreadyStarted", err)
	}
	if err := c.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	err := c.Start(testCtx(t))
	if !errors.Is(err, weir.ErrStopped) || errors.Is(err, weir.ErrAlreadyStarted) {
		t.Fatalf("Start after Stop: %v, want ErrStopped", err)
	}
	if !strings.Contains(err.Error(), "stopped") || !strings.Contains(err.Error(), "new client") {
		t.Fatalf("Start after Stop: %q does not say the client was stopped and what to do", err)
	}
}

// TestStatsDuringSlowStart holds Start in its schema check (every connection the
// pool hands out waits for the test) and reads the client meanwhile: Stats and
// IsLeader must not wait for Start's database I/O. They waited while Start held
// the client's mutex across the check. A Stop meanwhile waits for the Start and
// then stops the client.
func TestStatsDuringSlowStart(t *testing.T) {
	t.Parallel()
	var hold atomic.Bool
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	b := setup(t, &setupOpts{pool: func(c *pgxpool.Config) {
		c.PrepareConn = func(ctx context.Context, _ *pgx.Conn) (bool, error) {
			if hold.Load() {
				select {
				case entered <- struct{}{}:
				default:
				}
				select {
				case <-release:
				case <-ctx.Done():
					return true, ctx.Err()
				}
			}
			return true, nil
		}
	}})
	c, err := weir.NewClient(b.driver, fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }), nil))
	if err != nil {
		t.Fatal(err)
	}
	hold.Store(true)
	var startErr error
	started := make(chan struct{})
	go func() {
		startErr = c.Start(testCtx(t))
		close(started)
	}()
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(func() { // also when the test fails below, so that nothing is left running
		unblock()
		<-started
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("Start did not reach the database")
	}

	read := make(chan weir.Stats, 1)
	go func() {
		_ = c.IsLeader()
		read <- c.Stats()
	}()
	select {
	case s := <-read:
		if s.Claims != 0 {
			t.Fatalf("stats %+v before the client started", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stats and IsLeader waited for Start's schema check")
	}

	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(testCtx(t)) }()
	unblock()
	<-started
	if startErr != nil {
		t.Fatalf("Start: %v", startErr)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Stop during Start: %v", err)
	}
	if err := c.Start(testCtx(t)); !errors.Is(err, weir.ErrStopped) {
		t.Fatalf("Start after a Stop that waited for the first Start: %v, want ErrStopped", err)
	}
}
