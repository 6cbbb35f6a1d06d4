// Command compare runs weir and River side by side on one PostgreSQL, in one
// run, and prints each workload's median and range per system and the ratio
// weir/River. See bench/README.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"time"
)

type options struct {
	databaseURL    string
	rounds         int
	drainJobs      int
	insertJobs     int
	batch          int
	insertDuration time.Duration
	drainTimeout   time.Duration
	maxConns       int
	weirMaxWorkers int
	weirPrefetch   int
	workloads      string
	jsonPath       string
}

func main() {
	var o options
	flag.StringVar(&o.databaseURL, "database-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL to run on")
	flag.IntVar(&o.rounds, "rounds", 3, "runs of each workload per system, alternating weir and River")
	flag.IntVar(&o.drainJobs, "drain-jobs", 200_000, "jobs inserted and then drained in W1")
	flag.IntVar(&o.insertJobs, "insert-jobs", 200_000, "jobs bulk-inserted in W4")
	flag.IntVar(&o.batch, "batch", 5_000, "jobs per bulk insert")
	insertSeconds := flag.Int("insert-seconds", 10, "how long each single-insert run lasts, in seconds")
	flag.DurationVar(&o.drainTimeout, "drain-timeout", 10*time.Minute, "give up a drain after this long")
	flag.IntVar(&o.maxConns, "max-conns", 20, "pool size of each system's client")
	flag.IntVar(&o.weirMaxWorkers, "weir-max-workers", 1000, "weir's MaxWorkers in W1")
	flag.IntVar(&o.weirPrefetch, "weir-prefetch", 1000, "weir's Prefetch in W1")
	flag.StringVar(&o.workloads, "workloads", "drain,bulk,single1,single8", "workloads to run, comma-separated")
	flag.StringVar(&o.jsonPath, "json", "", "also write the raw figures to this file as JSON")
	flag.Parse()
	o.insertDuration = time.Duration(*insertSeconds) * time.Second

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

// report is what --json writes.
type report struct {
	Date     string                          `json:"date"`
	Command  []string                        `json:"command"` // as run from bench/
	CPUs     int                             `json:"cpus"`
	Settings map[string]string               `json:"settings"`
	Results  map[string]map[string][]float64 `json:"results"` // figure → system → one value per round
}

func run(ctx context.Context, o options) error {
	admin, err := openPool(ctx, o.databaseURL, "bench_admin", 2)
	if err != nil {
		return err
	}
	defer admin.Close()
	b := &bench{opts: o, admin: admin}
	systems := []system{
		&weirSystem{schema: "bench_weir", maxWorkers: o.weirMaxWorkers, prefetch: o.weirPrefetch},
		&riverSystem{schema: "bench_river"},
	}
	for _, sys := range systems {
		if err := sys.Migrate(ctx, admin); err != nil {
			return err
		}
	}
	rep := report{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Command: append([]string{"go", "run", "./cmd/compare"}, os.Args[1:]...),
		CPUs:    runtime.NumCPU(),
		Results: map[string]map[string][]float64{},
	}
	if rep.Settings, err = readSettings(ctx, admin); err != nil {
		return err
	}

	chosen := strings.Split(o.workloads, ",")
	for _, w := range b.workloads() {
		if !slices.Contains(chosen, w.name) {
			continue
		}
		for round := 1; round <= o.rounds; round++ {
			for _, sys := range systems {
				figures, err := w.run(ctx, sys)
				if err != nil {
					return fmt.Errorf("%s on %s, round %d: %w", w.name, sys.Name(), round, err)
				}
				var line []string
				for _, m := range metricOrder {
					if v, ok := figures[m]; ok {
						rep.add(m, sys.Name(), v)
						line = append(line, m+" "+format(m, v))
					}
				}
				fmt.Fprintf(os.Stderr, "%s %d/%d %s: %s\n", w.name, round, o.rounds, sys.Name(), strings.Join(line, "; "))
			}
		}
	}
	rep.print(o, systems)
	if o.jsonPath != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonPath, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", o.jsonPath, err)
		}
	}
	return nil
}

func (r *report) add(metric, sys string, v float64) {
	if r.Results[metric] == nil {
		r.Results[metric] = map[string][]float64{}
	}
	r.Results[metric][sys] = append(r.Results[metric][sys], v)
}
