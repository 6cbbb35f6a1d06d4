package weirpgx

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirq/weir/weirdriver"
)

// The ready list (docs/design/storage.md): weir_ready, partitioned into
// readySegments segments weir_ready_0 ... by the second its rows were written.
// A claim deletes the rows it takes. Under a snapshot that an old transaction
// holds open, neither VACUUM nor the index's own clean-up can remove deleted
// rows, and each claim would walk their index entries again; TRUNCATE removes
// them whatever the snapshots, so ReadyCompact empties a segment once most of
// its rows are gone.
const readySegments = 4

// compactMinDead is the fewest dead rows a segment must have before it is
// compacted: below it, a claim walks them in well under a millisecond.
const compactMinDead = 1000

// A compaction waits for its segment's lock at most compactLockWait at first.
// Claims queue behind a compaction that waits, so it gives up soon; but a
// claim in flight holds the lock too, and claims that a backlog made slow
// would then never let a compaction through, and grow slower still. So each
// time a segment's lock is not granted the next wait doubles, up to
// compactLockWaitMax, and the segment is left alone for as long again as the
// hold-off (compactHoldOff doubled, up to compactHoldOffMax); a compaction
// that succeeds starts both afresh. The hold-off also keeps a segment just
// emptied from being emptied again before the statistics say it was.
const (
	compactLockWait    = 50 * time.Millisecond
	compactLockWaitMax = 400 * time.Millisecond
	compactHoldOff     = 2 * time.Second
	compactHoldOffMax  = 30 * time.Second
)

// compactState is what ReadyCompact remembers between calls on a driver: for
// each segment, when it may next be compacted, how long to wait for its lock
// then, and how many compactions in a row found it locked.
type compactState struct {
	mu     sync.Mutex
	after  [readySegments]time.Time
	wait   [readySegments]time.Duration
	off    [readySegments]time.Duration
	denied [readySegments]int
	mode   readyModeState
}

// plan returns how long to wait for segment n's lock, and false while n is
// held off (a compaction of every segment goes ahead, with that wait).
func (c *compactState) plan(n int, now time.Time) (time.Duration, bool) {
	if c == nil {
		return compactLockWait, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.wait[n], compactLockWait), !now.Before(c.after[n])
}

// done records the outcome of a compaction of segment n: emptied, or busy.
// It returns how many compactions in a row found n busy, this one included.
func (c *compactState) done(n int, busy bool, now time.Time) int {
	if c == nil {
		if busy {
			return 1
		}
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !busy {
		c.wait[n], c.off[n], c.denied[n] = compactLockWait, compactHoldOff, 0
	} else {
		c.wait[n] = min(2*max(c.wait[n], compactLockWait), compactLockWaitMax)
		c.off[n] = min(2*max(c.off[n], compactHoldOff), compactHoldOffMax)
		c.denied[n]++
	}
	c.after[n] = now.Add(c.off[n])
	return c.denied[n]
}

// compactMaxLive is the most live rows a segment may have to be compacted
// while no snapshot is held open: they are copied while claims wait, and
// without an old snapshot the dead rows cost claims little (each claim marks
// the index entries of rows dead to every transaction, and later claims skip
// them). While a snapshot older than compactHeldAfter is held (as far as this
// role can see in pg_stat_activity), segments are compacted whatever they hold.
const (
	compactMaxLive   = 5000
	compactHeldAfter = 5 // seconds
)

// readySegmentsSQL returns the segment new rows go to now, how long the
// oldest snapshot of the database has been held (seconds; 0 when none is
// visible), and each segment's live and dead rows by the statistics (which
// lag by about a second).
const readySegmentsSQL = `
SELECT {schema}.weir_ready_seg(),
	(SELECT coalesce(max(extract(epoch FROM now() - a.xact_start)), 0)::bigint FROM pg_stat_activity a
		WHERE a.datname = current_database() AND a.backend_xmin IS NOT NULL AND a.xact_start IS NOT NULL),
	s.relname, s.n_live_tup, s.n_dead_tup
FROM pg_stat_user_tables s
WHERE s.schemaname = $1 AND s.relname LIKE 'weir\_ready\_%'
ORDER BY s.relname`

// readyLiveSQL counts the rows of segment {segment}, up to $1: a segment
// that the statistics call mostly dead is compacted only when the count says
// it holds at most compactMaxLive rows (see ReadyCompact).
const readyLiveSQL = `SELECT count(*) FROM (SELECT FROM {segment} LIMIT $1) r`

// readyMoveSQL copies the rows of segment {segment} whose job is available
// under the same claim order to segment $1, with their key hint (of two rows
// of one job that differ only in it, either). The CASE keeps the planner off the job
// table's partial index of available jobs (see jobClaimSQL).
const readyMoveSQL = `
INSERT INTO {ready} (seg, queue, priority, scheduled_at, job_id, key)
SELECT DISTINCT ON (r.job_id, r.queue, r.priority, r.scheduled_at) $1::smallint, r.queue, r.priority, r.scheduled_at, r.job_id, r.key
FROM {segment} r JOIN {job} j ON j.id = r.job_id
WHERE CASE WHEN j.state = 'available' AND j.queue = r.queue AND j.priority = r.priority
	AND j.scheduled_at = r.scheduled_at THEN true ELSE false END`

// readyRepairSQL adds a row for each available job that has none under its
// claim order (weir_ready_repair): jobs written while the list was off or the
// triggers did not fire (a restore with triggers disabled, a replica applying
// changes). It reads the job table's index of available jobs, so it runs when
// the list is turned on and at the start of a term, not at every compaction.
const readyRepairSQL = `SELECT {schema}.weir_ready_repair()`

// readyClearSQL empties segment {segment} while the list is off (checked
// under the mode's lock): its rows are stale, and claims do not read them.
const readyClearSQL = `TRUNCATE {segment}`

// segmentStats are a segment's live and dead rows by the statistics.
type segmentStats struct {
	n          int
	live, dead int64
}

func (e *executor) ReadyCompact(ctx context.Context, p *weirdriver.ReadyCompactParams) (_ weirdriver.ReadyCompactResult, err error) {
	defer func() { err = schemaErr(err) }()
	var res weirdriver.ReadyCompactResult
	if e.compact == nil {
		e.compact = &compactState{} // one call's memory
	}
	step, err := e.readyMode(ctx)
	res.Mode, res.ModeChanged, res.Repaired = modeName(step.mode), step.changed, int(step.repaired)
	if err != nil {
		return res, err
	}
	rows, err := e.db.Query(ctx, e.q.readySegments, e.q.schema)
	if err != nil {
		return res, fmt.Errorf("compact the ready list: %w", err)
	}
	var current int
	var held int64
	var segs []segmentStats
	for rows.Next() {
		var name string
		var s segmentStats
		if err := rows.Scan(&current, &held, &name, &s.live, &s.dead); err != nil {
			rows.Close()
			return res, fmt.Errorf("compact the ready list: %w", err)
		}
		if s.n, err = strconv.Atoi(name[len("weir_ready_"):]); err != nil || s.n < 0 || s.n >= readySegments {
			continue // not one of weir's segments
		}
		segs = append(segs, s)
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("compact the ready list: %w", err)
	}
	if step.mode == readyOff {
		return res, e.clearSegments(ctx, p.Every, segs, &res)
	}
	compacted, err := e.compactSegments(ctx, p.Every, current, held, segs)
	compacted.Mode, compacted.ModeChanged, compacted.Repaired = res.Mode, res.ModeChanged, res.Repaired
	if err != nil {
		return compacted, err
	}
	res = compacted
	if p.Repair && step.mode == readyOn && !step.changed {
		var n int64
		if err := e.db.QueryRow(ctx, e.q.readyRepair).Scan(&n); err != nil {
			return res, fmt.Errorf("repair the ready list: %w", err)
		}
		res.Repaired += int(n)
	}
	return res, nil
}

func modeName(m int64) string {
	switch m {
	case readyOn:
		return "on"
	case readyWriting:
		return "writing"
	}
	return "off"
}

// clearSegments empties, while the list is off, the segments the statistics
// say hold rows (every one when every), each in a transaction that checks the
// mode under its lock, so that a list being turned on meanwhile, whose rows
// count, keeps them.
func (e *executor) clearSegments(ctx context.Context, every bool, segs []segmentStats, res *weirdriver.ReadyCompactResult) error {
	for _, s := range segs {
		if !every && s.live+s.dead == 0 {
			continue
		}
		wait, ok := e.compact.plan(s.n, time.Now())
		if !ok && !every {
			continue
		}
		table := pgx.Identifier{e.q.schema, "weir_ready_" + strconv.Itoa(s.n)}.Sanitize()
		err := e.withModeLock(ctx, func(tx pgx.Tx, v int64) error {
			if m := v % 4; m == readyWriting || m == readyOn {
				return errModeMoved
			}
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = "+strconv.FormatInt(wait.Milliseconds(), 10)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, replaceSegment(e.q.readyClear, table))
			return err
		})
		var pgErr *pgconn.PgError
		busy := errors.As(err, &pgErr) && pgErr.Code == "55P03" // lock_not_available
		e.compact.done(s.n, busy, time.Now())
		switch {
		case errors.Is(err, errModeMoved):
			return nil
		case busy:
			res.Busy++
		case err != nil:
			return fmt.Errorf("clear the ready list: %s: %w", table, err)
		default:
			res.Compacted++
		}
	}
	return nil
}

// compactSegments compacts the segments that segs, their statistics, say are
// due (every one when every): current is the segment written to now, held how
// long the oldest snapshot has been held (seconds).
//
// The statistics are a hint. A backend sends its counts of a TRUNCATE (which
// sets a table's counts to zero) up to some seconds after it committed, and
// the counts of rows written to the segment meanwhile are then lost: a
// segment full of live rows can read as all dead. Moving its rows would keep
// every claim waiting for as long, so a segment due by its statistics while
// no snapshot is held is counted first (up to compactMaxLive + 1 rows, which
// stops early when it is full) and left for compactHoldOff when it holds more.
func (e *executor) compactSegments(ctx context.Context, every bool, current int, held int64, segs []segmentStats) (weirdriver.ReadyCompactResult, error) {
	var res weirdriver.ReadyCompactResult
	var due []segmentStats
	for _, s := range segs {
		capped := held < compactHeldAfter && s.live > compactMaxLive
		if every || s.n != current && !capped && s.dead >= max(compactMinDead, s.live) {
			due = append(due, s)
		}
	}
	// The segment being written to is left alone (unless every): its
	// writers would wait for the compaction; it is compacted once the next
	// second begins.
	for _, s := range due {
		wait, ok := e.compact.plan(s.n, time.Now())
		if !ok && !every {
			continue
		}
		table := pgx.Identifier{e.q.schema, "weir_ready_" + strconv.Itoa(s.n)}.Sanitize()
		if !every && held < compactHeldAfter {
			var live int64
			if err := e.db.QueryRow(ctx, replaceSegment(e.q.readyLive, table), compactMaxLive+1).Scan(&live); err != nil {
				return res, fmt.Errorf("compact the ready list: count %s: %w", table, err)
			}
			if live > compactMaxLive {
				e.compact.done(s.n, false, time.Now())
				res.Crowded++
				continue
			}
		}
		to := current
		if to == s.n {
			to = (s.n + 1) % readySegments
		}
		moved, err := e.compactSegment(ctx, table, to, wait)
		tries := e.compact.done(s.n, errors.Is(err, errSegmentBusy), time.Now())
		if errors.Is(err, errSegmentBusy) {
			res.Busy++
			res.BusyTries = max(res.BusyTries, tries)
			continue
		}
		if err != nil {
			return res, err
		}
		res.Compacted++
		res.Moved += moved
	}
	return res, nil
}

// errSegmentBusy says a segment's lock was not granted in time.
var errSegmentBusy = errors.New("ready list segment busy")

// compactSegment moves the rows of segment table whose job is still
// available to segment to, and truncates table, in one transaction that holds
// its lock from the start: no row can be written to it meanwhile (a writer
// waits, and writes to the emptied segment afterwards), and every row written
// before is committed.
func (e *executor) compactSegment(ctx context.Context, table string, to int, wait time.Duration) (int, error) {
	tx, err := e.db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("compact the ready list: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = "+strconv.FormatInt(wait.Milliseconds(), 10)); err != nil {
		return 0, fmt.Errorf("compact the ready list: %w", err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			return 0, errSegmentBusy
		}
		return 0, fmt.Errorf("compact the ready list: lock %s: %w", table, err)
	}
	tag, err := tx.Exec(ctx, replaceSegment(e.q.readyMove, table), to)
	if err != nil {
		return 0, fmt.Errorf("compact the ready list: move from %s: %w", table, err)
	}
	if _, err := tx.Exec(ctx, "TRUNCATE "+table); err != nil {
		return 0, fmt.Errorf("compact the ready list: truncate %s: %w", table, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("compact the ready list: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// replaceSegment fills readyMoveSQL's {segment} with table.
func replaceSegment(sql, table string) string { return strings.ReplaceAll(sql, "{segment}", table) }
