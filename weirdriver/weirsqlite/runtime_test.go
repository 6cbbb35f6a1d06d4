package weirsqlite_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver/weirsqlite"
)

// The worker runtime on SQLite: a weir.Client runs on the driver exactly as on
// PostgreSQL.

type countArgs struct {
	N        int  `json:"n"`
	FailOnce bool `json:"fail_once,omitempty"`
}

func (countArgs) Kind() string { return "count" }

// startClient starts a client on d and stops it at cleanup, before d closes.
func startClient(t *testing.T, d *weirsqlite.Driver, cfg *weir.Config) *weir.Client {
	t.Helper()
	c, err := weir.NewClient(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return c
}

// waitFor polls the database until cond holds, failing after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countStates counts the jobs of every queue by state.
func countStates(t *testing.T, c *weir.Client) map[weir.JobState]int64 {
	t.Helper()
	queues, err := c.QueueList(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	out := map[weir.JobState]int64{}
	for _, q := range queues {
		for s, n := range q.Counts {
			out[s] += n
		}
	}
	return out
}

// TestClientRunsJobs inserts 500 jobs through one client and works them with
// another on the same driver. The worker's poll interval is an hour, so every
// job is picked up through the driver's in-process notifications: inserts (one
// by one and in bulk), retries that became due, and jobs freed by finishing ones.
func TestClientRunsJobs(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	var (
		mu   sync.Mutex
		runs = map[int64]int{} // job id -> attempts that ran
	)
	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(func(ctx context.Context, job *weir.Job[countArgs]) error {
		mu.Lock()
		runs[job.ID]++
		mu.Unlock()
		if job.Args.FailOnce && job.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}))
	worker := startClient(t, d, &weir.Config{
		Workers:           workers,
		Queues:            map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 20}},
		HeartbeatInterval: time.Second, // also each claim's timeout: generous for -race
		RescueInterval:    time.Second,
		FetchPollInterval: time.Hour,
		RetryPolicy:       weir.ExponentialBackoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond},
	})
	inserter, err := weir.NewClient(d, nil) // no queues: it only inserts
	if err != nil {
		t.Fatal(err)
	}

	const total, single = 500, 100
	var batch []weir.InsertManyParams
	for n := single; n < total; n++ {
		batch = append(batch, weir.InsertManyParams{Args: countArgs{N: n, FailOnce: n%10 == 0}})
	}
	if _, err := inserter.InsertMany(testCtx(t), batch); err != nil { // the bulk path
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, single)
	for n := range single {
		wg.Go(func() {
			if _, err := inserter.Insert(testCtx(t), countArgs{N: n, FailOnce: n%10 == 0}, nil); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	waitFor(t, 60*time.Second, "every job to complete", func() bool {
		return countStates(t, worker)[weir.JobStateCompleted] == total
	})
	if states := countStates(t, worker); len(states) != 1 {
		t.Fatalf("jobs by state: %v", states)
	}
	jobs, err := worker.JobList(testCtx(t), &weir.JobListParams{Limit: total})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs.Jobs) != total {
		t.Fatalf("listed %d jobs, want %d", len(jobs.Jobs), total)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, j := range jobs.Jobs {
		var args countArgs
		if err := jsonUnmarshal(j.Args, &args); err != nil {
			t.Fatal(err)
		}
		want := 1
		if args.FailOnce {
			want = 2
		}
		if runs[j.ID] != want || j.Attempt != want || len(j.Errors) != want-1 {
			t.Errorf("job %d (n %d): ran %d times, attempt %d, %d errors; want %d runs", j.ID, args.N, runs[j.ID], j.Attempt, len(j.Errors), want)
		}
	}
	if s := worker.Stats(); s.StaleWrites != 0 || s.LeasesLost != 0 || s.Abandoned != 0 {
		t.Errorf("stats: %+v", s)
	}
}

// TestClientGracefulStop stops a client holding running and prefetched jobs:
// the prefetched ones go back at once, the running ones finish, Stop returns
// without error, and no job is left running.
func TestClientGracefulStop(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	started := make(chan int64, 100)
	gate := make(chan struct{})
	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(func(ctx context.Context, job *weir.Job[countArgs]) error {
		started <- job.ID
		<-gate
		return nil
	}))
	c, err := weir.NewClient(d, &weir.Config{
		Workers:           workers,
		Queues:            map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 2, Prefetch: 4}},
		HeartbeatInterval: time.Second,
		RescueInterval:    time.Second,
		FetchPollInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	const total = 10
	for n := range total {
		if _, err := c.Insert(testCtx(t), countArgs{N: n}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	running := map[int64]bool{<-started: true, <-started: true}
	waitFor(t, 10*time.Second, "2 running and 4 prefetched jobs claimed", func() bool {
		return countStates(t, c)[weir.JobStateRunning] == 6
	})

	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stopped <- c.Stop(ctx)
	}()
	waitFor(t, 10*time.Second, "the prefetched jobs returned", func() bool {
		return countStates(t, c)[weir.JobStateAvailable] == total-2
	})
	close(gate)
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	if len(started) != 0 {
		t.Fatalf("%d more handlers started during the stop", len(started))
	}
	jobs, err := c.JobList(testCtx(t), &weir.JobListParams{Limit: total})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Jobs {
		switch {
		case running[j.ID]:
			if j.State != weir.JobStateCompleted || j.Attempt != 1 {
				t.Errorf("running job %d: %s attempt %d, want completed", j.ID, j.State, j.Attempt)
			}
		case j.State != weir.JobStateAvailable || j.Attempt != 0 || j.ReleaseCount != 0 || j.LeaseExpiresAt != nil:
			t.Errorf("job %d: %s attempt %d releases %d lease %v, want available as inserted", j.ID, j.State, j.Attempt, j.ReleaseCount, j.LeaseExpiresAt)
		}
	}
	if s := c.Stats(); s.Released != 4 || s.Finalized != 6 {
		t.Errorf("stats: %+v, want 4 released and 6 outcomes written", s)
	}
}

// TestClientCancelRunning: an operator's cancel reaches the running handler
// through the control channel. The heartbeat, the other path, runs every 20 s;
// the test waits 10 s at most.
func TestClientCancelRunning(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	started := make(chan int64, 1)
	causes := make(chan error, 1)
	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(func(ctx context.Context, job *weir.Job[countArgs]) error {
		started <- job.ID
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil // the job ends cancelled whatever the handler returns
	}))
	c := startClient(t, d, &weir.Config{
		Workers:           workers,
		Queues:            map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 1}},
		HeartbeatInterval: 20 * time.Second,
		LeaseDuration:     time.Minute,
	})
	res, err := c.Insert(testCtx(t), countArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if id := <-started; id != res.Job.ID {
		t.Fatalf("started job %d, want %d", id, res.Job.ID)
	}
	if _, err := c.JobCancel(testCtx(t), res.Job.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, weir.ErrJobCancelRequested) {
			t.Fatalf("handler cancelled with %v, want ErrJobCancelRequested", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancel did not reach the handler through the control channel")
	}
	waitFor(t, 10*time.Second, "the job to end cancelled", func() bool {
		j, err := c.JobGet(testCtx(t), res.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		return j.State == weir.JobStateCancelled
	})
}

// TestClientCallerTx: a job inserted in the caller's transaction exists when it
// commits, and not before; nothing wakes the worker then (the driver cannot see
// the commit), so it is found by polling. A rolled-back insert never runs.
func TestClientCallerTx(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ran := make(chan int, 10)
	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(func(ctx context.Context, job *weir.Job[countArgs]) error {
		ran <- job.Args.N
		return nil
	}))
	c := startClient(t, d, &weir.Config{
		Workers:           workers,
		Queues:            map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 2}},
		FetchPollInterval: 50 * time.Millisecond,
	})
	for n, commit := range []bool{false, true} {
		tx, err := d.DB().BeginTx(testCtx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(testCtx(t), "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		res, err := c.InsertSQLTx(testCtx(t), tx, countArgs{N: n}, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Other connections cannot see it yet.
		if _, err := c.JobGet(testCtx(t), res.Job.ID); !errors.Is(err, weir.ErrNotFound) {
			t.Fatalf("job before commit: %v, want ErrNotFound", err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	select {
	case n := <-ran:
		if n != 1 {
			t.Fatalf("ran job %d, want only the committed one (1)", n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the committed job did not run")
	}
	waitFor(t, 10*time.Second, "the committed job to complete", func() bool {
		return countStates(t, c)[weir.JobStateCompleted] == 1
	})
	if states := countStates(t, c); len(states) != 1 {
		t.Fatalf("jobs by state: %v", states)
	}
}

func jsonUnmarshal(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s: %w", b, err)
	}
	return nil
}

// TestClientUniqueByArgs checks unique jobs by args through the client: equal
// args in another key order and spacing collide, other args do not.
func TestClientUniqueByArgs(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	c, err := weir.NewClient(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := &weir.InsertOpts{Unique: weir.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}}
	insert := func(args string) *weir.InsertResult {
		t.Helper()
		res, err := c.Insert(t.Context(), weir.RawArgs{KindName: "u", JSON: json.RawMessage(args)}, opts)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := insert(`{"a": 1, "b": [1, 2]}`)
	again := insert(`{ "b":[1,2],"a":1 }`)
	other := insert(`{"a": 2, "b": [1, 2]}`)
	if first.Duplicate || !again.Duplicate || again.Job.ID != first.Job.ID || other.Duplicate || other.Job.ID == first.Job.ID {
		t.Fatalf("first %+v, again %+v, other %+v", first, again, other)
	}
}
