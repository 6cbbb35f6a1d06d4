package weirpgx

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The ready list on demand (docs/design/storage.md). The list costs every
// insert a second row and every claim a delete; it pays only while an old
// snapshot keeps the index entries of claimed jobs from being cleaned, or for
// the key hints of queues limited per key. So it is off unless one of those
// holds, and the maintenance leader turns it on and off.
//
// Its mode is weir_ready_mode's value modulo 4: readyOff (0, or 3), readyWriting
// (1: the triggers write rows, claims still walk the job table's index) and
// readyOn (2: claims walk the list). Only the leader writes the value, under
// the transaction-level advisory lock readyModeLockSQL names, after reading it
// under the same lock, and each write is higher than the value read: so a
// leader that finds the value it read earlier knows nobody changed it since.
//
// Turning it on: write readyWriting; wait for every transaction that held a
// write lock on weir_job just after (the ones that may have read readyOff and
// written jobs without rows: a writer reads the mode after taking its lock);
// add the rows of the available jobs that have none, and commit; then, if the
// value is still the one written, write readyOn. Turning it off needs no
// wait: the job table's index is always whole.
const (
	readyOff     = 0
	readyWriting = 1
	readyOn      = 2
)

// A claim that walks the index while a snapshot is held passes over the
// entries of every job claimed since it began, which it cannot mark dead. The
// leader turns the list on when, since its last look, the index handed out
// readyWalkFactor times as many entries as it gave live rows, and
// readyWalkMin more: without a held snapshot each dead entry is handed out
// about once (the scan that meets it first marks it), so the two stay close.
const (
	readyWalkFactor = 10
	readyWalkMin    = 50000
)

// While the list is on, the leader probes the job table's index every
// readyProbeEvery. Each probe notes, for each queue with rows in the list
// (at most readyProbeQueues), the range of the claim order its first
// readyProbeRange rows span; the next probe walks that range of the index
// twice, and counts the entries the second walk was handed beyond the rows it
// found. By then the range's jobs have mostly been claimed: their entries are
// dead, and the first walk marks them (later scans skip them) unless a
// snapshot older than their claims keeps them. So a short second walk says no
// old snapshot is held, whatever else the index holds (walking the whole dead
// head of a busy queue's index would not fit the probe's time). The walks are
// cut off at readyProbeTimeout (counted as long). readyProbeShort probes in a
// row with at most readyProbeSlack extra entries in every range turn the list
// off.
const (
	readyProbeEvery   = 5 * time.Second
	readyProbeShort   = 3
	readyProbeRange   = 1000
	readyProbeSlack   = readyProbeRange / 4
	readyProbeTimeout = 50 * time.Millisecond
	readyProbeQueues  = 32
)

// readyModeSQL reads the mode's value, whether any queue has limits per key,
// and the counts of the job table's index of available jobs: entries handed
// out by its scans and live rows fetched through it.
const readyModeSQL = `
SELECT last_value, EXISTS (SELECT 1 FROM {queue} WHERE key_source IS NOT NULL),
	pg_stat_get_tuples_returned('{schema}.weir_job_available_idx'::regclass),
	pg_stat_get_tuples_fetched('{schema}.weir_job_available_idx'::regclass)
FROM {schema}.weir_ready_mode`

// readyModeLockSQL takes the lock under which the mode is read and written,
// named after the schema.
const readyModeLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1 || '.weir_ready_mode', 0))`

const readyModeReadSQL = `SELECT last_value FROM {schema}.weir_ready_mode`

const readyModeSetSQL = `SELECT setval('{schema}.weir_ready_mode', $1, true)`

// readyLockersSQL lists the transactions, other than this one, that hold a
// write lock on weir_job (prepared ones too), by virtual transaction id,
// which no later transaction reuses.
const readyLockersSQL = `
SELECT coalesce(array_agg(DISTINCT l.virtualtransaction), '{}') FROM pg_locks l
WHERE l.locktype = 'relation' AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND l.relation = '{schema}.weir_job'::regclass AND l.mode = 'RowExclusiveLock'
	AND l.pid IS DISTINCT FROM pg_backend_pid()`

// readyLockersLeftSQL counts those of $1 that still hold it.
const readyLockersLeftSQL = `
SELECT count(*) FROM pg_locks l
WHERE l.locktype = 'relation' AND l.relation = '{schema}.weir_job'::regclass AND l.virtualtransaction = ANY($1)`

// readyProbeQueuesSQL names the queues with rows in the list (a skip scan
// of its claim index), at most $1.
const readyProbeQueuesSQL = `
WITH RECURSIVE listed(q) AS (
	(SELECT r.queue FROM {ready} r ORDER BY r.queue LIMIT 1)
	UNION ALL
	SELECT (SELECT r.queue FROM {ready} r WHERE r.queue > listed.q ORDER BY r.queue LIMIT 1)
	FROM listed WHERE listed.q IS NOT NULL
)
SELECT listed.q FROM listed WHERE listed.q IS NOT NULL LIMIT $1`

// readyProbeRangeSQL returns the range of the claim order that queue $1's
// first $2 rows in the list span: the first's place and the last's; no row
// when it has none.
const readyProbeRangeSQL = `
WITH h AS (
	SELECT r.priority, r.scheduled_at, r.job_id FROM {ready} r WHERE r.queue = $1
	ORDER BY r.priority, r.scheduled_at, r.job_id LIMIT $2
)
SELECT f.priority, f.scheduled_at, f.job_id, l.priority, l.scheduled_at, l.job_id
FROM (SELECT * FROM h ORDER BY h.priority, h.scheduled_at, h.job_id LIMIT 1) f,
	(SELECT * FROM h ORDER BY h.priority DESC, h.scheduled_at DESC, h.job_id DESC LIMIT 1) l`

// readyProbeSQL walks the range ($2, $3, $4) to ($5, $6, $7) of queue $1's
// entries in the job table's index of available jobs, and returns how many
// entries the index has handed out in this transaction, and how many rows
// the walk found.
const readyProbeSQL = `
WITH walk AS (
	SELECT count(*) AS n FROM {job} j WHERE j.state = 'available' AND j.queue = $1
		AND (j.priority, j.scheduled_at, j.id) >= ($2::smallint, $3::timestamptz, $4::bigint)
		AND (j.priority, j.scheduled_at, j.id) <= ($5::smallint, $6::timestamptz, $7::bigint)
)
SELECT pg_stat_get_xact_tuples_returned('{schema}.weir_job_available_idx'::regclass), walk.n FROM walk`

// probeRange is a range of a queue's claim order that the next probe walks.
type probeRange struct {
	queue      string
	loP, hiP   int16
	loAt, hiAt time.Time
	loID, hiID int64
}

// readyModeState is what the leader's driver remembers of the mode between
// calls: the index's counts at its last look, and the probes.
type readyModeState struct {
	sampled         bool
	handed, fetched int64
	nextProbe       time.Time
	short           int
	ranges          []probeRange // what the next probe walks
}

// nextModeValue is the value that sets mode m after value v.
func nextModeValue(v int64, m int64) int64 { return (v/4+1)*4 + m }

// ReadyModeStep is what one step of the mode did.
type readyModeStep struct {
	mode     int64 // the mode after the step
	changed  bool
	repaired int64
}

// readyMode runs one step of the mode: the leader calls it before each
// compaction.
func (e *executor) readyMode(ctx context.Context) (readyModeStep, error) {
	var (
		v               int64
		keyed           bool
		handed, fetched int64
	)
	if err := e.db.QueryRow(ctx, e.q.readyMode).Scan(&v, &keyed, &handed, &fetched); err != nil {
		return readyModeStep{}, fmt.Errorf("read the ready list's mode: %w", err)
	}
	e.compact.mu.Lock()
	st := &e.compact.mode
	long := st.sampled && handed-st.handed-(fetched-st.fetched) > readyWalkFactor*(fetched-st.fetched)+readyWalkMin
	st.sampled, st.handed, st.fetched = true, handed, fetched
	if keyed {
		st.short = 0
	}
	e.compact.mu.Unlock()
	switch v % 4 {
	case readyWriting:
		return e.readyTurnOn(ctx, v)
	case readyOn:
		if keyed {
			return readyModeStep{mode: readyOn}, nil
		}
		return e.readyProbe(ctx, v)
	default:
		if !keyed && !long {
			return readyModeStep{mode: readyOff}, nil
		}
		w, ok, err := e.readyModeSet(ctx, v, readyWriting)
		if err != nil || !ok {
			return readyModeStep{mode: readyOff}, err
		}
		return e.readyTurnOn(ctx, w)
	}
}

// readyModeSet writes mode m if the value is still v, and returns the value
// written.
func (e *executor) readyModeSet(ctx context.Context, v, m int64) (int64, bool, error) {
	w := nextModeValue(v, m)
	err := e.withModeLock(ctx, func(tx pgx.Tx, now int64) error {
		if now != v {
			return errModeMoved
		}
		_, err := tx.Exec(ctx, e.q.readyModeSet, w)
		return err
	})
	if errors.Is(err, errModeMoved) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("set the ready list's mode: %w", err)
	}
	return w, true, nil
}

var errModeMoved = errors.New("the ready list's mode moved")

// withModeLock runs fn in a transaction that holds the mode's lock, with the
// mode's value read under it.
func (e *executor) withModeLock(ctx context.Context, fn func(tx pgx.Tx, v int64) error) error {
	return pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, e.q.readyModeLock, e.q.schema); err != nil {
			return err
		}
		var v int64
		if err := tx.QueryRow(ctx, e.q.readyModeRead).Scan(&v); err != nil {
			return err
		}
		return fn(tx, v)
	})
}

// readyTurnOn finishes turning the list on from value v (readyWriting): it
// waits for the transactions that held a write lock on weir_job, adds the
// missing rows, and writes readyOn.
func (e *executor) readyTurnOn(ctx context.Context, v int64) (readyModeStep, error) {
	step := readyModeStep{mode: readyWriting}
	var lockers []string
	if err := e.db.QueryRow(ctx, e.q.readyLockers).Scan(&lockers); err != nil {
		return step, fmt.Errorf("turn the ready list on: %w", err)
	}
	// No statement waits for another session's transaction without taking
	// a lock that would queue new writers behind it, so the leader polls
	// pg_locks until the listed ones are gone.
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for len(lockers) > 0 {
		var left int
		if err := e.db.QueryRow(ctx, e.q.readyLockersLeft, lockers).Scan(&left); err != nil {
			return step, fmt.Errorf("turn the ready list on: wait for writers: %w", err)
		}
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return step, fmt.Errorf("turn the ready list on: wait for %d writers: %w", left, ctx.Err())
		case <-poll.C:
		}
	}
	err := e.withModeLock(ctx, func(tx pgx.Tx, now int64) error {
		if now != v {
			return errModeMoved
		}
		return tx.QueryRow(ctx, e.q.readyRepair).Scan(&step.repaired)
	})
	if errors.Is(err, errModeMoved) {
		return step, nil
	}
	if err != nil {
		return step, fmt.Errorf("turn the ready list on: add the rows: %w", err)
	}
	_, ok, err := e.readyModeSet(ctx, v, readyOn)
	if err != nil || !ok {
		return step, err
	}
	e.compact.mu.Lock()
	e.compact.mode.short, e.compact.mode.nextProbe = 0, time.Now().Add(readyProbeEvery)
	e.compact.mu.Unlock()
	return readyModeStep{mode: readyOn, changed: true, repaired: step.repaired}, nil
}

// readyProbe, every readyProbeEvery while the list is on at value v, walks
// each queue's head in the job table's index, and turns the list off after
// readyProbeShort probes in a row found every walk short.
func (e *executor) readyProbe(ctx context.Context, v int64) (readyModeStep, error) {
	step := readyModeStep{mode: readyOn}
	c := e.compact
	c.mu.Lock()
	due := !time.Now().Before(c.mode.nextProbe)
	if due {
		c.mode.nextProbe = time.Now().Add(readyProbeEvery)
	}
	c.mu.Unlock()
	if !due {
		return step, nil
	}
	short, err := e.readyProbeShort(ctx)
	c.mu.Lock()
	if err != nil || !short {
		c.mode.short = 0
	} else {
		c.mode.short++
	}
	off := c.mode.short >= readyProbeShort
	if off {
		c.mode.short = 0
	}
	c.mu.Unlock()
	if !off {
		return step, err
	}
	if _, ok, err := e.readyModeSet(ctx, v, readyOff); err != nil || !ok {
		return step, err
	}
	return readyModeStep{mode: readyOff, changed: true}, nil
}

// readyProbeShort walks the ranges the last probe noted, twice each, says
// whether every second walk was short, and notes the ranges of the next.
func (e *executor) readyProbeShort(ctx context.Context) (bool, error) {
	e.compact.mu.Lock()
	ranges := e.compact.mode.ranges
	e.compact.mode.ranges = nil
	e.compact.mu.Unlock()
	// The first probe since the list was turned on only notes ranges.
	short, err := e.walkProbeRanges(ctx, ranges)
	if isQueryCanceled(err) {
		short, err = false, nil // cut off: long
	}
	if err != nil {
		return false, fmt.Errorf("probe the ready list: %w", err)
	}
	next, err := e.readyProbeRanges(ctx)
	if err != nil {
		return false, err
	}
	e.compact.mu.Lock()
	e.compact.mode.ranges = next
	e.compact.mu.Unlock()
	return short, nil
}

// walkProbeRanges walks each of ranges twice in one transaction bounded to
// readyProbeTimeout, and says whether no second walk was handed more than
// readyProbeSlack entries beyond its rows.
func (e *executor) walkProbeRanges(ctx context.Context, ranges []probeRange) (bool, error) {
	if len(ranges) == 0 {
		return true, nil
	}
	short := true
	err := pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = "+strconv.FormatInt(readyProbeTimeout.Milliseconds(), 10)+
			"; SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off"); err != nil {
			return err
		}
		for _, r := range ranges {
			var before, after, n int64
			for walk := range 2 {
				if err := tx.QueryRow(ctx, e.q.readyProbe, r.queue, r.loP, r.loAt, r.loID, r.hiP, r.hiAt, r.hiID).
					Scan(&after, &n); err != nil {
					return err
				}
				if walk == 0 {
					before = after
				}
			}
			if after-before-n > readyProbeSlack {
				short = false
				return nil
			}
		}
		return nil
	})
	return short, err
}

// readyProbeRanges notes the range of each listed queue's first rows.
func (e *executor) readyProbeRanges(ctx context.Context) ([]probeRange, error) {
	rows, err := e.db.Query(ctx, e.q.readyProbeQueues, readyProbeQueues)
	if err != nil {
		return nil, fmt.Errorf("probe the ready list: %w", err)
	}
	queues, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("probe the ready list: %w", err)
	}
	var out []probeRange
	for _, q := range queues {
		r := probeRange{queue: q}
		err := e.db.QueryRow(ctx, e.q.readyProbeRange, q, readyProbeRange).
			Scan(&r.loP, &r.loAt, &r.loID, &r.hiP, &r.hiAt, &r.hiID)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // its rows went meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("probe the ready list: %w", err)
		}
		out = append(out, r)
	}
	return out, nil
}

// readyOnWait is how long setting a limit per key waits for the list to be
// turned on (see QueueSetKeyLimit).
const readyOnWait = 5 * time.Second

// readyEnsureOn turns the list on, waiting for it, unless it is on: a queue
// limited per key is claimed through it. It leaves the list as it is when
// another client's leader keeps moving the mode.
func (e *executor) readyEnsureOn(ctx context.Context) error {
	for range 3 {
		var v int64
		if err := e.db.QueryRow(ctx, e.q.readyModeRead).Scan(&v); err != nil {
			return fmt.Errorf("read the ready list's mode: %w", err)
		}
		switch v % 4 {
		case readyOn:
			return nil
		case readyWriting:
		default:
			w, ok, err := e.readyModeSet(ctx, v, readyWriting)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			v = w
		}
		step, err := e.readyTurnOn(ctx, v)
		if err != nil {
			return err
		}
		if step.mode == readyOn {
			return nil
		}
	}
	return nil
}

// ReadyListOn turns the ready list on now and waits until claims walk it, as
// the maintenance leader does when it finds claims walking the entries an old
// snapshot keeps (docs/design/storage.md): for an operator who knows such a
// snapshot is about to be held (a pg_dump of a busy database), and for tests
// of the list. The leader turns it off again once its probes find the job
// table's index short for a while (about 15 seconds).
func (d *Driver) ReadyListOn(ctx context.Context) error {
	return d.Executor().(*executor).readyEnsureOn(ctx)
}

// isQueryCanceled says err is a statement cancelled by its timeout.
func isQueryCanceled(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014"
}
