package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/weirq/weir/weirdriver"
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

// batches runs stmt, which changes up to BatchSize rows, until it changes fewer,
// fails or the term ends. Each statement's context ends at the term's local
// deadline, so that no statement outlives the leadership it runs under, or
// sooner when the term ends.
func (s *Service) batches(t *term, what string, stmt func(ctx context.Context) (int, error)) {
	for {
		deadline, ok := s.termDeadline()
		if !ok || t.loop.Err() != nil {
			return
		}
		ctx, cancel := context.WithDeadline(t.stmt, deadline)
		n, err := stmt(ctx)
		cancel()
		if err != nil {
			// An error because the term ended is expected, not a problem.
			if t.loop.Err() == nil && s.IsLeader() {
				s.logger.Warn("maintenance: "+what, slog.Any("error", err))
			}
			return
		}
		if n < s.cfg.BatchSize {
			return
		}
	}
}

// rescue takes back jobs whose lease expired.
func (s *Service) rescue(t *term) {
	s.batches(t, "rescue expired leases", func(ctx context.Context) (int, error) {
		jobs, err := s.exec.JobRescue(ctx, &weirdriver.JobRescueParams{Limit: s.cfg.BatchSize})
		if err != nil {
			return 0, err
		}
		if len(jobs) > 0 {
			s.rescued.Add(int64(len(jobs)))
			ids := make([]int64, len(jobs))
			for i, j := range jobs {
				ids[i] = j.ID
			}
			s.logger.Info("maintenance: rescued jobs whose lease expired", slog.Int("count", len(jobs)), slog.Any("ids", ids))
		}
		return len(jobs), nil
	})
}

// schedule makes due scheduled and retryable jobs available.
func (s *Service) schedule(t *term) {
	s.batches(t, "schedule due jobs", func(ctx context.Context) (int, error) {
		n, err := s.exec.JobSchedule(ctx, s.cfg.BatchSize)
		s.scheduled.Add(int64(n))
		return n, err
	})
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
		Limit:           s.cfg.BatchSize,
	}
	if params.CompletedBefore.IsZero() && params.CancelledBefore.IsZero() && params.DiscardedBefore.IsZero() {
		return
	}
	s.batches(t, "prune final jobs", func(ctx context.Context) (int, error) {
		n, err := s.exec.JobPrune(ctx, params)
		s.pruned.Add(int64(n))
		return n, err
	})
}
