package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/internal/weirbench"
)

func TestBenchHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help", "bench"}, {"bench", "-h"}, {"bench", "--rounds", "2", "--help"}} {
		r := runWeir(t, nil, args...)
		wantOK(t, r)
		for _, s := range []string{"weir bench --database-url", "TRUNCATES", "-schema", "-workloads", "-rounds",
			"-drain-jobs", "-mixed-rates", "-latency-rate", "-rss-jobs", "-json", "-plot", "weir_bench"} {
			if !strings.Contains(r.stdout, s) {
				t.Errorf("weir %s: help does not mention %q", args, s)
			}
		}
	}
}

// TestBenchBadFlags checks that each bad command line fails before anything
// touches a database, with one line that names the flag.
func TestBenchBadFlags(t *testing.T) {
	t.Parallel()
	const url = "postgres://postgres@127.0.0.1:1/none?sslmode=disable" // nothing answers
	for _, tt := range []struct {
		args     []string
		env      map[string]string
		mentions []string
	}{
		{args: nil, mentions: []string{"--database-url is required"}},
		{args: nil, env: map[string]string{envDatabaseURL: url}, mentions: []string{"--database-url is required", envDatabaseURL}},
		{args: []string{"--database-url", "jobs.db"}, mentions: []string{"SQLite", "PostgreSQL only"}},
		{args: []string{"--database-url", "sqlite:x.db"}, mentions: []string{"SQLite"}},
		{args: []string{"--database-url", "postgres://%zz"}, mentions: []string{"database URL does not parse"}},
		{args: []string{"--schema", "Bad-Name"}, mentions: []string{"bad --schema"}},
		{args: []string{"--rounds", "0"}, mentions: []string{"--rounds must be at least 1, got 0"}},
		{args: []string{"--rounds", "x"}, mentions: []string{"-rounds"}},
		{args: []string{"--max-conns", "1"}, mentions: []string{"--max-conns"}},
		{args: []string{"--drain-jobs", "-5"}, mentions: []string{"--drain-jobs"}},
		{args: []string{"--batch", "0"}, mentions: []string{"--batch"}},
		{args: []string{"--insert-jobs", "0"}, mentions: []string{"--insert-jobs"}},
		{args: []string{"--insert-duration", "0s"}, mentions: []string{"--insert-duration must be positive"}},
		{args: []string{"--insert-duration", "10"}, mentions: []string{"-insert-duration"}},
		{args: []string{"--workloads", "drain,nope"}, mentions: []string{"--workloads", `"nope"`}},
		{args: []string{"--workloads", "drain,,bulk"}, mentions: []string{"-workloads", "empty item"}},
		{args: []string{"--mixed-rates", "2k"}, mentions: []string{"-mixed-rates", `"2k" is not a number`}},
		{args: []string{"--mixed-rates", "100,0"}, mentions: []string{"--mixed-rates", "rate 0"}},
		{args: []string{"--mixed-rates", "1000000", "--mixed-duration", "1h"}, mentions: []string{"--mixed-rates", "more than"}},
		{args: []string{"--mixed-duration", "-1s"}, mentions: []string{"--mixed-duration must be positive"}},
		{args: []string{"--latency-rate", "0"}, mentions: []string{"--latency-rate"}},
		{args: []string{"--latency-duration", "0s"}, mentions: []string{"--latency-duration"}},
		{args: []string{"--rss-jobs", "0"}, mentions: []string{"--rss-jobs"}},
		{args: []string{"--rss-workers", "0"}, mentions: []string{"--rss-workers"}},
		{args: []string{"--timeout", "0s"}, mentions: []string{"--timeout"}},
		{args: []string{"--max-workers", "0"}, mentions: []string{"--max-workers"}},
		{args: []string{"--prefetch", "0"}, mentions: []string{"--prefetch"}},
		{args: []string{"--nope"}, mentions: []string{"-nope"}},
		{args: []string{"extra"}, mentions: []string{`unexpected argument "extra"`}},
	} {
		args := append([]string{"bench"}, tt.args...)
		if tt.env == nil && !strings.Contains(strings.Join(tt.args, " "), "--database-url") && len(tt.args) > 0 {
			args = append(args, "--database-url", url)
		}
		r := runWeir(t, tt.env, args...)
		wantFailure(t, r, exitUsage, append([]string{"weir: "}, tt.mentions...)...)
	}
}

// TestBenchRefusesForeignSchema checks that bench leaves alone a schema that
// holds weir's tables it did not create.
func TestBenchRefusesForeignSchema(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	before := dbState(t, f.schema)
	r := runWeir(t, nil, "bench", "--database-url", dbtest.URL(), "--schema", f.schema, "--workloads", "bulk", "--insert-jobs", "10")
	wantFailure(t, r, exitFailure, "weir: bench: ", f.schema, "not made by the benchmark")
	if after := dbState(t, f.schema); after != before {
		t.Fatalf("the schema changed:\nbefore %s\nafter  %s", before, after)
	}
}

// TestBenchEndToEnd runs every workload once, tiny, with the built binary (W5
// re-executes it), and checks that the table has each figure and that the
// figures that must be positive are. It asserts nothing about speed.
func TestBenchEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds weir and runs the benchmark; skipped with -short")
	}
	t.Parallel()
	b := buildWeir(t)
	schema := dbtest.Schema(t)
	ceiling := schema + "_sql" // W1's raw SQL ceiling's, made by weir bench
	t.Cleanup(func() {
		if err := weirbench.DropScratchSchema(context.Background(), dbtest.URL(), ceiling); err != nil {
			t.Errorf("drop %s: %v", ceiling, err)
		}
	})
	dir := t.TempDir()
	jsonPath, plotPath := filepath.Join(dir, "bench.json"), filepath.Join(dir, "bench.svg")
	args := []string{"bench", "--database-url", dbtest.URL(), "--schema", schema,
		"--workloads", strings.Join(weirbench.DefaultOptions().Workloads, ",") + ",latency-defaults",
		"--drain-jobs", "500", "--insert-jobs", "1000", "--batch", "250", "--insert-duration", "300ms",
		"--mixed-rates", "200", "--mixed-duration", "1s", "--latency-rate", "200", "--latency-duration", "1s",
		"--rss-jobs", "500", "--rss-workers", "50", "--max-conns", "5",
		"--json", jsonPath, "--plot", plotPath}
	r := b.run(t, nil, args...)
	if r.code != 0 {
		t.Fatalf("weir bench failed: %v", r)
	}

	var rep weirbench.Report
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	figures := map[string][]float64{}
	for _, f := range rep.Figures {
		figures[f.Name] = f.Values["weir"]
	}
	positive := []string{
		"W1 drain, jobs/s", "W1 raw SQL ceiling, jobs/s", "W1 drain / raw SQL ceiling, ratio", "W1 WAL, bytes/job", "W1 dead tuples left, per job", "W1 row updates, per job",
		"W1 table before drain, MiB", "W1 table after drain and VACUUM, MiB", "W1 indexes after drain and VACUUM, MiB",
		"W2 200/s completed, jobs/s", "W2 200/s inserted, jobs/s", "W2 200/s pickup p99, ms", "W2 200/s WAL, bytes/job",
		"W3 200/s pickup p99, ms", "W3 200/s pickup max, ms", "W3 200/s inserted, jobs/s",
		"W3 defaults 200/s pickup max, ms", "W3 defaults 200/s inserted, jobs/s",
		"W4 bulk insert, jobs/s", "W4 single insert x1, jobs/s", "W4 single insert x8, jobs/s",
		"W5 peak RSS, MiB", "W5 drain 500 in own process, jobs/s",
	}
	if _, err := weirbench.PgbenchPath(); err == nil {
		// W4's ceiling, where pgbench is installed (as on CI's machines).
		positive = append(positive, "W4 pgbench single-row insert x1, rows/s", "W4 pgbench single-row insert x8, rows/s",
			"W4 single insert x1 / pgbench, ratio", "W4 single insert x8 / pgbench, ratio")
	}
	present := append(positive, "W1 HOT updates, per job", "W1 autovacuums during drain, count",
		"W2 200/s backlog at end, jobs", "W2 200/s pickup p50, ms", "W2 200/s dead tuples left, per job",
		"W3 200/s pickup p50, ms", "W3 defaults 200/s pickup p50, ms", "W3 defaults 200/s pickup p99, ms",
		"W1 ready list on at end, 1 = on", "W1 ready list mode changes so far, count")
	for _, name := range present {
		vs, ok := figures[name]
		if !ok || len(vs) != 1 {
			t.Errorf("figure %q: values %v, want one", name, vs)
			continue
		}
		if vs[0] < 0 {
			t.Errorf("figure %q is negative: %v", name, vs[0])
		}
		if !strings.Contains(r.stdout, "\n"+name+" ") {
			t.Errorf("the table has no row %q:\n%s", name, r.stdout)
		}
	}
	for _, name := range positive {
		if vs := figures[name]; len(vs) == 1 && vs[0] <= 0 {
			t.Errorf("figure %q = %v, want it positive", name, vs[0])
		}
	}
	if len(rep.Figures) != len(present) {
		t.Errorf("%d figures, want %d", len(rep.Figures), len(present))
	}
	for _, s := range []string{"weir bench, ", "PostgreSQL: ", "synchronous_commit=", "weir settings: "} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("the report does not say %q:\n%s", s, r.stdout)
		}
	}
	if strings.Contains(r.stdout, dbtest.URL()) || strings.Contains(r.stderr, dbtest.URL()) {
		t.Errorf("the database URL is printed:\n%s\n%s", r.stdout, r.stderr)
	}

	// The plot is well-formed XML.
	svg, err := os.Open(plotPath)
	if err != nil {
		t.Fatal(err)
	}
	defer svg.Close()
	for dec := xml.NewDecoder(svg); ; {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("the plot is not well-formed: %v", err)
		}
	}

	// The long workloads, tiny: W7 with its snapshot held, W8 and W6 with worker
	// processes of weir bench itself, and the plot over time.
	seriesPath := filepath.Join(dir, "series.svg")
	r = b.run(t, nil, "bench", "--database-url", dbtest.URL(), "--schema", schema, "--max-conns", "8",
		"--workloads", "pressure,pressure-clean,scale,scale-mixed,limit", "--batch", "100",
		"--pressure-rate", "200", "--pressure-duration", "1s", "--scale-jobs", "300", "--scale-procs", "1,2",
		"--scale-workers", "20", "--scale-rate", "200", "--scale-duration", "1s",
		"--limit-jobs", "300", "--limit-procs", "2", "--global-limit", "3", "--key-limit", "2", "--limit-keys", "10", "--series-plot", seriesPath)
	if r.code != 0 {
		t.Fatalf("weir bench of the long workloads failed: %v", r)
	}
	for _, s := range []string{"W7 snapshot held pickup p99, ms", "W7 clean completed, jobs/s", "W7 snapshot held, 1s pickup p99, ms",
		"W8 drain by 1 process, jobs/s", "W8 drain by 2 processes, jobs/s", "W8 drain by 2 processes claims, per s",
		"W8 200/s by 4 processes pickup p99, ms", "W6 drain by 2 processes, no limit, jobs/s",
		"W6 drain by 2 processes, global limit 3, jobs/s", "W6 drain by 2 processes, 2 per key of 10, jobs/s",
		"W6 global limit 3 / no limit, in each round, ratio", "W6 2 per key / no limit, in each round, ratio"} {
		if !strings.Contains(r.stdout, "\n"+s+" ") {
			t.Errorf("the table has no row %q:\n%s", s, r.stdout)
		}
	}
	series, err := os.ReadFile(seriesPath)
	if err != nil {
		t.Fatal(err)
	}
	for dec := xml.NewDecoder(bytes.NewReader(series)); ; {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("the plot over time is not well-formed: %v", err)
		}
	}
	if !strings.Contains(string(series), "W7 snapshot held pickup p99") {
		t.Errorf("the plot over time has no W7 pickup p99:\n%s", series)
	}

	// A second run reuses the schema, which is now the benchmark's.
	r = b.run(t, nil, "bench", "--database-url", dbtest.URL(), "--schema", schema, "--workloads", "bulk", "--insert-jobs", "10")
	if r.code != 0 || !strings.Contains(r.stdout, "W4 bulk insert, jobs/s") {
		t.Fatalf("second run: %v", r)
	}
}
