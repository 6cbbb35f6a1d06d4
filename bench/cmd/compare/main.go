// Command compare runs weir and River side by side on one PostgreSQL, in one
// run, with weir's benchmark engine (github.com/weirq/weir/internal/bench): each
// workload alternates the two systems round by round, and the report gives
// each figure's median and range per system and the ratio weir/River, as a
// table on stdout and a plot. See bench/README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"

	"github.com/weirq/weir/internal/pgcluster"
	"github.com/weirq/weir/internal/weirbench"
)

func main() {
	o := weirbench.DefaultOptions()
	databaseURL := flag.String("database-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL `URL` to run on")
	weirMaxWorkers := flag.Int("weir-max-workers", 1000, "weir's MaxWorkers with its throughput settings (W1, W2)")
	weirPrefetch := flag.Int("weir-prefetch", 1000, "weir's Prefetch with its throughput settings (W1, W2, W5)")
	o.RegisterFlags(flag.CommandLine)
	jsonPath := flag.String("json", "", "also write every round's figures to `FILE` as JSON")
	plotPath := flag.String("plot", "results/compare.svg", "write the plot to `FILE` as SVG (empty: none)")
	seriesPath := flag.String("series-plot", "", "also write a plot of the figures taken over time (W7) to `FILE` as SVG")
	systemNames := flag.String("systems", "weir,river", "the systems to run, in order, the first two giving the ratio: `LIST` of weir, weir-otel (weir with weirotel's tracing and metrics on the OpenTelemetry SDK, exporting to nothing), weir-mw (weir with a worker middleware that only calls the next handler), weir-deep (weir whose no-op handler first uses 8 KiB of stack, as a handler with a real call depth does), river, river-otel (River with otelriver's middleware on the same OpenTelemetry SDK as weir-otel), graphile (graphile-worker) and pgboss (pg-boss), the last two on Node.js (bench/node)")
	otelParts := flag.String("otel-parts", "insert,worker,hook,observe", "the parts of weirotel that weir-otel turns on: `LIST` of insert, worker, hook, observe")
	otelSample := flag.Float64("otel-sample", 1, "the fraction of traces weir-otel and river-otel sample (`F`, 0 to 1; 1: every one)")
	otelMetrics := flag.Bool("otel-metrics", true, "weir-otel and river-otel record metrics (false: OpenTelemetry's no-op meter provider)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (this process: the clients, not PostgreSQL) to `FILE`")
	startPostgres := flag.Bool("start-postgres", false, "run on a throwaway PostgreSQL cluster started from the installed binaries, with PostgreSQL's defaults (autovacuum on), instead of --database-url")
	replot := flag.String("replot", "", "run nothing: print the table of the report a --json run wrote to `FILE`, and write its plot")
	flag.Parse()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected argument %q", flag.Arg(0)))
	}
	if *abRev != "" {
		abMain(o) // ab.go
		return
	}
	if *replot != "" {
		data, err := os.ReadFile(*replot)
		if err != nil {
			fail(err)
		}
		var rep weirbench.Report
		if err := json.Unmarshal(data, &rep); err != nil {
			fail(fmt.Errorf("%s: %w", *replot, err))
		}
		write(&rep, "", *plotPath, *seriesPath)
		return
	}
	parts := map[string]bool{}
	for part := range strings.SplitSeq(*otelParts, ",") {
		if !slices.Contains([]string{"insert", "worker", "hook", "observe"}, part) {
			fail(fmt.Errorf("--otel-parts: unknown part %q (insert, worker, hook, observe)", part))
		}
		parts[part] = true
	}
	if *otelSample < 0 || *otelSample > 1 {
		fail(fmt.Errorf("--otel-sample %v is outside 0..1", *otelSample))
	}
	weirCfg := weirbench.WeirConfig{Schema: "weirbench_weir", MaxWorkers: *weirMaxWorkers, Prefetch: *weirPrefetch}
	sdk := otelSDK{sample: *otelSample, metrics: *otelMetrics}
	known := map[string]weirbench.System{
		"weir":       weirbench.Weir(weirCfg),
		"weir-otel":  weirWithTelemetry(weirCfg, parts, sdk),
		"weir-mw":    weirWithNoopMiddleware(weirCfg),
		"weir-deep":  weirWithDeepHandler(weirCfg),
		"river":      &riverSystem{name: "river", schema: riverSchema},
		"river-otel": riverWithTelemetry(sdk),
		"graphile":   graphileSystem(),
		"pgboss":     pgbossSystem(),
	}
	var systems []weirbench.System
	for name := range strings.SplitSeq(*systemNames, ",") {
		sys, ok := known[strings.TrimSpace(name)]
		if !ok {
			fail(fmt.Errorf("--systems: unknown system %q (weir, weir-otel, weir-mw, weir-deep, river, river-otel, graphile, pgboss)", name))
		}
		if slices.Contains(systems, sys) {
			fail(fmt.Errorf("--systems: %q twice", name))
		}
		systems = append(systems, sys)
	}
	if len(systems) == 0 {
		fail(errors.New("--systems: no system"))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Re-executed as W5's worker process.
	if spec := os.Getenv(weirbench.ChildEnv); spec != "" {
		if err := weirbench.RunChild(ctx, spec, os.Stdout, os.Stderr, systems...); err != nil {
			fail(err)
		}
		return
	}

	exe, err := os.Executable()
	if err != nil {
		fail(err)
	}
	o.DatabaseURL = *databaseURL
	if *startPostgres {
		// fsync as PostgreSQL's default has it; the cluster turns it off
		// for tests.
		c, err := pgcluster.Start(pgcluster.Options{DirPrefix: "weir-compare-", Settings: []string{"fsync=on"}})
		if err != nil {
			fail(fmt.Errorf("--start-postgres: %w", err))
		}
		defer c.Stop() //nolint:errcheck // the benchmark's result is what matters
		atExit = append(atExit, func() { _ = c.Stop() })
		o.DatabaseURL = c.URL()
	}
	o.Title = "weir (working tree) vs River " + riverVersion()
	if *systemNames != "weir,river" {
		o.Title = "weir (working tree): " + *systemNames + " (River " + riverVersion() + ")"
	}
	o.Command, o.Args = "cd bench && go run ./cmd/compare", redact(os.Args[1:], *databaseURL)
	o.Progress = os.Stderr
	o.ChildCommand = append([]string{exe}, os.Args[1:]...)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	rep, err := weirbench.Run(ctx, o, systems...)
	if rep != nil && len(rep.Figures) > 0 {
		write(rep, *jsonPath, *plotPath, *seriesPath)
	}
	if err != nil {
		fail(err)
	}
}

// write prints rep's table on stdout and writes its JSON and its plots to
// the files named, if any.
func write(rep *weirbench.Report, jsonPath, plotPath, seriesPath string) {
	if err := rep.WriteTable(os.Stdout); err != nil {
		fail(err)
	}
	for _, out := range []struct {
		path  string
		write func(io.Writer) error
	}{{jsonPath, rep.WriteJSON}, {plotPath, rep.WriteSVG}, {seriesPath, rep.WriteSeriesSVG}} {
		if out.path == "" {
			continue
		}
		if err := weirbench.WriteFile(out.path, out.write); err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", out.path)
	}
}

// atExit is what fail runs before it exits, last first, since os.Exit runs
// no deferred call: the throwaway cluster's stop.
var atExit []func()

func fail(err error) {
	fmt.Fprintln(os.Stderr, "compare:", err)
	for i := len(atExit) - 1; i >= 0; i-- {
		atExit[i]()
	}
	os.Exit(1)
}

// riverVersion is the version of River this program was built with.
func riverVersion() string { return moduleVersion("github.com/riverqueue/river") }

// otelriverVersion is the version of otelriver this program was built with.
func otelriverVersion() string { return moduleVersion("github.com/riverqueue/rivercontrib/otelriver") }

// moduleVersion is the version of the module at path this program was built
// with.
func moduleVersion(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == path {
				return m.Version
			}
		}
	}
	return "(version unknown)"
}
