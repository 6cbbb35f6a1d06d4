package weirpgx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// errSQLTx is returned by the operations that a *sql.Tx executor does not offer.
var errSQLTx = errors.New("weirpgx: only inserts run inside a *sql.Tx; use a pgx.Tx or the client")

// sqlExecutor inserts jobs inside a caller's database/sql transaction.
type sqlExecutor struct {
	tx *sql.Tx
	q  *queries
}

func (e *sqlExecutor) JobInsert(ctx context.Context, params []*weirdriver.JobInsertParams) (_ []weirdriver.JobInsertResult, err error) {
	defer func() { err = schemaErr(err) }()
	input, err := insertInput(params)
	if err != nil {
		return nil, err
	}
	r, err := e.tx.QueryContext(ctx, e.q.jobInsert, string(input), e.q.insertChannel)
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	defer r.Close()
	return scanInsertResults(r, len(params))
}

// JobInsertBulk has no COPY here and inserts with the one-statement path.
func (e *sqlExecutor) JobInsertBulk(ctx context.Context, params []*weirdriver.JobInsertParams) ([]*weirtype.JobRow, error) {
	results, err := e.JobInsert(ctx, params)
	if err != nil {
		return nil, err
	}
	jobs := make([]*weirtype.JobRow, len(results))
	for i, res := range results {
		jobs[i] = res.Job
	}
	return jobs, nil
}

func (e *sqlExecutor) NotifyInsert(ctx context.Context, queues []string) error {
	// JobInsert notifies by itself, and the bulk path here is JobInsert.
	return nil
}

func (e *sqlExecutor) JobGet(context.Context, int64) (*weirtype.JobRow, error) { return nil, errSQLTx }
func (e *sqlExecutor) JobList(context.Context, *weirdriver.JobListParams) ([]*weirtype.JobRow, error) {
	return nil, errSQLTx
}
func (e *sqlExecutor) JobCancel(context.Context, int64) (*weirtype.JobRow, error) {
	return nil, errSQLTx
}
func (e *sqlExecutor) JobRetry(context.Context, int64) (*weirtype.JobRow, error) {
	return nil, errSQLTx
}
func (e *sqlExecutor) JobDelete(context.Context, int64) (*weirtype.JobRow, error) {
	return nil, errSQLTx
}
func (e *sqlExecutor) QueuePause(context.Context, string) error  { return errSQLTx }
func (e *sqlExecutor) QueueResume(context.Context, string) error { return errSQLTx }
func (e *sqlExecutor) QueueList(context.Context) ([]*weirdriver.QueueStats, error) {
	return nil, errSQLTx
}

// Begin opens a savepoint in the caller's transaction.
func (e *sqlExecutor) Begin(ctx context.Context) (weirdriver.ExecutorTx, error) {
	if _, err := e.tx.ExecContext(ctx, "SAVEPOINT weir_insert"); err != nil {
		return nil, fmt.Errorf("begin savepoint: %w", err)
	}
	return &sqlSavepoint{sqlExecutor: e}, nil
}

// sqlSavepoint is a savepoint inside a caller's database/sql transaction.
type sqlSavepoint struct {
	*sqlExecutor
	done bool
}

func (s *sqlSavepoint) Commit(ctx context.Context) error {
	if s.done {
		return nil
	}
	s.done = true
	_, err := s.tx.ExecContext(ctx, "RELEASE SAVEPOINT weir_insert")
	return err
}

func (s *sqlSavepoint) Rollback(ctx context.Context) error {
	if s.done {
		return nil
	}
	s.done = true
	_, err := s.tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT weir_insert")
	return err
}

// The worker runtime's statements run on the driver's pool or in a pgx.Tx.

func (e *sqlExecutor) JobClaim(context.Context, *weirdriver.JobClaimParams) ([]*weirtype.JobRow, error) {
	return nil, errSQLTx
}
func (e *sqlExecutor) JobFinalize(context.Context, []*weirdriver.JobFinalizeParams) ([]bool, error) {
	return nil, errSQLTx
}
func (e *sqlExecutor) JobRenew(context.Context, *weirdriver.JobRenewParams) (*weirdriver.JobRenewResult, error) {
	return nil, errSQLTx
}
func (e *sqlExecutor) JobRescue(context.Context, *weirdriver.JobRescueParams) ([]*weirtype.JobRow, error) {
	return nil, errSQLTx
}
func (e *sqlExecutor) JobSchedule(context.Context, int) (int, error) { return 0, errSQLTx }
func (e *sqlExecutor) JobPrune(context.Context, *weirdriver.JobPruneParams) (int, error) {
	return 0, errSQLTx
}
func (e *sqlExecutor) LeaderElect(context.Context, *weirdriver.LeaderElectParams) (bool, error) {
	return false, errSQLTx
}
func (e *sqlExecutor) LeaderResign(context.Context, string, string) error { return errSQLTx }
func (e *sqlExecutor) LeaderGet(context.Context, string) (string, time.Time, error) {
	return "", time.Time{}, errSQLTx
}
