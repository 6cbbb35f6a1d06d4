package main

import (
	"bytes"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, to read SQLite files

	"github.com/weirq/weir"
	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirsqlite"
	"github.com/weirq/weir/weirmigrate"
)

// weirBinary is the weir command built for the tests, run as a user would.
type weirBinary struct {
	path string
	env  []string // the test's environment without WEIR_DATABASE_URL
}

// buildWeir builds the weir command in a temporary directory.
func buildWeir(t *testing.T) *weirBinary {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "weir")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// Without WEIR_DATABASE_URL, so that only what a test passes counts.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envDatabaseURL+"=") {
			env = append(env, kv)
		}
	}
	return &weirBinary{path: bin, env: env}
}

// run runs weir with args; env adds to the environment, and wins over it.
func (b *weirBinary) run(t *testing.T, env []string, args ...string) result {
	t.Helper()
	return b.runIn(t, "", env, args...)
}

// runIn runs weir in the working directory dir ("" for the test's).
func (b *weirBinary) runIn(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), b.path, args...)
	cmd.Dir = dir
	// For a key given twice, exec uses the last value.
	cmd.Env = append(b.env[:len(b.env):len(b.env)], env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running weir %s: %v", args, err)
	}
	return result{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

// backend is a database weir runs on, as TestBinary uses it.
type backend struct {
	name string
	// migrations are the migrations of the backend's driver.
	migrations []weirdriver.Migration
	// fresh returns a database weir has not migrated: an empty schema, or a
	// path where no file exists yet.
	fresh func(t *testing.T) *testDB
	// fixture returns a migrated database holding the fixture's jobs.
	fixture func(t *testing.T) (*testDB, *fixture)
	// badURL is a URL of this backend that does not parse.
	badURL string
	// deadURL is a URL of this backend next to db that names nothing that
	// answers; deadMsg is what weir says about it.
	deadURL func(db *testDB) string
	deadMsg string
}

func backends() []*backend {
	return []*backend{
		{
			name:       "postgres",
			migrations: knownMigrations(),
			fresh:      func(t *testing.T) *testDB { return postgresDB(dbtest.Schema(t)) },
			fixture: func(t *testing.T) (*testDB, *fixture) {
				f := newFixture(t)
				return postgresDB(f.schema), f
			},
			badURL:  "postgres://%zz",
			deadURL: func(*testDB) string { return deadURL },
			deadMsg: "weir: cannot reach the database at 127.0.0.1:1: ",
		},
		{
			name:       "sqlite",
			migrations: (&weirsqlite.Driver{}).Migrations(),
			// The fresh database is named by a sqlite: URL, the fixture by a
			// plain path: both spellings run every test.
			fresh: func(t *testing.T) *testDB {
				dir := t.TempDir()
				return sqliteDB(dir, "sqlite:"+filepath.Join(dir, "weir.db"))
			},
			fixture: func(t *testing.T) (*testDB, *fixture) {
				dir := t.TempDir()
				f := newSQLiteFixture(t, filepath.Join(dir, "weir.db"))
				return sqliteDB(dir, f.path), f
			},
			badURL: "sqlite:",
			// A file that does not exist, in the directory whose state the
			// test compares: weir must not create it.
			deadURL: func(db *testDB) string { return filepath.Join(db.dir, "missing.db") },
			deadMsg: "weir: no SQLite database at ",
		},
	}
}

// testDB is one database of a backend, for one test.
type testDB struct {
	url    string
	schema []string // --schema NAME on PostgreSQL; nothing on SQLite
	dir    string   // SQLite: the directory that holds the file and nothing else
	// state describes everything the database holds, so that two states differ
	// when anything changed.
	state func(t *testing.T) string
	// jobs reads every job, straight from the database.
	jobs func(t *testing.T) map[int64]dbJob
	// paused reads the names of the paused queues, straight from the database.
	paused func(t *testing.T) []string
}

// flags name the database on the command line.
func (db *testDB) flags() []string {
	return append([]string{"--database-url", db.url}, db.schema...)
}

// env names the database in the environment; the schema still needs db.schema.
func (db *testDB) env() []string { return []string{envDatabaseURL + "=" + db.url} }

// dbJob is a job as the database holds it.
type dbJob struct {
	state, queue, kind string
	args               string // compact JSON, keys sorted
	priority           int
	maxAttempts        int
	tags               []string
	scheduledAt        time.Time
}

func postgresDB(schema string) *testDB {
	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	return &testDB{
		url:    dbtest.URL(),
		schema: []string{"--schema", schema},
		state:  func(t *testing.T) string { return dbState(t, schema) },
		jobs: func(t *testing.T) map[int64]dbJob {
			t.Helper()
			rows, err := dbtest.Pool(t, nil).Query(t.Context(), "SELECT id, state, queue, kind, args::text, priority, max_attempts, tags, scheduled_at FROM "+table("weir_job"))
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			jobs := map[int64]dbJob{}
			for rows.Next() {
				var (
					id int64
					j  dbJob
				)
				if err := rows.Scan(&id, &j.state, &j.queue, &j.kind, &j.args, &j.priority, &j.maxAttempts, &j.tags, &j.scheduledAt); err != nil {
					t.Fatal(err)
				}
				j.args = canonicalJSON(t, j.args)
				jobs[id] = j
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return jobs
		},
		paused: func(t *testing.T) []string {
			t.Helper()
			rows, err := dbtest.Pool(t, nil).Query(t.Context(), "SELECT name FROM "+table("weir_queue")+" WHERE paused_at IS NOT NULL ORDER BY name")
			if err != nil {
				t.Fatal(err)
			}
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			return names
		},
	}
}

// sqliteDB is the SQLite database that url names, a file in dir.
func sqliteDB(dir, url string) *testDB {
	path, _ := sqlitePath(url)
	return &testDB{
		url:   url,
		dir:   dir,
		state: func(t *testing.T) string { return sqliteState(t, dir) },
		jobs: func(t *testing.T) map[int64]dbJob {
			t.Helper()
			db := openCopy(t, path)
			defer db.Close()
			rows, err := db.QueryContext(t.Context(), "SELECT id, state, queue, kind, args, priority, max_attempts, tags, scheduled_at FROM weir_job")
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			jobs := map[int64]dbJob{}
			for rows.Next() {
				var (
					id, scheduled int64
					tags          string
					j             dbJob
				)
				if err := rows.Scan(&id, &j.state, &j.queue, &j.kind, &j.args, &j.priority, &j.maxAttempts, &tags, &scheduled); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal([]byte(tags), &j.tags); err != nil {
					t.Fatalf("tags %q: %v", tags, err)
				}
				j.args = canonicalJSON(t, j.args)
				j.scheduledAt = time.UnixMicro(scheduled).UTC()
				jobs[id] = j
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return jobs
		},
		paused: func(t *testing.T) []string {
			t.Helper()
			db := openCopy(t, path)
			defer db.Close()
			rows, err := db.QueryContext(t.Context(), "SELECT name FROM weir_queue WHERE paused_at IS NOT NULL ORDER BY name")
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var names []string
			for rows.Next() {
				var name string
				if err := rows.Scan(&name); err != nil {
					t.Fatal(err)
				}
				names = append(names, name)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return names
		},
	}
}

// openCopy opens a copy of the SQLite file at path, so that reading it leaves
// the file, and the directory it is in, exactly as they were.
func openCopy(t *testing.T, path string) *sql.DB {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(cp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", cp)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

const sqliteHeader = "SQLite format 3\x00"

// sqliteState describes dir, which holds a SQLite database or anything else: each
// file's name, size and hash, and every row of a SQLite database's tables.
// Two states differ when a file appeared, went away or changed in any byte.
func sqliteState(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		return "(no files)"
	}
	var b strings.Builder
	for _, e := range entries {
		if !e.Type().IsRegular() {
			fmt.Fprintf(&b, "%s: %v\n", e.Name(), e.Type())
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s: %d bytes, sha256 %x\n", e.Name(), len(data), sha256.Sum256(data))
		if strings.HasSuffix(e.Name(), ".db") && bytes.HasPrefix(data, []byte(sqliteHeader)) {
			b.WriteString(sqliteRows(t, path))
		}
	}
	return b.String()
}

// sqliteRows lists every row of every table in the SQLite file at path.
func sqliteRows(t *testing.T, path string) string {
	t.Helper()
	db := openCopy(t, path)
	defer db.Close()
	ctx := t.Context()
	rows, err := db.QueryContext(ctx, "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	var b strings.Builder
	for _, table := range tables {
		fmt.Fprintf(&b, "  %s:\n", table)
		rows, err := db.QueryContext(ctx, `SELECT * FROM "`+table+`" ORDER BY rowid`)
		if err != nil {
			t.Fatal(err)
		}
		cols, err := rows.Columns()
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			b.WriteString("   ")
			for i, v := range vals {
				if raw, ok := v.([]byte); ok {
					v = fmt.Sprintf("%x", raw)
				}
				fmt.Fprintf(&b, " %s=%v", cols[i], v)
			}
			b.WriteString("\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	return b.String()
}

// canonicalJSON returns the JSON value s compacted, with object keys sorted.
func canonicalJSON(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// migrationLines is what weir migrate up prints when it applies every one of
// known, one line per migration with the given prefix.
func migrationLines(known []weirdriver.Migration, prefix string, newestFirst bool) string {
	var b strings.Builder
	for i := range known {
		m := known[i]
		if newestFirst {
			m = known[len(known)-1-i]
		}
		fmt.Fprintf(&b, "%s %s\n", prefix, weirmigrate.Migration{Version: m.Version, Name: m.Name})
	}
	return b.String()
}

// wantStatusApplied is weir migrate status's rows when the first n of known
// are applied.
func wantStatusApplied(known []weirdriver.Migration, n int) []string {
	var rows []string
	for i, m := range known {
		state := "pending"
		if i < n {
			state = "applied"
		}
		rows = append(rows, fmt.Sprintf("%03d %s %s", m.Version, m.Name, state))
	}
	return rows
}

// TestBinary builds the weir command once and runs it as a user would, on
// PostgreSQL and on SQLite.
func TestBinary(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the weir binary")
	}
	b := buildWeir(t)

	t.Run("VersionAndHelp", func(t *testing.T) {
		t.Parallel()
		r := b.run(t, nil, "version")
		wantOK(t, r)
		if !strings.HasPrefix(r.stdout, "weir "+weir.Version+"\n") && !strings.HasPrefix(r.stdout, "weir "+weir.Version+" (") {
			t.Errorf("version printed %q", r.stdout)
		}
		r = b.run(t, nil, "help")
		wantOK(t, r)
		if !strings.Contains(r.stdout, "weir <command>") {
			t.Errorf("help printed %q", r.stdout)
		}
		r = b.run(t, nil)
		if r.code != exitUsage || !strings.Contains(r.stderr, "weir <command>") {
			t.Errorf("weir without arguments: %v", r)
		}
		wantFailure(t, b.run(t, nil, "version", "--short"), exitUsage, "weir: version: ", "-short")
		wantFailure(t, b.run(t, nil, "version", "extra"), exitUsage, `weir: version: unexpected argument "extra"`)
		wantFailure(t, b.run(t, nil, "versions"), exitUsage, `weir: unknown command "versions"`)
		wantFailure(t, b.run(t, nil, "--verbose", "version"), exitUsage, "weir: unknown flag --verbose")
	})

	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			t.Run("MigrateUpStatusDownUp", func(t *testing.T) { t.Parallel(); testBinaryMigrate(t, b, be) })
			t.Run("EnqueueJobsQueues", func(t *testing.T) { t.Parallel(); testBinaryEnqueueJobsQueues(t, b, be) })
			t.Run("Fixture", func(t *testing.T) { t.Parallel(); testBinaryFixture(t, b, be) })
			t.Run("NotMigrated", func(t *testing.T) { t.Parallel(); testBinaryNotMigrated(t, b, be) })
			t.Run("Failures", func(t *testing.T) { t.Parallel(); testBinaryFailures(t, b, be) })
		})
	}
	t.Run("sqlite-only", func(t *testing.T) {
		t.Parallel()
		testBinarySQLite(t, b)
	})
	t.Run("demo", func(t *testing.T) {
		t.Parallel()
		testBinaryDemo(t, b)
	})
}

func testBinaryMigrate(t *testing.T, b *weirBinary, be *backend) {
	db := be.fresh(t)
	known := be.migrations
	n := len(known)

	r := b.run(t, nil, append([]string{"migrate", "up"}, db.flags()...)...)
	wantOK(t, r)
	if want := migrationLines(known, "applied", false); r.stdout != want {
		t.Fatalf("up printed %q, want %q", r.stdout, want)
	}

	// The URL from the environment from now on.
	migrate := func(args ...string) result {
		t.Helper()
		return b.run(t, db.env(), append(append([]string{"migrate"}, args...), db.schema...)...)
	}
	status := func(applied int) {
		t.Helper()
		r := migrate("status")
		if code := map[bool]int{true: exitOK, false: exitPending}[applied == n]; r.code != code || r.stderr != "" {
			t.Fatalf("status with %d of %d applied: want exit %d and nothing on stderr: %v", applied, n, code, r)
		}
		if got, want := statusLines(t, r.stdout), wantStatusApplied(known, applied); !slices.Equal(got, want) {
			t.Fatalf("status: got %q, want %q", got, want)
		}
	}
	status(n)

	last := weirmigrate.Migration{Version: known[n-1].Version, Name: known[n-1].Name}
	r = migrate("down")
	wantOK(t, r)
	if want := "reverted " + last.String() + "\n"; r.stdout != want {
		t.Fatalf("down printed %q, want %q", r.stdout, want)
	}
	status(n - 1)

	r = migrate("up")
	wantOK(t, r)
	if want := "applied " + last.String() + "\n"; r.stdout != want {
		t.Fatalf("second up printed %q, want %q", r.stdout, want)
	}
	r = migrate("up")
	wantOK(t, r)
	if r.stdout != "already up to date\n" {
		t.Fatalf("third up printed %q", r.stdout)
	}

	r = migrate("down", "--all")
	wantOK(t, r)
	if want := migrationLines(known, "reverted", true); r.stdout != want {
		t.Fatalf("down --all printed %q, want %q", r.stdout, want)
	}
	status(0)
	r = migrate("down")
	wantOK(t, r)
	if r.stdout != "nothing to revert\n" {
		t.Fatalf("down with nothing applied printed %q", r.stdout)
	}

	first := weirmigrate.Migration{Version: known[0].Version, Name: known[0].Name}
	r = migrate("up", "--target-version", "1")
	wantOK(t, r)
	if want := "applied " + first.String() + "\n"; r.stdout != want {
		t.Fatalf("up --target-version 1 printed %q, want %q", r.stdout, want)
	}
	status(1)
	r = migrate("up")
	wantOK(t, r)
	status(n)
	r = migrate("down", "--steps", fmt.Sprint(n))
	wantOK(t, r)
	if want := migrationLines(known, "reverted", true); r.stdout != want {
		t.Fatalf("down --steps %d printed %q, want %q", n, r.stdout, want)
	}
	status(0)
}

func testBinaryEnqueueJobsQueues(t *testing.T, b *weirBinary, be *backend) {
	db := be.fresh(t)
	wantOK(t, b.run(t, nil, append([]string{"migrate", "up"}, db.flags()...)...))
	run := func(t *testing.T, args ...string) result {
		t.Helper()
		return b.run(t, db.env(), append(args, db.schema...)...)
	}
	stateOf := func(id int64) string {
		t.Helper()
		if j, ok := db.jobs(t)[id]; ok {
			return j.state
		}
		return "gone"
	}

	r := run(t, "enqueue", "--kind", "email.send", "--args", `{"to": "ada@example.com", "cc": []}`, "--queue", "mail", "--tags", "a,b", "--priority", "3")
	wantOK(t, r)
	id := ids(t, r.stdout)[0]
	j := db.jobs(t)[id]
	if j.kind != "email.send" || j.queue != "mail" || j.args != `{"cc":[],"to":"ada@example.com"}` ||
		!slices.Equal(j.tags, []string{"a", "b"}) || j.priority != 3 || j.maxAttempts != 25 || j.state != "available" {
		t.Fatalf("row: %+v", j)
	}

	start := time.Now()
	r = run(t, "enqueue", "--kind", "k", "--count", "5", "--in", "1h")
	wantOK(t, r)
	batch := ids(t, r.stdout)
	if len(batch) != 5 || !slices.IsSorted(batch) || batch[0] <= id {
		t.Fatalf("--count 5 printed %q", r.stdout)
	}
	jobs := db.jobs(t)
	for _, bid := range batch {
		j := jobs[bid]
		if d := j.scheduledAt.Sub(start); j.kind != "k" || j.queue != "default" || j.state != "scheduled" || d < 59*time.Minute || d > 61*time.Minute {
			t.Fatalf("job %d of --count 5 --in 1h: %+v, due %s after the start", bid, j, d)
		}
	}

	r = run(t, "enqueue", "--kind", "report.build", "--run-at", "2099-01-02T03:04:05+02:00", "--max-attempts", "3", "--priority", "1")
	wantOK(t, r)
	later := ids(t, r.stdout)[0]
	j = db.jobs(t)[later]
	if want := time.Date(2099, 1, 2, 1, 4, 5, 0, time.UTC); !j.scheduledAt.Equal(want) || j.state != "scheduled" || j.maxAttempts != 3 || j.priority != 1 || j.args != "{}" || len(j.tags) != 0 {
		t.Fatalf("--run-at job: %+v", j)
	}
	if len(db.jobs(t)) != 7 {
		t.Fatalf("want 7 jobs, have %d", len(db.jobs(t)))
	}

	r = run(t, "jobs", "list", "--json", "--kind", "email.send")
	wantOK(t, r)
	var listed []shownJob
	decodeJSON(t, r.stdout, &listed)
	if len(listed) != 1 || listed[0].ID != id || listed[0].Queue != "mail" {
		t.Fatalf("jobs list --json: %+v", listed)
	}
	r = run(t, "jobs", "list", "--limit", "4")
	wantOK(t, r)
	if !strings.HasSuffix(r.stdout, fmt.Sprintf("more jobs follow: add --after %d for the next page\n", batch[2])) {
		t.Fatalf("jobs list --limit 4 printed %q", r.stdout)
	}
	r = run(t, "jobs", "list", "--state", "scheduled", "--queue", "default")
	wantOK(t, r)
	header, rows := tableRows(t, r.stdout)
	if header != "ID KIND QUEUE STATE ATTEMPT/MAX PRIORITY SCHEDULED CREATED" || len(rows) != 6 {
		t.Fatalf("jobs list --state scheduled:\n%s", r.stdout)
	}
	if want := []string{fmt.Sprint(later), "report.build", "default", "scheduled", "0/3", "1", "2099-01-02T01:04:05Z"}; !slices.Equal(rows[5][:7], want) {
		t.Fatalf("row %q, want it to start with %q", rows[5], want)
	}

	r = run(t, "jobs", "show", fmt.Sprint(id))
	wantOK(t, r)
	lines := normalizedLines(r.stdout)
	for _, want := range []string{"kind: email.send", "queue: mail", "state: available", "priority: 3", "tags: a,b", "errors: 0"} {
		if !slices.Contains(lines, want) {
			t.Errorf("jobs show lacks %q:\n%s", want, r.stdout)
		}
	}
	job := showJob(t, run, id)
	if job.ID != id || job.Kind != "email.send" || job.Priority != 3 || job.State != "available" ||
		!slices.Equal(job.Tags, []string{"a", "b"}) || canonicalJSON(t, string(job.Args)) != `{"cc":[],"to":"ada@example.com"}` {
		t.Fatalf("jobs show --json: %+v", job)
	}

	r = run(t, "jobs", "cancel", fmt.Sprint(id))
	wantOK(t, r)
	if want := fmt.Sprintf("job %d: cancelled\n", id); r.stdout != want || stateOf(id) != "cancelled" {
		t.Fatalf("cancel printed %q; the job is %s", r.stdout, stateOf(id))
	}
	r = run(t, "jobs", "retry", fmt.Sprint(id))
	wantOK(t, r)
	if want := fmt.Sprintf("job %d: retried\n", id); r.stdout != want || stateOf(id) != "available" {
		t.Fatalf("retry printed %q; the job is %s", r.stdout, stateOf(id))
	}
	r = run(t, "jobs", "delete", fmt.Sprint(id), fmt.Sprint(batch[0]))
	wantOK(t, r)
	if want := fmt.Sprintf("job %d: deleted\njob %d: deleted\n", id, batch[0]); r.stdout != want || stateOf(id) != "gone" || stateOf(batch[0]) != "gone" {
		t.Fatalf("delete printed %q; the jobs are %s, %s", r.stdout, stateOf(id), stateOf(batch[0]))
	}

	r = run(t, "queues", "pause", "default")
	wantOK(t, r)
	if paused := db.paused(t); r.stdout != "queue default paused\n" || !slices.Equal(paused, []string{"default"}) {
		t.Fatalf("pause printed %q; paused: %q", r.stdout, paused)
	}
	r = run(t, "queues", "list")
	wantOK(t, r)
	header, rows = tableRows(t, r.stdout)
	if header != "NAME PAUSED GLOBAL LIMIT RATE KEY LIMIT SCHEDULED AVAILABLE RUNNING RETRYABLE COMPLETED CANCELLED DISCARDED" ||
		len(rows) != 1 || strings.Join(rows[0], " ") != "default yes - - - 5 0 0 0 0 0 0" {
		t.Fatalf("queues list printed %q", r.stdout)
	}
	r = run(t, "queues", "resume", "default")
	wantOK(t, r)
	if paused := db.paused(t); r.stdout != "queue default resumed\n" || len(paused) != 0 {
		t.Fatalf("resume printed %q; paused: %q", r.stdout, paused)
	}
	r = run(t, "queues", "list", "--json")
	wantOK(t, r)
	var queues []listedQueue
	decodeJSON(t, r.stdout, &queues)
	if len(queues) != 1 || queues[0].Name != "default" || queues[0].Paused || queues[0].Counts["scheduled"] != 5 || len(queues[0].Counts) != 7 {
		t.Fatalf("queues list --json: %+v", queues)
	}
}

// testBinaryFixture runs the operator commands on jobs in every situation.
func testBinaryFixture(t *testing.T, b *weirBinary, be *backend) {
	db, f := be.fixture(t)
	run := func(t *testing.T, args ...string) result {
		t.Helper()
		return b.run(t, nil, append(args, db.flags()...)...)
	}

	// version needs no database, and ignores one.
	r := b.run(t, db.env(), "version")
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, "weir ") {
		t.Fatalf("version printed %q", r.stdout)
	}

	running := showJob(t, run, f.running)
	if running.State != "running" || running.Attempt != 1 || running.LeaseExpiresAt == nil || running.AttemptedBy == nil || *running.AttemptedBy != "fixture" {
		t.Fatalf("running job: %+v", running)
	}
	r = run(t, "jobs", "list", "--state", "running,retryable")
	wantOK(t, r)
	if _, rows := tableRows(t, r.stdout); len(rows) != 2 || rows[0][0] != fmt.Sprint(f.running) || rows[1][0] != fmt.Sprint(f.failed) {
		t.Fatalf("jobs list --state running,retryable:\n%s", r.stdout)
	}

	r = run(t, "jobs", "show", fmt.Sprint(f.failed))
	wantOK(t, r)
	for _, want := range []string{"state: retryable", "attempt: 1", "tags: t1,t2", "errors: 1", "boom", "second line", "trace:", "main.work()", "work.go:12"} {
		if !slices.Contains(normalizedLines(r.stdout), want) {
			t.Errorf("jobs show of the failed job lacks the line %q:\n%s", want, r.stdout)
		}
	}

	r = run(t, "queues", "list")
	wantOK(t, r)
	if _, rows := tableRows(t, r.stdout); !slices.ContainsFunc(rows, func(row []string) bool {
		return strings.Join(row, " ") == "held yes - - - 0 0 0 0 0 0 0"
	}) {
		t.Fatalf("queues list lacks the paused queue:\n%s", r.stdout)
	}

	// Cancelling a running job asks its worker to stop; the job keeps running.
	r = run(t, "jobs", "cancel", fmt.Sprint(f.running), fmt.Sprint(f.scheduled))
	wantOK(t, r)
	if want := fmt.Sprintf("job %d: cancel requested (running)\njob %d: cancelled\n", f.running, f.scheduled); r.stdout != want {
		t.Fatalf("cancel printed %q, want %q", r.stdout, want)
	}
	if jobs := db.jobs(t); jobs[f.running].state != "running" || jobs[f.scheduled].state != "cancelled" {
		t.Fatalf("after cancel: running job is %s, scheduled job is %s", jobs[f.running].state, jobs[f.scheduled].state)
	}
	if job := showJob(t, run, f.running); job.CancelRequestedAt == nil {
		t.Fatalf("running job after cancel: %+v", job)
	}

	r = run(t, "jobs", "retry", fmt.Sprint(f.failed), fmt.Sprint(f.cancelled))
	wantOK(t, r)
	if jobs := db.jobs(t); jobs[f.failed].state != "available" || jobs[f.cancelled].state != "available" {
		t.Fatalf("retry printed %q; the jobs are %s, %s", r.stdout, jobs[f.failed].state, jobs[f.cancelled].state)
	}

	// Several ids, some of which fail: a line for each, and exit 1.
	r = run(t, "jobs", "delete", fmt.Sprint(f.available), fmt.Sprint(f.running), "987654")
	if want := fmt.Sprintf("job %d: deleted\n", f.available); r.code != exitFailure || r.stdout != want {
		t.Fatalf("delete of three jobs: %v", r)
	}
	if want := fmt.Sprintf("weir: job %d: running: cancel it first\nweir: job 987654: not found\n", f.running); r.stderr != want {
		t.Fatalf("delete of three jobs printed %q on stderr, want %q", r.stderr, want)
	}
	if jobs := db.jobs(t); len(jobs) != 6 || jobs[f.running].state != "running" {
		t.Fatalf("after delete: %d jobs, running job %+v", len(jobs), jobs[f.running])
	}
}

func testBinaryNotMigrated(t *testing.T, b *weirBinary, be *backend) {
	commands := [][]string{
		{"enqueue", "--kind", "k"},
		{"enqueue", "--kind", "k", "--count", "100"},
		{"jobs", "list"},
		{"jobs", "list", "--json"},
		{"jobs", "show", "1"},
		{"jobs", "show", "1", "--json"},
		{"jobs", "retry", "1", "2"},
		{"jobs", "cancel", "1", "2"},
		{"jobs", "delete", "1", "2"},
		{"queues", "list"},
		{"queues", "list", "--json"},
		{"queues", "pause", "default"},
		{"queues", "resume", "default"},
	}
	// A schema weir never migrated (a SQLite file weir never migrated is one
	// that does not exist, or another program's: see testBinarySQLite).
	if be.name == "postgres" {
		t.Run("never", func(t *testing.T) {
			t.Parallel()
			db := be.fresh(t)
			before := db.state(t)
			for _, args := range commands {
				r := b.run(t, db.env(), append(args, db.schema...)...)
				wantFailure(t, r, exitFailure, "weir: schema is not migrated: ", "001_baseline", "run `weir migrate up`")
			}
			if after := db.state(t); after != before {
				t.Fatalf("the database changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
	// Migrated, then reverted: the schema or the file exists, without weir's tables.
	t.Run("reverted", func(t *testing.T) {
		t.Parallel()
		db := be.fresh(t)
		wantOK(t, b.run(t, nil, append([]string{"migrate", "up"}, db.flags()...)...))
		wantOK(t, b.run(t, nil, append([]string{"migrate", "down", "--all"}, db.flags()...)...))
		before := db.state(t)
		for _, args := range commands {
			r := b.run(t, nil, append(args, db.flags()...)...)
			wantFailure(t, r, exitFailure, "weir: schema is not migrated: ", "001_baseline", "run `weir migrate up`")
		}
		if after := db.state(t); after != before {
			t.Fatalf("the database changed:\nbefore %s\nafter  %s", before, after)
		}
	})
}

// binaryFailure is a command line that must fail and change nothing.
type binaryFailure struct {
	name string
	args []string // AVAILABLE, RUNNING, CANCELLED and UNIQUE stand for the fixture's jobs
	// url is how the database is named: "" the fixture's, "bad" the backend's
	// URL that does not parse, "dead" its URL that does not answer, "none" not at all.
	url  string
	code int
	// DEAD stands for what weir says of the URL that does not answer, LATEST
	// for the latest migration's version.
	contains []string
	only     string // the backend the case applies to, or "" for both
}

var binaryFailures = []binaryFailure{
	{name: "UnknownCommand", args: []string{"migrat", "down"}, code: exitUsage, contains: []string{`weir: unknown command "migrat"`}},
	{name: "MissingURL", args: []string{"migrate", "down"}, url: "none", code: exitUsage, contains: []string{"no database URL", envDatabaseURL}},

	{name: "MigrateUnknownFlag", args: []string{"migrate", "down", "--yes"}, code: exitUsage, contains: []string{"weir: migrate down: ", "-yes"}},
	{name: "MigrateUnknownAction", args: []string{"migrate", "sideways"}, code: exitUsage, contains: []string{`unknown action "sideways"`}},
	{name: "MigrateDownURLDoesNotParse", args: []string{"migrate", "down"}, url: "bad", code: exitUsage, contains: []string{"weir: database URL does not parse: "}},
	{name: "MigrateDownURLDoesNotAnswer", args: []string{"migrate", "down"}, url: "dead", code: exitFailure, contains: []string{"DEAD"}},
	{name: "MigrateStatusURLDoesNotAnswer", args: []string{"migrate", "status"}, url: "dead", code: exitFailure, contains: []string{"DEAD"}},
	{name: "MigrateUpURLDoesNotParse", args: []string{"migrate", "up"}, url: "bad", code: exitUsage, contains: []string{"weir: database URL does not parse: "}},
	{name: "MigrateUpTargetTooHigh", args: []string{"migrate", "up", "--target-version", "99"}, code: exitUsage, contains: []string{"--target-version 99 is out of range 1..LATEST\n"}},
	// Checked before weir opens the database: migrate up creates no SQLite file.
	{name: "MigrateUpTargetTooHighOnNothing", args: []string{"migrate", "up", "--target-version", "99"}, url: "dead", code: exitUsage, contains: []string{"--target-version 99 is out of range"}},
	{name: "MigrateDownTargetTooHigh", args: []string{"migrate", "down", "--target-version", "99"}, code: exitUsage, contains: []string{"--target-version 99 is out of range 0..LATEST\n"}},
	{name: "MigrateNegativeSteps", args: []string{"migrate", "down", "--steps", "-1"}, code: exitUsage, contains: []string{"--steps"}},

	{name: "EnqueueUnknownFlag", args: []string{"enqueue", "--kind", "k", "--urgent"}, code: exitUsage, contains: []string{"weir: enqueue: ", "-urgent"}},
	{name: "EnqueueMalformedArgs", args: []string{"enqueue", "--kind", "k", "--args", "{to: ada}"}, code: exitUsage, contains: []string{"weir: enqueue: --args is not valid JSON: "}},
	{name: "EnqueueTruncatedArgs", args: []string{"enqueue", "--kind", "k", "--args", `{"to":`, "--count", "3"}, code: exitUsage, contains: []string{"weir: enqueue: --args is not valid JSON: "}},
	{name: "EnqueueArgsNotAnObject", args: []string{"enqueue", "--kind", "k", "--args", `"ada"`}, code: exitUsage, contains: []string{"weir: enqueue: --args must be a JSON object, got a string"}},
	{name: "EnqueueWithoutKind", args: []string{"enqueue"}, code: exitUsage, contains: []string{"--kind is required"}},
	{name: "EnqueueRunAtAndIn", args: []string{"enqueue", "--kind", "k", "--in", "1m", "--run-at", "2030-01-01T00:00:00Z"}, code: exitUsage, contains: []string{"not both"}},
	{name: "EnqueueBadRunAt", args: []string{"enqueue", "--kind", "k", "--run-at", "tomorrow"}, code: exitUsage, contains: []string{"RFC 3339"}},
	{name: "EnqueueNegativeIn", args: []string{"enqueue", "--kind", "k", "--in", "-1m"}, code: exitUsage, contains: []string{"negative"}},
	{name: "EnqueueCountTooHigh", args: []string{"enqueue", "--kind", "k", "--count", "1000000"}, code: exitUsage, contains: []string{"--count 1000000 is out of range"}},
	{name: "EnqueueClientRejectsPriority", args: []string{"enqueue", "--kind", "k", "--priority", "9", "--count", "100"}, code: exitUsage, contains: []string{"weir: enqueue: priority 9 is out of range 1..4\n"}},
	{name: "EnqueueClientRejectsTag", args: []string{"enqueue", "--kind", "k", "--tags", "ok,not ok"}, code: exitUsage, contains: []string{`tag "not ok"`}},
	{name: "EnqueueURLDoesNotParse", args: []string{"enqueue", "--kind", "k"}, url: "bad", code: exitUsage, contains: []string{"weir: database URL does not parse: "}},
	{name: "EnqueueURLDoesNotAnswer", args: []string{"enqueue", "--kind", "k"}, url: "dead", code: exitFailure, contains: []string{"DEAD"}},

	{name: "JobsUnknownAction", args: []string{"jobs", "remove", "1"}, code: exitUsage, contains: []string{`unknown action "remove"`}},
	{name: "JobsListUnknownFlag", args: []string{"jobs", "list", "--page", "2"}, code: exitUsage, contains: []string{"weir: jobs list: ", "-page"}},
	{name: "JobsListBadState", args: []string{"jobs", "list", "--state", "queued"}, code: exitUsage, contains: []string{`"queued" is not a job state`}},
	{name: "JobsListURLDoesNotParse", args: []string{"jobs", "list"}, url: "bad", code: exitUsage, contains: []string{"weir: database URL does not parse: "}},
	{name: "JobsListURLDoesNotAnswer", args: []string{"jobs", "list", "--json"}, url: "dead", code: exitFailure, contains: []string{"DEAD"}},
	{name: "JobsShowUnknownID", args: []string{"jobs", "show", "987654"}, code: exitFailure, contains: []string{"weir: job 987654 not found\n"}},
	{name: "JobsShowUnknownIDJSON", args: []string{"jobs", "show", "987654", "--json"}, code: exitFailure, contains: []string{"weir: job 987654 not found\n"}},
	{name: "JobsShowUnknownFlag", args: []string{"jobs", "show", "AVAILABLE", "--yaml"}, code: exitUsage, contains: []string{"-yaml"}},
	{name: "JobsShowNotANumber", args: []string{"jobs", "show", "first"}, code: exitUsage, contains: []string{`job id "first"`}},
	{name: "JobsShowURLDoesNotAnswer", args: []string{"jobs", "show", "AVAILABLE"}, url: "dead", code: exitFailure, contains: []string{"DEAD"}},
	{name: "JobsRetryUnknownID", args: []string{"jobs", "retry", "987654"}, code: exitFailure, contains: []string{"weir: job 987654: not found\n"}},
	{name: "JobsRetryRunning", args: []string{"jobs", "retry", "RUNNING"}, code: exitFailure, contains: []string{"weir: job RUNNING: running: it can be retried once it ends\n"}},
	{name: "JobsRetryUniqueConflict", args: []string{"jobs", "retry", "UNIQUE"}, code: exitFailure, contains: []string{"weir: job UNIQUE: another job with the same unique key is live\n"}},
	{name: "JobsRetryURLDoesNotAnswer", args: []string{"jobs", "retry", "CANCELLED"}, url: "dead", code: exitFailure, contains: []string{"DEAD"}},
	{name: "JobsCancelUnknownID", args: []string{"jobs", "cancel", "987654"}, code: exitFailure, contains: []string{"weir: job 987654: not found\n"}},
	{name: "JobsCancelFinal", args: []string{"jobs", "cancel", "CANCELLED"}, code: exitFailure, contains: []string{"weir: job CANCELLED: already final (cancelled)\n"}},
	{name: "JobsCancelNotANumber", args: []string{"jobs", "cancel", "AVAILABLE", "last"}, code: exitUsage, contains: []string{`job id "last"`}},
	{name: "JobsCancelUnknownFlag", args: []string{"jobs", "cancel", "AVAILABLE", "--force"}, code: exitUsage, contains: []string{"-force"}},
	{name: "JobsCancelURLDoesNotParse", args: []string{"jobs", "cancel", "AVAILABLE"}, url: "bad", code: exitUsage, contains: []string{"weir: database URL does not parse: "}},
	{name: "JobsCancelURLDoesNotAnswer", args: []string{"jobs", "cancel", "AVAILABLE"}, url: "dead", code: exitFailure, contains: []string{"DEAD"}},
	{name: "JobsDeleteUnknownID", args: []string{"jobs", "delete", "987654"}, code: exitFailure, contains: []string{"weir: job 987654: not found\n"}},
	{name: "JobsDeleteRunning", args: []string{"jobs", "delete", "RUNNING"}, code: exitFailure, contains: []string{"weir: job RUNNING: running: cancel it first\n"}},
	{name: "JobsDeleteURLDoesNotParse", args: []string{"jobs", "delete", "AVAILABLE"}, url: "bad", code: exitUsage, contains: []string{"weir: database URL does not parse: "}},
	{name: "JobsDeleteURLDoesNotAnswer", args: []string{"jobs", "delete", "AVAILABLE"}, url: "dead", code: exitFailure, contains: []string{"DEAD"}},

	{name: "QueuesUnknownAction", args: []string{"queues", "stop", "default"}, code: exitUsage, contains: []string{`unknown action "stop"`}},
	{name: "QueuesListUnknownFlag", args: []string{"queues", "list", "--all"}, code: exitUsage, contains: []string{"-all"}},
	{name: "QueuesListURLDoesNotParse", args: []string{"queues", "list"}, url: "bad", code: exitUsage, contains: []string{"weir: database URL does not parse: "}},
	{name: "QueuesListURLDoesNotAnswer", args: []string{"queues", "list"}, url: "dead", code: exitFailure, contains: []string{"DEAD"}},
	{name: "QueuesPauseBadName", args: []string{"queues", "pause", "mail queue"}, code: exitUsage, contains: []string{`weir: queues pause: queue "mail queue"`}},
	{name: "QueuesPauseURLDoesNotAnswer", args: []string{"queues", "pause", "default"}, url: "dead", code: exitFailure, contains: []string{"DEAD"}},
	{name: "QueuesResumeUnknownFlag", args: []string{"queues", "resume", "held", "--all"}, code: exitUsage, contains: []string{"-all"}},
	{name: "QueuesResumeURLDoesNotParse", args: []string{"queues", "resume", "held"}, url: "bad", code: exitUsage, contains: []string{"weir: database URL does not parse: "}},

	{name: "DemoUnknownFlag", args: []string{"demo", "--jobs", "5"}, code: exitUsage, contains: []string{"weir: demo: ", "-jobs"}},
	{name: "DemoURLDoesNotParse", args: []string{"demo"}, url: "bad", code: exitUsage, contains: []string{"weir: database URL does not parse: "}},
	// demo creates a SQLite file that does not exist: only PostgreSQL can fail to answer.
	{name: "DemoURLDoesNotAnswer", args: []string{"demo"}, url: "dead", code: exitFailure, contains: []string{"DEAD"}, only: "postgres"},

	{name: "VersionUnknownFlag", args: []string{"version", "--json"}, url: "none", code: exitUsage, contains: []string{"-json"}},
}

// testBinaryFailures runs each of binaryFailures on one fixture, in turn, and
// checks after each that the database is as it was.
func testBinaryFailures(t *testing.T, b *weirBinary, be *backend) {
	db, f := be.fixture(t)
	before := db.state(t)
	for _, tt := range binaryFailures {
		if tt.only != "" && tt.only != be.name {
			continue
		}
		t.Run(tt.name, func(t *testing.T) {
			args := f.replace(tt.args)
			switch tt.url {
			case "":
				args = append(args, db.flags()...)
			case "bad":
				args = append(append(args, "--database-url", be.badURL), db.schema...)
			case "dead":
				args = append(append(args, "--database-url", be.deadURL(db)), db.schema...)
			}
			// A database in the environment must not count either.
			env := []string{envDatabaseURL + "=" + be.deadURL(db)}
			if tt.url == "none" {
				env = nil
			}
			contains := f.replace(tt.contains)
			for i, s := range contains {
				contains[i] = strings.NewReplacer("DEAD", be.deadMsg, "LATEST", fmt.Sprint(len(be.migrations))).Replace(s)
			}
			r := b.run(t, env, args...)
			wantFailure(t, r, tt.code, contains...)
			if after := db.state(t); after != before {
				t.Errorf("the database changed:\nbefore %s\nafter  %s", before, after)
				before = after // the next case compares with what this one left
			}
		})
	}
	// The status weir prints is unchanged too.
	r := b.run(t, nil, append([]string{"migrate", "status"}, db.flags()...)...)
	wantOK(t, r)
	if got, want := statusLines(t, r.stdout), wantStatusApplied(be.migrations, len(be.migrations)); !slices.Equal(got, want) {
		t.Fatalf("status after the failures: got %q, want %q", got, want)
	}
}
