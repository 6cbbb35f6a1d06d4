package weirsqlite

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// queryer is what *sql.DB and *sql.Tx have in common.
type queryer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// executor runs statements on the driver's connections, or inside a transaction:
// one of its own (Begin), or a caller's (UnwrapTx), where it serves only as a
// weirdriver.Inserter.
type executor struct {
	d  *Driver
	tx *txn // nil: each call runs in a transaction of its own
}

// txn is a transaction, or a savepoint inside one, that an executor runs in.
type txn struct {
	tx *sql.Tx
	// owned is set for transactions opened by Begin: their notifications are
	// published when the outermost one commits. A caller's transaction (UnwrapTx)
	// publishes nothing, since the driver cannot see its commit.
	owned  bool
	parent *txn   // the enclosing transaction of a savepoint
	name   string // the savepoint's name; "" for a transaction
	depth  int
	notes  []weirdriver.Notification
	done   bool
	// endTurn ends the driver's write turn that an outermost owned transaction
	// holds; stopEnd cancels its call when the context ends.
	endTurn func()
	stopEnd func() bool
}

// finish ends an outermost owned transaction's write turn.
func (t *txn) finish() {
	if t.endTurn != nil {
		t.stopEnd()
		t.endTurn()
	}
}

// write is one write call in progress: its statements, the time that stands for
// the database's now() in all of them, and the notifications it publishes.
type write struct {
	q     *sql.Tx
	now   int64 // µs since the Unix epoch
	notes []weirdriver.Notification
}

func (w *write) notify(channel, payload string) {
	w.notes = append(w.notes, weirdriver.Notification{Channel: channel, Payload: payload})
}

// notifyQueues notifies the insert channel once per queue, in first-seen order.
func (w *write) notifyQueues(queues []string) {
	seen := make(map[string]bool, len(queues))
	for _, q := range queues {
		if !seen[q] {
			seen[q] = true
			w.notify(insertChannel, q)
		}
	}
}

// nowMicros is the database clock: the host's wall clock, in microseconds. A
// write reads it after it holds the file's write lock, so that writes see time
// in commit order on one host.
func nowMicros() int64 { return time.Now().UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// write runs fn as one all-or-nothing write. On the driver's connections it is a
// BEGIN IMMEDIATE transaction that commits and then publishes fn's notifications;
// inside a transaction it is a savepoint, and the notifications wait for the
// outermost commit (or are dropped in a caller's transaction).
func (e *executor) write(ctx context.Context, fn func(w *write) error) error {
	if e.tx == nil {
		if err := e.d.takeTurn(ctx); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		defer e.d.endTurn()
		tx, err := e.d.writer.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		w := &write{q: tx, now: nowMicros()}
		if err := fn(w); err != nil {
			_ = tx.Rollback()
			return err
		}
		return e.d.commit(tx, w.notes)
	}
	if e.tx.done {
		return sql.ErrTxDone
	}
	// SQLite undoes only the failing statement, and a call may run several: the
	// savepoint makes the call all-or-nothing, as one statement is on PostgreSQL.
	q := e.tx.tx
	if _, err := q.ExecContext(ctx, "SAVEPOINT weir_call"); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	w := &write{q: q, now: nowMicros()}
	if err := fn(w); err != nil {
		_, _ = q.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO weir_call; RELEASE weir_call")
		return err
	}
	if _, err := q.ExecContext(ctx, "RELEASE weir_call"); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	if e.tx.owned {
		e.tx.notes = append(e.tx.notes, w.notes...)
	}
	return nil
}

// commit commits tx and publishes its notifications, in commit order.
func (d *Driver) commit(tx *sql.Tx, notes []weirdriver.Notification) error {
	d.pubMu.Lock()
	defer d.pubMu.Unlock()
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	d.broker.publish(notes)
	return nil
}

// reader returns where reads run: the read pool, or the executor's transaction.
func (e *executor) reader() queryer {
	if e.tx == nil {
		return e.d.reader
	}
	return e.tx.tx
}

// Begin starts a transaction that holds the write connection until it ends, or a
// savepoint inside the executor's transaction. Its notifications go out when
// the outermost transaction commits.
func (e *executor) Begin(ctx context.Context) (weirdriver.ExecutorTx, error) {
	if e.tx == nil {
		if err := e.d.takeTurn(ctx); err != nil {
			return nil, fmt.Errorf("begin: %w", err)
		}
		tx, err := e.d.writer.BeginTx(ctx, nil)
		if err != nil {
			e.d.endTurn()
			return nil, fmt.Errorf("begin: %w", err)
		}
		t := &txn{tx: tx, owned: true}
		// The turn ends with the transaction: at Commit or Rollback, or when ctx
		// ends, since database/sql then rolls the transaction back by itself.
		var once sync.Once
		t.endTurn = func() { once.Do(e.d.endTurn) }
		t.stopEnd = context.AfterFunc(ctx, t.endTurn)
		return &executorTx{executor{d: e.d, tx: t}}, nil
	}
	if e.tx.done {
		return nil, fmt.Errorf("begin savepoint: %w", sql.ErrTxDone)
	}
	sp := &txn{tx: e.tx.tx, owned: e.tx.owned, parent: e.tx, depth: e.tx.depth + 1}
	sp.name = "weir_sp_" + strconv.Itoa(sp.depth)
	if _, err := e.tx.tx.ExecContext(ctx, "SAVEPOINT "+sp.name); err != nil {
		return nil, fmt.Errorf("begin savepoint: %w", err)
	}
	return &executorTx{executor{d: e.d, tx: sp}}, nil
}

func (e *executor) BeginInsert(ctx context.Context) (weirdriver.InserterTx, error) {
	return e.Begin(ctx)
}

// executorTx is an executor inside a transaction (or savepoint) it owns.
type executorTx struct {
	executor
}

func (e *executorTx) Commit(ctx context.Context) error {
	t := e.tx
	if t.done {
		return fmt.Errorf("commit: %w", sql.ErrTxDone)
	}
	t.done = true
	if t.parent != nil {
		if _, err := t.tx.ExecContext(ctx, "RELEASE "+t.name); err != nil {
			return fmt.Errorf("release savepoint: %w", err)
		}
		t.parent.notes = append(t.parent.notes, t.notes...)
		return nil
	}
	defer t.finish()
	return e.d.commit(t.tx, t.notes)
}

// Rollback ends the transaction (or savepoint) and drops its notifications. After
// Commit it does nothing.
func (e *executorTx) Rollback(ctx context.Context) error {
	t := e.tx
	if t.done {
		return nil
	}
	t.done, t.notes = true, nil
	if t.parent != nil {
		if _, err := t.tx.ExecContext(ctx, "ROLLBACK TO "+t.name+"; RELEASE "+t.name); err != nil {
			return fmt.Errorf("rollback savepoint: %w", err)
		}
		return nil
	}
	defer t.finish()
	if err := t.tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("rollback: %w", err)
	}
	return nil
}

func (e *executor) JobInsert(ctx context.Context, params []*weirdriver.JobInsertParams) (_ []weirdriver.JobInsertResult, err error) {
	defer func() { err = schemaErr(err) }()
	if len(params) == 0 {
		return []weirdriver.JobInsertResult{}, nil
	}
	var results []weirdriver.JobInsertResult
	err = e.write(ctx, func(w *write) error {
		var err error
		results, err = insertUnique(ctx, w, params)
		if err != nil {
			return err
		}
		var queues []string
		for _, r := range results {
			if (!r.Duplicate || r.Replaced) && r.Job.State == weirtype.JobStateAvailable {
				queues = append(queues, r.Job.Queue)
			}
		}
		w.notifyQueues(queues)
		return nil
	})
	if isUniqueViolation(err) {
		// Only a caller's deferred transaction on a stale snapshot can get here:
		// the driver's own look-up and insert hold the write lock.
		return nil, fmt.Errorf("insert jobs: %w: %w", weirdriver.ErrUniqueConflict, err)
	}
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	return results, nil
}

// JobInsertBulk inserts with multi-row INSERTs in one transaction. As weirpgx's
// COPY, it notifies nobody: the caller sends NotifyInsert in the same transaction.
func (e *executor) JobInsertBulk(ctx context.Context, params []*weirdriver.JobInsertParams) (_ []*weirtype.JobRow, err error) {
	defer func() { err = schemaErr(err) }()
	if len(params) == 0 {
		return nil, nil
	}
	for i, p := range params {
		if p.UniqueKey != nil {
			return nil, fmt.Errorf("insert jobs in bulk: job %d has a unique key; use JobInsert", i)
		}
	}
	var jobs []*weirtype.JobRow
	err = e.write(ctx, func(w *write) error {
		var err error
		jobs, err = insertRows(ctx, w, params)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("insert jobs in bulk: %w", err)
	}
	return jobs, nil
}

// NotifyInsert publishes at once on the driver's connections and at commit in a
// transaction from Begin. In a caller's transaction it does nothing: the driver
// cannot see that commit, and workers poll.
func (e *executor) NotifyInsert(ctx context.Context, queues []string) error {
	if len(queues) == 0 {
		return nil
	}
	w := &write{}
	w.notifyQueues(queues)
	switch {
	case e.tx == nil:
		e.d.pubMu.Lock()
		e.d.broker.publish(w.notes)
		e.d.pubMu.Unlock()
	case e.tx.owned && !e.tx.done:
		e.tx.notes = append(e.tx.notes, w.notes...)
	case e.tx.owned:
		return fmt.Errorf("notify insert: %w", sql.ErrTxDone)
	}
	return nil
}

func (e *executor) JobGet(ctx context.Context, id int64) (_ *weirtype.JobRow, err error) {
	defer func() { err = schemaErr(err) }()
	q := e.reader()
	rows, err := q.QueryContext(ctx, jobGet, id)
	if err != nil {
		return nil, fmt.Errorf("get job %d: %w", id, err)
	}
	jobs, err := collectJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("get job %d: %w", id, err)
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("get job %d: %w", id, weirdriver.ErrNotFound)
	}
	return jobs[0], nil
}

func (e *executor) JobList(ctx context.Context, p *weirdriver.JobListParams) (_ []*weirtype.JobRow, err error) {
	defer func() { err = schemaErr(err) }()
	if p.Limit < 0 {
		return nil, fmt.Errorf("list jobs: limit %d is negative", p.Limit)
	}
	q := e.reader()
	query, args := listQuery(p)
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	jobs, err := collectJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}

// listQuery builds the listing statement for p.
func listQuery(p *weirdriver.JobListParams) (string, []any) {
	var (
		where []string
		args  []any
	)
	in := func(col string, values []string) {
		marks := make([]string, len(values))
		for i, v := range values {
			args = append(args, v)
			marks[i] = "?" + strconv.Itoa(len(args))
		}
		where = append(where, col+" IN ("+strings.Join(marks, ", ")+")")
	}
	cmp := func(cond string, arg any) {
		args = append(args, arg)
		where = append(where, cond+" ?"+strconv.Itoa(len(args)))
	}
	if len(p.States) > 0 {
		states := make([]string, len(p.States))
		for i, s := range p.States {
			states[i] = string(s)
		}
		in("state", states)
	}
	if len(p.Queues) > 0 {
		in("queue", p.Queues)
	}
	if len(p.Kinds) > 0 {
		in("kind", p.Kinds)
	}
	for _, tag := range p.Tags {
		args = append(args, tag)
		where = append(where, "EXISTS (SELECT 1 FROM json_each(tags) WHERE value = ?"+strconv.Itoa(len(args))+")")
	}
	if !p.CreatedAfter.IsZero() {
		cmp("created_at >=", p.CreatedAfter.UnixMicro())
	}
	if !p.CreatedBefore.IsZero() {
		cmp("created_at <", p.CreatedBefore.UnixMicro())
	}
	if p.Search != "" {
		// LIKE folds the case of ASCII letters only.
		args = append(args, weirdriver.LikePattern(p.Search))
		n := strconv.Itoa(len(args))
		where = append(where, `(kind LIKE ?`+n+` ESCAPE '\' OR args LIKE ?`+n+` ESCAPE '\')`)
	}
	order := "ASC"
	if p.Descending {
		order = "DESC"
		if p.AfterID > 0 {
			cmp("id <", p.AfterID)
		}
		if p.StopID > 0 {
			cmp("id >=", p.StopID)
		}
	} else {
		if p.AfterID > 0 {
			cmp("id >", p.AfterID)
		}
		if p.StopID > 0 {
			cmp("id <=", p.StopID)
		}
	}
	query := "SELECT " + jobColumns + " FROM weir_job"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, p.Limit)
	query += " ORDER BY id " + order + " LIMIT ?" + strconv.Itoa(len(args))
	return query, args
}

func (e *executor) JobCancel(ctx context.Context, id int64) (*weirtype.JobRow, error) {
	return e.changeJob(ctx, "cancel", id, jobCancel, true, nil, func(w *write, job *weirtype.JobRow) {
		if job.State == weirtype.JobStateRunning {
			w.notify(controlChannel, "cancel "+strconv.FormatInt(job.ID, 10))
		}
	})
}

func (e *executor) JobRetry(ctx context.Context, id int64) (*weirtype.JobRow, error) {
	return e.changeJob(ctx, "retry", id, jobRetry, true, nil, func(w *write, job *weirtype.JobRow) {
		w.notify(insertChannel, job.Queue)
	})
}

func (e *executor) JobDelete(ctx context.Context, id int64) (*weirtype.JobRow, error) {
	return e.changeJob(ctx, "delete", id, jobDelete, false, nil, nil)
}

func (e *executor) JobUpdate(ctx context.Context, id int64, p *weirdriver.JobUpdateParams) (*weirtype.JobRow, error) {
	var meta, tags any // NULL: kept
	if p.Metadata != nil {
		meta = string(p.Metadata)
	}
	if p.Tags != nil {
		b, err := json.Marshal(p.Tags)
		if err != nil {
			return nil, fmt.Errorf("update job %d: %w", id, err)
		}
		tags = string(b)
	}
	return e.changeJob(ctx, "update", id, jobUpdate, false, []any{meta, tags}, nil)
}

// changeJob runs an operator statement on one job (?1 the id, ?2 now if withNow,
// then extra) and calls then with the changed row. When it matches no row, the
// job's state says why.
func (e *executor) changeJob(ctx context.Context, what string, id int64, query string, withNow bool, extra []any, then func(*write, *weirtype.JobRow)) (_ *weirtype.JobRow, err error) {
	defer func() { err = schemaErr(err) }()
	var job *weirtype.JobRow
	err = e.write(ctx, func(w *write) error {
		args := []any{id}
		if withNow {
			args = append(args, w.now)
		}
		args = append(args, extra...)
		rows, err := w.q.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		jobs, err := collectJobs(rows)
		if err != nil {
			return err
		}
		if len(jobs) == 1 {
			job = jobs[0]
			if then != nil {
				then(w, job)
			}
			return nil
		}
		var state weirtype.JobState
		if err := w.q.QueryRowContext(ctx, jobState, id).Scan(&state); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return weirdriver.ErrNotFound
			}
			return err
		}
		if state == weirtype.JobStateRunning {
			return weirdriver.ErrJobRunning
		}
		return &weirdriver.JobFinalError{State: state}
	})
	if isUniqueViolation(err) {
		return nil, fmt.Errorf("%s job %d: %w", what, id, weirdriver.ErrUniqueConflict)
	}
	if err != nil {
		return nil, fmt.Errorf("%s job %d: %w", what, id, err)
	}
	return job, nil
}

func (e *executor) QueueList(ctx context.Context) (_ []*weirtype.QueueStats, err error) {
	defer func() { err = schemaErr(err) }()
	q := e.reader()
	rows, err := q.QueryContext(ctx, queueList)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	defer rows.Close()
	var out []*weirtype.QueueStats
	for rows.Next() {
		var (
			queue    string
			state    sql.NullString
			n        int64
			oldest   sql.NullInt64
			paused   bool
			limit    int
			rate     int
			periodUS int64
			keyLimit int
			keyRate  int
			keyPerUS int64
			key      string
		)
		if err := rows.Scan(&queue, &state, &n, &oldest, &paused, &limit, &rate, &periodUS, &keyLimit, &keyRate, &keyPerUS, &key); err != nil {
			return nil, fmt.Errorf("list queues: %w", err)
		}
		if len(out) == 0 || out[len(out)-1].Name != queue {
			out = append(out, &weirtype.QueueStats{Name: queue, Counts: map[weirtype.JobState]int64{}, Paused: paused,
				GlobalLimit: limit, RateLimit: rate, RatePeriod: time.Duration(periodUS) * time.Microsecond,
				KeyLimit: keyLimit, KeyRate: keyRate, KeyRatePeriod: time.Duration(keyPerUS) * time.Microsecond, Key: key})
		}
		if state.Valid {
			out[len(out)-1].Counts[weirtype.JobState(state.String)] = n
			if weirtype.JobState(state.String) == weirtype.JobStateAvailable && oldest.Valid {
				out[len(out)-1].OldestAvailableAt = fromMicros(oldest.Int64)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	return out, nil
}

func (e *executor) QueuePause(ctx context.Context, name string) (err error) {
	defer func() { err = schemaErr(err) }()
	err = e.write(ctx, func(w *write) error {
		if _, err := w.q.ExecContext(ctx, queuePause, name, w.now); err != nil {
			return err
		}
		w.notify(controlChannel, "pause "+name)
		return nil
	})
	if err != nil {
		return fmt.Errorf("pause queue %s: %w", name, err)
	}
	return nil
}

func (e *executor) QueueResume(ctx context.Context, name string) (err error) {
	defer func() { err = schemaErr(err) }()
	err = e.write(ctx, func(w *write) error {
		res, err := w.q.ExecContext(ctx, queueResume, name, w.now)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n > 0 {
			w.notify(insertChannel, name) // wake the queue's workers
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("resume queue %s: %w", name, err)
	}
	return nil
}

func (e *executor) QueueSetGlobalLimit(ctx context.Context, name string, limit int) (err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckGlobalLimit(name, limit); err != nil {
		return fmt.Errorf("set global limit of queue %s: %w", name, err)
	}
	var arg any
	if limit > 0 {
		arg = limit
	}
	err = e.write(ctx, func(w *write) error {
		if _, err := w.q.ExecContext(ctx, queueSetGlobalLimit, name, arg, w.now); err != nil {
			return err
		}
		w.notify(insertChannel, name) // wake the queue's workers
		return nil
	})
	if err != nil {
		return fmt.Errorf("set global limit of queue %s: %w", name, err)
	}
	return nil
}

func (e *executor) QueueSetRateLimit(ctx context.Context, name string, limit int, period time.Duration) (err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckRateLimit(name, limit, period); err != nil {
		return fmt.Errorf("set rate limit of queue %s: %w", name, err)
	}
	var rate, periodUS any
	if limit > 0 {
		rate, periodUS = limit, period.Microseconds()
	}
	err = e.write(ctx, func(w *write) error {
		if _, err := w.q.ExecContext(ctx, queueSetRateLimit, name, rate, periodUS, w.now); err != nil {
			return err
		}
		w.notify(insertChannel, name) // wake the queue's workers
		return nil
	})
	if err != nil {
		return fmt.Errorf("set rate limit of queue %s: %w", name, err)
	}
	return nil
}

func (e *executor) QueueSetKeyLimit(ctx context.Context, name string, p weirdriver.KeyLimitParams) (err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckKeyLimit(name, p); err != nil {
		return fmt.Errorf("set key limit of queue %s: %w", name, err)
	}
	var lim, rate, periodUS, key any
	if p.Limit > 0 {
		lim = p.Limit
	}
	if p.Rate > 0 {
		rate, periodUS = p.Rate, p.RatePeriod.Microseconds()
	}
	if p != (weirdriver.KeyLimitParams{}) {
		key = p.Key
	}
	err = e.write(ctx, func(w *write) error {
		if _, err := w.q.ExecContext(ctx, keyRateForget, name, key); err != nil {
			return err
		}
		if _, err := w.q.ExecContext(ctx, queueSetKeyLimit, name, lim, rate, periodUS, key, w.now); err != nil {
			return err
		}
		w.notify(insertChannel, name) // wake the queue's workers
		return nil
	})
	if err != nil {
		return fmt.Errorf("set key limit of queue %s: %w", name, err)
	}
	return nil
}

// insertUnique inserts params in order. A job with a unique key whose state is
// in its unique states is not inserted when a job that is in its own unique
// states holds the key (the condition of weir_job_unique_idx), or when an earlier
// job of the batch took it; the holder comes back with Duplicate set. The write
// lock makes the look-up and the insert one step.
func insertUnique(ctx context.Context, w *write, params []*weirdriver.JobInsertParams) ([]weirdriver.JobInsertResult, error) {
	params = withArgsKeys(params)
	results := make([]weirdriver.JobInsertResult, len(params))
	var (
		send    []*weirdriver.JobInsertParams
		sentAt  []int              // index in params of each sent job
		batch   = map[string]int{} // unique key -> index in params of the batch's holder
		dupOf   = map[int]int{}    // index in params -> index of the batch's holder
		holders *sql.Stmt
	)
	defer func() {
		if holders != nil {
			holders.Close()
		}
	}()
	for i, p := range params {
		if p.UniqueKey != nil && weirdriver.StatesMask(p.UniqueStates)&weirdriver.StateBit(insertState(p, w.now)) != 0 {
			if first, ok := batch[string(p.UniqueKey)]; ok {
				dupOf[i] = first
				continue
			}
			if holders == nil {
				var err error
				if holders, err = w.q.PrepareContext(ctx, jobUniqueHolder); err != nil {
					return nil, err
				}
			}
			rows, err := holders.QueryContext(ctx, p.UniqueKey)
			if err != nil {
				return nil, err
			}
			existing, err := collectJobs(rows)
			if err != nil {
				return nil, err
			}
			if len(existing) > 0 {
				res, err := onConflict(ctx, w, p, existing[0])
				if err != nil {
					return nil, err
				}
				results[i] = res
				continue
			}
			batch[string(p.UniqueKey)] = i
		}
		send = append(send, p)
		sentAt = append(sentAt, i)
	}
	jobs, err := insertRows(ctx, w, send)
	if err != nil {
		return nil, err
	}
	for j, job := range jobs {
		results[sentAt[j]] = weirdriver.JobInsertResult{Job: job}
	}
	for i, first := range dupOf {
		results[i] = weirdriver.JobInsertResult{Job: results[first].Job, Duplicate: true}
	}
	return results, nil
}

// onConflict applies p's conflict mode to holder, the job that holds p's unique
// key, and returns the result for p. The write lock is held since the look-up,
// so holder is as the store has it: only a pending holder is changed.
func onConflict(ctx context.Context, w *write, p *weirdriver.JobInsertParams, holder *weirtype.JobRow) (weirdriver.JobInsertResult, error) {
	dup := weirdriver.JobInsertResult{Job: holder, Duplicate: true}
	if p.UniqueOnConflict == weirdriver.UniqueOnConflictSkip {
		return dup, nil
	}
	switch holder.State {
	case weirtype.JobStateScheduled, weirtype.JobStateAvailable, weirtype.JobStateRetryable:
	default:
		return dup, nil
	}
	row, err := insertArgs(p, w.now)
	if err != nil {
		return dup, err
	}
	// row: state, queue, kind, args, priority, max_attempts, scheduled_at, ...
	scheduled, state := holder.ScheduledAt.UnixMicro(), holder.State
	if p.UniqueOnConflict == weirdriver.UniqueOnConflictDebounce {
		scheduled = row[6].(int64)
		switch {
		case scheduled <= w.now:
			state = weirtype.JobStateAvailable
		case holder.State != weirtype.JobStateRetryable:
			state = weirtype.JobStateScheduled
		}
	}
	rows, err := w.q.QueryContext(ctx, jobReplace, holder.ID, row[3], row[9], row[8], p.Priority, p.MaxAttempts,
		scheduled, string(state))
	if err != nil {
		return dup, err
	}
	got, err := collectJobs(rows)
	if err != nil {
		return dup, err
	}
	if len(got) == 0 {
		return dup, nil // not pending after all: left as it is
	}
	return weirdriver.JobInsertResult{Job: got[0], Duplicate: true, Replaced: true}, nil
}

// insertState is the state a job starts in: scheduled when it is due after now.
func insertState(p *weirdriver.JobInsertParams, now int64) weirtype.JobState {
	if !p.ScheduledAt.IsZero() && p.ScheduledAt.UnixMicro() > now {
		return weirtype.JobStateScheduled
	}
	return weirtype.JobStateAvailable
}

// insertChunk is the most rows per INSERT: 12 parameters each, well under
// SQLite's limit of 32766.
const insertChunk = 500

// insertRows inserts params with multi-row INSERTs and returns the rows in order.
// SQLite gives AUTOINCREMENT ids in the order of the VALUES rows, and nothing else
// inserts meanwhile (the write lock), so the rows sorted by id are in params order;
// RETURNING itself promises no order.
func insertRows(ctx context.Context, w *write, params []*weirdriver.JobInsertParams) ([]*weirtype.JobRow, error) {
	jobs := make([]*weirtype.JobRow, 0, len(params))
	for chunk := range slices.Chunk(params, insertChunk) {
		var (
			sb   strings.Builder
			args = make([]any, 0, 12*len(chunk))
		)
		sb.WriteString(jobInsertHead)
		for i, p := range chunk {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString("(")
			for c := range 12 {
				if c > 0 {
					sb.WriteString(", ")
				}
				sb.WriteString("?" + strconv.Itoa(len(args)+c+1))
			}
			sb.WriteString(")")
			row, err := insertArgs(p, w.now)
			if err != nil {
				return nil, err
			}
			args = append(args, row...)
		}
		sb.WriteString(" RETURNING " + jobColumns)
		rows, err := w.q.QueryContext(ctx, sb.String(), args...)
		if err != nil {
			return nil, err
		}
		got, err := collectJobs(rows)
		if err != nil {
			return nil, err
		}
		if len(got) != len(chunk) {
			return nil, fmt.Errorf("got %d rows back for %d jobs", len(got), len(chunk))
		}
		slices.SortFunc(got, func(a, b *weirtype.JobRow) int { return cmp.Compare(a.ID, b.ID) })
		for i, job := range got {
			if job.Kind != chunk[i].Kind || job.Queue != chunk[i].Queue {
				return nil, fmt.Errorf("row %d came back as job %d (%s in %s), not in insert order", i, job.ID, job.Kind, job.Queue)
			}
		}
		jobs = append(jobs, got...)
	}
	return jobs, nil
}

// insertArgs are the values of one row of jobInsertHead's columns.
func insertArgs(p *weirdriver.JobInsertParams, now int64) ([]any, error) {
	scheduled := now
	if !p.ScheduledAt.IsZero() {
		scheduled = p.ScheduledAt.UnixMicro()
	}
	tags := "[]"
	if len(p.Tags) > 0 {
		b, err := json.Marshal(p.Tags)
		if err != nil {
			return nil, fmt.Errorf("encode tags: %w", err)
		}
		tags = string(b)
	}
	var args, metadata any // NULL args fails the NOT NULL constraint, as on PostgreSQL
	if p.Args != nil {
		args = string(p.Args)
	}
	metadata = "{}"
	if p.Metadata != nil {
		metadata = string(p.Metadata)
	}
	var key, states any
	if p.UniqueKey != nil {
		key, states = p.UniqueKey, int64(weirdriver.StatesMask(p.UniqueStates))
	}
	return []any{
		string(insertState(p, now)), p.Queue, p.Kind, args, p.Priority, p.MaxAttempts,
		scheduled, now, tags, metadata, key, states,
	}, nil
}

// collectJobs reads rows of jobColumns and closes rows.
func collectJobs(rows *sql.Rows) ([]*weirtype.JobRow, error) {
	defer rows.Close()
	var jobs []*weirtype.JobRow
	for rows.Next() {
		job, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, job)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return jobs, nil
}

// scanJob reads one row of jobColumns.
func scanJob(rows *sql.Rows) (*weirtype.JobRow, error) {
	var (
		j                                              weirtype.JobRow
		state, args, errs, tags, metadata              string
		attemptedBy                                    sql.NullString
		scheduled, created                             int64
		attempted, finalized, leaseExpires, cancelReqd sql.NullInt64
		uniqueStates                                   sql.NullInt64
		output, progress                               sql.NullString
	)
	err := rows.Scan(&j.ID, &state, &j.Queue, &j.Kind, &args, &j.Priority, &j.Attempt,
		&j.MaxAttempts, &scheduled, &created, &attempted, &finalized, &j.LeaseToken,
		&leaseExpires, &attemptedBy, &errs, &tags, &metadata, &j.UniqueKey, &uniqueStates,
		&j.ReleaseCount, &cancelReqd, &output, &progress)
	if err != nil {
		return nil, err
	}
	j.State = weirtype.JobState(state)
	j.Args = json.RawMessage(args)
	j.Metadata = json.RawMessage(metadata)
	j.ScheduledAt, j.CreatedAt = fromMicros(scheduled), fromMicros(created)
	j.AttemptedAt, j.FinalizedAt = timePtr(attempted), timePtr(finalized)
	j.LeaseExpiresAt, j.CancelRequestedAt = timePtr(leaseExpires), timePtr(cancelReqd)
	j.AttemptedBy = attemptedBy.String
	if output.Valid {
		j.Output = json.RawMessage(output.String)
	}
	if progress.Valid {
		j.Progress = json.RawMessage(progress.String)
	}
	if err := json.Unmarshal([]byte(errs), &j.Errors); err != nil {
		return nil, fmt.Errorf("job %d: decode errors column: %w", j.ID, err)
	}
	if err := json.Unmarshal([]byte(tags), &j.Tags); err != nil {
		return nil, fmt.Errorf("job %d: decode tags column: %w", j.ID, err)
	}
	if uniqueStates.Valid {
		j.UniqueStates = weirdriver.MaskStates(uint16(uniqueStates.Int64))
	}
	return &j, nil
}

func timePtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicros(v.Int64)
	return &t
}

// sqliteCode returns the extended result code of a SQLite error, or 0.
func sqliteCode(err error) int {
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

func isUniqueViolation(err error) bool {
	code := sqliteCode(err)
	return code == sqlite3.SQLITE_CONSTRAINT_UNIQUE || code == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// schemaErr marks errors that mean weir's schema is missing or behind. SQLite
// reports them as generic errors, so the message tells.
func schemaErr(err error) error {
	if err == nil || sqliteCode(err)&0xff != sqlite3.SQLITE_ERROR {
		return err
	}
	msg := err.Error()
	for _, missing := range []string{"no such table:", "no such column:", "no such function:", "has no column named"} {
		if strings.Contains(msg, missing) {
			return fmt.Errorf("%w: %w", weirdriver.ErrSchemaMissing, err)
		}
	}
	return err
}

// withArgsKeys returns params with the unique key of each job that is unique by
// its args derived as weirdriver.JobInsertParams says: SHA-256 of the prefix the
// client computed, "\x00args=" and the client's canonical args (SQLite has no
// canonical JSON text of its own). The caller's params are not changed.
func withArgsKeys(params []*weirdriver.JobInsertParams) []*weirdriver.JobInsertParams {
	out := params
	for i, p := range params {
		if !p.UniqueByArgs || p.UniqueKey == nil {
			continue
		}
		if &out[0] == &params[0] {
			out = slices.Clone(params)
		}
		canonical := p.CanonicalArgs
		if canonical == nil {
			canonical = p.Args
		}
		h := sha256.New()
		h.Write(p.UniqueKey)
		h.Write([]byte("\x00args="))
		h.Write(canonical)
		derived := *p
		derived.UniqueKey, derived.UniqueByArgs = h.Sum(nil), false
		out[i] = &derived
	}
	return out
}
