package weir

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/weirdriver"
)

// bulkThreshold is the batch size from which InsertMany writes with the driver's
// bulk path (COPY on PostgreSQL) instead of one INSERT statement.
const bulkThreshold = 64

// InsertResult is an inserted job, or the existing job that a unique insert found.
type InsertResult struct {
	Job *JobRow
	// Duplicate is true when the job was not inserted because a job with the same
	// unique key exists; Job is that job.
	Duplicate bool
	// Replaced is true, with Duplicate, when the insert's UniqueOpts.OnConflict
	// (UniqueReplace or UniqueDebounce) changed the existing job; Job is that job
	// as changed. A duplicate that was running or final is never changed.
	Replaced bool
}

// InsertManyParams is one job of an InsertMany call.
type InsertManyParams struct {
	Args       JobArgs
	InsertOpts *InsertOpts
}

// Insert inserts a job in its own transaction.
func (c *Client) Insert(ctx context.Context, args JobArgs, opts *InsertOpts) (*InsertResult, error) {
	res, err := c.insert(ctx, c.driver.Executor(), []InsertManyParams{{Args: args, InsertOpts: opts}})
	if err != nil {
		return nil, err
	}
	c.wakeLocal(res)
	return res[0], nil
}

// wakeLocal wakes this client's own producers for committed new available jobs at
// once, without waiting for the notification's round trip.
func (c *Client) wakeLocal(results []*InsertResult) {
	e := c.engine()
	if e == nil {
		return
	}
	for _, r := range results {
		if r.Duplicate && !r.Replaced || r.Job.State != JobStateAvailable {
			continue
		}
		if p := e.producer(r.Job.Queue); p != nil {
			p.poke()
		}
	}
}

// InsertTx inserts a job inside the caller's transaction: the job exists, and wakes
// workers, exactly when tx commits.
func (c *Client) InsertTx(ctx context.Context, tx pgx.Tx, args JobArgs, opts *InsertOpts) (*InsertResult, error) {
	return c.insertOneTx(ctx, tx, args, opts)
}

// InsertSQLTx is InsertTx for a database/sql transaction.
func (c *Client) InsertSQLTx(ctx context.Context, tx *sql.Tx, args JobArgs, opts *InsertOpts) (*InsertResult, error) {
	return c.insertOneTx(ctx, tx, args, opts)
}

func (c *Client) insertOneTx(ctx context.Context, tx any, args JobArgs, opts *InsertOpts) (*InsertResult, error) {
	exec, err := c.driver.UnwrapTx(tx)
	if err != nil {
		return nil, invalidf("tx", "%v", err)
	}
	res, err := c.insert(ctx, exec, []InsertManyParams{{Args: args, InsertOpts: opts}})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// InsertMany inserts jobs in one transaction and returns them in order. Large
// batches of jobs without unique options are written with COPY.
func (c *Client) InsertMany(ctx context.Context, params []InsertManyParams) ([]*InsertResult, error) {
	res, err := c.insert(ctx, c.driver.Executor(), params)
	if err != nil {
		return nil, err
	}
	c.wakeLocal(res)
	return res, nil
}

// InsertManyTx is InsertMany inside the caller's transaction.
func (c *Client) InsertManyTx(ctx context.Context, tx pgx.Tx, params []InsertManyParams) ([]*InsertResult, error) {
	exec, err := c.driver.UnwrapTx(tx)
	if err != nil {
		return nil, invalidf("tx", "%v", err)
	}
	return c.insert(ctx, exec, params)
}

// InsertManySQLTx is InsertManyTx for a database/sql transaction.
func (c *Client) InsertManySQLTx(ctx context.Context, tx *sql.Tx, params []InsertManyParams) ([]*InsertResult, error) {
	exec, err := c.driver.UnwrapTx(tx)
	if err != nil {
		return nil, invalidf("tx", "%v", err)
	}
	return c.insert(ctx, exec, params)
}

// insert encodes every job, passes the batch through the insert middleware,
// and writes it.
func (c *Client) insert(ctx context.Context, exec weirdriver.Inserter, params []InsertManyParams) ([]*InsertResult, error) {
	if len(params) == 0 {
		return nil, invalidf("params", "no jobs to insert")
	}
	jobs := make([]*InsertParams, len(params))
	for i, p := range params {
		in, err := encodeInsert(p.Args, p.InsertOpts)
		if err != nil {
			return nil, atJob(err, i, len(params))
		}
		jobs[i] = in
	}
	return c.insertEncoded(ctx, exec, jobs)
}

// insertEncoded passes encoded jobs through the insert middleware and writes
// them.
func (c *Client) insertEncoded(ctx context.Context, exec weirdriver.Inserter, jobs []*InsertParams) ([]*InsertResult, error) {
	if len(c.config.InsertMiddleware) == 0 {
		res, err := c.write(ctx, exec, jobs)
		if err != nil {
			return nil, err
		}
		return c.runInline(ctx, exec, res)
	}
	// Middleware may change what it is given in place; the caller's slices are
	// not its to change.
	for _, j := range jobs {
		j.Tags, j.Metadata, j.Unique.ByState = slices.Clone(j.Tags), slices.Clone(j.Metadata), slices.Clone(j.Unique.ByState)
		j.Unique.ByArgsKeys = slices.Clone(j.Unique.ByArgsKeys)
	}
	h := chainInsert(c.config.InsertMiddleware, func(ctx context.Context, got []*InsertParams) ([]*InsertResult, error) {
		if len(got) != len(jobs) {
			return nil, fmt.Errorf("weir: insert middleware passed on %d jobs of the %d it was given; nothing was written", len(got), len(jobs))
		}
		return c.write(ctx, exec, got)
	})
	res, err := h(ctx, jobs)
	if err == nil && len(res) != len(jobs) {
		return nil, fmt.Errorf("weir: insert middleware returned %d results for %d jobs, which may have been written", len(res), len(jobs))
	}
	if err != nil {
		return nil, err
	}
	return c.runInline(ctx, exec, res)
}

// checkInline refuses, before anything is written, a batch an inline client
// could not run: a kind without a worker, or a transaction the driver can only
// insert in.
func (c *Client) checkInline(exec weirdriver.Inserter, all []*weirdriver.JobInsertParams) error {
	if _, ok := exec.(weirdriver.Executor); !ok {
		return errInlineTx(exec)
	}
	for i, p := range all {
		if c.config.Workers.byKind[p.Kind] == nil {
			return atJob(invalidf("Kind", "an inline client runs every job it inserts, and it has no worker for kind %q", p.Kind), i, len(all))
		}
	}
	return nil
}

// errInlineTx says that exec, a caller's transaction, can take inserts but not
// the runs of an inline client.
func errInlineTx(exec weirdriver.Inserter) error {
	return invalidf("tx", "an inline client runs jobs in the insert's transaction, and this driver can only insert in a %T: use a pgx.Tx", exec)
}

// runInline runs one attempt of each new job of an inline client's insert, in
// order, on exec, and puts the job as it is afterwards in its result.
func (c *Client) runInline(ctx context.Context, exec weirdriver.Inserter, res []*InsertResult) ([]*InsertResult, error) {
	if !c.config.Inline {
		return res, nil
	}
	runner, ok := exec.(weirdriver.Executor)
	if !ok { // checkInline refuses this before a write; only middleware that skips the write gets here
		return nil, errInlineTx(exec)
	}
	attempts := c.Attempts()
	for _, r := range res {
		if r.Duplicate {
			continue
		}
		run, err := attempts.Work(ctx, runner, r.Job.ID)
		if err != nil {
			return nil, fmt.Errorf("weir: insert: inline run: %w", err)
		}
		r.Job = run.Job
	}
	return res, nil
}

// atJob places a bad-input error about the i-th of n jobs in its batch.
func atJob(err error, i, n int) error {
	if invalid, ok := errors.AsType[*InvalidError](err); ok && n > 1 {
		return &InvalidError{Job: i + 1, Jobs: n, Field: invalid.Field, Message: invalid.Message}
	}
	return err
}

// write checks every job before it writes any, then writes them all or none.
func (c *Client) write(ctx context.Context, exec weirdriver.Inserter, jobs []*InsertParams) ([]*InsertResult, error) {
	all, unique, bulk, err := c.checkBatch(jobs)
	if err != nil {
		return nil, err
	}
	if c.config.Inline {
		if err := c.checkInline(exec, all); err != nil {
			return nil, err
		}
	}

	results := make([]*InsertResult, len(jobs))
	err = c.withSchemaCheck(ctx, func() error {
		// A batch with too few plain jobs for the bulk path goes through one
		// INSERT, which needs no transaction of its own.
		if len(bulk) < bulkThreshold {
			return c.insertStatement(ctx, exec, all, results)
		}
		return c.insertBulk(ctx, exec, all, unique, bulk, results)
	})
	if err != nil {
		return nil, &OpError{Op: "insert", Err: err}
	}
	return results, nil
}

// checkBatch checks every job of a batch and returns them as the driver
// takes them, with the indexes of those with a unique key and of the others.
func (c *Client) checkBatch(jobs []*InsertParams) (all []*weirdriver.JobInsertParams, unique, bulk []int, err error) {
	now := time.Now()
	all = make([]*weirdriver.JobInsertParams, len(jobs))
	var check jsonChecker
	for i, in := range jobs {
		ip, err := c.checkInsert(in, now, &check)
		if err != nil {
			return nil, nil, nil, atJob(err, i, len(jobs))
		}
		all[i] = ip
		if ip.UniqueKey != nil {
			unique = append(unique, i)
		} else {
			bulk = append(bulk, i)
		}
	}
	return all, unique, bulk, nil
}

// insertBulk writes all in a transaction of its own: all[unique...] with one
// INSERT, all[bulk...] with the driver's bulk path, and the notification to
// the queues of the available ones.
func (c *Client) insertBulk(ctx context.Context, exec weirdriver.Inserter, all []*weirdriver.JobInsertParams, unique, bulk []int, results []*InsertResult) error {
	tx, err := exec.BeginInsert(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if len(unique) > 0 {
		if err := c.insertStatementAt(ctx, tx, all, unique, results); err != nil {
			return err
		}
	}
	bulkParams := make([]*weirdriver.JobInsertParams, len(bulk))
	for j, i := range bulk {
		bulkParams[j] = all[i]
	}
	rows, err := tx.JobInsertBulk(ctx, bulkParams)
	if err != nil {
		return err
	}
	var queues []string
	seen := map[string]bool{}
	for j, i := range bulk {
		results[i] = &InsertResult{Job: rows[j]}
		if rows[j].State == JobStateAvailable && !seen[rows[j].Queue] {
			seen[rows[j].Queue] = true
			queues = append(queues, rows[j].Queue)
		}
	}
	if err := tx.NotifyInsert(ctx, queues); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (c *Client) insertStatement(ctx context.Context, exec weirdriver.Inserter, all []*weirdriver.JobInsertParams, results []*InsertResult) error {
	idx := make([]int, len(all))
	for i := range idx {
		idx[i] = i
	}
	return c.insertStatementAt(ctx, exec, all, idx, results)
}

// insertStatementAt inserts all[idx...] with one statement. Jobs of the batch that
// share a unique key are sent once, folded so that the batch ends as if they had
// been inserted one after another (foldUnique).
func (c *Client) insertStatementAt(ctx context.Context, exec weirdriver.Inserter, all []*weirdriver.JobInsertParams, idx []int, results []*InsertResult) error {
	var (
		send   []*weirdriver.JobInsertParams
		groups [][]int            // per sent job, the indexes into all it stands for
		byKey  = map[string]int{} // unique key -> index into send
	)
	for _, i := range idx {
		if key := all[i].UniqueKey; key != nil {
			k := string(key) + "\x00" + string(all[i].CanonicalArgs)
			if at, ok := byKey[k]; ok {
				groups[at] = append(groups[at], i)
				continue
			}
			byKey[k] = len(send)
		}
		send = append(send, all[i])
		groups = append(groups, []int{i})
	}
	for at, group := range groups {
		if len(group) > 1 {
			send[at] = foldUnique(all, group)
		}
	}
	res, err := exec.JobInsert(ctx, send)
	if err != nil {
		return err
	}
	for at, r := range res {
		// The row is pending after the statement when it was inserted or
		// replaced; each later job of its group then met it pending.
		pending := !r.Duplicate || r.Replaced
		for k, i := range groups[at] {
			skip := all[i].UniqueOnConflict == weirdriver.UniqueOnConflictSkip
			switch {
			case k == 0 && !r.Duplicate:
				results[i] = &InsertResult{Job: r.Job}
			case pending && !skip:
				results[i] = &InsertResult{Job: r.Job, Duplicate: true, Replaced: true}
			default:
				results[i] = &InsertResult{Job: r.Job, Duplicate: true}
			}
		}
	}
	return nil
}

// foldUnique returns the one job to send for jobs all[group...], which share a
// unique key, such that the statement leaves the store as inserting them one
// after another would: the first is inserted (or meets the holder), and each
// later one meets that job pending. So the job sent is the first, carrying the
// args, metadata, tags, priority and max attempts of the last one that replaces
// (UniqueReplace or UniqueDebounce) and the scheduled time of the last one that
// debounces, with the strongest mode among them. Queue, unique states and key
// are the first's.
func foldUnique(all []*weirdriver.JobInsertParams, group []int) *weirdriver.JobInsertParams {
	folded := *all[group[0]]
	for _, i := range group {
		p := all[i]
		switch p.UniqueOnConflict {
		case weirdriver.UniqueOnConflictDebounce:
			folded.ScheduledAt = p.ScheduledAt
			folded.UniqueOnConflict = weirdriver.UniqueOnConflictDebounce
			fallthrough
		case weirdriver.UniqueOnConflictReplace:
			folded.Args, folded.Metadata, folded.Tags = p.Args, p.Metadata, p.Tags
			folded.Priority, folded.MaxAttempts = p.Priority, p.MaxAttempts
			if folded.UniqueOnConflict == weirdriver.UniqueOnConflictSkip {
				folded.UniqueOnConflict = weirdriver.UniqueOnConflictReplace
			}
		}
	}
	return &folded
}
