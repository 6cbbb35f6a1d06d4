package weir_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirq/weir"
)

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
	var started atomic.Int64
	all := make(chan struct{})
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		if started.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), map[string]weir.QueueConfig{"q": {MaxWorkers: n}})
	// No poll while the test runs: the jobs were inserted before the client
	// started, so no notification comes either, and only the workers
	// themselves can start the jobs left waiting for one.
	cfg.FetchPollInterval = time.Hour
	b.start(t, cfg)
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d of %d handlers started, each waiting for all of them", started.Load(), n)
	}
	waitFor(t, 30*time.Second, "every job completed", func() bool { return b.count(t, "state = 'completed'") == n })
}
