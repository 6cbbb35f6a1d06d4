package weirbench

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
)

// WeirConfig sets up weir as a system under test.
type WeirConfig struct {
	// Schema holds weir's tables. Default: "weir_bench".
	Schema string
	// MaxWorkers and Prefetch are the queue's settings for Throughput.
	// Defaults: 1,000 and 1,000.
	MaxWorkers int
	Prefetch   int
	// Name names the system in reports. Default: "weir".
	Name string
	// Configure, if set, changes each client's config before the client is
	// made (to add middleware or hooks, say). It may return a function called
	// with the client once it is made (to register observers), which may return
	// one called when the benchmark is done with the client (to release them).
	Configure func(cfg *weir.Config) (made func(*weir.Client) (release func(), err error))
}

// Weir returns weir as a system under test. It works one queue, weir's default
// one: with Throughput with cfg's MaxWorkers and Prefetch, with Latency and
// Defaults with 100 handlers and the default prefetch; every other setting is
// weir's default.
func Weir(cfg WeirConfig) System {
	if cfg.Schema == "" {
		cfg.Schema = "weir_bench"
	}
	if cfg.Name == "" {
		cfg.Name = "weir"
	}
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = 1000
	}
	switch {
	case cfg.Prefetch == 0:
		cfg.Prefetch = 1000
	case cfg.Prefetch < 0:
		cfg.Prefetch = -1 // none, the only negative value weir accepts
	}
	return &weirSystem{cfg: cfg}
}

type weirSystem struct{ cfg WeirConfig }

func (s *weirSystem) Name() string   { return s.cfg.Name }
func (s *weirSystem) Schema() string { return s.cfg.Schema }
func (s *weirSystem) JobTable() string {
	return pgx.Identifier{s.cfg.Schema, "weir_job"}.Sanitize()
}

// RowInsert is W4's ceiling statement: a job as Insert makes it, written by
// hand, so that weir's statement and its client are all that differ.
func (s *weirSystem) RowInsert() string {
	return "INSERT INTO " + s.JobTable() + ` (queue, kind, args, max_attempts) VALUES ('default', 'noop', '{"seq": 0}', 25)`
}

// ResetTables adds the ready list, which holds a row per available job, the
// queue settings, which hold W6's limits, and the shares of them that the
// last run's processes held, to what each run empties.
func (s *weirSystem) ResetTables() []string {
	var tables []string
	for _, t := range []string{"weir_ready", "weir_queue", "weir_queue_share", "weir_key_share", "weir_key_holder"} {
		tables = append(tables, pgx.Identifier{s.cfg.Schema, t}.Sanitize())
	}
	return tables
}

// ResetSQL turns the ready list off after the tables are emptied, as its
// leader would some 15 s after a run that turned it on (W6's limits per key,
// W7's snapshot): so that each run starts as on a new schema. Off is always
// safe (claims then walk the job table's index, which is whole), and the
// value written is higher than the one read, as a leader's are.
func (s *weirSystem) ResetSQL() []string {
	seq := strings.ReplaceAll(pgx.Identifier{s.cfg.Schema, "weir_ready_mode"}.Sanitize(), "'", "''")
	return []string{`SELECT setval(c.oid, (pg_sequence_last_value(c.oid) / 4 + 1) * 4, true)
FROM (SELECT to_regclass('` + seq + `') AS oid) c
WHERE c.oid IS NOT NULL AND pg_sequence_last_value(c.oid) % 4 <> 0`}
}

// defaultWorkers is the number of handlers of Latency and Defaults; weir has
// no default, and 100 is River's.
const defaultWorkers = 100

func (s *weirSystem) queue(set Settings, maxWorkers int) weir.QueueConfig {
	q := weir.QueueConfig{MaxWorkers: defaultWorkers}
	if set == Throughput {
		q = weir.QueueConfig{MaxWorkers: s.cfg.MaxWorkers, Prefetch: s.cfg.Prefetch}
	}
	if maxWorkers > 0 {
		// Fewer handlers than the settings' (a W8 worker process's share)
		// prefetch as much fewer jobs.
		if set == Throughput && q.Prefetch > 0 && maxWorkers < q.MaxWorkers {
			q.Prefetch = max(q.Prefetch*maxWorkers/q.MaxWorkers, 1)
		}
		q.MaxWorkers = maxWorkers
	}
	return q
}

func (s *weirSystem) Describe(set Settings) string {
	q := s.queue(set, 0)
	if q.Prefetch == 0 {
		return fmt.Sprintf("MaxWorkers %d, the rest default", q.MaxWorkers)
	}
	return fmt.Sprintf("MaxWorkers %d, Prefetch %d, the rest default", q.MaxWorkers, q.Prefetch)
}

// GlobalLimits says that weir's clients take ClientConfig.GlobalLimit.
func (s *weirSystem) GlobalLimits() bool { return true }

func (s *weirSystem) Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: s.cfg.Schema})
	if err != nil {
		return err
	}
	if _, err := weirmigrate.New(driver).Up(ctx, nil); err != nil {
		return fmt.Errorf("migrate weir: %w", err)
	}
	return nil
}

func (s *weirSystem) Open(pool *pgxpool.Pool, cfg ClientConfig) (Client, error) {
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: s.cfg.Schema})
	if err != nil {
		return nil, err
	}
	wcfg := &weir.Config{Logger: cfg.Logger}
	if cfg.Work {
		onStart := cfg.OnStart
		wcfg.Workers = weir.NewWorkers()
		weir.AddWorker(wcfg.Workers, weir.WorkFunc(func(_ context.Context, job *weir.Job[NoopArgs]) error {
			if onStart != nil {
				onStart(job.Args.Seq)
			}
			return nil
		}))
		q := s.queue(cfg.Settings, cfg.MaxWorkers)
		if cfg.GlobalLimit > 0 {
			// The throughput settings' prefetch: a job waiting in a client's
			// buffer holds no slot of the limit, which bounds handlers
			// through the client's share (docs/design/flow-control.md).
			q.GlobalLimit = cfg.GlobalLimit
		}
		if cfg.KeyLimit > 0 {
			// The same prefetch: a client holding buckets of the queue's
			// keys keeps each key within its limit itself, and a job
			// waiting in its buffer holds no slot (docs/design/flow-control.md).
			q.KeyLimit = weir.KeyLimit{Key: "args.key", Limit: cfg.KeyLimit}
		}
		wcfg.Queues = map[string]weir.QueueConfig{weir.DefaultQueue: q}
	}
	var made func(*weir.Client) (func(), error)
	if s.cfg.Configure != nil {
		made = s.cfg.Configure(wcfg)
	}
	c, err := weir.NewClient(driver, wcfg)
	if err != nil {
		return nil, err
	}
	w := &weirClient{c: c, keys: int64(cfg.Keys)}
	if made != nil {
		if w.release, err = made(c); err != nil {
			return nil, err
		}
	}
	return w, nil
}

type weirClient struct {
	c       *weir.Client
	keys    int64  // ClientConfig.Keys
	release func() // from WeirConfig.Configure, or nil
}

// Close releases what WeirConfig.Configure set up for the client.
func (w *weirClient) Close() {
	if w.release != nil {
		w.release()
	}
}

func (w *weirClient) InsertMany(ctx context.Context, first int64, n int) error {
	params := make([]weir.InsertManyParams, n)
	for i := range params {
		args := NoopArgs{Seq: first + int64(i)}
		if w.keys > 0 {
			args.Key = args.Seq%w.keys + 1
		}
		params[i].Args = args
	}
	_, err := w.c.InsertMany(ctx, params)
	return err
}

// SetLimits stores W6's limits on the queue, as a running system holds them
// before its jobs arrive (LimitSetter).
func (w *weirClient) SetLimits(ctx context.Context, global, key int) error {
	if global > 0 {
		if err := w.c.QueueSetGlobalLimit(ctx, weir.DefaultQueue, global); err != nil {
			return err
		}
	}
	if key > 0 {
		return w.c.QueueSetKeyLimit(ctx, weir.DefaultQueue, weir.KeyLimit{Key: "args.key", Limit: key})
	}
	return nil
}

func (w *weirClient) Insert(ctx context.Context, seq int64) error {
	_, err := w.c.Insert(ctx, NoopArgs{Seq: seq}, nil)
	return err
}

func (w *weirClient) Start(ctx context.Context) error { return w.c.Start(ctx) }

// Completed counts outcomes written: weir counts one only after the statement
// that wrote it has committed. Every outcome here is a completion, except the
// jobs given back unstarted (Released: at Stop, and the buffered jobs of a
// bucket of keys that a client lets go), which are not.
func (w *weirClient) Completed() int64 {
	s := w.c.Stats()
	return s.Finalized - s.Released
}

func (w *weirClient) Stop(ctx context.Context) error { return w.c.Stop(ctx) }

// String gives the runtime's counters: claims, stale writes and lost leases
// explain a slow run.
func (w *weirClient) String() string { return fmt.Sprintf("%+v", w.c.Stats()) }

// Claims counts the claim statements the client ran, for W8's claims per
// second.
func (w *weirClient) Claims() int64 { return w.c.Stats().Claims }
