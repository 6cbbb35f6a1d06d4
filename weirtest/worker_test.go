package weirtest_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirtest"
)

// task's Do says what its handler does.
type task struct {
	Do string `json:"do"`
}

func (task) Kind() string { return "task" }

type ctxKey struct{}

// taskWorker does what the task says; its own timeout is 50 ms.
type taskWorker struct{}

func (taskWorker) Timeout(*weir.JobRow) time.Duration { return 50 * time.Millisecond }

func (taskWorker) Work(ctx context.Context, job *weir.Job[task]) error {
	switch job.Args.Do {
	case "ok":
		return nil
	case "fail":
		return errors.New("it failed")
	case "snooze":
		return weir.JobSnooze(time.Hour)
	case "cancel":
		return weir.JobCancel(errors.New("no point"))
	case "discard":
		return weir.JobDiscard(errors.New("bad input"))
	case "panic":
		panic("it panicked")
	case "hang":
		<-ctx.Done()
		return context.Cause(ctx)
	case "output":
		if err := weir.SetProgress(ctx, map[string]int{"done": 3}); err != nil {
			return err
		}
		return weir.RecordOutput(ctx, map[string]bool{"sent": true})
	case "middleware":
		if v, _ := ctx.Value(ctxKey{}).(string); v != "set by middleware" {
			return errors.New("the middleware's value is missing")
		}
		return nil
	}
	return errors.New("unknown task " + job.Args.Do)
}

// TestWorker runs each kind of outcome through weirtest.Worker on each store,
// in each transaction type that can run a job, and on the driver's own
// connections.
func TestWorker(t *testing.T) {
	t.Parallel()
	for _, s := range stores(t) {
		mw := func(next weir.WorkHandler) weir.WorkHandler {
			return func(ctx context.Context, job *weir.JobRow) error {
				return next(context.WithValue(ctx, ctxKey{}, "set by middleware"), job)
			}
		}
		w := weirtest.NewWorker(t, s.driver, &weir.Config{WorkerMiddleware: []weir.WorkerMiddleware{mw}}, weir.Worker[task](taskWorker{}))
		cases := []struct {
			do    string
			event weir.EventKind
			state weir.JobState
			err   string // in the handler's error
		}{
			{"ok", weir.EventJobCompleted, weir.JobStateCompleted, ""},
			{"middleware", weir.EventJobCompleted, weir.JobStateCompleted, ""},
			{"output", weir.EventJobCompleted, weir.JobStateCompleted, ""},
			{"fail", weir.EventJobFailed, weir.JobStateRetryable, "it failed"},
			{"snooze", weir.EventJobSnoozed, weir.JobStateScheduled, "snooze"},
			{"cancel", weir.EventJobCancelled, weir.JobStateCancelled, "no point"},
			{"discard", weir.EventJobDiscarded, weir.JobStateDiscarded, "bad input"},
			{"panic", weir.EventJobFailed, weir.JobStateRetryable, "it panicked"},
			{"hang", weir.EventJobFailed, weir.JobStateRetryable, weir.ErrJobTimeout.Error()},
		}
		for _, via := range []string{"none", "pgx", "database/sql"} {
			begin, ok := s.begin[via]
			if via != "none" && (!ok || (s.name == "postgres" && via == "database/sql")) {
				continue // TestWorkerRefusesInsertOnlyTx covers pgx's database/sql
			}
			for _, c := range cases {
				t.Run(s.name+"/"+via+"/"+c.do, func(t *testing.T) {
					var tx any
					if via != "none" {
						var rollback func()
						tx, _, rollback = begin(t)
						defer rollback()
					}
					// Due tomorrow: Work runs it now all the same.
					res, err := w.Work(t.Context(), tx, task{Do: c.do}, &weir.InsertOpts{ScheduledAt: time.Now().Add(24 * time.Hour)})
					if err != nil {
						t.Fatal(err)
					}
					attempt := 1
					if c.event == weir.EventJobSnoozed {
						attempt = 0 // a snooze spends no attempt
					}
					if res.Event != c.event || res.Job.State != c.state || res.Job.Attempt != attempt {
						t.Fatalf("%s: event %s, job %s at attempt %d; want %s, %s at %d", c.do, res.Event, res.Job.State, res.Job.Attempt, c.event, c.state, attempt)
					}
					switch {
					case c.err == "" && res.Err != nil:
						t.Fatalf("%s: handler error %v", c.do, res.Err)
					case c.err != "" && (res.Err == nil || !strings.Contains(res.Err.Error(), c.err)):
						t.Fatalf("%s: handler error %v, want one saying %q", c.do, res.Err, c.err)
					}
					if c.do == "output" && (compact(t, res.Job.Output) != `{"sent":true}` || compact(t, res.Job.Progress) != `{"done":3}`) {
						t.Fatalf("output %s, progress %s", res.Job.Output, res.Job.Progress)
					}
					if c.state == weir.JobStateRetryable && (len(res.Job.Errors) != 1 || !strings.Contains(res.Job.Errors[0].Error, c.err)) {
						t.Fatalf("%s: errors recorded %+v", c.do, res.Job.Errors)
					}
				})
			}
		}
	}
}

// TestWorkerInTxRollsBack: what Work did in a transaction is gone with it,
// and a handler that completes its job in that transaction completes it there.
func TestWorkerInTxRollsBack(t *testing.T) {
	t.Parallel()
	for _, s := range stores(t) {
		via := "pgx"
		if s.name != "postgres" {
			via = "database/sql"
		}
		t.Run(s.name, func(t *testing.T) {
			tx, _, rollback := s.begin[via](t)
			w := weirtest.NewWorker(t, s.driver, nil, weir.WorkFunc(func(ctx context.Context, job *weir.Job[task]) error {
				var err error
				switch tx := tx.(type) {
				case pgx.Tx:
					err = weir.JobCompleteTx(ctx, tx, job.JobRow)
				case *sql.Tx:
					err = weir.JobCompleteSQLTx(ctx, tx, job.JobRow)
				}
				if err != nil {
					return err
				}
				return errors.New("failed after completing in its transaction")
			}))
			res, err := w.Work(t.Context(), tx, task{Do: "complete in tx"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Event != weir.EventJobCompleted || res.Job.State != weir.JobStateCompleted {
				t.Fatalf("completed in the test's transaction: event %s, state %s (handler said %v)", res.Event, res.Job.State, res.Err)
			}
			weirtest.RequireInserted(t.Context(), t, weirtest.Tx(t, s.driver, tx), task{}, &weirtest.RequireInsertedOpts{State: weir.JobStateCompleted})
			rollback()
			weirtest.RequireNotInserted(t.Context(), t, s.driver.Executor(), task{}, nil)
		})
	}
}

// TestWorkJobRefuses: WorkJob says what is wrong with a job it cannot run,
// and changes nothing.
func TestWorkJobRefuses(t *testing.T) {
	t.Parallel()
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			ctx := t.Context()
			w := weirtest.NewWorker(t, s.driver, nil, weir.Worker[task](taskWorker{}))
			res, err := w.Work(ctx, nil, task{Do: "ok"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.WorkJob(ctx, nil, res.Job); err == nil || !strings.Contains(err.Error(), "it is completed") {
				t.Fatalf("WorkJob of a completed job: %v", err)
			}
			other, err := s.client.Insert(ctx, receipt{Order: 1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.WorkJob(ctx, nil, other.Job); err == nil || !strings.Contains(err.Error(), `of kind "receipt.send"`) {
				t.Fatalf("WorkJob of another kind: %v", err)
			}
			if _, err := w.WorkJob(ctx, "a string", res.Job); err == nil || !strings.Contains(err.Error(), "type string") {
				t.Fatalf("WorkJob in a string: %v", err)
			}
			if job := weirtest.RequireInserted(ctx, t, s.driver.Executor(), receipt{}, nil); job.State != weir.JobStateAvailable || job.Attempt != 0 {
				t.Fatalf("the refused job changed: %+v", job.JobRow)
			}
		})
	}
}

// TestWorkerRefusesInsertOnlyTx: a *sql.Tx on PostgreSQL can take inserts, not
// a run; Work says so before it inserts anything.
func TestWorkerRefusesInsertOnlyTx(t *testing.T) {
	t.Parallel()
	s := stores(t)[0]
	tx, _, rollback := s.begin["database/sql"](t)
	defer rollback()
	w := weirtest.NewWorker(t, s.driver, nil, weir.Worker[task](taskWorker{}))
	_, err := w.Work(t.Context(), tx, task{Do: "ok"}, nil)
	if err == nil || !strings.Contains(err.Error(), "use a pgx.Tx") {
		t.Fatalf("Work in a database/sql transaction on PostgreSQL: %v", err)
	}
	weirtest.RequireNotInserted(t.Context(), t, weirtest.Tx(t, s.driver, tx), task{}, nil)
}

// compact returns JSON without its spaces (PostgreSQL's jsonb adds some).
func compact(t *testing.T, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	return buf.String()
}
