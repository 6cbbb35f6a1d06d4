package weirpgx

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// pgxDB is what pgxpool.Pool and pgx.Tx have in common.
type pgxDB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
	Begin(ctx context.Context) (pgx.Tx, error)
}

// executor runs statements on a pool or inside a pgx transaction.
type executor struct {
	db pgxDB
	q  *queries
	// notifier is set on the pool's executor, where each statement commits on
	// its own: inserts there leave their notifications to it.
	notifier *notifier
	// compact is the driver's memory of its ready list's compactions, set
	// on the pool's executor (nil: none, every call decides afresh).
	compact *compactState
}

// rows is what pgx.Rows and *sql.Rows have in common, for scanning.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

func (e *executor) Begin(ctx context.Context) (weirdriver.ExecutorTx, error) {
	tx, err := e.db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	return &executorTx{executor: executor{db: tx, q: e.q}, tx: tx}, nil
}

func (e *executor) BeginInsert(ctx context.Context) (weirdriver.InserterTx, error) {
	return e.Begin(ctx)
}

// executorTx is an executor inside a transaction (or savepoint) it owns.
type executorTx struct {
	executor
	tx pgx.Tx
}

func (e *executorTx) Commit(ctx context.Context) error   { return e.tx.Commit(ctx) }
func (e *executorTx) Rollback(ctx context.Context) error { return e.tx.Rollback(ctx) }

func (e *executor) JobInsert(ctx context.Context, params []*weirdriver.JobInsertParams) (_ []weirdriver.JobInsertResult, err error) {
	defer func() { err = schemaErr(err) }()
	// In a transaction the statement notifies, at that transaction's commit. On
	// the pool an insert notifies from its own statement only while no other
	// insert of this driver is in flight: a notifying commit holds a
	// database-wide lock until it is flushed, which costs nothing to an insert
	// alone and saves it the notifier's round trip (docs/design/store-runtime.md,
	// "Notifying inserts").
	inStatement := e.notifier == nil
	if !inStatement {
		inStatement = e.notifier.begin()
		defer e.notifier.end()
	}
	results, err := e.insert(ctx, params, inStatement)
	if err != nil || inStatement {
		return results, err
	}
	var queues []string
	for _, res := range results {
		if (!res.Duplicate || res.Replaced) && res.Job.State == weirtype.JobStateAvailable && !slices.Contains(queues, res.Job.Queue) {
			queues = append(queues, res.Job.Queue)
		}
	}
	e.notifier.notify(ctx, queues)
	return results, nil
}

// insert runs the insert statement for params, notifying from it when notify
// is set, and reads its rows: when it returns, a statement on the pool has
// committed.
func (e *executor) insert(ctx context.Context, params []*weirdriver.JobInsertParams, notify bool) ([]weirdriver.JobInsertResult, error) {
	var (
		r   pgx.Rows
		err error
	)
	if len(params) == 1 && params[0].UniqueKey == nil {
		p := params[0]
		args := []any{p.Queue, p.Kind, []byte(p.Args), p.Priority, nil, p.MaxAttempts, nil, nil}
		if !p.ScheduledAt.IsZero() {
			args[4] = p.ScheduledAt.Truncate(time.Microsecond) // as insertInput does
		}
		if len(p.Tags) > 0 {
			args[6] = p.Tags
		}
		if len(p.Metadata) > 0 {
			args[7] = []byte(p.Metadata)
		}
		sql := e.q.jobInsertOneQ
		if notify {
			sql, args = e.q.jobInsertOne, append(args, e.q.insertChannel)
		}
		r, err = e.db.Query(ctx, sql, args...)
	} else {
		input, ierr := insertInput(params)
		if ierr != nil {
			return nil, ierr
		}
		if notify {
			r, err = e.db.Query(ctx, e.q.jobInsert, input, e.q.insertChannel)
		} else {
			r, err = e.db.Query(ctx, e.q.jobInsertQuiet, input)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	defer r.Close()
	return scanInsertResults(r, len(params))
}

func (e *executor) JobInsertBulk(ctx context.Context, params []*weirdriver.JobInsertParams) (_ []*weirtype.JobRow, err error) {
	defer func() { err = schemaErr(err) }()
	if len(params) == 0 {
		return nil, nil
	}
	var (
		now time.Time
		ids []int64
	)
	if err := e.db.QueryRow(ctx, e.q.jobIDs, len(params)).Scan(&now, &ids); err != nil {
		return nil, fmt.Errorf("reserve job ids: %w", err)
	}
	jobs := make([]*weirtype.JobRow, len(params))
	for i, p := range params {
		jobs[i] = bulkRow(ids[i], now, p)
	}
	src, cols := newCopySource(jobs)
	n, err := e.db.CopyFrom(ctx, pgx.Identifier{e.q.schema, "weir_job"}, cols, src)
	if err != nil {
		return nil, fmt.Errorf("copy jobs: %w", err)
	}
	if int(n) != len(jobs) {
		return nil, fmt.Errorf("copy jobs: wrote %d rows of %d", n, len(jobs))
	}
	return jobs, nil
}

func (e *executor) NotifyInsert(ctx context.Context, queues []string) (err error) {
	defer func() { err = schemaErr(err) }()
	if len(queues) == 0 {
		return nil
	}
	if e.notifier != nil {
		e.notifier.notify(ctx, queues)
		return nil
	}
	if _, err := e.db.Exec(ctx, e.q.notifyInsert, e.q.insertChannel, queues); err != nil {
		return fmt.Errorf("notify insert: %w", err)
	}
	return nil
}

func (e *executor) JobGet(ctx context.Context, id int64) (_ *weirtype.JobRow, err error) {
	defer func() { err = schemaErr(err) }()
	r, err := e.db.Query(ctx, e.q.jobGet, id)
	if err != nil {
		return nil, fmt.Errorf("get job %d: %w", id, err)
	}
	defer r.Close()
	return scanOne(r, id)
}

func (e *executor) JobList(ctx context.Context, p *weirdriver.JobListParams) (_ []*weirtype.JobRow, err error) {
	defer func() { err = schemaErr(err) }()
	sql, args := listQuery(e.q, p)
	r, err := e.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	defer r.Close()
	return scanListed(r)
}

// scanListed reads the rows of a listing (listQuery).
func scanListed(r rows) ([]*weirtype.JobRow, error) {
	var jobs []*weirtype.JobRow
	sc := newJobScanner()
	for r.Next() {
		job, err := sc.scan(r)
		if err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		jobs = append(jobs, job)
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}

func (e *executor) JobUpdate(ctx context.Context, id int64, p *weirdriver.JobUpdateParams) (*weirtype.JobRow, error) {
	var meta, tags any // NULL: kept
	if p.Metadata != nil {
		meta = string(p.Metadata)
	}
	if p.Tags != nil {
		tags = p.Tags
	}
	return e.changeJob(ctx, "update", id, e.q.jobUpdate, meta, tags)
}

func (e *executor) JobCancel(ctx context.Context, id int64) (*weirtype.JobRow, error) {
	return e.changeJob(ctx, "cancel", id, e.q.jobCancel, e.q.controlChannel)
}

func (e *executor) JobRetry(ctx context.Context, id int64) (*weirtype.JobRow, error) {
	return e.changeJob(ctx, "retry", id, e.q.jobRetry, e.q.insertChannel)
}

func (e *executor) JobDelete(ctx context.Context, id int64) (*weirtype.JobRow, error) {
	return e.changeJob(ctx, "delete", id, e.q.jobDelete)
}

// changeJob runs an operator statement on one job. When it matches no row, the job's
// current state says why.
func (e *executor) changeJob(ctx context.Context, what string, id int64, sql string, args ...any) (_ *weirtype.JobRow, err error) {
	defer func() { err = schemaErr(err) }()
	r, err := e.db.Query(ctx, sql, append([]any{id}, args...)...)
	if err != nil {
		if isUniqueViolation(err) {
			return nil, fmt.Errorf("%s job %d: %w", what, id, weirdriver.ErrUniqueConflict)
		}
		return nil, fmt.Errorf("%s job %d: %w", what, id, err)
	}
	var job *weirtype.JobRow
	for r.Next() {
		job, err = scanJob(r)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("%s job %d: %w", what, id, err)
		}
	}
	r.Close()
	if err := r.Err(); err != nil {
		if isUniqueViolation(err) {
			return nil, fmt.Errorf("%s job %d: %w", what, id, weirdriver.ErrUniqueConflict)
		}
		return nil, fmt.Errorf("%s job %d: %w", what, id, err)
	}
	if job != nil {
		return job, nil
	}
	var state weirtype.JobState
	if err := e.db.QueryRow(ctx, e.q.jobState, id).Scan(&state); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("%s job %d: %w", what, id, weirdriver.ErrNotFound)
		}
		return nil, fmt.Errorf("%s job %d: %w", what, id, err)
	}
	if state == weirtype.JobStateRunning {
		return nil, fmt.Errorf("%s job %d: %w", what, id, weirdriver.ErrJobRunning)
	}
	return nil, fmt.Errorf("%s job %d: %w", what, id, &weirdriver.JobFinalError{State: state})
}

func (e *executor) QueueList(ctx context.Context) (_ []*weirtype.QueueStats, err error) {
	defer func() { err = schemaErr(err) }()
	r, err := e.db.Query(ctx, e.q.queueList)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	defer r.Close()
	out, _, _, err := scanQueues(r)
	return out, err
}

func (e *executor) QueuePause(ctx context.Context, name string) (err error) {
	defer func() { err = schemaErr(err) }()
	if _, err := e.db.Exec(ctx, e.q.queuePause, name, e.q.controlChannel); err != nil {
		return fmt.Errorf("pause queue %s: %w", name, err)
	}
	return nil
}

func (e *executor) QueueResume(ctx context.Context, name string) (err error) {
	defer func() { err = schemaErr(err) }()
	if _, err := e.db.Exec(ctx, e.q.queueResume, name, e.q.insertChannel); err != nil {
		return fmt.Errorf("resume queue %s: %w", name, err)
	}
	return nil
}

func (e *executor) QueueSetGlobalLimit(ctx context.Context, name string, limit int) (err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckGlobalLimit(name, limit); err != nil {
		return fmt.Errorf("set global limit of queue %s: %w", name, err)
	}
	var arg *int
	if limit > 0 {
		arg = &limit
	}
	if _, err := e.db.Exec(ctx, e.q.queueSetLimit, name, arg, e.q.insertChannel); err != nil {
		return fmt.Errorf("set global limit of queue %s: %w", name, err)
	}
	return nil
}

func (e *executor) QueueSetRateLimit(ctx context.Context, name string, limit int, period time.Duration) (err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckRateLimit(name, limit, period); err != nil {
		return fmt.Errorf("set rate limit of queue %s: %w", name, err)
	}
	var rate, periodUS *int64
	if limit > 0 {
		r, p := int64(limit), period.Microseconds()
		rate, periodUS = &r, &p
	}
	if _, err := e.db.Exec(ctx, e.q.queueSetRate, name, rate, periodUS, e.q.insertChannel); err != nil {
		return fmt.Errorf("set rate limit of queue %s: %w", name, err)
	}
	return nil
}

func (e *executor) QueueSetKeyLimit(ctx context.Context, name string, p weirdriver.KeyLimitParams) (err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckKeyLimit(name, p); err != nil {
		return fmt.Errorf("set key limit of queue %s: %w", name, err)
	}
	var (
		lim, rate *int
		periodUS  *int64
		source    *string
		path      []string
	)
	if p.Limit > 0 {
		lim = &p.Limit
	}
	if p.Rate > 0 {
		us := p.RatePeriod.Microseconds()
		rate, periodUS = &p.Rate, &us
	}
	if p != (weirdriver.KeyLimitParams{}) {
		src, fields, _ := weirdriver.ParseKey(p.Key) // checked
		source, path = &src, fields
	}
	if source != nil && e.compact != nil {
		// Claims of a queue limited per key read the list's key hints; turn
		// it on first (only from the pool: inside a transaction, the rows it
		// adds would not be seen until that commits). Turning on waits for
		// the transactions writing jobs; one left open (the caller's own,
		// perhaps) leaves it to the maintenance leader after readyOnWait,
		// and the queue's claims take nothing until then.
		onCtx, cancel := context.WithTimeout(ctx, readyOnWait)
		err := e.readyEnsureOn(onCtx)
		cancel()
		if err != nil && (ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded)) {
			return fmt.Errorf("set key limit of queue %s: %w", name, err)
		}
	}
	if _, err := e.db.Exec(ctx, e.q.queueSetKey, name, lim, rate, periodUS, source, path, e.q.insertChannel); err != nil {
		return fmt.Errorf("set key limit of queue %s: %w", name, err)
	}
	return nil
}

// listQuery builds the listing statement for p; the schema is fixed at construction.
func listQuery(q *queries, p *weirdriver.JobListParams) (string, []any) {
	var (
		where []string
		args  []any
	)
	add := func(cond string, arg any) {
		args = append(args, arg)
		where = append(where, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args))))
	}
	if len(p.States) > 0 {
		states := make([]string, len(p.States))
		for i, s := range p.States {
			states[i] = string(s)
		}
		add("state = ANY($?::text[])", states)
	}
	if len(p.Queues) > 0 {
		add("queue = ANY($?::text[])", p.Queues)
	}
	if len(p.Kinds) > 0 {
		add("kind = ANY($?::text[])", p.Kinds)
	}
	if len(p.Tags) > 0 {
		add("tags @> $?::text[]", p.Tags)
	}
	if !p.CreatedAfter.IsZero() {
		add("created_at >= $?", p.CreatedAfter)
	}
	if !p.CreatedBefore.IsZero() {
		add("created_at < $?", p.CreatedBefore)
	}
	if p.Search != "" {
		add(`(kind ILIKE $? ESCAPE '\' OR args::text ILIKE $? ESCAPE '\')`, weirdriver.LikePattern(p.Search))
	}
	order := "ASC"
	if p.Descending {
		order = "DESC"
		if p.AfterID > 0 {
			add("id < $?", p.AfterID)
		}
		if p.StopID > 0 {
			add("id >= $?", p.StopID)
		}
	} else {
		if p.AfterID > 0 {
			add("id > $?", p.AfterID)
		}
		if p.StopID > 0 {
			add("id <= $?", p.StopID)
		}
	}
	sql := "SELECT " + jobColumns + " FROM " + q.job
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, p.Limit)
	sql += " ORDER BY id " + order + " LIMIT $" + strconv.Itoa(len(args))
	return sql, args
}

// insertRecord is one job in the JSON array that jobInsert reads.
type insertRecord struct {
	Ord          int             `json:"ord"`
	Kind         string          `json:"kind"`
	Queue        string          `json:"queue"`
	Args         json.RawMessage `json:"args"`
	Priority     int             `json:"priority"`
	MaxAttempts  int             `json:"max_attempts"`
	ScheduledAt  *time.Time      `json:"scheduled_at,omitempty"`
	Tags         []string        `json:"tags,omitempty"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
	UniqueKey    string          `json:"unique_key,omitempty"`
	UniqueStates *uint16         `json:"unique_states,omitempty"`
	UniqueByArgs bool            `json:"unique_by_args,omitempty"`
	// KeyArgs is what a key by a subset of args covers; absent, all args.
	KeyArgs    json.RawMessage `json:"key_args,omitempty"`
	OnConflict uint8           `json:"on_conflict,omitempty"`
}

func insertInput(params []*weirdriver.JobInsertParams) ([]byte, error) {
	records := make([]insertRecord, len(params))
	for i, p := range params {
		rec := insertRecord{
			Ord: i, Kind: p.Kind, Queue: p.Queue, Args: p.Args, Priority: p.Priority,
			MaxAttempts: p.MaxAttempts, Tags: p.Tags, Metadata: p.Metadata,
		}
		if !p.ScheduledAt.IsZero() {
			// Truncate as pgx does for COPY; PostgreSQL would round the text form.
			at := p.ScheduledAt.Truncate(time.Microsecond)
			rec.ScheduledAt = &at
		}
		if p.UniqueKey != nil {
			mask := weirdriver.StatesMask(p.UniqueStates)
			rec.UniqueKey, rec.UniqueStates = hex.EncodeToString(p.UniqueKey), &mask
			rec.UniqueByArgs = p.UniqueByArgs
			if p.UniqueByArgs && len(p.UniqueArgsKeys) > 0 {
				rec.KeyArgs = p.CanonicalArgs
			}
			rec.OnConflict = uint8(p.UniqueOnConflict)
		}
		records[i] = rec
	}
	input, err := json.Marshal(records)
	if err != nil {
		return nil, fmt.Errorf("encode jobs: %w", err)
	}
	return input, nil
}

// scanInsertResults reads jobInsert's rows: the job columns and the duplicate
// and replaced flags.
func scanInsertResults(r rows, want int) ([]weirdriver.JobInsertResult, error) {
	results := make([]weirdriver.JobInsertResult, 0, want)
	var duplicate, replaced bool
	sc := newJobScanner(&duplicate, &replaced)
	for r.Next() {
		job, err := sc.scan(r)
		if err != nil {
			return nil, fmt.Errorf("insert jobs: %w", err)
		}
		results = append(results, weirdriver.JobInsertResult{Job: job, Duplicate: duplicate, Replaced: replaced})
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	if len(results) != want {
		return nil, fmt.Errorf("insert jobs: got %d rows back for %d jobs", len(results), want)
	}
	return results, nil
}

func scanOne(r rows, id int64) (*weirtype.JobRow, error) {
	if !r.Next() {
		if err := r.Err(); err != nil {
			return nil, fmt.Errorf("get job %d: %w", id, err)
		}
		return nil, fmt.Errorf("get job %d: %w", id, weirdriver.ErrNotFound)
	}
	job, err := scanJob(r)
	if err != nil {
		return nil, fmt.Errorf("get job %d: %w", id, err)
	}
	return job, nil
}

// scanJob reads one row of jobColumns.
func scanJob(r rows) (*weirtype.JobRow, error) {
	var s jobScan
	if err := r.Scan(s.dest()...); err != nil {
		return nil, err
	}
	return s.finish()
}

// jobScanner reads rows of jobColumns, then the extra columns, into targets it
// keeps from row to row (a claim reads a thousand rows at a time).
type jobScanner struct {
	s    jobScan
	dest []any
}

func newJobScanner(extra ...any) *jobScanner {
	sc := &jobScanner{}
	sc.dest = append(sc.s.dest(), extra...)
	return sc
}

func (sc *jobScanner) scan(r rows) (*weirtype.JobRow, error) {
	sc.s = jobScan{}
	if err := r.Scan(sc.dest...); err != nil {
		return nil, err
	}
	return sc.s.finish()
}

// jobScan is a row of jobColumns being read: dest gives the scan targets, finish
// decodes the columns that need it.
type jobScan struct {
	job          weirtype.JobRow
	errors       []byte
	tags         []byte
	attemptedBy  *string
	uniqueStates *int16
}

func (s *jobScan) dest() []any {
	j := &s.job
	// Args and metadata are read as bytes: into a json.RawMessage, pgx would
	// run the JSON decoder over them only to copy them.
	return []any{
		&j.ID, &j.State, &j.Queue, &j.Kind, (*[]byte)(&j.Args), &j.Priority, &j.Attempt,
		&j.MaxAttempts, &j.ScheduledAt, &j.CreatedAt, &j.AttemptedAt, &j.FinalizedAt,
		&j.LeaseToken, &j.LeaseExpiresAt, &s.attemptedBy, &s.errors, &s.tags,
		(*[]byte)(&j.Metadata), &j.UniqueKey, &s.uniqueStates, &j.ReleaseCount, &j.CancelRequestedAt,
		(*[]byte)(&j.Output), (*[]byte)(&j.Progress),
	}
}

// finish returns a copy of the job read, so that s can be reused.
func (s *jobScan) finish() (*weirtype.JobRow, error) {
	j := new(weirtype.JobRow)
	*j = s.job
	if s.attemptedBy != nil {
		j.AttemptedBy = *s.attemptedBy
	}
	// Most jobs have no errors and no tags: skip the decoder for those.
	if string(s.errors) == "[]" {
		j.Errors = []weirtype.AttemptError{}
	} else if err := json.Unmarshal(s.errors, &j.Errors); err != nil {
		return nil, fmt.Errorf("job %d: decode errors column: %w", j.ID, err)
	}
	if string(s.tags) == "[]" {
		j.Tags = []string{}
	} else if err := json.Unmarshal(s.tags, &j.Tags); err != nil {
		return nil, fmt.Errorf("job %d: decode tags column: %w", j.ID, err)
	}
	if s.uniqueStates != nil {
		j.UniqueStates = weirdriver.MaskStates(uint16(*s.uniqueStates))
	}
	return j, nil
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// schemaErr marks errors that mean weir's schema is missing or behind, and
// explains the prepared statement errors of a connection pooler.
func schemaErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01", "42703", "42883", "3F000": // undefined table, column, function; invalid schema
			return fmt.Errorf("%w: %w", weirdriver.ErrSchemaMissing, err)
		}
	}
	return preparedErr(err)
}

// poolerHint is added to the prepared statement errors a connection pooler in
// transaction mode causes with pgx's default statement cache.
const poolerHint = "through a connection pooler in transaction mode (PgBouncer), add " +
	"default_query_exec_mode=cache_describe to the connection string (docs/poolers.md)"

// preparedErr adds poolerHint to a prepared statement error (SQLSTATE 26000:
// does not exist; 42P05: already exists), and returns any other error as it is.
func preparedErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "26000" || pgErr.Code == "42P05") {
		return fmt.Errorf("%w (%s)", err, poolerHint)
	}
	return err
}
