package weirpgx

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

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

// JobComplete implements weirdriver.Inserter in the caller's transaction.
func (e *sqlExecutor) JobComplete(ctx context.Context, p *weirdriver.JobCompleteParams) (_ bool, err error) {
	defer func() { err = schemaErr(err) }()
	var got int64
	err = e.tx.QueryRowContext(ctx, e.q.jobCompleteOne, p.ID, p.LeaseToken, sqlJSONText(p.Output), sqlJSONText(p.Progress)).Scan(&got)
	return completed(err)
}

// JobList implements weirdriver.Inserter in the caller's transaction.
func (e *sqlExecutor) JobList(ctx context.Context, p *weirdriver.JobListParams) (_ []*weirtype.JobRow, err error) {
	defer func() { err = schemaErr(err) }()
	query, args := listQuery(e.q, p)
	r, err := e.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	defer r.Close()
	return scanListed(r)
}

// BeginInsert opens a savepoint in the caller's transaction.
func (e *sqlExecutor) BeginInsert(ctx context.Context) (weirdriver.InserterTx, error) {
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

// sqlJSONText is a JSON value as a database/sql text parameter: NULL when
// unset.
func sqlJSONText(b json.RawMessage) sql.NullString {
	return sql.NullString{String: string(b), Valid: len(b) > 0}
}
