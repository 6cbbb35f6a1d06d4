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

// stampMiddleware adds {"stamp": name} to each job's metadata and the tag name,
// records the jobs it saw and the ids it got back.
type stampMiddleware struct {
	name string
	mu   sync.Mutex
	seen []weir.InsertParams
	ids  []int64
}

func (s *stampMiddleware) middleware(next weir.InsertHandler) weir.InsertHandler {
	return func(ctx context.Context, jobs []*weir.InsertParams) ([]*weir.InsertResult, error) {
		s.mu.Lock()
		for _, j := range jobs {
			s.seen = append(s.seen, *j)
			meta := map[string]any{}
			if len(j.Metadata) > 0 {
				if err := json.Unmarshal(j.Metadata, &meta); err != nil {
					s.mu.Unlock()
					return nil, err
				}
			}
			meta["stamp"] = append(toStrings(meta["stamp"]), s.name)
			j.Metadata, _ = json.Marshal(meta)
			j.Tags = append(j.Tags, s.name)
		}
		s.mu.Unlock()
		res, err := next(ctx, jobs)
		s.mu.Lock()
		for _, r := range res {
			s.ids = append(s.ids, r.Job.ID)
		}
		s.mu.Unlock()
		return res, err
	}
}

func toStrings(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, x := range list {
		out = append(out, x.(string))
	}
	return out
}

// TestInsertMiddleware checks that insert middleware see every job with its
// defaults applied, in order, the first outermost, on every insert call (one
// statement, the bulk path, a caller's transaction); that what they change is
// written; and that they see the results.
func TestInsertMiddleware(t *testing.T) {
	t.Parallel()
	outer, inner := &stampMiddleware{name: "outer"}, &stampMiddleware{name: "inner"}
	b := setup(t, &setupOpts{config: &weir.Config{
		InsertMiddleware: []weir.InsertMiddleware{outer.middleware, inner.middleware},
	}})
	ctx := testCtx(t)
	var ids []int64
	// Room in the caller's slice, which a middleware's append must not use.
	tags := append(make([]string, 0, 4), "mine")
	res, err := b.client.Insert(ctx, emailArgs{To: "one"}, &weir.InsertOpts{Metadata: json.RawMessage(`{"own": 1}`), Tags: tags})
	if err != nil {
		t.Fatal(err)
	}
	if extra := tags[:2]; extra[1] != "" {
		t.Errorf("a middleware wrote into the caller's tags: %q", extra)
	}
	ids = append(ids, res.Job.ID)
	many := make([]weir.InsertManyParams, 100) // past the bulk threshold
	for i := range many {
		many[i] = weir.InsertManyParams{Args: emailArgs{To: "many"}}
	}
	results, err := b.client.InsertMany(ctx, many)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		ids = append(ids, r.Job.ID)
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err = b.client.InsertTx(ctx, tx, emailArgs{To: "tx"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, res.Job.ID)

	for _, s := range []*stampMiddleware{outer, inner} {
		if !slices.Equal(s.ids, ids) {
			t.Errorf("%s saw ids %v, want %v", s.name, s.ids, ids)
		}
		if len(s.seen) != len(ids) {
			t.Fatalf("%s saw %d jobs, want %d", s.name, len(s.seen), len(ids))
		}
		first := s.seen[0]
		if first.Kind != (emailArgs{}).Kind() || first.Queue != weir.DefaultQueue || first.Priority != weir.DefaultPriority ||
			first.MaxAttempts != weir.DefaultMaxAttempts || string(first.Args) != `{"to":"one"}` {
			t.Errorf("%s saw %+v, want the encoded job with its defaults", s.name, first)
		}
	}
	// The inner one saw what the outer one changed.
	if got := string(inner.seen[0].Metadata); !strings.Contains(got, `"stamp":["outer"]`) {
		t.Errorf("the inner middleware saw metadata %s, want the outer one's stamp", got)
	}
	for _, id := range ids {
		job := b.job(t, id)
		var meta struct {
			Own   int      `json:"own"`
			Stamp []string `json:"stamp"`
		}
		if err := json.Unmarshal(job.Metadata, &meta); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(meta.Stamp, []string{"outer", "inner"}) || !slices.Contains(job.Tags, "outer") || !slices.Contains(job.Tags, "inner") {
			t.Errorf("job %d: metadata %s, tags %v, want both stamps", id, job.Metadata, job.Tags)
		}
		if id == ids[0] && (meta.Own != 1 || !slices.Equal(job.Tags, []string{"mine", "outer", "inner"})) {
			t.Errorf("the first job lost its own metadata or tags: %s, %v", job.Metadata, job.Tags)
		}
	}
	// A job a middleware passed on inside a transaction that rolls back is gone
	// with it (G8).
	tx, err = b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rolled, err := b.client.InsertTx(ctx, tx, emailArgs{To: "rolled back"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.JobGet(ctx, rolled.Job.ID); !errors.Is(err, weir.ErrNotFound) {
		t.Errorf("a job inserted through middleware in a rolled-back transaction: %v, want ErrNotFound", err)
	}
}

// TestInsertMiddlewareRefusals checks that an insert middleware can refuse an
// insert, that every change it makes is checked as a caller's input is, that a
// batch whose length it changed is refused, and that in each case nothing is
// written.
func TestInsertMiddlewareRefusals(t *testing.T) {
	t.Parallel()
	errRefused := errors.New("refused by middleware")
	each := func(change func(*weir.InsertParams)) weir.InsertMiddleware {
		return func(next weir.InsertHandler) weir.InsertHandler {
			return func(ctx context.Context, jobs []*weir.InsertParams) ([]*weir.InsertResult, error) {
				for _, j := range jobs {
					change(j)
				}
				return next(ctx, jobs)
			}
		}
	}
	for _, tc := range []struct {
		name string
		mw   weir.InsertMiddleware
		// field is the InvalidError's Field; when empty, want is in the error.
		field, want string
	}{
		{"refuse", func(weir.InsertHandler) weir.InsertHandler {
			return func(context.Context, []*weir.InsertParams) ([]*weir.InsertResult, error) { return nil, errRefused }
		}, "", "refused by middleware"},
		{"priority", each(func(j *weir.InsertParams) { j.Priority = 9 }), "InsertOpts.Priority", "priority 9 is out of range"},
		{"queue", each(func(j *weir.InsertParams) { j.Queue = "a queue" }), "InsertOpts.Queue", "characters outside"},
		{"kind", each(func(j *weir.InsertParams) { j.Kind = "" }), "Kind", "kind is empty"},
		{"tag", each(func(j *weir.InsertParams) { j.Tags = []string{"bad tag"} }), "InsertOpts.Tags", "characters outside"},
		{"args not JSON", each(func(j *weir.InsertParams) { j.Args = json.RawMessage(`{"a":`) }), "Args", "must encode to a JSON object"},
		{"args changed in place", each(func(j *weir.InsertParams) { j.Args[len(j.Args)-1] = ',' }), "Args", "must encode to a JSON object"},
		{"args an array", each(func(j *weir.InsertParams) { j.Args = json.RawMessage(`[1]`) }), "Args", "must encode to a JSON object"},
		{"args with NUL", each(func(j *weir.InsertParams) { j.Args = json.RawMessage(`{"a":"\u0000"}`) }), "Args", "NUL character"},
		{"metadata", each(func(j *weir.InsertParams) { j.Metadata = json.RawMessage(`"x"`) }), "InsertOpts.Metadata", "must be a JSON object"},
		{"metadata duplicate key", each(func(j *weir.InsertParams) { j.Metadata = json.RawMessage(`{"a":1,"a":2}`) }), "InsertOpts.Metadata", `the key "a" twice`},
		{"scheduled", each(func(j *weir.InsertParams) { j.ScheduledAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }), "InsertOpts.ScheduledAt", "out of range"},
		{"unique", each(func(j *weir.InsertParams) { j.Unique.ByPeriod = -time.Second }), "InsertOpts.Unique.ByPeriod", "negative"},
		{"dropped job", func(next weir.InsertHandler) weir.InsertHandler {
			return func(ctx context.Context, jobs []*weir.InsertParams) ([]*weir.InsertResult, error) {
				return next(ctx, jobs[1:])
			}
		}, "", "insert middleware passed on 1 jobs of the 2 it was given; nothing was written"},
		{"nil job", func(next weir.InsertHandler) weir.InsertHandler {
			return func(ctx context.Context, jobs []*weir.InsertParams) ([]*weir.InsertResult, error) {
				return next(ctx, []*weir.InsertParams{jobs[0], nil})
			}
		}, "params", "the job is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, &setupOpts{config: &weir.Config{InsertMiddleware: []weir.InsertMiddleware{tc.mw}}})
			ctx := testCtx(t)
			_, err := b.client.InsertMany(ctx, []weir.InsertManyParams{{Args: emailArgs{To: "a"}}, {Args: emailArgs{To: "b"}}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
			if tc.field != "" {
				if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != tc.field || e.Jobs != 2 {
					t.Errorf("error %#v, want an *InvalidError about %s in a batch of 2", err, tc.field)
				}
			}
			if tc.name == "refuse" && err != errRefused {
				t.Errorf("error %v, want the middleware's own", err)
			}
			if n := b.count(t, "true"); n != 0 {
				t.Errorf("%d jobs written", n)
			}
		})
	}
}

// TestInsertMiddlewareResults checks that a middleware that returns a result
// per job it did not write is reported, not passed on as a short slice.
func TestInsertMiddlewareResults(t *testing.T) {
	t.Parallel()
	short := func(next weir.InsertHandler) weir.InsertHandler {
		return func(ctx context.Context, jobs []*weir.InsertParams) ([]*weir.InsertResult, error) {
			res, err := next(ctx, jobs)
			return res[:0], err
		}
	}
	b := setup(t, &setupOpts{config: &weir.Config{InsertMiddleware: []weir.InsertMiddleware{short}}})
	res, err := b.client.Insert(testCtx(t), emailArgs{To: "a"}, nil)
	if err == nil || !strings.Contains(err.Error(), "insert middleware returned 0 results for 1 jobs, which may have been written") || res != nil {
		t.Errorf("%v, %v: want an error saying the middleware returned no result", res, err)
	}
	_, err = weir.NewClient(b.driver, &weir.Config{InsertMiddleware: []weir.InsertMiddleware{short, nil}})
	if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != "Config.InsertMiddleware" ||
		!strings.Contains(e.Message, "Config.InsertMiddleware[1] is nil") {
		t.Errorf("nil insert middleware: %v", err)
	}
}
