package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/internal/weirbench"
)

// abFlagSet is compare's flags as main registers them, those --ab reads or
// refuses at least, parsed from args.
func abFlagSet(t *testing.T, args ...string) (*flag.FlagSet, weirbench.Options) {
	t.Helper()
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := weirbench.DefaultOptions()
	fs.String("database-url", "postgres://postgres@127.0.0.1:5432/postgres", "")
	fs.Int("weir-max-workers", 1000, "")
	fs.Int("weir-prefetch", 1000, "")
	o.RegisterFlags(fs)
	fs.String("json", "", "")
	fs.String("plot", "results/compare.svg", "")
	fs.String("systems", "weir,river", "")
	fs.String("replot", "", "")
	fs.Bool("start-postgres", false, "")
	fs.String("ab", "", "")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs, o
}

func TestABConfigFrom(t *testing.T) {
	t.Parallel()
	fs, o := abFlagSet(t, "--ab", "HEAD~1", "--database-url", "postgres://u:secret@h/db", "--rounds", "3",
		"--weir-prefetch", "500", "--drain-jobs", "1000", "--drain-ceiling=false", "--mixed-rates", "100,200")
	c, err := abConfigFrom(fs, o, []string{"--ab", "HEAD~1", "--database-url", "postgres://u:secret@h/db"})
	if err != nil {
		t.Fatal(err)
	}
	if c.rev != "HEAD~1" || c.rounds != 3 || c.url != "postgres://u:secret@h/db" || c.plotPath != "" {
		t.Errorf("config %+v", c)
	}
	// Passed on by weir bench's names, rounds and workloads left to --ab.
	if want := []string{"--drain-ceiling=false", "--drain-jobs=1000", "--mixed-rates=100,200", "--prefetch=500"}; !slices.Equal(c.pass, want) {
		t.Errorf("passed %q, want %q", c.pass, want)
	}
	// weir bench's default workloads, in the engine's order.
	if want := []string{"drain", "mixed", "latency", "bulk", "single1", "single8", "rss"}; !slices.Equal(c.workloads, want) {
		t.Errorf("workloads %q, want %q", c.workloads, want)
	}
	if strings.Contains(strings.Join(c.args, " "), "secret") {
		t.Errorf("the command line holds the database URL: %q", c.args)
	}

	fs, o = abFlagSet(t, "--ab", "abc", "--workloads", "latency-defaults,drain", "--plot", "ab.svg")
	if c, err = abConfigFrom(fs, o, nil); err != nil {
		t.Fatal(err)
	}
	if want := []string{"drain", "latency-defaults"}; !slices.Equal(c.workloads, want) || c.plotPath != "ab.svg" || len(c.pass) != 0 {
		t.Errorf("workloads %q, plot %q, passed %q", c.workloads, c.plotPath, c.pass)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--ab", "HEAD", "--systems", "weir"}, "--systems does not apply"},
		{[]string{"--ab", "HEAD", "--replot", "x.json"}, "--replot does not apply"},
		{[]string{"--ab", "--rounds"}, `"--rounds" is not a revision`},
		{[]string{"--ab", "HEAD", "--drain-jobs", "0"}, "--drain-jobs"},
	} {
		fs, o := abFlagSet(t, tt.args...)
		if _, err := abConfigFrom(fs, o, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want an error saying %s", tt.args, err, tt.want)
		}
	}
}

// TestABCheckHelp reads the help of the oldest base --ab supports, that of
// 0aba536's weir bench (testdata), and of a weir with no bench.
func TestABCheckHelp(t *testing.T) {
	t.Parallel()
	old, err := os.ReadFile("testdata/bench-help-0aba536.txt")
	if err != nil {
		t.Fatal(err)
	}
	help := string(old)
	if err := abCheckHelp("weir@0aba536", help, []string{"--drain-jobs=10", "--prefetch=5", "--timeout=1m0s"}, []string{"drain", "rss"}); err != nil {
		t.Errorf("flags and workloads it has: %v", err)
	}
	for _, tt := range []struct {
		help            string
		pass, workloads []string
		want            string
	}{
		{help, []string{"--drain-jobs=10", "--drain-ceiling=false"}, nil, "weir@0aba536's weir bench has no flag --drain-ceiling"},
		{help, nil, []string{"drain", "pressure"}, `weir@0aba536's weir bench has no workload "pressure"`},
		{"weir: unknown command \"bench\"\n", nil, []string{"drain"}, "weir@0aba536 has no `weir bench` that takes --database-url"},
	} {
		if err := abCheckHelp("weir@0aba536", tt.help, tt.pass, tt.workloads); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q %q: %v, want an error saying %s", tt.pass, tt.workloads, err, tt.want)
		}
	}
}

func TestABOrder(t *testing.T) {
	t.Parallel()
	for round, want := range map[int][2]int{1: {0, 1}, 2: {1, 0}, 3: {0, 1}, 4: {1, 0}} {
		if got := abOrder(round); got != want {
			t.Errorf("round %d: %v, want %v", round, got, want)
		}
	}
}

// abTestReport is one `weir bench` run's report of system sys.
func abTestReport(sys string, drainJobs int, figures map[string]float64) *weirbench.Report {
	rep := &weirbench.Report{Systems: []weirbench.SystemInfo{{Name: sys, Settings: map[string]string{"throughput": sys + "'s"}}}}
	rep.Options.DrainJobs = drainJobs
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range figures {
			if !yield(k) {
				return
			}
		}
	}) {
		rep.Figures = append(rep.Figures, &weirbench.Figure{Name: name, Unit: "jobs/s", Better: "higher",
			Values: map[string][]float64{sys: {figures[name]}}})
	}
	return rep
}

func TestABMerge(t *testing.T) {
	t.Parallel()
	const drain, ceiling = "W1 drain, jobs/s", "W1 raw SQL ceiling, jobs/s"
	opts := func(v ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(v); i += 2 {
			m[v[i].(string)] = v[i+1]
		}
		return m
	}
	// A has no ceiling; the runs in the order they ran, A first in round 1.
	runs := []abRun{
		{Workload: "drain", Round: 1, Side: 0, First: true, rep: abTestReport("weir", 100, map[string]float64{drain: 100}),
			options: opts("drain_jobs", 100.0, "title", "weir bench", "timeout", 1.0)},
		{Workload: "drain", Round: 1, Side: 1, rep: abTestReport("weir", 200, map[string]float64{drain: 110, ceiling: 200}),
			options: opts("drain_jobs", 200.0, "title", "other", "timeout", 1.0, "drain_ceiling", true)},
		{Workload: "drain", Round: 2, Side: 1, First: true, rep: abTestReport("weir poll-only", 200, map[string]float64{drain: 130, ceiling: 210})},
		{Workload: "drain", Round: 2, Side: 0, rep: abTestReport("weir", 100, map[string]float64{})},
	}
	c := abConfig{rounds: 2, workloads: []string{"drain"}, options: weirbench.DefaultOptions(), args: []string{"--ab", "HEAD"}}
	names := [2]string{"weir@abc", "weir (working tree)"}
	rep, notes := abMerge(runs, c, names)
	if len(rep.Systems) != 2 || rep.Systems[0].Name != names[1] || rep.Systems[1].Name != names[0] || rep.Systems[1].Settings["throughput"] != "weir's" {
		t.Errorf("systems %+v, want B then A", rep.Systems)
	}
	if len(rep.Figures) != 2 || rep.Figures[0].Name != drain || rep.Figures[1].Name != ceiling {
		t.Fatalf("figures %v, want B's order", rep.Figures)
	}
	if got := rep.Figures[0].Values; !slices.Equal(got[names[1]], []float64{110, 130}) || !slices.Equal(got[names[0]], []float64{100}) {
		t.Errorf("drain values %v", got)
	}
	if rep.Options.Rounds != 2 || !strings.Contains(rep.Options.Title, "weir (working tree) vs weir@abc") {
		t.Errorf("options %+v", rep.Options)
	}
	// drain_jobs differs; the title says what ran, and drain_ceiling is B's alone.
	if len(notes) != 1 || !strings.Contains(notes[0], "weir@abc ran with drain_jobs 100, weir (working tree) with 200") {
		t.Errorf("notes %q", notes)
	}

	pairs := abPairs(rep, runs)
	if len(pairs) != 1 || pairs[0].Figure != drain || pairs[0].Ratios[0] == nil || *pairs[0].Ratios[0] != 1.1 || pairs[0].Ratios[1] != nil {
		t.Errorf("pairs %+v, want drain's alone, 1.1 then none (the ceiling is B's alone)", pairs)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	out := abReport{Report: rep, AB: abInfo{A: names[0], B: names[1], Runs: runs, Pairs: pairs}}
	if err := out.writePairs(&table); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"weir (working tree)/weir@abc", "1.20", "1 (A first)", "2 (B first)", "1.10 ", "–"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("the output does not say %q:\n%s", s, table.String())
		}
	}
	var js bytes.Buffer
	if err := out.writeJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back abReportJSON
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Figures) != 2 || len(back.AB.Runs) != 4 || back.AB.Runs[2].Side != "b" || !back.AB.Runs[2].First {
		t.Errorf("the JSON does not read back: %s", js.String())
	}
}

// TestABEndToEnd runs --ab against HEAD, tiny: W1 twice, the order
// alternated, the report merged; then a run that fails after the base's
// worktree was made and one interrupted (which reports the round before),
// each of which removes it. It builds
// weir twice (cached after the first time) and asserts nothing about speed.
func TestABEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds weir twice; skipped with -short")
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	worktrees := func() string {
		out, err := exec.Command("git", "worktree", "list", "--porcelain").Output()
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	before := worktrees()
	left := func() {
		t.Helper()
		if after := worktrees(); after != before {
			t.Errorf("worktrees left:\n%s\nbefore:\n%s", after, before)
		}
		if entries, _ := os.ReadDir(tmp); len(entries) > 0 {
			t.Errorf("temporary files left: %v", entries)
		}
	}

	jsonPath := filepath.Join(t.TempDir(), "ab.json")
	args := []string{"--ab", "HEAD", "--database-url", dbtest.URL(), "--workloads", "drain", "--rounds", "2",
		"--drain-jobs", "200", "--batch", "100", "--max-conns", "4", "--json", jsonPath}
	fs, o := abFlagSet(t, args...)
	c, err := abConfigFrom(fs, o, args)
	if err != nil {
		t.Fatal(err)
	}
	c.schemas = [2]string{dbtest.SchemaName(t), dbtest.SchemaName(t)}
	t.Cleanup(func() {
		for _, s := range c.schemas {
			_ = weirbench.DropScratchSchema(context.Background(), dbtest.URL(), s+"_sql")
		}
	})
	var stdout, stderr bytes.Buffer
	if err := runAB(t.Context(), c, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	left()
	for _, s := range []string{"weir (working tree) vs weir@", "W1 drain, jobs/s", "W1 raw SQL ceiling, jobs/s",
		"weir (working tree)/weir@", "B/A pair by pair", "2 (B first)"} {
		if !strings.Contains(stdout.String(), s) {
			t.Errorf("the output does not say %q:\n%s", s, stdout.String())
		}
	}
	if strings.Contains(stdout.String()+stderr.String(), dbtest.URL()) {
		t.Errorf("the database URL is printed:\n%s\n%s", stdout.String(), stderr.String())
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep abReportJSON
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, r := range rep.AB.Runs {
		order = append(order, r.Side)
	}
	if !slices.Equal(order, []string{"a", "b", "b", "a"}) || !rep.AB.Runs[0].First || !rep.AB.Runs[2].First {
		t.Errorf("runs %+v, want A B, then B A", rep.AB.Runs)
	}
	for _, f := range rep.Figures {
		if f.Name == "W1 drain, jobs/s" {
			for _, sys := range rep.Systems {
				if vs := f.Values[sys.Name]; len(vs) != 2 || slices.Min(vs) <= 0 {
					t.Errorf("%s's W1 drain: %v, want 2 positive values", sys.Name, vs)
				}
			}
		}
	}

	// A database that does not answer: the worktree made, then removed.
	c.url = "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"
	if err := runAB(t.Context(), c, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "connect") {
		t.Errorf("a database that does not answer: %v", err)
	}
	left()

	// Interrupted as the second round starts: the first is reported.
	c.url = dbtest.URL()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout.Reset()
	err = runAB(ctx, c, &stdout, &onWrite{match: "A/B drain, round 2", do: cancel})
	if err == nil || ctx.Err() == nil {
		t.Errorf("interrupted: %v (context %v)", err, ctx.Err())
	}
	if !strings.Contains(stdout.String(), "1 (A first)") || strings.Contains(stdout.String(), "2 (B first)") {
		t.Errorf("interrupted in round 2, the report is not round 1's:\n%s", stdout.String())
	}
	left()

	// A revision that is not one.
	c.rev = "no-such-revision"
	if err := runAB(t.Context(), c, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), `"no-such-revision" is not a commit`) {
		t.Errorf("a bad revision: %v", err)
	}
}

// onWrite calls do once when what is written contains match.
type onWrite struct {
	match string
	do    func()
	buf   bytes.Buffer
	once  sync.Once
}

func (w *onWrite) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.match) {
		w.once.Do(w.do)
	}
	return len(p), nil
}

// abReportJSON is what the tests read of an A/B report's JSON: the report and
// the order its runs went in.
type abReportJSON struct {
	weirbench.Report
	AB struct {
		Runs []struct {
			Side  string `json:"side"`
			First bool   `json:"first"`
		} `json:"runs"`
	} `json:"ab"`
}
