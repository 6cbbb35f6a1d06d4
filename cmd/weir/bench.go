package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/cmd/weir/internal/pgurl"
	"github.com/weirq/weir/internal/pgcluster"
	"github.com/weirq/weir/internal/weirbench"
)

var benchCommand = &command{
	name:    "bench",
	summary: "measure weir on a PostgreSQL: drain, mixed load, pickup latency, inserts, costs",
	usage:   benchUsage,
	run:     runBench,
}

func benchUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:

    weir bench --database-url URL [--schema NAME] [--workloads LIST] [--rounds N] [flags]

bench runs weir's benchmark workloads against the PostgreSQL at URL and prints
a table of what it measured: the median of the rounds and their range.

    drain      W1: --drain-jobs jobs inserted, then worked down by one client;
               then as many drained from a table of the schema NAME_sql by a
               raw SQL claim-and-complete loop, the ceiling (--drain-ceiling)
    mixed      W2: a producer offers each of --mixed-rates jobs/s for
               --mixed-duration while one client works; completed jobs/s,
               backlog at the end, pickup latency (insert → handler start)
    latency    W3: --latency-rate single inserts per second for
               --latency-duration, weir's default settings; pickup latency
    latency-defaults
               W3 again (for weir alone the same as latency; off by default)
    bulk       W4: --insert-jobs jobs in bulk inserts of --batch
    single1, single8
               W4: single inserts from 1 and 8 goroutines, --insert-duration;
               then pgbench's single-row INSERT into the same table from as
               many connections, their ceiling (when pgbench is installed)
    rss        W5: a worker process of its own (weir bench re-executed) with
               --rss-workers handlers drains --rss-jobs jobs; its peak RSS

Run only when named in --workloads:

    pressure   W7: --pressure-rate jobs/s for --pressure-duration while another
               session holds a REPEATABLE READ snapshot open; completed/s,
               pickup latency, and each by tenth of the run (--series-plot)
    pressure-clean
               W7 without the snapshot, its baseline
    scale      W8: --scale-jobs jobs drained by each count of --scale-procs
               worker processes (weir bench re-executed) at once, sharing
               --scale-workers handlers and --max-conns connections
    scale-mixed
               W8: --scale-rate jobs/s for --scale-duration, worked by
               --scale-mixed-procs worker processes

W1 also gives WAL bytes and dead tuples per job and the table's size after a
VACUUM; W2 gives WAL bytes and dead tuples per job too. bench/README.md in
weir's repository says how each figure is measured.

bench works in a schema of its own, --schema (default weir_bench): it creates
it, migrates it, and TRUNCATES ITS JOB TABLE before every run; W1's ceiling
works in the schema of the same name with _sql added, where it makes its table
afresh at every start. It refuses a schema that holds tables it did not
create, so that it never truncates your jobs; still, run it on a database
where heavy load is welcome, never on production. It takes the database from
--database-url only, not from WEIR_DATABASE_URL. With the default sizes one
round takes about 5 minutes.
Progress goes to stderr: one line that updates in place on a terminal.

Flags:

`)
	fs, _ := benchFlags()
	printDefaults(w, fs)
}

// benchOpts are weir bench's flags.
type benchOpts struct {
	url, schema        string
	maxWorkers         int
	prefetch           int
	jsonPath, plotPath string
	seriesPath         string
	bench              weirbench.Options
	// startPgBouncer and pollOnly: bench through a PgBouncer it starts, with
	// poll-only clients (docs/poolers.md).
	startPgBouncer, pollOnly bool
}

func benchFlags() (*flag.FlagSet, *benchOpts) {
	o := &benchOpts{bench: weirbench.DefaultOptions()}
	o.bench.Rounds = 1
	o.bench.Workloads = slices.DeleteFunc(o.bench.Workloads, func(w string) bool { return w == "latency-defaults" })
	fs := newFlagSet("weir bench")
	fs.StringVar(&o.url, "database-url", "", "PostgreSQL `URL` to run on (required; WEIR_DATABASE_URL is not read)")
	fs.StringVar(&o.schema, "schema", "weir_bench", "`NAME` of the schema bench creates and works in; its job table is truncated at every run")
	fs.IntVar(&o.maxWorkers, "max-workers", 1000, "weir's MaxWorkers in W1 and W2")
	fs.IntVar(&o.prefetch, "prefetch", 1000, "weir's Prefetch in W1, W2 and W5 (negative: none)")
	o.bench.RegisterFlags(fs)
	fs.BoolVar(&o.startPgBouncer, "start-pgbouncer", false, "start a PgBouncer in transaction mode in front of --database-url and bench through it (implies --poll-only)")
	fs.BoolVar(&o.pollOnly, "poll-only", false, "weir's clients poll and listen for nothing (Config.PollOnly), with FetchPollInterval 100ms as docs/poolers.md advises")
	fs.StringVar(&o.jsonPath, "json", "", "also write every round's figures to `FILE` as JSON")
	fs.StringVar(&o.plotPath, "plot", "", "also write a plot of the figures to `FILE` as SVG")
	fs.StringVar(&o.seriesPath, "series-plot", "", "also write a plot of the figures taken over time (W7) to `FILE` as SVG")
	return fs, o
}

func runBench(ctx context.Context, e *env, args []string) error {
	fs, o := benchFlags()
	if err := parseFlags(e, fs, args, benchUsage); err != nil {
		return err
	}
	name := cmdName(fs)
	if o.url == "" {
		return usagef("%s: --database-url is required: bench truncates tables, so it never takes the database from %s", name, envDatabaseURL)
	}
	if _, ok := sqlitePath(o.url); ok {
		return usagef("%s: --database-url names a SQLite database; bench runs on PostgreSQL only", name)
	}
	pcfg, err := postgresConfig(o.url)
	if err != nil {
		return err
	}
	if o.startPgBouncer {
		if err := checkPgBouncerTarget(o.url, pcfg.ConnConfig.Password, name); err != nil {
			return err
		}
		o.pollOnly = true // LISTEN does not work through PgBouncer in transaction mode
	}
	if err := checkSchema(name, o.schema); err != nil {
		return err
	}
	o.bench.CeilingSchema = o.schema + "_sql"
	if o.maxWorkers < 1 {
		return usagef("%s: --max-workers must be at least 1, got %d", name, o.maxWorkers)
	}
	if o.prefetch == 0 {
		return usagef("%s: --prefetch must not be 0 (negative: none)", name)
	}
	if err := o.bench.Validate(); err != nil {
		return usagef("%s: %v", name, err)
	}
	wc := weirbench.WeirConfig{Schema: o.schema, MaxWorkers: o.maxWorkers, Prefetch: o.prefetch}
	if o.pollOnly {
		wc.Name = "weir poll-only"
		wc.Configure = func(cfg *weir.Config) func(*weir.Client) (func(), error) {
			cfg.PollOnly, cfg.FetchPollInterval = true, 100*time.Millisecond
			return nil
		}
	}
	sys := weirbench.Weir(wc)

	// Re-executed as W5's worker process.
	if spec := e.getenv(weirbench.ChildEnv); spec != "" {
		return weirbench.RunChild(ctx, spec, e.stdout, e.stderr, sys)
	}

	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("%s: find the weir executable to run W5's worker process: %v", name, err)
	}
	o.bench.DatabaseURL = o.url
	if o.startPgBouncer {
		b, err := pgcluster.StartPgBouncer(o.url, pgcluster.PgBouncerOptions{PoolSize: 40})
		if err != nil {
			return fmt.Errorf("%s: --start-pgbouncer: %s", name, pgurl.Redact(err.Error(), o.url, ""))
		}
		defer b.Stop() //nolint:errcheck // the benchmark's result is what matters
		o.bench.DatabaseURL = b.ClientURL("")
		fmt.Fprintf(e.stderr, "%s: through PgBouncer (transaction mode) on 127.0.0.1:%d, poll-only clients\n", name, b.Port())
	}
	o.bench.Title = "weir bench"
	o.bench.Command, o.bench.Args = "weir bench", redactArgs(args, o.url)
	o.bench.Progress = e.stderr
	o.bench.ChildCommand = append([]string{exe, "bench"}, args...)
	rep, err := weirbench.Run(ctx, o.bench, sys)
	if rep != nil && len(rep.Figures) > 0 {
		if werr := rep.WriteTable(e.stdout); werr != nil {
			err = errors.Join(err, werr)
		}
		for _, out := range []struct {
			path  string
			write func(io.Writer) error
		}{{o.jsonPath, rep.WriteJSON}, {o.plotPath, rep.WriteSVG}, {o.seriesPath, rep.WriteSeriesSVG}} {
			if out.path != "" {
				if werr := weirbench.WriteFile(out.path, out.write); werr != nil {
					err = errors.Join(err, werr)
				}
			}
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %s", name, pgurl.Redact(err.Error(), o.url, ""))
	}
	return nil
}

// redactArgs returns args with the database URL in them replaced, for the
// report's command line.
func redactArgs(args []string, url string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, url, "URL")
	}
	return out
}
