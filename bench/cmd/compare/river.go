package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"

	"github.com/weirq/weir/internal/weirbench"
)

// riverSchema is the schema of River's tables, river's and river-otel's.
const riverSchema = "weirbench_river"

// riverSystem is River as a system under test. With Throughput and Latency it
// has the settings of its own `river bench`: 2,000 handlers on the default
// queue, a fetch cooldown of 2 ms and a fetch poll interval of 20 ms; with
// Defaults, River's defaults and 100 handlers. A client that only inserts has
// River's defaults.
type riverSystem struct {
	name   string // "river", or "river-otel" with otel
	schema string
	// otel, if not nil, is the OpenTelemetry SDK on which each client has
	// otelriver's middleware (riverWithTelemetry).
	otel *otelSDK
}

func (s *riverSystem) Name() string     { return s.name }
func (s *riverSystem) Schema() string   { return s.schema }
func (s *riverSystem) JobTable() string { return pgx.Identifier{s.schema, "river_job"}.Sanitize() }

// RowInsert is W4's ceiling statement on River's table.
func (s *riverSystem) RowInsert() string {
	return "INSERT INTO " + s.JobTable() + ` (args, kind, max_attempts, queue) VALUES ('{"seq": 0}', 'noop', 25, 'default')`
}

const (
	benchWorkers       = 2000
	benchFetchCooldown = 2 * time.Millisecond
	benchFetchPoll     = 20 * time.Millisecond
	defaultWorkers     = 100
)

func (s *riverSystem) Describe(set weirbench.Settings) string {
	d := fmt.Sprintf("MaxWorkers %d, FetchCooldown %s, FetchPollInterval %s (river bench's), the rest default",
		benchWorkers, benchFetchCooldown, benchFetchPoll)
	if set == weirbench.Defaults {
		d = fmt.Sprintf("MaxWorkers %d, the rest default", defaultWorkers)
	}
	if s.otel != nil {
		d += fmt.Sprintf("; otelriver %s, traces sampled at %g, metrics %t", otelriverVersion(), s.otel.sample, s.otel.metrics)
	}
	return d
}

func (s *riverSystem) Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
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

func (s *riverSystem) Open(pool *pgxpool.Pool, cfg weirbench.ClientConfig) (weirbench.Client, error) {
	if cfg.GlobalLimit > 0 {
		// River's open-source release has no global limit (River Pro sells one).
		return nil, errors.New("river: no global limit in River's open-source release")
	}
	rcfg := &river.Config{Logger: cfg.Logger, Schema: s.schema}
	if cfg.Work {
		workers := defaultWorkers
		if cfg.Settings != weirbench.Defaults {
			workers = benchWorkers
			rcfg.FetchCooldown = benchFetchCooldown
			rcfg.FetchPollInterval = benchFetchPoll
		}
		if cfg.MaxWorkers > 0 {
			workers = cfg.MaxWorkers
		}
		rcfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}}
		rcfg.Workers = river.NewWorkers()
		onStart := cfg.OnStart
		river.AddWorker(rcfg.Workers, river.WorkFunc(func(_ context.Context, job *river.Job[weirbench.NoopArgs]) error {
			if onStart != nil {
				onStart(job.Args.Seq)
			}
			return nil
		}))
	}
	var release func()
	if s.otel != nil {
		tp, mp, shutdown := s.otel.providers()
		release = shutdown
		// otelriver's defaults: it does not carry the trace context in the
		// job (weirotel always does), so River is not charged for work its
		// users must ask for.
		rcfg.Plugins = []rivertype.Plugin{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
			TracerProvider: tp,
			MeterProvider:  mp,
		})}
	}
	c, err := river.NewClient(riverpgxv5.New(pool), rcfg)
	if err != nil {
		if release != nil {
			release()
		}
		return nil, err
	}
	rc := &riverClient{c: c, release: release}
	if cfg.Work {
		// Completions are counted as `river bench` counts them, by the
		// completed events, which River sends once the completing statement
		// has committed. A full channel drops events: a goroutine empties it,
		// and its buffer holds several seconds of them.
		events, cancel := c.SubscribeConfig(&river.SubscribeConfig{
			ChanSize: 100_000,
			Kinds:    []river.EventKind{river.EventKindJobCompleted},
		})
		rc.unsubscribe = cancel
		rc.counted.Add(1)
		go func() {
			defer rc.counted.Done()
			for range events {
				rc.completed.Add(1)
			}
		}()
	}
	return rc, nil
}

type riverClient struct {
	c           *river.Client[pgx.Tx]
	completed   atomic.Int64
	unsubscribe func()
	counted     sync.WaitGroup // the counting goroutine
	release     func()         // shuts river-otel's providers down, or nil
}

// Close shuts down river-otel's tracer and meter providers, flushing the spans
// still batched.
func (r *riverClient) Close() {
	if r.release != nil {
		r.release()
	}
}

func (r *riverClient) InsertMany(ctx context.Context, first int64, n int) error {
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i].Args = weirbench.NoopArgs{Seq: first + int64(i)}
	}
	_, err := r.c.InsertManyFast(ctx, params)
	return err
}

func (r *riverClient) Insert(ctx context.Context, seq int64) error {
	_, err := r.c.Insert(ctx, weirbench.NoopArgs{Seq: seq}, nil)
	return err
}

func (r *riverClient) Start(ctx context.Context) error { return r.c.Start(ctx) }

func (r *riverClient) Completed() int64 { return r.completed.Load() }

func (r *riverClient) Stop(ctx context.Context) error {
	err := r.c.Stop(ctx)
	if r.unsubscribe != nil {
		r.unsubscribe()
		r.counted.Wait()
	}
	return err
}
