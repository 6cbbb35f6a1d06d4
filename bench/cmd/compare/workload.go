package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The figures a run reports, in the report's order.
const (
	drainRate   = "W1 drain, jobs/s"
	drainWAL    = "W1 WAL, bytes/job"
	drainDead   = "W1 dead tuples left, per job"
	drainUpd    = "W1 row updates, per job"
	drainHOT    = "W1 HOT updates, per job"
	drainAV     = "W1 autovacuums during drain"
	bulkRate    = "W4 bulk insert, jobs/s"
	single1Rate = "W4 single insert x1, jobs/s"
	single8Rate = "W4 single insert x8, jobs/s"
)

var metricOrder = []string{
	drainRate, drainWAL, drainDead, drainUpd, drainHOT, drainAV,
	bulkRate, single1Rate, single8Rate,
}

// bench holds what every run shares.
type bench struct {
	opts  options
	admin *pgxpool.Pool
}

// A workload runs once on one system and returns its figures.
type workload struct {
	name string
	run  func(ctx context.Context, sys system) (map[string]float64, error)
}

func (b *bench) workloads() []workload {
	return []workload{
		{"drain", b.drain},
		{"bulk", b.bulk},
		{"single1", b.singles(1, single1Rate)},
		{"single8", b.singles(8, single8Rate)},
	}
}

// withClient runs fn with a client of sys on a pool of its own and the system's
// job table freshly truncated and vacuumed. It returns once the pool's
// connections have closed and so flushed their statistics.
func (b *bench) withClient(ctx context.Context, sys system, work bool, fn func(client) error) error {
	app := "bench_" + sys.Name()
	pool, err := openPool(ctx, b.opts.databaseURL, app, b.opts.maxConns)
	if err != nil {
		return err
	}
	err = func() error {
		c, err := sys.Open(pool, work)
		if err != nil {
			return err
		}
		if err := reset(ctx, b.admin, sys.JobTable()); err != nil {
			return err
		}
		return fn(c)
	}()
	pool.Close()
	return errors.Join(err, waitGone(ctx, b.admin, app))
}

// drain is W1: jobs inserted first, then worked down by one client. WAL and
// table counters are taken around the working only; a checkpoint first makes
// each run pay for full-page images alike.
func (b *bench) drain(ctx context.Context, sys system) (map[string]float64, error) {
	n := b.opts.drainJobs
	var (
		elapsed    time.Duration
		wal0, wal1 int64
		before     tableStats
	)
	err := b.withClient(ctx, sys, true, func(c client) error {
		if err := insertAll(ctx, c, n, b.opts.batch); err != nil {
			return err
		}
		for _, sql := range []string{"VACUUM ANALYZE " + sys.JobTable(), "CHECKPOINT"} {
			if _, err := b.admin.Exec(ctx, sql); err != nil {
				return fmt.Errorf("%s: %w", sql, err)
			}
		}
		var err error
		if before, err = readTableStats(ctx, b.admin, sys.JobTable()); err != nil {
			return err
		}
		if wal0, err = walPosition(ctx, b.admin); err != nil {
			return err
		}
		drainCtx, cancel := context.WithTimeout(ctx, b.opts.drainTimeout)
		defer cancel()
		if elapsed, err = c.Drain(drainCtx, n); err != nil {
			return err
		}
		if wal1, err = walPosition(ctx, b.admin); err != nil {
			return err
		}
		done, err := countCompleted(ctx, b.admin, sys.JobTable())
		if err != nil {
			return err
		}
		if done != n {
			return fmt.Errorf("%s: %d jobs completed in the table, want %d", sys.Name(), done, n)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	after, err := readTableStats(ctx, b.admin, sys.JobTable())
	if err != nil {
		return nil, err
	}
	perJob := func(v int64) float64 { return float64(v) / float64(n) }
	return map[string]float64{
		drainRate: float64(n) / elapsed.Seconds(),
		drainWAL:  perJob(wal1 - wal0),
		drainDead: perJob(after.dead),
		drainUpd:  perJob(after.updates - before.updates),
		drainHOT:  perJob(after.hotUpdates - before.hotUpdates),
		drainAV:   float64(after.autovacuums - before.autovacuums),
	}, nil
}

// bulk is W4's bulk insert.
func (b *bench) bulk(ctx context.Context, sys system) (map[string]float64, error) {
	var elapsed time.Duration
	err := b.withClient(ctx, sys, false, func(c client) error {
		start := time.Now()
		err := insertAll(ctx, c, b.opts.insertJobs, b.opts.batch)
		elapsed = time.Since(start)
		return err
	})
	if err != nil {
		return nil, err
	}
	return map[string]float64{bulkRate: float64(b.opts.insertJobs) / elapsed.Seconds()}, nil
}

// singles is W4's single inserts from goroutines at once, each job in its own
// transaction, for the insert duration.
func (b *bench) singles(goroutines int, metric string) func(context.Context, system) (map[string]float64, error) {
	return func(ctx context.Context, sys system) (map[string]float64, error) {
		var (
			inserted atomic.Int64
			elapsed  time.Duration
		)
		err := b.withClient(ctx, sys, false, func(c client) error {
			errs := make([]error, goroutines)
			var wg sync.WaitGroup
			start := time.Now()
			deadline := start.Add(b.opts.insertDuration)
			for i := range goroutines {
				wg.Go(func() {
					for time.Now().Before(deadline) {
						if errs[i] = c.Insert(ctx); errs[i] != nil {
							return
						}
						inserted.Add(1)
					}
				})
			}
			wg.Wait()
			elapsed = time.Since(start)
			return errors.Join(errs...)
		})
		if err != nil {
			return nil, err
		}
		return map[string]float64{metric: float64(inserted.Load()) / elapsed.Seconds()}, nil
	}
}

func insertAll(ctx context.Context, c client, n, batch int) error {
	for left := n; left > 0; left -= batch {
		if err := c.InsertMany(ctx, min(batch, left)); err != nil {
			return fmt.Errorf("insert jobs: %w", err)
		}
	}
	return nil
}
