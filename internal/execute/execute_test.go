package execute_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir/internal/completer"
	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/internal/execute"
	"github.com/weirq/weir/internal/lease"
	"github.com/weirq/weir/internal/teststore"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// insert inserts a job due in an hour and returns its id.
func insert(t *testing.T, exec weirdriver.Executor) int64 {
	t.Helper()
	res, err := exec.JobInsert(t.Context(), []*weirdriver.JobInsertParams{{
		Kind: "k", Queue: "q", Args: []byte(`{}`), Priority: 1, MaxAttempts: 3, ScheduledAt: time.Now().Add(time.Hour),
	}})
	if err != nil {
		t.Fatal(err)
	}
	return res[0].Job.ID
}

type scopeKey struct{}

// client is an execute.Client whose handler is handler, with timeout, that
// completes a job whose handler returned nil and retries it otherwise, in an
// hour; outcome, when set, changes that outcome before it is written.
type client struct {
	timeout time.Duration
	handler func(ctx context.Context, j *lease.Job) error
	outcome func(f *completer.Finalization)
	// prepared counts the calls of the prepared call, cause is the cause the
	// handler's return came with.
	prepared int
	cause    error
}

func (c *client) Prepare(*weirtype.JobRow) func(context.Context) error {
	return func(context.Context) error { c.prepared++; return nil }
}

func (c *client) Scope(ctx context.Context, _ *lease.Table) context.Context {
	return context.WithValue(ctx, scopeKey{}, "scoped")
}

func (c *client) Timeout(*weirtype.JobRow) time.Duration { return c.timeout }

func (c *client) Run(ctx context.Context, j *lease.Job) error {
	if err := j.Work(ctx); err != nil {
		return err
	}
	if c.handler == nil {
		return nil
	}
	return c.handler(ctx, j)
}

func (c *client) Outcome(j *lease.Job, err, cause error, _ time.Duration, left lease.Returned) *completer.Finalization {
	c.cause = cause
	f := &completer.Finalization{Job: j, Err: err, CompletedInTx: left.CompletedInTx,
		Params: weirdriver.JobFinalizeParams{ID: j.Row.ID, LeaseToken: j.Token, Outcome: weirdriver.OutcomeCompleted}}
	if err != nil {
		f.Params.Outcome, f.Params.ScheduledAt = weirdriver.OutcomeRetry, time.Now().Add(time.Hour)
		f.Params.Error = &weirtype.AttemptError{Attempt: j.Row.Attempt, At: time.Now(), Error: err.Error()}
	}
	if c.outcome != nil {
		c.outcome(f)
	}
	return f
}

func (c *client) Event(o weirdriver.Outcome) string { return "event " + string(o) }

var settings = execute.Settings{ClientID: "tester", LeaseDuration: time.Minute}

// TestWorkWritesOutcome: Work leases a job that is not yet due, runs its
// prepared call with the client's scope and the job's lease in the context,
// and writes the outcome of what the handler returned.
func TestWorkWritesOutcome(t *testing.T) {
	t.Parallel()
	for _, d := range teststore.Both(t) {
		for _, fail := range []bool{false, true} {
			exec := d.Executor()
			id := insert(t, exec)
			c := &client{handler: func(ctx context.Context, j *lease.Job) error {
				if ctx.Value(scopeKey{}) != "scoped" || lease.FromContext(ctx) != j {
					return errors.New("the context lacks the client's scope or the job's lease")
				}
				if fail {
					return errors.New("it failed")
				}
				return nil
			}}
			res, err := execute.New(c, settings).Work(t.Context(), exec, id)
			if err != nil {
				t.Fatal(err)
			}
			want, state, msg := "event completed", weirtype.JobStateCompleted, ""
			if fail {
				want, state, msg = "event retry", weirtype.JobStateRetryable, "it failed"
			}
			if res.Event != want || res.Job.State != state || res.Job.Attempt != 1 || res.Job.AttemptedBy != "tester" {
				t.Fatalf("%s, fail %v: event %q, job %s at attempt %d by %q; want %q, %s at 1 by tester",
					d.Name(), fail, res.Event, res.Job.State, res.Job.Attempt, res.Job.AttemptedBy, want, state)
			}
			if (msg == "") != (res.Err == nil) || (res.Err != nil && res.Err.Error() != msg) {
				t.Fatalf("%s, fail %v: handler error %v, want %q", d.Name(), fail, res.Err, msg)
			}
			if c.prepared != 1 {
				t.Fatalf("%s: the prepared call ran %d times, want once", d.Name(), c.prepared)
			}
		}
	}
}

// TestWorkRefusesJobNotPending: a job that is not scheduled, available or
// retryable is not run, and stays as it was.
func TestWorkRefusesJobNotPending(t *testing.T) {
	t.Parallel()
	for _, d := range teststore.Both(t) {
		exec := d.Executor()
		id := insert(t, exec)
		if _, err := execute.New(&client{}, settings).Work(t.Context(), exec, id); err != nil {
			t.Fatal(err)
		}
		c := &client{}
		_, err := execute.New(c, settings).Work(t.Context(), exec, id)
		if err == nil || !strings.Contains(err.Error(), "it is completed") {
			t.Fatalf("%s: Work of a completed job: %v", d.Name(), err)
		}
		job, err := exec.JobGet(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if c.prepared != 0 || job.State != weirtype.JobStateCompleted || job.Attempt != 1 {
			t.Fatalf("%s: the refused job ran (%d) or changed: %s at attempt %d", d.Name(), c.prepared, job.State, job.Attempt)
		}
	}
}

// TestWorkTimeout: the handler's context ends at the client's timeout for
// the job, with ErrJobTimeout as its cause; a timeout that is not positive
// sets no deadline.
func TestWorkTimeout(t *testing.T) {
	t.Parallel()
	d := teststore.Both(t)[0]
	exec := d.Executor()
	c := &client{timeout: time.Millisecond, handler: func(ctx context.Context, _ *lease.Job) error {
		<-ctx.Done()
		return context.Cause(ctx)
	}}
	res, err := execute.New(c, settings).Work(t.Context(), exec, insert(t, exec))
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(c.cause, weirtype.ErrJobTimeout) || !errors.Is(res.Err, weirtype.ErrJobTimeout) || res.Job.State != weirtype.JobStateRetryable {
		t.Fatalf("cause %v, handler error %v, job %s; want the timeout, and the job retryable", c.cause, res.Err, res.Job.State)
	}
	for _, timeout := range []time.Duration{0, -1} {
		c := &client{timeout: timeout, handler: func(ctx context.Context, _ *lease.Job) error {
			if _, ok := ctx.Deadline(); ok {
				return errors.New("the context has a deadline")
			}
			return nil
		}}
		res, err := execute.New(c, settings).Work(t.Context(), exec, insert(t, exec))
		if err != nil {
			t.Fatal(err)
		}
		if res.Err != nil || c.cause != nil {
			t.Fatalf("timeout %v: handler error %v, cause %v", timeout, res.Err, c.cause)
		}
	}
}

// TestWorkLeaseLost: an outcome the fence refuses is an error wrapping
// ErrLeaseLost, and the job is left as the fence found it.
func TestWorkLeaseLost(t *testing.T) {
	t.Parallel()
	for _, d := range teststore.Both(t) {
		exec := d.Executor()
		id := insert(t, exec)
		c := &client{outcome: func(f *completer.Finalization) { f.Params.LeaseToken++ }}
		_, err := execute.New(c, settings).Work(t.Context(), exec, id)
		if !errors.Is(err, weirtype.ErrLeaseLost) {
			t.Fatalf("%s: Work with a stale lease token: %v, want ErrLeaseLost", d.Name(), err)
		}
		if job, err := exec.JobGet(t.Context(), id); err != nil || job.State != weirtype.JobStateRunning {
			t.Fatalf("%s: job %+v, %v; want it running still", d.Name(), job, err)
		}
	}
}

// TestWorkCompletedInTx: the outcome of a handler that completed its job in
// its own transaction is that transaction's: Work writes nothing and names
// the completion.
func TestWorkCompletedInTx(t *testing.T) {
	t.Parallel()
	for _, d := range teststore.Both(t) {
		exec := d.Executor()
		id := insert(t, exec)
		c := &client{
			handler: func(context.Context, *lease.Job) error { return errors.New("failed after its transaction") },
			outcome: func(f *completer.Finalization) { f.CompletedInTx = true },
		}
		res, err := execute.New(c, settings).Work(t.Context(), exec, id)
		if err != nil {
			t.Fatal(err)
		}
		// The test's handler wrote nothing: the job is running still.
		if res.Event != "event completed" || res.Job.State != weirtype.JobStateRunning {
			t.Fatalf("%s: event %q, job %s; want the completion, and nothing written", d.Name(), res.Event, res.Job.State)
		}
	}
}

// TestWorkCancelRequested: an operator's cancel while the handler runs ends
// the job cancelled, and Work names the cancel, whatever the handler
// returned.
func TestWorkCancelRequested(t *testing.T) {
	t.Parallel()
	for _, d := range teststore.Both(t) {
		exec := d.Executor()
		c := &client{handler: func(ctx context.Context, j *lease.Job) error {
			if _, err := exec.JobCancel(ctx, j.Row.ID); err != nil {
				return err
			}
			return errors.New("it failed")
		}}
		res, err := execute.New(c, settings).Work(t.Context(), exec, insert(t, exec))
		if err != nil {
			t.Fatal(err)
		}
		if res.Event != "event cancel" || res.Job.State != weirtype.JobStateCancelled || res.Err == nil {
			t.Fatalf("%s: event %q, job %s, handler error %v; want the cancel", d.Name(), res.Event, res.Job.State, res.Err)
		}
	}
}
