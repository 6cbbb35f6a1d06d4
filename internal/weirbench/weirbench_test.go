package weirbench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/internal/dbtest"
)

// TestMain is also W5's worker process: Run re-executes the test binary.
func TestMain(m *testing.M) {
	if spec := os.Getenv(ChildEnv); spec != "" {
		// TestRun passes its schema in the environment.
		if err := RunChild(context.Background(), spec, os.Stdout, os.Stderr, Weir(WeirConfig{Schema: os.Getenv("WEIRBENCH_TEST_SCHEMA")})); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	dbtest.Main(m)
}

// TestRun runs every workload once, tiny, on weir, in this process (but W5),
// and checks the report's shape. It asserts nothing about speed.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark; skipped with -short")
	}
	schema := dbtest.Schema(t)
	t.Setenv("WEIRBENCH_TEST_SCHEMA", schema) // for the worker process
	o := DefaultOptions()
	o.DatabaseURL = dbtest.URL()
	o.Title = "test"
	o.Rounds = 2
	o.MaxConns = 5
	o.DrainJobs, o.InsertJobs, o.Batch = 300, 500, 200
	o.InsertDuration = 200 * time.Millisecond
	o.MixedRates, o.MixedDuration = []int{300}, 500*time.Millisecond
	o.LatencyRate, o.LatencyDuration = 300, 500*time.Millisecond
	o.RSSJobs, o.RSSWorkers = 300, 20
	o.Timeout = time.Minute
	o.CeilingSchema = dbtest.Schema(t)
	var progress bytes.Buffer
	o.Progress = &progress
	o.ChildCommand = []string{os.Args[0], "-test.run=^$"}
	// A parent far bigger than its worker process: W5 must measure the
	// worker's memory, not the parent's (which exec would carry over into the
	// kernel's maxrss).
	ballast := make([]byte, 256<<20)
	for i := 0; i < len(ballast); i += 4096 {
		ballast[i] = 1
	}
	rep, err := Run(t.Context(), o, Weir(WeirConfig{Schema: schema, MaxWorkers: 50, Prefetch: 50}))
	runtime.KeepAlive(ballast)
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	for _, f := range rep.Figures {
		if f.Name == "W5 peak RSS, MiB" {
			t.Logf("W5 peak RSS %v MiB", f.Values["weir"])
		}
		if f.Name == "W5 peak RSS, MiB" && runtime.GOOS == "linux" && slices.Max(f.Values["weir"]) > 200 {
			t.Errorf("W5 peak RSS %v MiB: the parent's, not the worker's", f.Values["weir"])
		}
	}
	if len(rep.Systems) != 1 || rep.Systems[0].Name != "weir" {
		t.Errorf("systems %+v", rep.Systems)
	}
	for _, f := range rep.Figures {
		if vs := f.Values["weir"]; len(vs) != 2 {
			t.Errorf("%s: %v, want a value for each of 2 rounds", f.Name, vs)
		}
		for _, v := range f.Values["weir"] {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				t.Errorf("%s: %v", f.Name, v)
			}
		}
	}
	want := 33 // with W1's raw SQL ceiling and the ratio to it, and the ready list's mode
	// A plain drain leaves weir's ready list off.
	if i := slices.IndexFunc(rep.Figures, func(f *Figure) bool { return f.Name == "W1 ready list on at end, 1 = on" }); i < 0 ||
		slices.Max(rep.Figures[i].Values["weir"]) != 0 {
		t.Errorf("W1's ready list figure missing or on")
	}
	for _, name := range []string{"W1 raw SQL ceiling, jobs/s", "W1 drain / raw SQL ceiling, ratio"} {
		if i := slices.IndexFunc(rep.Figures, func(f *Figure) bool { return f.Name == name }); i < 0 || slices.Min(rep.Figures[i].Values["weir"]) <= 0 {
			t.Errorf("figure %q missing or not positive", name)
		}
	}
	if _, err := PgbenchPath(); err == nil {
		want += 4 // W4's ceiling of single inserts and the ratios to it
		for _, name := range []string{"W4 pgbench single-row insert x1, rows/s", "W4 single insert x8 / pgbench, ratio"} {
			if i := slices.IndexFunc(rep.Figures, func(f *Figure) bool { return f.Name == name }); i < 0 || slices.Min(rep.Figures[i].Values["weir"]) <= 0 {
				t.Errorf("figure %q missing or not positive", name)
			}
		}
	}
	if got := len(rep.Figures); got != want {
		t.Errorf("%d figures, want %d", got, want)
	}
	// Every run has its line; a non-terminal gets no status updates.
	if n := strings.Count(progress.String(), " weir: "); n < 2*len(Workloads()) {
		t.Errorf("progress has %d run lines:\n%s", n, progress.String())
	}
	if strings.Contains(progress.String(), "\r") {
		t.Errorf("progress to a non-terminal updates in place:\n%q", progress.String())
	}

	var table, svg, js bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"test, ", "W1 drain, jobs/s", "W5 peak RSS, MiB", "W2 300/s pickup p99, ms", "(", "–"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table does not hold %q:\n%s", s, table.String())
		}
	}
	if err := rep.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	for dec := xml.NewDecoder(&svg); ; {
		if _, err := dec.Token(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("plot is not well-formed: %v", err)
		}
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Figures) != len(rep.Figures) {
		t.Errorf("JSON does not read back: %v", err)
	}
}

func TestClaimSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin := dbtest.Pool(t, nil)

	// An empty schema, made by someone else, is claimed.
	empty := dbtest.Schema(t)
	if err := claimSchema(ctx, admin, empty); err != nil {
		t.Fatal(err)
	}
	// A schema that does not exist is created.
	fresh := "wb_" + strings.TrimPrefix(dbtest.Schema(t), "t_")
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{fresh}.Sanitize()+" CASCADE")
	})
	for range 2 {
		if err := claimSchema(ctx, admin, fresh); err != nil {
			t.Fatal(err)
		}
	}
	// Tables in a claimed schema are the benchmark's.
	if _, err := admin.Exec(ctx, "CREATE TABLE "+pgx.Identifier{fresh, "x"}.Sanitize()+" (i int)"); err != nil {
		t.Fatal(err)
	}
	if err := claimSchema(ctx, admin, fresh); err != nil {
		t.Fatal(err)
	}
	// A schema with tables and without the mark is refused, and left alone:
	// its comment (the test harness's own mark) stays as it was.
	foreign := dbtest.Schema(t)
	if _, err := admin.Exec(ctx, "CREATE TABLE "+pgx.Identifier{foreign, "jobs"}.Sanitize()+" (i int)"); err != nil {
		t.Fatal(err)
	}
	comment := func() string {
		t.Helper()
		var c *string
		if err := admin.QueryRow(ctx, "SELECT obj_description($1::regnamespace, 'pg_namespace')", foreign).Scan(&c); err != nil {
			t.Fatal(err)
		}
		if c == nil {
			return "<none>"
		}
		return *c
	}
	before := comment()
	err := claimSchema(ctx, admin, foreign)
	if err == nil || !strings.Contains(err.Error(), "not made by the benchmark") {
		t.Fatalf("claim of a foreign schema: %v", err)
	}
	if after := comment(); after != before {
		t.Errorf("the foreign schema's comment changed from %q to %q", before, after)
	}
}

func TestRecorder(t *testing.T) {
	t.Parallel()
	r := newRecorder(4)
	r.committed[0], r.committed[1], r.committed[2] = 1e6, 2e6, 3e6
	r.started[0].Store(3e6) // 2 ms
	r.started[1].Store(1e6) // before its insert returned: 0
	r.started[3].Store(9e6) // never inserted: ignored
	// Job 2 has not started by 10 ms: 7 ms so far.
	got := r.pickups(10e6)
	want := []float64{0, 2, 7}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pickups = %v, want %v", got, want)
	}
	if p := percentile(got, 0.5); p != 2 {
		t.Errorf("p50 = %v, want 2", p)
	}
	if p := percentile(got, 0.99); p != 7 {
		t.Errorf("p99 = %v, want 7", p)
	}
	r.start(-1)
	r.start(4)
	r.start(2)
	r.start(2)
	if n := r.nstarted.Load(); n != 1 {
		t.Errorf("nstarted = %d, want 1", n)
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		unit string
		v    float64
		want string
	}{
		{"jobs/s", 17563.4, "17,563"},
		{"jobs/s", 999.5, "1,000"},
		{"bytes/job", 1074, "1,074"},
		{"per job", 2, "2.00"},
		{"MiB", 59.04, "59.0"},
		{"ms", 2.345, "2.35"},
		{"ms", 42.71, "42.7"},
		{"ms", 1234.5, "1,235"},
		{"jobs", -1234567, "-1,234,567"},
	} {
		if got := format(tt.unit, tt.v); got != tt.want {
			t.Errorf("format(%q, %v) = %q, want %q", tt.unit, tt.v, got, tt.want)
		}
	}
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median = %v", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median = %v", m)
	}
	for _, tt := range []struct {
		a, b float64
		want string
	}{{1, 2, "0.50"}, {2, 1, "2.00"}, {0, 5, "0.00"}, {5.04, 3440, "0.0015"}, {3.7, 100, "0.037"}, {9.6, 100, "0.10"}, {1, 0, "–"}} {
		if got := ratio(tt.a, tt.b); got != tt.want {
			t.Errorf("ratio(%v, %v) = %q, want %q", tt.a, tt.b, got, tt.want)
		}
	}
	if c := compact(2000); c != "2k" {
		t.Errorf("compact(2000) = %q", c)
	}
	if c := compactJobs(1_000_000); c != "1M" {
		t.Errorf("compactJobs(1e6) = %q", c)
	}
	if got, want := shellQuote([]string{"--plot", "", "a b", "x'y", "--rates=2000,5000"}), `--plot '' 'a b' 'x'\''y' --rates=2000,5000`; got != want {
		t.Errorf("shellQuote = %s, want %s", got, want)
	}
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		change func(*Options)
		want   string
	}{
		{func(o *Options) { o.Workloads = nil }, "--workloads"},
		{func(o *Options) { o.Workloads = []string{"drain", "x"} }, `unknown workload "x"`},
		{func(o *Options) { o.Rounds = 0 }, "--rounds"},
		{func(o *Options) { o.MixedRates = nil }, "--mixed-rates"},
		{func(o *Options) { o.MixedRates = []int{-1} }, "--mixed-rates"},
		{func(o *Options) { o.LatencyDuration = 0 }, "--latency-duration"},
		{func(o *Options) { o.LatencyRate = 1e6; o.LatencyDuration = time.Hour }, "--latency-rate"},
		{func(o *Options) { o.CeilingSchema = strings.Repeat("s", 64) }, "--drain-ceiling: the schema"},
	} {
		o := DefaultOptions()
		tt.change(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate = %v, want an error naming %s", err, tt.want)
		}
	}
	o := DefaultOptions()
	if err := o.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	o.CeilingSchema, o.DrainCeiling = strings.Repeat("s", 64), false
	if err := o.Validate(); err != nil {
		t.Errorf("no ceiling, its schema unused: %v", err)
	}
}

func TestProgress(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	p := newProgress(&buf)
	p.Status("not shown off a terminal")
	fmt.Fprint(p, "a warn")
	fmt.Fprint(p, "ing\nsecond\nthi")
	p.Linef("run %d", 1)
	fmt.Fprint(p, "rd\n")
	p.Clear()
	if got, want := buf.String(), "a warning\nsecond\nrun 1\nthird\n"; got != want {
		t.Errorf("progress wrote %q, want %q", got, want)
	}
	if got := shorten("W1 drain, jobs/s", "W1 drain"); got != "drain, jobs/s" {
		t.Errorf("shorten = %q", got)
	}
	if got := shorten("W2 2,000/s completed, jobs/s", "W2 2,000/s"); got != "completed, jobs/s" {
		t.Errorf("shorten = %q", got)
	}
}

// TestDropScratchSchema: a schema with the benchmark's mark is dropped; one
// without it is refused if it holds tables and left alone either way.
func TestDropScratchSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin := dbtest.Pool(t, nil)
	exists := func(schema string) bool {
		t.Helper()
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	ours := dbtest.Schema(t)
	if err := claimSchema(ctx, admin, ours); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE TABLE "+pgx.Identifier{ours, "jobs"}.Sanitize()+" (i int)"); err != nil {
		t.Fatal(err)
	}
	if err := DropScratchSchema(ctx, dbtest.URL(), ours); err != nil || exists(ours) {
		t.Errorf("the benchmark's schema: %v, still there: %v", err, exists(ours))
	}
	if err := DropScratchSchema(ctx, dbtest.URL(), ours); err != nil {
		t.Errorf("a schema that is gone: %v", err)
	}

	empty := dbtest.Schema(t)
	if err := DropScratchSchema(ctx, dbtest.URL(), empty); err != nil || !exists(empty) {
		t.Errorf("an empty schema of another's: %v, still there: %v", err, exists(empty))
	}
	foreign := dbtest.Schema(t)
	if _, err := admin.Exec(ctx, "CREATE TABLE "+pgx.Identifier{foreign, "jobs"}.Sanitize()+" (i int)"); err != nil {
		t.Fatal(err)
	}
	err := DropScratchSchema(ctx, dbtest.URL(), foreign)
	if err == nil || !strings.Contains(err.Error(), "not made by the benchmark") || !exists(foreign) {
		t.Errorf("another's schema with a table: %v, still there: %v", err, exists(foreign))
	}
}
