package weir

import (
	"context"
	"fmt"
	"time"

	"github.com/weirq/weir/internal/lease"
	"github.com/weirq/weir/internal/testseam"
	"github.com/weirq/weir/weirdriver"
)

func init() {
	testseam.CheckTx = func(client any, tx any) error {
		_, err := client.(*Client).oneJobExecutor(tx)
		return err
	}
	testseam.WorkJob = func(ctx context.Context, client any, tx any, id int64) (*testseam.Attempt, error) {
		c := client.(*Client)
		exec, err := c.oneJobExecutor(tx)
		if err != nil {
			return nil, err
		}
		a, err := c.workOne(ctx, exec, id)
		if err != nil {
			return nil, err
		}
		return &testseam.Attempt{Event: string(a.event), Err: a.err, Job: a.job}, nil
	}
}

// oneJobExecutor returns what workOne runs on for tx: the driver's own
// connections when tx is nil, else tx, which must be a transaction the driver
// can run every statement in, not only inserts.
func (c *Client) oneJobExecutor(tx any) (weirdriver.Executor, error) {
	if tx == nil {
		return c.driver.Executor(), nil
	}
	in, err := c.driver.UnwrapTx(tx)
	if err != nil {
		return nil, invalidf("tx", "%v", err)
	}
	exec, ok := in.(weirdriver.Executor)
	if !ok {
		return nil, invalidf("tx", "a job cannot be run in a %T on this driver, only inserted: use a pgx.Tx with weirpgx", tx)
	}
	return exec, nil
}

// attemptRun is what one attempt run by workOne came to.
type attemptRun struct {
	event EventKind // of the outcome written
	err   error     // what the handler returned
	job   *JobRow   // the job afterwards
}

// workOne runs one attempt of job id on exec as a started client's worker
// would, without one: it leases the job (scheduled, available or retryable,
// due or not), runs the worker for its kind inside the client's and the
// worker's middleware, with its timeout and panic recovery, turns what the
// handler returned into an outcome with the retry policy, and writes it fenced
// by the lease token. Nothing renews the lease, no hook is called and nothing
// is logged. Inline clients and weirtest's Worker run jobs with it.
func (c *Client) workOne(ctx context.Context, exec weirdriver.Executor, id int64) (*attemptRun, error) {
	sent := time.Now()
	row, claimed, err := exec.JobClaimID(ctx, &weirdriver.JobClaimIDParams{
		ID: id, ClientID: c.config.ID, LeaseDuration: c.config.LeaseDuration,
	})
	if err != nil {
		return nil, fmt.Errorf("weir: work job %d: %w", id, err)
	}
	if !claimed {
		return nil, fmt.Errorf("weir: work job %d: it is %s; only a scheduled, available or retryable job can be worked", id, row.State)
	}
	entry := c.config.Workers.byKind[row.Kind]
	j := lease.NewJob(row, prepare(entry, row), sent.Add(c.config.LeaseDuration))
	leases := lease.NewTable(func(*lease.Job, string) {})
	leases.Add([]*lease.Job{j})
	leases.MarkRunning(j, context.WithValue(ctx, handlerScopeKey{}, &handlerScope{driver: c.driver, leases: leases, maxBytes: c.config.MaxArgsBytes}))
	hctx := leases.HandlerContext(j)
	if timeout := timeoutOf(entry, row, c.config.JobTimeout); timeout > 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeoutCause(hctx, timeout, ErrJobTimeout)
		defer cancel()
	}

	start := time.Now()
	handlerErr := invoke(hctx, handlerOf(c.config.WorkerMiddleware, j, entry))
	fin := finalizationOf(j, entry, c.config.RetryPolicy, handlerErr, context.Cause(hctx), time.Since(start))
	run := &attemptRun{event: eventOf(fin.Params.Outcome), err: handlerErr}
	withReturned(fin, leases.MarkReturned(j))
	if fin.CompletedInTx {
		// The handler completed the job in its transaction: its fate is that
		// transaction's, and the job reads completed only if it is exec's.
		run.event = EventJobCompleted
	} else {
		applied, err := exec.JobFinalize(ctx, []*weirdriver.JobFinalizeParams{&fin.Params})
		if err != nil {
			return nil, fmt.Errorf("weir: work job %d: write its outcome: %w", id, err)
		}
		if !applied[0] {
			return nil, fmt.Errorf("weir: work job %d: its outcome was not written: %w", id, ErrLeaseLost)
		}
	}
	if run.job, err = exec.JobGet(ctx, id); err != nil {
		return nil, fmt.Errorf("weir: work job %d: read it back: %w", id, err)
	}
	if run.job.State == JobStateCancelled && run.event != EventJobCancelled {
		run.event = EventJobCancelled // an operator's cancel request won
	}
	return run, nil
}
