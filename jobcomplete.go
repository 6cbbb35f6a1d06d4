package weir

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/internal/lease"
	"github.com/weirq/weir/weirdriver"
)

// handlerScopeKey keys the handlerScope in the contexts handlers run with.
type handlerScopeKey struct{}

// handlerScope is what JobCompleteTx needs of the client whose handler calls
// it: its driver, and the leases it holds. Every handler's context carries it.
type handlerScope struct {
	driver weirdriver.Driver
	leases *lease.Table
	// maxBytes is Config.MaxArgsBytes, which bounds RecordOutput's and
	// SetProgress's values too.
	maxBytes int
}

// withHandlerScope returns ctx carrying the client's handlerScope over leases.
func (c *Client) withHandlerScope(ctx context.Context, leases *lease.Table) context.Context {
	return context.WithValue(ctx, handlerScopeKey{}, &handlerScope{driver: c.driver, leases: leases, maxBytes: c.config.MaxArgsBytes})
}

// JobCompleteTx completes job, which the handler whose context is ctx runs,
// inside tx, the handler's own transaction on the job's database: the job and
// the handler's writes in tx commit together or not at all. The completion is
// fenced like the client's own: it applies only while the job is running under
// the lease the handler holds (a requested cancel makes it cancelled instead).
//
// If the lease was lost — the job was rescued, and maybe claimed and run again
// elsewhere — it changes nothing and returns an error wrapping ErrLeaseLost:
// roll tx back, so that the handler's writes are undone too. Once it succeeds,
// the job's row stays locked by tx until tx ends, so no rescue or claim can take
// the job meanwhile; commit promptly.
//
// After the handler returns, the client writes its outcome as always, fenced:
// if tx committed, that write finds the job ended and changes nothing, and the
// job counts as completed even if the handler then returned an error; if tx
// rolled back, the handler's return decides, as if JobCompleteTx had not been
// called. The output the handler recorded with RecordOutput before the call,
// and its latest progress (SetProgress), are written in tx with the
// completion. docs/handlers.md says more.
func JobCompleteTx(ctx context.Context, tx pgx.Tx, job *JobRow) error {
	return jobCompleteTx(ctx, tx, job)
}

// JobCompleteSQLTx is JobCompleteTx for a database/sql transaction (on
// PostgreSQL through pgx's stdlib driver, or on SQLite).
func JobCompleteSQLTx(ctx context.Context, tx *sql.Tx, job *JobRow) error {
	return jobCompleteTx(ctx, tx, job)
}

func jobCompleteTx(ctx context.Context, tx any, job *JobRow) error {
	scope, _ := ctx.Value(handlerScopeKey{}).(*handlerScope)
	switch {
	case scope == nil:
		return invalidf("ctx", "JobCompleteTx needs the context of the handler that runs the job")
	case job == nil:
		return invalidf("job", "JobCompleteTx needs the job; it is nil")
	}
	held, valid := scope.leases.Standing(job.ID, job.LeaseToken, time.Now())
	switch {
	case !held:
		return invalidf("job", "job %d is not running in this client under lease token %d", job.ID, job.LeaseToken)
	case !valid:
		return fmt.Errorf("weir: JobCompleteTx: job %d: %w; roll the transaction back", job.ID, ErrLeaseLost)
	}
	exec, err := scope.driver.UnwrapTx(tx)
	if err != nil {
		return fmt.Errorf("weir: JobCompleteTx: %w", err)
	}
	// The output and progress recorded so far commit with the completion; a
	// RecordOutput after this call is refused.
	output, progress := scope.leases.Recorded(job.ID, job.LeaseToken)
	ok, err := exec.JobComplete(ctx, &weirdriver.JobCompleteParams{
		ID: job.ID, LeaseToken: job.LeaseToken, Output: output, Progress: progress,
	})
	if err != nil {
		return fmt.Errorf("weir: JobCompleteTx: job %d: %w", job.ID, err)
	}
	if !ok {
		return fmt.Errorf("weir: JobCompleteTx: job %d: %w; roll the transaction back", job.ID, ErrLeaseLost)
	}
	scope.leases.MarkCompletedInTx(job.ID, job.LeaseToken)
	return nil
}
