package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
)

// weirSystem is weir with one queue of MaxWorkers handlers and Prefetch jobs
// waiting locally; other settings are weir's defaults.
type weirSystem struct {
	schema     string
	maxWorkers int
	prefetch   int
}

func (s *weirSystem) Name() string     { return "weir" }
func (s *weirSystem) JobTable() string { return s.schema + ".weir_job" }

func (s *weirSystem) Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: s.schema})
	if err != nil {
		return err
	}
	if _, err := weirmigrate.New(driver).Up(ctx, nil); err != nil {
		return fmt.Errorf("migrate weir: %w", err)
	}
	return nil
}

func (s *weirSystem) Open(pool *pgxpool.Pool, work bool) (client, error) {
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: s.schema})
	if err != nil {
		return nil, err
	}
	cfg := &weir.Config{Logger: warnLogger}
	if work {
		cfg.Workers = weir.NewWorkers()
		weir.AddWorker(cfg.Workers, weir.WorkFunc(func(context.Context, *weir.Job[noop]) error { return nil }))
		cfg.Queues = map[string]weir.QueueConfig{
			weir.DefaultQueue: {MaxWorkers: s.maxWorkers, Prefetch: s.prefetch},
		}
	}
	c, err := weir.NewClient(driver, cfg)
	if err != nil {
		return nil, err
	}
	return &weirClient{c: c}, nil
}

type weirClient struct{ c *weir.Client }

func (w *weirClient) InsertMany(ctx context.Context, n int) error {
	params := make([]weir.InsertManyParams, n)
	for i := range params {
		params[i].Args = noop{N: i}
	}
	_, err := w.c.InsertMany(ctx, params)
	return err
}

func (w *weirClient) Insert(ctx context.Context) error {
	_, err := w.c.Insert(ctx, noop{}, nil)
	return err
}

// Drain counts outcomes written (Stats().Finalized): weir counts one only after
// the statement that wrote it has committed.
func (w *weirClient) Drain(ctx context.Context, n int) (time.Duration, error) {
	start := time.Now()
	if err := w.c.Start(ctx); err != nil {
		return 0, err
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for w.c.Stats().Finalized < int64(n) {
		select {
		case <-ctx.Done():
			w.stop()
			return 0, fmt.Errorf("weir drained %d of %d jobs: %w", w.c.Stats().Finalized, n, ctx.Err())
		case <-tick.C:
		}
	}
	elapsed := time.Since(start)
	// Claims, stale writes and lost leases explain a slow drain.
	fmt.Fprintf(os.Stderr, "weir stats: %+v\n", w.c.Stats())
	return elapsed, w.stop()
}

func (w *weirClient) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), stopBudget)
	defer cancel()
	return w.c.Stop(ctx)
}
