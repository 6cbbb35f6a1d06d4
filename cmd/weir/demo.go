package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirmigrate"
	"github.com/weirq/weir/weirtype"
)

var demoCommand = &command{
	name:    "demo",
	summary: "enqueue and work a mix of demo jobs, then show how they ended",
	usage:   demoUsage,
	run:     runDemo,
}

func demoUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:

    weir demo [--database-url URL] [--schema NAME]

demo shows weir working: it enqueues a mix of jobs in the queue "demo" (fast
ones, slow ones, one that fails once and then succeeds, two scheduled a few
seconds ahead, one cancelled before it runs, one that fails until its attempts
run out), works them with a client, shows progress, and ends with a table of how
the jobs ended. It exits 0 when every job ended as expected, within a minute.

With no --database-url, it keeps its jobs in an embedded SQLite file under your
cache directory (the path is printed), so nothing needs to run. With a
PostgreSQL URL it runs the same demo there, in the schema given by --schema
(default weir_demo), migrating it first. It does not read WEIR_DATABASE_URL, so
that it never touches your database unless you name it.

Flags:
`)
	fs := newFlagSet("weir demo")
	var f demoFlags
	f.register(fs)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

type demoFlags struct {
	url    string
	schema string
}

func (f *demoFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "database-url", "", "database `URL` (default: an embedded SQLite file in your cache directory)")
	fs.StringVar(&f.schema, "schema", "weir_demo", "PostgreSQL schema `NAME` for the demo's tables (not with SQLite)")
}

// demoArgs are the demo's jobs. Name says what the job does.
type demoArgs struct {
	Name string `json:"name"`
}

func (demoArgs) Kind() string { return "demo" }

// demoJob is one job the demo inserts and the state it must end in.
type demoJob struct {
	name string
	opts *weir.InsertOpts
	want weir.JobState
	id   int64
}

const (
	demoQueue   = "demo"
	demoWorkers = 5
)

func runDemo(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("weir demo")
	var f demoFlags
	f.register(fs)
	if err := parseFlags(e, fs, args, demoUsage); err != nil {
		return err
	}
	if err := checkSchema("demo", f.schema); err != nil {
		return err
	}
	if _, ok := sqlitePath(f.url); isSet(fs, "schema") && (f.url == "" || ok) {
		// A SQLite file has no schemas: --schema would be ignored, and the
		// demo would not run where the command line says.
		return usagef("demo: --schema is for PostgreSQL; the demo's SQLite file has no schemas")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	store := f.url
	if store == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return fmt.Errorf("demo: no cache directory for the embedded store: %v (pass --database-url)", err)
		}
		// The store holds the demo's jobs: its directory is the user's alone,
		// as the file is (weirsqlite creates it so).
		if err := os.MkdirAll(filepath.Join(dir, "weir"), 0o700); err != nil {
			return fmt.Errorf("demo: create the store's directory: %v", err)
		}
		store = "sqlite:" + filepath.Join(dir, "weir", "demo.db")
	}
	driver, closeDB, err := openDriver(ctx, store, f.schema, true)
	if err != nil {
		return err
	}
	defer closeDB()
	// Said as soon as the store answers: the reader sees the demo run, after a
	// first build that may have taken minutes.
	fmt.Fprintf(e.stdout, "weir demo: migrating the %s\n", describeStore(store, f.schema))
	if _, err := weirmigrate.New(driver).Up(ctx, nil); err != nil {
		return fmt.Errorf("demo: migrate: %v", err)
	}

	// The demo shows its jobs' failed attempts itself, from the database, at the
	// end; the client's log carries everything else.
	logger := slog.New(dropJobLines{slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})})
	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(func(ctx context.Context, job *weir.Job[demoArgs]) error {
		switch job.Args.Name {
		case "slow":
			select {
			case <-time.After(1500 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		case "flaky":
			if job.Attempt == 1 {
				return errors.New("flaky: the first attempt fails")
			}
			return nil
		case "doomed":
			return fmt.Errorf("doomed: attempt %d fails too", job.Attempt)
		}
		return nil // fast, scheduled
	}))
	client, err := weir.NewClient(driver, &weir.Config{
		Workers:           workers,
		Queues:            map[string]weir.QueueConfig{demoQueue: {MaxWorkers: demoWorkers}},
		Logger:            logger,
		FetchPollInterval: 200 * time.Millisecond,
		RescueInterval:    time.Second,
		RetryPolicy:       weir.ExponentialBackoff{Base: 300 * time.Millisecond, Max: time.Second},
	})
	if err != nil {
		return err
	}

	jobs := demoJobs(time.Now())
	for _, j := range jobs {
		res, err := client.Insert(ctx, demoArgs{Name: j.name}, j.opts)
		if err != nil {
			return fmt.Errorf("demo: enqueue: %v", err)
		}
		j.id = res.Job.ID
		if j.want == weir.JobStateCancelled {
			if _, err := client.JobCancel(ctx, j.id); err != nil {
				return fmt.Errorf("demo: cancel job %d: %v", j.id, err)
			}
		}
	}
	fmt.Fprintf(e.stdout, "enqueued %d demo jobs in %s\n", len(jobs), describeStore(store, f.schema))
	fmt.Fprintf(e.stdout, "working them with a client of %d workers; a few fail and are retried, as planned\n", demoWorkers)

	if err := client.Start(ctx); err != nil {
		return err
	}
	states, waitErr := waitForDemo(ctx, e, client, jobs)
	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer stopCancel()
	stopErr := client.Stop(stopCtx)

	printDemoSummary(e.stdout, jobs, states)
	if err := printDemoAttempts(ctx, e.stdout, client, jobs); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "store: %s\n", describeStore(store, f.schema))
	if waitErr != nil {
		return waitErr
	}
	if stopErr != nil {
		return fmt.Errorf("demo: stop: %v", stopErr)
	}
	if bad := demoFailed(jobs, states); len(bad) > 0 {
		return fmt.Errorf("demo: %s", strings.Join(bad, "; "))
	}
	fmt.Fprintln(e.stdout, "every demo job ended as expected")
	printDemoNext(e.stdout, store, f.schema, jobs)
	return nil
}

// dropJobLines is a log handler that drops the client's lines about the demo's
// own jobs (failed attempts, discarded jobs), which the demo reports itself.
type dropJobLines struct{ slog.Handler }

func (h dropJobLines) Handle(ctx context.Context, r slog.Record) error {
	demoJob := false
	r.Attrs(func(a slog.Attr) bool {
		demoJob = a.Key == "kind" && a.Value.String() == demoArgs{}.Kind()
		return !demoJob
	})
	if demoJob {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h dropJobLines) WithAttrs(attrs []slog.Attr) slog.Handler {
	return dropJobLines{h.Handler.WithAttrs(attrs)}
}

func (h dropJobLines) WithGroup(name string) slog.Handler {
	return dropJobLines{h.Handler.WithGroup(name)}
}

// printDemoAttempts prints the failed attempts of the jobs that failed at least
// once, as the database recorded them.
func printDemoAttempts(ctx context.Context, w io.Writer, client *weir.Client, jobs []*demoJob) error {
	header := false
	for _, j := range jobs {
		if j.name != "flaky" && j.name != "doomed" {
			continue
		}
		row, err := client.JobGet(ctx, j.id)
		if err != nil {
			return fmt.Errorf("demo: read job %d: %v", j.id, err)
		}
		for _, ae := range row.Errors {
			if !header {
				fmt.Fprintln(w, "\nFAILED ATTEMPTS")
				header = true
			}
			fmt.Fprintf(w, "job %d (%s, now %s) attempt %d: %s\n",
				row.ID, j.name, termSafe(string(row.State)), ae.Attempt, termSafe(ae.Error))
		}
	}
	if header {
		fmt.Fprintln(w)
	}
	return nil
}

// invokedAs is how the commands the demo suggests call weir, as main found
// it (selfCommand); "weir" when main did not run, as in the tests.
var invokedAs = "weir"

// selfCommand returns how to run this weir again from the shell it was run
// from, arg0 being its os.Args[0] and inClone whether that shell's directory
// is weir's clone: when go run built it (the binary is in a go-build
// directory, gone once it exits), "go run ./cmd/weir" in the clone and go run
// of the module's command elsewhere; the path it was run by (./weir); or
// "weir", on PATH.
func selfCommand(arg0 string, inClone bool) string {
	if goRunBuild(arg0) {
		if inClone {
			return "go run ./cmd/weir"
		}
		return "go run github.com/weirq/weir/cmd/weir@latest"
	}
	if strings.ContainsRune(arg0, filepath.Separator) {
		return shellQuote(arg0)
	}
	return "weir"
}

// goRunBuild reports whether the program at path was built by go run: it
// lies under a directory whose name starts with go-build (the build's
// temporary directory, or the build cache).
func goRunBuild(path string) bool {
	for dir := filepath.Dir(path); dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
		if strings.HasPrefix(filepath.Base(dir), "go-build") {
			return true
		}
	}
	return false
}

// isClone reports whether dir is the top of weir's clone, where go run
// ./cmd/weir works.
func isClone(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "cmd", "weir", "main.go"))
	return err == nil
}

// printDemoNext says what to try next, against the demo's own store, with
// commands that work as printed (invokedAs). A PostgreSQL URL is not
// repeated, since it may hold a password.
func printDemoNext(w io.Writer, store, schema string, jobs []*demoJob) {
	db := "--database-url 'URL' --schema " + termSafe(schema)
	if path, ok := sqlitePath(store); ok {
		db = "--database-url " + shellQuote("sqlite:"+path)
	}
	var doomed int64
	for _, j := range jobs {
		if j.name == "doomed" {
			doomed = j.id
		}
	}
	fmt.Fprintf(w, `
Try next:
    %[3]s jobs list %[1]s
    %[3]s jobs show %[2]d %[1]s
    %[3]s queues list %[1]s
`, db, doomed, invokedAs)
	if strings.HasPrefix(invokedAs, "go run ") {
		fmt.Fprintln(w, "(go run builds weir each time; `go install ./cmd/weir` in the clone installs it as weir)")
	}
	fmt.Fprintln(w, "The quickstart (README.md, and examples/quickstart) shows the Go API.")
}

// shellQuote quotes s for a POSIX shell, and makes it safe for a terminal.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(termSafe(s), "'", `'\''`) + "'"
}

// demoJobs is the mix of jobs, with the states they must end in.
func demoJobs(now time.Time) []*demoJob {
	var jobs []*demoJob
	add := func(n int, name string, opts *weir.InsertOpts, want weir.JobState) {
		for range n {
			o := &weir.InsertOpts{Queue: demoQueue}
			if opts != nil {
				*o = *opts
				o.Queue = demoQueue
			}
			jobs = append(jobs, &demoJob{name: name, opts: o, want: want})
		}
	}
	add(20, "fast", nil, weir.JobStateCompleted)
	add(3, "slow", nil, weir.JobStateCompleted)
	add(2, "flaky", nil, weir.JobStateCompleted)
	add(2, "scheduled", &weir.InsertOpts{ScheduledAt: now.Add(3 * time.Second)}, weir.JobStateCompleted)
	add(1, "cancelled", &weir.InsertOpts{ScheduledAt: now.Add(time.Hour)}, weir.JobStateCancelled)
	add(1, "doomed", &weir.InsertOpts{MaxAttempts: 3}, weir.JobStateDiscarded)
	return jobs
}

// waitForDemo shows progress until every demo job is final, and returns the jobs'
// states. On a terminal it redraws one line; elsewhere it prints a line every two
// seconds.
func waitForDemo(ctx context.Context, e *env, client *weir.Client, jobs []*demoJob) (map[int64]weir.JobState, error) {
	terminal := isTerminal(e.stdout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	lastLine := time.Time{}
	for {
		states, err := demoStates(ctx, client, jobs)
		if err != nil {
			return states, err
		}
		final, counts := 0, map[weir.JobState]int{}
		for _, s := range states {
			counts[s]++
			if s.Final() {
				final++
			}
		}
		line := fmt.Sprintf("%5.1fs  %d/%d done  %s", time.Since(start).Seconds(), final, len(jobs), countsLine(counts))
		switch {
		case terminal:
			fmt.Fprintf(e.stdout, "\r\033[K%s", line)
		case time.Since(lastLine) >= 2*time.Second || final == len(jobs):
			fmt.Fprintln(e.stdout, line)
			lastLine = time.Now()
		}
		if final == len(jobs) {
			if terminal {
				fmt.Fprintln(e.stdout)
			}
			return states, nil
		}
		select {
		case <-ctx.Done():
			if terminal {
				fmt.Fprintln(e.stdout)
			}
			return states, fmt.Errorf("demo: %d of %d jobs ended within a minute", final, len(jobs))
		case <-tick.C:
		}
	}
}

// demoStates reads the demo jobs' states, a page from the first id on.
func demoStates(ctx context.Context, client *weir.Client, jobs []*demoJob) (map[int64]weir.JobState, error) {
	wanted := map[int64]bool{}
	minID := jobs[0].id
	for _, j := range jobs {
		wanted[j.id] = true
		minID = min(minID, j.id)
	}
	states := map[int64]weir.JobState{}
	params := &weir.JobListParams{Queues: []string{demoQueue}, Cursor: minID - 1, Limit: 1000}
	for {
		page, err := client.JobList(ctx, params)
		if err != nil {
			return states, fmt.Errorf("demo: list jobs: %v", err)
		}
		for _, j := range page.Jobs {
			if wanted[j.ID] {
				states[j.ID] = j.State
			}
		}
		if page.Next == 0 {
			return states, nil
		}
		params.Cursor = page.Next
	}
}

func countsLine(counts map[weir.JobState]int) string {
	var parts []string
	for _, s := range weirtype.JobStates() {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", termSafe(string(s)), counts[s]))
		}
	}
	return strings.Join(parts, "  ")
}

// printDemoSummary prints, per end state, how many jobs ended there and how many
// should have; a job that ended elsewhere fails the demo.
func printDemoSummary(w io.Writer, jobs []*demoJob, states map[int64]weir.JobState) {
	got, want := map[weir.JobState]int{}, map[weir.JobState]int{}
	for _, j := range jobs {
		got[states[j.id]]++
		want[j.want]++
	}
	keys := map[weir.JobState]bool{}
	for s := range got {
		keys[s] = true
	}
	for s := range want {
		keys[s] = true
	}
	var order []weir.JobState
	for s := range keys {
		order = append(order, s)
	}
	sort.Slice(order, func(a, b int) bool { return order[a] < order[b] })
	fmt.Fprintf(w, "\n%-10s %5s %8s\n", "STATE", "JOBS", "EXPECTED")
	for _, s := range order {
		name := string(s)
		if name == "" {
			name = "(missing)"
		}
		fmt.Fprintf(w, "%-10s %5d %8d\n", termSafe(name), got[s], want[s])
	}
}

// demoFailed reports the jobs that did not end as expected.
func demoFailed(jobs []*demoJob, states map[int64]weir.JobState) []string {
	var bad []string
	for _, j := range jobs {
		if states[j.id] != j.want {
			bad = append(bad, fmt.Sprintf("job %d (%s) is %s, want %s", j.id, j.name, termSafe(string(states[j.id])), j.want))
		}
	}
	return bad
}

func describeStore(store, schema string) string {
	if path, ok := sqlitePath(store); ok {
		return "SQLite file " + termSafe(path)
	}
	return "PostgreSQL schema " + termSafe(schema)
}

// isTerminal reports whether w is a terminal, to draw progress in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
