package weir

import (
	"context"
	"time"

	"github.com/weirq/weir/internal/completer"
	"github.com/weirq/weir/internal/execute"
	"github.com/weirq/weir/internal/lease"
	"github.com/weirq/weir/weirdriver"
)

// Attempts runs single attempts of the client's jobs, one at a time, as a
// started client's worker would, without starting it (internal/execute says
// how). It is package weirtest's way to the client's workers and settings,
// and its type is internal to this module: tests run jobs with
// weirtest.Worker.
func (c *Client) Attempts() *execute.Runner {
	return execute.New(clientAttempt{c}, execute.Settings{ClientID: c.config.ID, LeaseDuration: c.config.LeaseDuration})
}

// clientAttempt is the client's side of an attempt internal/execute runs:
// the worker for the job's kind, inside the client's middleware, with the
// client's timeout and retry policy when the worker has none of its own.
type clientAttempt struct{ c *Client }

// entry is the worker for row's kind, nil when the client has none.
func (a clientAttempt) entry(row *JobRow) *workerEntry { return a.c.config.Workers.byKind[row.Kind] }

func (a clientAttempt) Prepare(row *JobRow) func(context.Context) error {
	return prepare(a.entry(row), row)
}

func (a clientAttempt) Scope(ctx context.Context, leases *lease.Table) context.Context {
	return a.c.withHandlerScope(ctx, leases)
}

func (a clientAttempt) Timeout(row *JobRow) time.Duration {
	return timeoutOf(a.entry(row), row, a.c.config.JobTimeout)
}

func (a clientAttempt) Run(ctx context.Context, j *lease.Job) error {
	return invoke(ctx, handlerOf(a.c.config.WorkerMiddleware, j, a.entry(j.Row)))
}

func (a clientAttempt) Outcome(j *lease.Job, err, cause error, ran time.Duration, left lease.Returned) *completer.Finalization {
	fin := finalizationOf(j, a.entry(j.Row), a.c.config.RetryPolicy, err, cause, ran)
	withReturned(fin, left)
	return fin
}

func (a clientAttempt) Event(o weirdriver.Outcome) string { return string(eventOf(o)) }
