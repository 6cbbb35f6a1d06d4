package weirbench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// stopBudget bounds a client's graceful stop once its run is over.
const stopBudget = 30 * time.Second

// bench holds what every run shares.
type bench struct {
	o      Options
	admin  *pgxpool.Pool
	p      *progress
	logger *slog.Logger
	tag    string // names the current run in status lines: "W1 drain 2/3 weir"
}

// A workload runs once on one system and returns its figures.
type workload struct {
	name  string // as Options.Workloads names it
	label string // for progress: "W2 5,000/s"
	run   func(ctx context.Context, sys System) ([]result, error)
}

func (b *bench) workloads() []workload {
	ws := []workload{{"drain", "W1 drain", b.drain}}
	for _, rate := range b.o.MixedRates {
		ws = append(ws, workload{"mixed", "W2 " + group(int64(rate)) + "/s", b.mixed(rate)})
	}
	ws = append(ws,
		workload{"latency", "W3 latency", b.latency(Latency)},
		workload{"latency-defaults", "W3 latency, defaults", b.latency(Defaults)},
		workload{"bulk", "W4 bulk", b.bulk},
		workload{"single1", "W4 single x1", b.singles(1)},
		workload{"single8", "W4 single x8", b.singles(8)},
		workload{"rss", "W5 peak RSS", b.rss},
		workload{"pressure", "W7 snapshot held", b.pressure(true)},
		workload{"pressure-clean", "W7 clean", b.pressure(false)},
	)
	for _, n := range b.o.ScaleProcs {
		ws = append(ws, workload{"scale", fmt.Sprintf("W8 drain ×%d", n), b.scaleDrain(n)})
	}
	return append(ws, workload{"scale-mixed", "W8 mixed", b.scaleMixed},
		workload{"limit", "W6 global limit", b.limitDrains})
}

// Run runs the chosen workloads on each system, alternating the systems round
// by round (A B A B ...), and returns the report. Each system's schema is
// created and migrated first; see the package documentation for the schemas
// Run accepts. On an error, the report holds the runs that finished.
func Run(ctx context.Context, o Options, systems ...System) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if len(systems) == 0 {
		return nil, errors.New("weirbench: no system to run")
	}
	for _, w := range []string{"rss", "scale", "scale-mixed", "limit"} {
		if slices.Contains(o.Workloads, w) && len(o.ChildCommand) == 0 {
			return nil, fmt.Errorf("weirbench: the %s workload needs Options.ChildCommand", w)
		}
	}
	p := newProgress(o.Progress)
	defer p.Clear()
	admin, err := openPool(ctx, o.DatabaseURL, "weirbench_admin", 2)
	if err != nil {
		return nil, err
	}
	defer admin.Close()

	rep := &Report{
		Date:       time.Now().UTC().Format(time.RFC3339),
		Options:    o,
		CPUs:       runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
	}
	if rep.PostgreSQL, err = readSettings(ctx, admin); err != nil {
		return nil, err
	}
	for _, sys := range systems {
		if err := claimSchema(ctx, admin, sys.Schema()); err != nil {
			return nil, err
		}
		if err := sys.Migrate(ctx, admin); err != nil {
			return nil, err
		}
		info := SystemInfo{Name: sys.Name(), Settings: map[string]string{}}
		for _, set := range []Settings{Throughput, Latency, Defaults} {
			info.Settings[set.String()] = sys.Describe(set)
		}
		rep.Systems = append(rep.Systems, info)
	}

	b := &bench{
		o:     o,
		admin: admin,
		p:     p,
		// Warnings during a run (a write retried, a lease lost) explain a
		// figure that is off.
		logger: slog.New(slog.NewTextHandler(p, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if o.DrainCeiling && slices.Contains(o.Workloads, "drain") {
		if err := setupSQLDrain(ctx, b, o.ceilingSchema()); err != nil {
			return nil, err
		}
	}
	for _, w := range b.workloads() {
		if !slices.Contains(o.Workloads, w.name) {
			continue
		}
		for round := 1; round <= o.Rounds; round++ {
			for _, sys := range systems {
				b.tag = fmt.Sprintf("%s %d/%d %s", w.label, round, o.Rounds, sys.Name())
				if !runs(sys, w.name) {
					if round == 1 {
						p.Linef("%s: %s does not run %s; its cells stay blank", w.label, sys.Name(), w.name)
					}
					continue
				}
				b.status("starting")
				results, err := w.run(ctx, sys)
				if err != nil {
					return rep, fmt.Errorf("%s: %w", b.tag, err)
				}
				var line []string
				for _, res := range results {
					rep.add(sys.Name(), res)
					line = append(line, shorten(res.fig.Name, w.label)+" "+format(res.fig.Unit, res.v))
				}
				p.Linef("%s: %s", b.tag, strings.Join(line, "; "))
			}
		}
	}
	return rep, nil
}

// status shows what the current run is doing.
func (b *bench) status(format string, args ...any) {
	b.p.Status(b.tag+": "+format, args...)
}

// withClient runs fn with a client of sys on a pool of its own and the system's
// job table freshly truncated and vacuumed. It returns once the pool's
// connections have closed and so flushed their statistics.
func (b *bench) withClient(ctx context.Context, sys System, cfg ClientConfig, fn func(Client) error) error {
	app := "weirbench_" + sys.Name()
	pool, err := openPool(ctx, b.o.DatabaseURL, app, b.o.MaxConns)
	if err != nil {
		return err
	}
	err = func() error {
		cfg.Logger = b.logger
		c, err := sys.Open(pool, cfg)
		if err != nil {
			return err
		}
		if closer, ok := c.(interface{ Close() }); ok {
			defer closer.Close()
		}
		if err := reset(ctx, b.admin, sys.JobTable()); err != nil {
			return err
		}
		if r, ok := sys.(interface{ ResetTables() []string }); ok {
			for _, t := range r.ResetTables() {
				if err := reset(ctx, b.admin, t); err != nil {
					return err
				}
			}
		}
		if r, ok := sys.(interface{ ResetSQL() []string }); ok {
			if err := execSQL(ctx, b.admin, r.ResetSQL()...); err != nil {
				return fmt.Errorf("reset: %w", err)
			}
		}
		return fn(c)
	}()
	pool.Close()
	return errors.Join(err, waitGone(ctx, b.admin, app))
}

// insertAll inserts jobs 0..n-1 in bulk inserts of batch.
func (b *bench) insertAll(ctx context.Context, c Client, n int) error {
	for done := 0; done < n; {
		k := min(b.o.Batch, n-done)
		if err := c.InsertMany(ctx, int64(done), k); err != nil {
			return fmt.Errorf("insert jobs: %w", err)
		}
		done += k
		b.status("inserted %s of %s jobs", group(int64(done)), group(int64(n)))
	}
	return nil
}

// work starts c, waits until n jobs are completed, stops c, and returns the
// time from the call to Start to the n-th completion.
func (b *bench) work(ctx context.Context, c Client, n int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, b.o.Timeout)
	defer cancel()
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		return 0, err
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for c.Completed() < int64(n) {
		select {
		case <-ctx.Done():
			err := fmt.Errorf("%s of %s jobs completed: %w", group(c.Completed()), group(int64(n)), ctx.Err())
			return 0, errors.Join(err, b.stop(c))
		case <-tick.C:
			b.status("%s of %s jobs completed", group(c.Completed()), group(int64(n)))
		}
	}
	elapsed := time.Since(start)
	return elapsed, b.stop(c)
}

// stop stops c within stopBudget and prints its String, if it has one.
func (b *bench) stop(c Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), stopBudget)
	defer cancel()
	err := c.Stop(ctx)
	if s, ok := c.(fmt.Stringer); ok {
		b.p.Linef("%s: %s", b.tag, s)
	}
	return err
}

// shorten drops from a figure's name what the run's label already says: the
// label itself, or else the workload's number.
func shorten(name, label string) string {
	if rest, ok := strings.CutPrefix(name, label+" "); ok {
		return rest
	}
	if _, rest, ok := strings.Cut(name, " "); ok {
		return rest
	}
	return name
}
