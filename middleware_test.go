package weir_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirq/weir"
)

// traceKey is the context key under which the middleware of these tests leave
// their names, for the worker to read.
type traceKey struct{}

// tracer records, in order, what the middleware and the worker of a test did.
type tracer struct {
	mu    sync.Mutex
	steps []string
}

func (tr *tracer) add(step string) {
	tr.mu.Lock()
	tr.steps = append(tr.steps, step)
	tr.mu.Unlock()
}

func (tr *tracer) get() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.steps)
}

// named returns middleware that records its name before and after next, and
// adds its name to the context's list.
func (tr *tracer) named(name string) weir.WorkerMiddleware {
	return func(next weir.WorkHandler) weir.WorkHandler {
		return func(ctx context.Context, job *weir.JobRow) error {
			tr.add(name + ">")
			names, _ := ctx.Value(traceKey{}).([]string)
			err := next(context.WithValue(ctx, traceKey{}, append(slices.Clone(names), name)), job)
			tr.add("<" + name)
			return err
		}
	}
}

// ownMiddlewareWorker is a probe worker with middleware of its own.
type ownMiddlewareWorker struct {
	tr *tracer
}

func (w ownMiddlewareWorker) Work(ctx context.Context, job *weir.Job[probeArgs]) error {
	names, _ := ctx.Value(traceKey{}).([]string)
	w.tr.add("work " + strings.Join(names, ","))
	return nil
}

func (w ownMiddlewareWorker) Middleware() []weir.WorkerMiddleware {
	return []weir.WorkerMiddleware{w.tr.named("own")}
}

// TestWorkerMiddlewareOrder checks that the client's middleware wrap the
// worker's own, the first outermost, that each runs once per attempt around the
// worker, and that values they put in the context reach the worker.
func TestWorkerMiddlewareOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	tr := &tracer{}
	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.Worker[probeArgs](ownMiddlewareWorker{tr: tr}))
	cfg := fastConfig(workers, nil)
	cfg.WorkerMiddleware = []weir.WorkerMiddleware{tr.named("a"), tr.named("b")}
	id := b.insertProbe(t, "ok", nil)
	b.start(t, cfg)
	waitFor(t, 30*time.Second, "the job to complete", func() bool { return b.job(t, id).State == weir.JobStateCompleted })
	want := []string{"a>", "b>", "own>", "work a,b,own", "<own", "<b", "<a"}
	if got := tr.get(); !slices.Equal(got, want) {
		t.Fatalf("steps %q, want %q", got, want)
	}
}

// TestWorkerMiddlewareOutcomes checks that what a middleware returns is the
// attempt's outcome, classified as a worker's error is, that a veto keeps the
// worker from running, and that a panic in a middleware is the attempt's error.
func TestWorkerMiddlewareOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var mu sync.Mutex
	ran := map[string]bool{}
	workers := probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		mu.Lock()
		ran[job.Args.Name] = true
		mu.Unlock()
		if job.Args.Name == "timeout" {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	causes := make(chan error, 1)
	mw := func(next weir.WorkHandler) weir.WorkHandler {
		return func(ctx context.Context, job *weir.JobRow) error {
			var args probeArgs
			if err := json.Unmarshal(job.Args, &args); err != nil {
				return err
			}
			switch args.Name {
			case "veto":
				return errors.New("vetoed by middleware")
			case "cancel":
				return weir.JobCancel(errors.New("cancelled by middleware"))
			case "discard":
				return weir.JobDiscard(nil)
			case "panic":
				panic("middleware panicked")
			case "timeout":
				err := next(ctx, job)
				causes <- context.Cause(ctx)
				return err
			}
			return next(ctx, job)
		}
	}
	cfg := fastConfig(workers, nil)
	cfg.WorkerMiddleware = []weir.WorkerMiddleware{mw}
	cfg.JobTimeout = 50 * time.Millisecond
	want := map[string]struct {
		state weir.JobState
		err   string // in the attempt's error, when one is recorded
	}{
		"ok":      {weir.JobStateCompleted, ""},
		"veto":    {weir.JobStateDiscarded, "vetoed by middleware"},
		"cancel":  {weir.JobStateCancelled, "cancelled by middleware"},
		"discard": {weir.JobStateDiscarded, ""},
		"panic":   {weir.JobStateDiscarded, "middleware panicked"},
		"timeout": {weir.JobStateDiscarded, "deadline exceeded"},
	}
	ids := map[string]int64{}
	for name := range want {
		ids[name] = b.insertProbe(t, name, &weir.InsertOpts{MaxAttempts: 1})
	}
	b.start(t, cfg)
	for name, w := range want {
		waitFor(t, 30*time.Second, name+" to end "+string(w.state), func() bool { return b.job(t, ids[name]).State.Final() })
		job := b.job(t, ids[name])
		if job.State != w.state {
			t.Errorf("%s: state %s, want %s", name, job.State, w.state)
		}
		if w.err != "" && (len(job.Errors) != 1 || !strings.Contains(job.Errors[0].Error, w.err)) {
			t.Errorf("%s: errors %+v, want one saying %q", name, job.Errors, w.err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, name := range []string{"veto", "cancel", "discard", "panic"} {
		if ran[name] {
			t.Errorf("%s: the worker ran past a middleware that did not call it", name)
		}
	}
	if !ran["ok"] || !ran["timeout"] {
		t.Errorf("workers ran for %v, want ok and timeout among them", ran)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, weir.ErrJobTimeout) {
			t.Errorf("the middleware saw cause %v after a timeout, want ErrJobTimeout", cause)
		}
	default:
		t.Error("the middleware did not see the attempt that timed out end")
	}
}

// TestWorkerMiddlewareBuildPanic checks that a middleware that panics when it
// is given the next handler fails the attempt, as a panic in the handler does,
// and leaves the client working.
func TestWorkerMiddlewareBuildPanic(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cfg := fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }), nil)
	cfg.WorkerMiddleware = []weir.WorkerMiddleware{func(weir.WorkHandler) weir.WorkHandler { panic("building panicked") }}
	ids := []int64{b.insertProbe(t, "one", &weir.InsertOpts{MaxAttempts: 1}), b.insertProbe(t, "two", &weir.InsertOpts{MaxAttempts: 1})}
	c := b.start(t, cfg)
	for _, id := range ids {
		waitFor(t, 30*time.Second, "the job to end", func() bool { return b.job(t, id).State.Final() })
		job := b.job(t, id)
		if job.State != weir.JobStateDiscarded || len(job.Errors) != 1 || !strings.Contains(job.Errors[0].Error, "panic: building panicked") {
			t.Errorf("job %d: %s with errors %+v, want discarded after a panic", id, job.State, job.Errors)
		}
	}
	if err := c.Stop(testCtx(t)); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// TestWorkerMiddlewareNil checks that a nil middleware is refused when it is
// configured, not when a job runs.
func TestWorkerMiddlewareNil(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{noMigrate: true})
	tr := &tracer{}
	_, err := weir.NewClient(b.driver, &weir.Config{WorkerMiddleware: []weir.WorkerMiddleware{tr.named("a"), nil}})
	if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != "Config.WorkerMiddleware" ||
		!strings.Contains(e.Message, "Config.WorkerMiddleware[1] is nil") {
		t.Errorf("nil client middleware: %v", err)
	}
	workers := weir.NewWorkers()
	err = weir.AddWorkerSafely(workers, weir.Worker[probeArgs](nilMiddlewareWorker{}))
	if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != "Middleware" ||
		!strings.Contains(e.Message, `kind "probe" has a nil middleware at 0`) {
		t.Errorf("nil worker middleware: %v", err)
	}
	if kinds := workers.Kinds(); len(kinds) != 0 {
		t.Errorf("a worker with a nil middleware was added: %v", kinds)
	}
}

type nilMiddlewareWorker struct{}

func (nilMiddlewareWorker) Work(context.Context, *weir.Job[probeArgs]) error { return nil }
func (nilMiddlewareWorker) Middleware() []weir.WorkerMiddleware {
	return []weir.WorkerMiddleware{nil}
}
