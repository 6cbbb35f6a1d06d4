package weir_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirq/weir"
)

// together is a handler for jobs that each wait until n of them run at once
// (jobs named "short" return at once); wait fails t unless all n start within
// 30 s.
type together struct {
	n       int64
	started atomic.Int64
	all     chan struct{}
}

func newTogether(n int64) *together { return &together{n: n, all: make(chan struct{})} }

func (g *together) handler(ctx context.Context, job *weir.Job[probeArgs]) error {
	if job.Args.Name == "short" {
		return nil
	}
	if g.started.Add(1) == g.n {
		close(g.all)
	}
	select {
	case <-g.all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *together) wait(t *testing.T) {
	t.Helper()
	select {
	case <-g.all:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d of %d handlers started, each waiting for all of them", g.started.Load(), g.n)
	}
}

// TestWorkersStartTogether checks that a claim of jobs whose handlers all wait
// for each other starts MaxWorkers of them at once. New workers start a few
// at a time, each starting the next few as it begins; were that chain broken,
// the jobs after the first few would wait for a handler to return, and here
// none would. The queue is not polled meanwhile, so that the claim loop does
// not start them either.
func TestWorkersStartTogether(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const n = 40
	for range n {
		b.insertProbe(t, "p", queueOpts("q"))
	}
	g := newTogether(n)
	cfg := fastConfig(probeWorkers(g.handler), map[string]weir.QueueConfig{"q": {MaxWorkers: n}})
	// No poll while the test runs: the jobs were inserted before the client
	// started, so no notification comes either, and only the workers
	// themselves can start the jobs left waiting for one.
	cfg.FetchPollInterval = time.Hour
	b.start(t, cfg)
	g.wait(t)
	waitFor(t, 30*time.Second, "every job completed", func() bool { return b.count(t, "state = 'completed'") == n })
}

// TestWorkersStartTogetherAfterShortJobs is TestWorkersStartTogether with
// short jobs claimed first: their average time says that a few workers in
// turn start a buffer's jobs soon enough, and the last of them return just
// before the long ones start. When the handlers running then return no more,
// the producer looks again on its own (the queue is not polled) and starts
// the rest, as long handlers need.
func TestWorkersStartTogetherAfterShortJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const short, n = 2000, 40
	batch := make([]weir.InsertManyParams, short+n)
	for i := range batch {
		name := "short"
		if i >= short {
			name = "long"
		}
		batch[i] = weir.InsertManyParams{Args: probeArgs{Name: name}, InsertOpts: queueOpts("q")}
	}
	if _, err := b.client.InsertMany(testCtx(t), batch); err != nil {
		t.Fatal(err)
	}
	g := newTogether(n)
	cfg := fastConfig(probeWorkers(g.handler), map[string]weir.QueueConfig{"q": {MaxWorkers: n, Prefetch: short + n}})
	cfg.FetchPollInterval = time.Hour
	b.start(t, cfg)
	g.wait(t)
	waitFor(t, 30*time.Second, "every job completed", func() bool { return b.count(t, "state = 'completed'") == short+n })
}

// TestShortJobsFewWorkers: a drain of handlers that return at once is run by
// a few workers in turn, not by a worker per job buffered (each keeping its
// stack): after it, far fewer workers exist than MaxWorkers.
func TestShortJobsFewWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const jobs, most = 20_000, 1000
	cfg := fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }),
		map[string]weir.QueueConfig{"q": {MaxWorkers: most, Prefetch: most}})
	batch := make([]weir.InsertManyParams, jobs)
	for i := range batch {
		batch[i] = weir.InsertManyParams{Args: probeArgs{Name: "short"}, InsertOpts: queueOpts("q")}
	}
	if _, err := b.client.InsertMany(testCtx(t), batch); err != nil {
		t.Fatal(err)
	}
	c := b.start(t, cfg)
	waitFor(t, 60*time.Second, "the jobs completed", func() bool { return b.count(t, "state = 'completed'") == jobs })
	// Idle workers wait for jobs until Stop: those alive now are every worker
	// the drain made.
	workers := weir.WorkersAlive(c)
	t.Logf("%d workers for %d jobs, MaxWorkers %d", workers, jobs, most)
	if workers > most/4 {
		t.Fatalf("%d workers ran %d jobs that return at once; want at most %d (MaxWorkers %d)", workers, jobs, most/4, most)
	}
}
