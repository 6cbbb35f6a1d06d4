package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// every runs task every interval until the term ends, and once at the start
// when now is set.
func (s *Service) every(t *term, interval time.Duration, now bool, task func(*term)) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	if now {
		task(t)
	}
	for {
		select {
		case <-t.loop.Done():
			return
		case <-ticker.C:
			task(t)
		}
	}
}

// minRescueGap is the least time between two rescue passes planned by a lease
// expiry: a lease that expired but is held locked (its worker is writing the
// outcome right now) is not taken, and would otherwise be planned for at once,
// again and again.
const minRescueGap = 100 * time.Millisecond

// rescueLoop rescues at the start of the term, then when the earliest lease of
// a running job expires, and at least every RescueInterval. It looks up the
// earliest expiry after each pass and again every ElectInterval (a read, not a
// pass), so that it learns of leases claimed since. Planning by the expiry makes
// a crashed worker's job runnable again a statement's time after its lease
// expires, not up to a rescue interval later; and a new leader, whose first pass
// takes every lease that expired while nobody led, plans its next pass for the
// leases expiring after it.
func (s *Service) rescueLoop(t *term) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	due := time.Now() // when the next pass is due
	for {
		select {
		case <-t.loop.Done():
			return
		case <-timer.C:
		}
		if !time.Now().Before(due) {
			s.rescue(t)
			due = time.Now().Add(s.cfg.RescueInterval)
		}
		if wait, ok := s.untilExpiry(t); ok {
			due = minTime(due, time.Now().Add(wait))
		}
		timer.Reset(min(time.Until(due), s.cfg.ElectInterval))
	}
}

// untilExpiry is how long until the earliest lease of a running job expires,
// by the database clock, plus a millisecond (rescue takes a lease once its
// expiry has passed), and at least minRescueGap; false when no job runs or the
// lookup failed.
func (s *Service) untilExpiry(t *term) (time.Duration, bool) {
	ctx, cancel := context.WithTimeout(t.stmt, s.cfg.ElectInterval)
	defer cancel()
	wait, ok, err := s.exec.JobNextExpiry(ctx)
	if err != nil {
		if t.loop.Err() == nil && s.IsLeader() {
			s.logger.Warn("weir: maintenance: plan the next rescue", slog.Any("error", err))
		}
		return 0, false
	}
	return max(wait+time.Millisecond, minRescueGap), ok
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// batches runs stmt, which changes up to limit rows, until it changes fewer,
// fails or the term ends, and calls committed, if set, after each batch that
// committed. Each statement's context ends at the term's local deadline, or
// sooner when the term ends.
//
// The local deadline alone cannot keep two leaders apart: a statement cut by its
// context may still run to commit on the server. So each statement runs in a
// transaction that first renews the term, which locks the leader row until the
// transaction ends: no other client can take leadership while a batch of ours is
// in flight, and a batch whose term is already gone changes nothing.
//
// A batch cut by its deadline changed nothing, and the same batch would be cut
// again on a database that slow: a backlog would never clear. So a batch that
// is cut halves the task's limit for its next try (a cut by Stop halves it
// too, which does no harm).
func (s *Service) batches(t *term, what string, limit *batchLimit, stmt func(ctx context.Context, exec weirdriver.Executor, limit int) (int, error), committed func()) {
	for {
		deadline, ok := s.termDeadline()
		if !ok || t.loop.Err() != nil {
			return
		}
		n := limit.get(s.cfg.BatchSize)
		ctx, cancel := context.WithDeadline(t.stmt, deadline)
		changed, err := s.fenced(ctx, t.stmt, func(ctx context.Context, exec weirdriver.Executor) (int, error) {
			return stmt(ctx, exec, n)
		})
		// Cut at the deadline, or when the term ended meanwhile: a renewal
		// waits for the batch's lock on the leader row, so a batch that runs
		// too long ends the term at the very deadline it was given.
		cut := ctx.Err() != nil
		cancel()
		if err != nil {
			attrs := []any{slog.Any("error", err)}
			if cut {
				attrs = append(attrs, slog.Int("batch", n), slog.Int("next_batch", limit.shrink(n)))
			}
			// An error because the term ended is expected, not a problem.
			if t.loop.Err() == nil && s.IsLeader() {
				s.logger.Warn("weir: maintenance: "+what, attrs...)
			}
			return
		}
		if committed != nil {
			committed()
		}
		if changed < n {
			return
		}
		limit.grow(n, s.cfg.BatchSize)
	}
}

// batchLimit is the most rows a task's next statement may change; zero means
// the configured batch size.
type batchLimit struct{ n atomic.Int64 }

func (l *batchLimit) get(size int) int {
	if n := l.n.Load(); n > 0 {
		return int(n)
	}
	return size
}

// shrink halves the limit after a batch of n rows ran out of time and returns
// the new limit, at least one row.
func (l *batchLimit) shrink(n int) int {
	next := max(n/2, 1)
	l.n.Store(int64(next))
	return next
}

// grow doubles the limit, up to size, after a full batch of n rows committed.
func (l *batchLimit) grow(n, size int) {
	if n < size {
		l.n.Store(int64(min(2*n, size)))
	}
}

// errNotLeader is returned by fenced when the term is gone in the database.
var errNotLeader = errors.New("not the leader any more")

// fenced runs stmt in a transaction that holds the leadership row.
//
// The commit is not cut at the term's local deadline, as the statements are:
// the transaction renewed the term when it began and holds its row, so no other
// client can lead until it ends, and committing late is safe. A commit cut
// halfway would leave the batch's fate unknown: done on the server, but not
// counted or reported here. So it gets a term's length of its own, and ends
// sooner only when the term's statements are cut (callCut: a hard stop, or a
// term lost at once).
func (s *Service) fenced(ctx, callCut context.Context, stmt func(ctx context.Context, exec weirdriver.Executor) (int, error)) (int, error) {
	tx, err := s.exec.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	held, err := tx.LeaderElect(ctx, &weirdriver.LeaderElectParams{
		Name: LeaderName, LeaderID: s.cfg.ClientID, TTL: s.cfg.LeaderTTL,
	})
	if err != nil {
		return 0, err
	}
	if !held {
		s.refused.Add(1)
		return 0, errNotLeader
	}
	n, err := stmt(ctx, tx)
	if err != nil {
		return 0, err
	}
	commitCtx, cancel := context.WithTimeout(callCut, s.cfg.LeaderTTL)
	defer cancel()
	if err := tx.Commit(commitCtx); err != nil {
		return 0, err
	}
	return n, nil
}

// rescue takes back jobs whose lease expired. Those with attempts left become
// retryable and due at once; the schedule pass that follows makes them
// available and wakes workers, so that a job of a crashed worker is runnable
// again as soon as it is rescued (G9), not a schedule interval later.
func (s *Service) rescue(t *term) {
	before := s.rescued.Load()
	defer func() {
		if s.rescued.Load() > before {
			s.schedule(t)
		}
	}()
	var jobs []*weirtype.JobRow // the batch's, reported once it committed
	s.batches(t, "rescue expired leases", &s.rescueLimit, func(ctx context.Context, exec weirdriver.Executor, limit int) (int, error) {
		var err error
		jobs, err = exec.JobRescue(ctx, &weirdriver.JobRescueParams{Limit: limit})
		return len(jobs), err
	}, func() {
		if s.cfg.Rescued != nil {
			for _, j := range jobs {
				s.cfg.Rescued(j)
			}
		}
		s.rescued.Add(int64(len(jobs))) // after the reports: Stats() seeing it means they were made
	})
}

// schedule makes due scheduled and retryable jobs available.
func (s *Service) schedule(t *term) {
	s.batches(t, "schedule due jobs", &s.scheduleLimit, func(ctx context.Context, exec weirdriver.Executor, limit int) (int, error) {
		n, err := exec.JobSchedule(ctx, limit)
		s.scheduled.Add(int64(n))
		return n, err
	}, nil)
}

// prune deletes final jobs older than their state's retention.
func (s *Service) prune(t *term) {
	now := time.Now().Round(0)
	cutoff := func(retention time.Duration) time.Time {
		if retention < 0 {
			return time.Time{} // keep forever
		}
		return now.Add(-retention)
	}
	params := &weirdriver.JobPruneParams{
		CompletedBefore: cutoff(s.cfg.CompletedRetention),
		CancelledBefore: cutoff(s.cfg.CancelledRetention),
		DiscardedBefore: cutoff(s.cfg.DiscardedRetention),
	}
	if params.CompletedBefore.IsZero() && params.CancelledBefore.IsZero() && params.DiscardedBefore.IsZero() {
		return
	}
	s.batches(t, "prune final jobs", &s.pruneLimit, func(ctx context.Context, exec weirdriver.Executor, limit int) (int, error) {
		p := *params
		p.Limit = limit
		n, err := exec.JobPrune(ctx, &p)
		s.pruned.Add(int64(n))
		return n, err
	}, nil)
}

// compactInterval is how often the leader compacts a driver's ready list
// (weirdriver.ReadyCompacter): often enough that a claim under an old snapshot
// walks at most a few seconds of claimed rows.
const compactInterval = 500 * time.Millisecond

// compactLoop compacts the ready list every compactInterval, and repairs it
// once at the start of the term. Compaction is safe whoever runs it and however often
// (each segment is emptied under its own lock), so it is not fenced by the
// term. A failure is logged once when failures begin, not at every pass; a
// segment that another transaction keeps locked (its dead rows stay until that
// transaction ends) once busyWatch finds it locked long enough to matter.
func (s *Service) compactLoop(t *term, c weirdriver.ReadyCompacter) {
	ticker := time.NewTicker(compactInterval)
	defer ticker.Stop()
	repair := true
	var failing bool
	var busy busyWatch
	for {
		// The repair reads every available job; it gets a term's length, and
		// one try per term.
		timeout := s.cfg.ElectInterval
		if repair {
			timeout = s.cfg.LeaderTTL
		}
		ctx, cancel := context.WithTimeout(t.stmt, timeout)
		res, err := c.ReadyCompact(ctx, &weirdriver.ReadyCompactParams{Repair: repair})
		cancel()
		repair = false
		if err != nil {
			if !failing && t.loop.Err() == nil {
				s.logger.Warn("weir: maintenance: compact the ready list", slog.Any("error", err))
			}
			failing = true
		} else {
			failing = false
			switch {
			case res.ModeChanged:
				// Turned on: claims walked entries an old snapshot keeps, or
				// a queue has limits per key; off: probes found the walk
				// short again (docs/design/storage.md).
				s.logger.Info("weir: maintenance: ready list turned "+res.Mode, slog.Int("rows_added", res.Repaired))
			case res.Repaired > 0:
				s.logger.Warn("weir: maintenance: available jobs had no row in the ready list; added",
					slog.Int("jobs", res.Repaired))
			}
			if locked, warn := busy.observe(res, s.cfg.Now); warn {
				s.logger.Warn("weir: maintenance: a segment of the ready list is locked by another transaction; "+
					"claims slow down while it holds the lock and a snapshot is held open",
					slog.Duration("locked_for", locked))
			}
		}
		select {
		case <-t.loop.Done():
			return
		case <-ticker.C:
		}
	}
}

// compactBusyWarnAfter is how long compactions must keep finding the ready
// list locked before the leader warns.
const compactBusyWarnAfter = 10 * time.Second

// busyWatch decides when a segment of the ready list that compactions find
// locked is worth a warning. A claim in flight holds its segment's lock too,
// so on a busy list a compaction now and then finds a segment locked and a
// later one gets through: no news. What matters is a lock held long, by a
// transaction left open (or a pg_dump): compactions that keep finding
// segments locked, the same one at least twice in a row (the driver's
// BusyTries), for at least compactBusyWarnAfter. It warns once per such run;
// a compaction that finds only segments locked for the first time begins a
// new run.
type busyWatch struct {
	since  time.Time // when the run of compactions finding locks began; zero: none
	warned bool      // the run was warned about
}

// observe takes the result of a compaction. When the warning is due, it
// returns how long the run has lasted, and true. It reads the clock, now,
// only when the compaction found a segment locked.
func (w *busyWatch) observe(res weirdriver.ReadyCompactResult, now func() time.Time) (time.Duration, bool) {
	if res.Busy == 0 {
		return 0, false
	}
	at := now()
	if res.BusyTries <= 1 || w.since.IsZero() {
		w.since, w.warned = at, false
	}
	locked := at.Sub(w.since)
	if w.warned || locked < compactBusyWarnAfter {
		return 0, false
	}
	w.warned = true
	return locked, true
}

// forgetClients deletes the client registry rows whose heartbeat is older than
// ClientStaleAfter: clients that crashed or were cut off. A live client that
// was cut off writes its row again at its next refresh.
func (s *Service) forgetClients(t *term) {
	var n int // the batch's, counted once it committed
	s.batches(t, "forget stale clients", &s.forgetLimit, func(ctx context.Context, exec weirdriver.Executor, limit int) (int, error) {
		var err error
		n, err = exec.ClientPrune(ctx, &weirdriver.ClientPruneParams{StaleAfter: s.cfg.ClientStaleAfter, Limit: limit})
		return n, err
	}, func() { s.forgotten.Add(int64(n)) })
}
