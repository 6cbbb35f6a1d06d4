package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverSystem is River with the settings of its own `river bench`: 2,000 workers
// on the default queue, a fetch cooldown of 2 ms and a fetch poll interval of
// 20 ms; other settings are River's defaults.
type riverSystem struct {
	schema string
}

func (s *riverSystem) Name() string     { return "river" }
func (s *riverSystem) JobTable() string { return s.schema + ".river_job" }

func (s *riverSystem) Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	// River's migrator targets a schema but does not create it.
	if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{s.schema}.Sanitize()); err != nil {
		return fmt.Errorf("create schema %s: %w", s.schema, err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{
		Logger: warnLogger,
		Schema: s.schema,
	})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate river: %w", err)
	}
	return nil
}

func (s *riverSystem) Open(pool *pgxpool.Pool, work bool) (client, error) {
	cfg := &river.Config{Logger: warnLogger, Schema: s.schema}
	if work {
		cfg.FetchCooldown = 2 * time.Millisecond
		cfg.FetchPollInterval = 20 * time.Millisecond
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2000}}
		cfg.Workers = river.NewWorkers()
		river.AddWorker(cfg.Workers, river.WorkFunc(func(context.Context, *river.Job[noop]) error { return nil }))
	}
	c, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		return nil, err
	}
	return &riverClient{c: c}, nil
}

type riverClient struct{ c *river.Client[pgx.Tx] }

func (r *riverClient) InsertMany(ctx context.Context, n int) error {
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i].Args = noop{N: i}
	}
	_, err := r.c.InsertManyFast(ctx, params)
	return err
}

func (r *riverClient) Insert(ctx context.Context) error {
	_, err := r.c.Insert(ctx, noop{}, nil)
	return err
}

// Drain counts completed events, as `river bench` does: River sends one only
// after the statement that completed the job has committed. The channel holds
// every event, so none is dropped.
func (r *riverClient) Drain(ctx context.Context, n int) (time.Duration, error) {
	events, cancel := r.c.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: n,
		Kinds:    []river.EventKind{river.EventKindJobCompleted},
	})
	defer cancel()
	start := time.Now()
	if err := r.c.Start(ctx); err != nil {
		return 0, err
	}
	for done := 0; done < n; done++ {
		select {
		case <-ctx.Done():
			r.stop()
			return 0, fmt.Errorf("river drained %d of %d jobs: %w", done, n, ctx.Err())
		case e := <-events:
			if e == nil {
				r.stop()
				return 0, fmt.Errorf("river: subscription closed after %d of %d jobs", done, n)
			}
		}
	}
	elapsed := time.Since(start)
	return elapsed, r.stop()
}

func (r *riverClient) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), stopBudget)
	defer cancel()
	return r.c.Stop(ctx)
}
