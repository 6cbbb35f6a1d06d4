package weirtest

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver"
)

// Worker runs jobs of T's kind through a client's real worker path — the
// client's worker middleware and the worker's own, its timeout, panic
// recovery, the retry policy and the outcome's fenced write — one attempt at a
// time, without a running client: no goroutine claims other jobs, and in a
// test's transaction everything it did rolls back with it.
//
//	w := weirtest.NewWorker(t, driver, &weir.Config{}, &SendWelcomeWorker{})
//	res, err := w.Work(ctx, tx, SendWelcome{To: "ada@example.com"}, nil)
//	// res.Event == weir.EventJobCompleted, res.Job.State == weir.JobStateCompleted
//
// Nothing renews the lease while the handler runs: an attempt that outlasts
// Config.LeaseDuration finds it lost, as a worker cut off from the database
// would. Hooks are not called and nothing is logged.
type Worker[T weir.JobArgs] struct {
	client *weir.Client
	kind   string
}

// WorkResult is what one attempt came to.
type WorkResult struct {
	// Event is the outcome written: weir.EventJobCompleted, EventJobFailed
	// (the job will be retried), EventJobSnoozed, EventJobCancelled or
	// EventJobDiscarded.
	Event weir.EventKind
	// Err is what the handler returned: nil when it completed the job.
	Err error
	// Job is the job after its outcome was written.
	Job *weir.JobRow
}

// NewWorker returns a Worker that runs worker with config's settings (worker
// middleware, JobTimeout, RetryPolicy, LeaseDuration, ID; config's Workers
// and Queues are not used), on driver. It fails tb when config is invalid.
func NewWorker[T weir.JobArgs](tb testing.TB, driver weirdriver.Driver, config *weir.Config, worker weir.Worker[T]) *Worker[T] {
	tb.Helper()
	var cfg weir.Config
	if config != nil {
		cfg = *config
		cfg.WorkerMiddleware = slices.Clone(cfg.WorkerMiddleware)
		cfg.InsertMiddleware = slices.Clone(cfg.InsertMiddleware)
	}
	cfg.Workers, cfg.Queues, cfg.Inline = weir.NewWorkers(), nil, false
	if err := weir.AddWorkerSafely(cfg.Workers, worker); err != nil {
		tb.Fatalf("weirtest: NewWorker: %v", err)
	}
	c, err := weir.NewClient(driver, &cfg)
	if err != nil {
		tb.Fatalf("weirtest: NewWorker: %v", err)
	}
	return &Worker[T]{client: c, kind: cfg.Workers.Kinds()[0]}
}

// Work inserts a job with args and opts in tx, as the client's Insert would
// (insert middleware included), and runs one attempt of it at once, whatever
// its scheduled time. tx is a pgx.Tx with weirpgx or a *sql.Tx with
// weirsqlite, or nil to insert and work on the driver's own connections,
// committing each step. The error is about the insert or the run, never the
// handler's (that is WorkResult.Err).
func (w *Worker[T]) Work(ctx context.Context, tx any, args T, opts *weir.InsertOpts) (*WorkResult, error) {
	if _, err := executorOf(w.client, tx); err != nil {
		return nil, fmt.Errorf("weirtest: Work: %w", err)
	}
	var (
		res *weir.InsertResult
		err error
	)
	switch tx := tx.(type) {
	case nil:
		res, err = w.client.Insert(ctx, args, opts)
	case pgx.Tx:
		res, err = w.client.InsertTx(ctx, tx, args, opts)
	case *sql.Tx:
		res, err = w.client.InsertSQLTx(ctx, tx, args, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("weirtest: Work: %w", err)
	}
	if res.Duplicate {
		return nil, fmt.Errorf("weirtest: Work: the insert found job %d, a duplicate of the unique job, which is %s", res.Job.ID, res.Job.State)
	}
	return w.WorkJob(ctx, tx, res.Job)
}

// WorkJob runs one attempt of job, which must be of T's kind and scheduled,
// available or retryable (whatever its scheduled time), in tx as Work does.
func (w *Worker[T]) WorkJob(ctx context.Context, tx any, job *weir.JobRow) (*WorkResult, error) {
	if job == nil {
		return nil, fmt.Errorf("weirtest: WorkJob: the job is nil")
	}
	if job.Kind != w.kind {
		return nil, fmt.Errorf("weirtest: WorkJob: job %d is of kind %q; this worker runs %q", job.ID, job.Kind, w.kind)
	}
	exec, err := executorOf(w.client, tx)
	if err != nil {
		return nil, fmt.Errorf("weirtest: WorkJob: %w", err)
	}
	res, err := w.client.Attempts().Work(ctx, exec, job.ID)
	if err != nil {
		return nil, fmt.Errorf("weirtest: WorkJob: %w", err)
	}
	return &WorkResult{Event: weir.EventKind(res.Event), Err: res.Err, Job: res.Job}, nil
}

// executorOf returns what c runs a job on in tx: its driver's own connections
// when tx is nil, else tx, which must be a transaction the driver can run
// every statement in, not only inserts.
func executorOf(c *weir.Client, tx any) (weirdriver.Executor, error) {
	switch tx.(type) {
	case nil:
		return c.Driver().Executor(), nil
	case pgx.Tx, *sql.Tx:
	default:
		return nil, fmt.Errorf("a transaction of type %T is not supported (use a pgx.Tx or a *sql.Tx)", tx)
	}
	in, err := c.Driver().UnwrapTx(tx)
	if err != nil {
		return nil, &weir.InvalidError{Field: "tx", Message: err.Error()}
	}
	exec, ok := in.(weirdriver.Executor)
	if !ok {
		return nil, &weir.InvalidError{Field: "tx", Message: fmt.Sprintf(
			"a job cannot be run in a %T on this driver, only inserted: use a pgx.Tx with weirpgx", tx)}
	}
	return exec, nil
}
