// Package execute runs one attempt of a job outside a running client, as a
// started client's worker would: it leases the job by id (scheduled,
// available or retryable, due or not), runs its handler with its timeout
// through what the client makes of it (the middleware, panic recovery, and
// the outcome the handler's return comes to), writes that outcome fenced by
// the lease token, and reads the job back. Nothing renews the lease, no hook
// is called and nothing is logged. An inline client runs the jobs it inserts
// with it, and package weirtest's Worker the jobs of a test.
package execute

import (
	"context"
	"fmt"
	"time"

	"github.com/weirq/weir/internal/completer"
	"github.com/weirq/weir/internal/lease"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// Client is what an attempt needs of the client whose job it runs: package
// weir implements it with the client's workers, middleware and settings.
type Client interface {
	// Prepare returns the call of row's worker with its decoded args.
	Prepare(row *weirtype.JobRow) func(context.Context) error
	// Scope returns ctx carrying what the handler's calls back into the
	// client need (JobCompleteTx, RecordOutput, SetProgress); leases holds
	// the job's lease.
	Scope(ctx context.Context, leases *lease.Table) context.Context
	// Timeout is the timeout of an attempt of row; not positive means none.
	Timeout(row *weirtype.JobRow) time.Duration
	// Run calls j's handler inside the client's middleware and the worker's
	// own, and returns what it returned, a panic as the attempt's error.
	Run(ctx context.Context, j *lease.Job) error
	// Outcome is the outcome to write for what j's handler returned: err,
	// after it ran for ran, cause why its context ended (nil if it did not),
	// and left what it recorded.
	Outcome(j *lease.Job, err, cause error, ran time.Duration, left lease.Returned) *completer.Finalization
	// Event names the event of a job's outcome o.
	Event(o weirdriver.Outcome) string
}

// Settings are the client's settings an attempt leases its job with.
type Settings struct {
	// ClientID names the client in the job's row.
	ClientID string
	// LeaseDuration is how long the lease holds the job (database clock).
	LeaseDuration time.Duration
}

// Runner runs single attempts of a client's jobs.
type Runner struct {
	client   Client
	settings Settings
}

// New returns a Runner of client's jobs with its settings s.
func New(client Client, s Settings) *Runner {
	return &Runner{client: client, settings: s}
}

// Result is what one attempt came to.
type Result struct {
	// Event names the outcome the job ended the attempt with (Client.Event).
	Event string
	// Err is what the handler returned.
	Err error
	// Job is the job after its outcome was written.
	Job *weirtype.JobRow
}

// Work runs one attempt of job id on exec: it leases the job, runs its
// handler, writes the outcome fenced by the lease token and reads the job
// back. Its error is about the job or the database, never the handler's
// (that is Result.Err).
func (r *Runner) Work(ctx context.Context, exec weirdriver.Executor, id int64) (*Result, error) {
	j, leases, err := r.lease(ctx, exec, id)
	if err != nil {
		return nil, err
	}
	fin := r.run(j, leases)
	outcome, err := write(ctx, exec, fin)
	if err != nil {
		return nil, err
	}
	job, err := exec.JobGet(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("weir: work job %d: read it back: %w", id, err)
	}
	if job.State == weirtype.JobStateCancelled {
		outcome = weirdriver.OutcomeCancel // an operator's cancel request won
	}
	return &Result{Event: r.client.Event(outcome), Err: fin.Err, Job: job}, nil
}

// lease claims job id on exec and returns its lease, running with the
// client's scope, in a table of its own.
func (r *Runner) lease(ctx context.Context, exec weirdriver.Executor, id int64) (*lease.Job, *lease.Table, error) {
	sent := time.Now()
	row, claimed, err := exec.JobClaimID(ctx, &weirdriver.JobClaimIDParams{
		ID: id, ClientID: r.settings.ClientID, LeaseDuration: r.settings.LeaseDuration,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("weir: work job %d: %w", id, err)
	}
	if !claimed {
		return nil, nil, fmt.Errorf("weir: work job %d: it is %s; only a scheduled, available or retryable job can be worked", id, row.State)
	}
	j := lease.NewJob(row, r.client.Prepare(row), sent.Add(r.settings.LeaseDuration))
	leases := lease.NewTable(func(*lease.Job, string) {})
	leases.Add([]*lease.Job{j})
	leases.MarkRunning(j, r.client.Scope(ctx, leases))
	return j, leases, nil
}

// run runs j's handler with its timeout and returns the outcome to write.
func (r *Runner) run(j *lease.Job, leases *lease.Table) *completer.Finalization {
	ctx := leases.Start(j, r.client.Timeout(j.Row))
	start := time.Now()
	err := r.client.Run(ctx, j)
	ran := time.Since(start)
	return r.client.Outcome(j, err, context.Cause(ctx), ran, leases.MarkReturned(j))
}

// write writes fin's outcome on exec, fenced by its lease token, and returns
// the outcome the job ended the attempt with.
func write(ctx context.Context, exec weirdriver.Executor, fin *completer.Finalization) (weirdriver.Outcome, error) {
	id := fin.Params.ID
	if fin.CompletedInTx {
		// The handler completed the job in its transaction: its fate is that
		// transaction's, and the job reads completed only if it is exec's.
		return weirdriver.OutcomeCompleted, nil
	}
	applied, err := exec.JobFinalize(ctx, []*weirdriver.JobFinalizeParams{&fin.Params})
	if err != nil {
		return "", fmt.Errorf("weir: work job %d: write its outcome: %w", id, err)
	}
	if !applied[0] {
		return "", fmt.Errorf("weir: work job %d: its outcome was not written: %w", id, weirtype.ErrLeaseLost)
	}
	return fin.Params.Outcome, nil
}
