package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir"
	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirdriver/weirsqlite"
	"github.com/weirq/weir/weirmigrate"
	"github.com/weirq/weir/weirtype"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// result is what one run of weir did.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
}

// runWeir runs weir in-process with env as its environment and nothing on
// its standard input.
func runWeir(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	return runWeirStdin(t, env, "", args...)
}

// runWeirStdin runs weir in-process with env as its environment and stdin on
// its standard input.
func runWeirStdin(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), args, strings.NewReader(stdin), &stdout, &stderr, func(k string) string { return env[k] })
	return result{code, stdout.String(), stderr.String()}
}

// wantOK fails t unless r succeeded with nothing on stderr.
func wantOK(t *testing.T, r result) {
	t.Helper()
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("want success: %v", r)
	}
}

// wantFailure fails t unless r failed with exit status code, nothing on stdout
// and exactly one line "weir: ..." on stderr that contains each of contains.
func wantFailure(t *testing.T, r result, code int, contains ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit status %d, want %d: %v", r.code, code, r)
	}
	if r.stdout != "" {
		t.Errorf("stdout not empty: %v", r)
	}
	if !strings.HasPrefix(r.stderr, "weir: ") || !strings.HasSuffix(r.stderr, "\n") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("stderr is not one line starting with \"weir: \": %q", r.stderr)
	}
	for _, s := range contains {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr %q does not contain %q", r.stderr, s)
		}
	}
}

// migrations is what weir migrate up prints on a fresh schema, one line per
// migration with the given prefix.
func migrations(prefix string, newestFirst bool) string {
	return migrationLines(knownMigrations(), prefix, newestFirst)
}

// snapshot describes schema's migration state as the database holds it, so that
// two snapshots differ when anything changed.
func snapshot(t *testing.T, schema string) string {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dbtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var nsp, job, mig bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1),
		to_regclass($2) IS NOT NULL, to_regclass($3) IS NOT NULL`,
		schema, pgx.Identifier{schema, "weir_job"}.Sanitize(), pgx.Identifier{schema, "weir_migration"}.Sanitize(),
	).Scan(&nsp, &job, &mig); err != nil {
		t.Fatal(err)
	}
	s := fmt.Sprintf("schema=%v weir_job=%v weir_migration=%v", nsp, job, mig)
	if mig {
		rows, err := conn.Query(ctx, "SELECT version || ' ' || applied_at FROM "+
			pgx.Identifier{schema, "weir_migration"}.Sanitize()+" ORDER BY version")
		if err != nil {
			t.Fatal(err)
		}
		applied, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		s += fmt.Sprintf(" applied=%v", applied)
	}
	return s
}

// statusLines returns weir migrate status's rows as "version name state" without
// the time, which the caller checks separately.
func statusLines(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) < 1 || strings.Join(strings.Fields(lines[0]), " ") != "VERSION NAME STATUS APPLIED AT" {
		t.Fatalf("status has no header: %q", out)
	}
	var rows []string
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("status row %q does not have 4 columns", line)
		}
		switch f[2] {
		case "applied":
			if f[3] == "-" {
				t.Errorf("applied row %q has no time", line)
			}
		case "pending":
			if f[3] != "-" {
				t.Errorf("pending row %q has a time", line)
			}
		}
		rows = append(rows, strings.Join(f[:3], " "))
	}
	return rows
}

func wantStatus(state string) []string {
	var rows []string
	for _, m := range knownMigrations() {
		rows = append(rows, fmt.Sprintf("%03d %s %s", m.Version, m.Name, state))
	}
	return rows
}

// driverOn returns a driver on schema, on a pool of the test's own, for tests
// that write what weir's clients would.
func driverOn(t *testing.T, schema string) *weirpgx.Driver {
	t.Helper()
	d, err := weirpgx.New(dbtest.Pool(t, nil), &weirpgx.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// migrateUp migrates schema with the library.
func migrateUp(t *testing.T, schema string) {
	t.Helper()
	if _, err := weirmigrate.New(driverOn(t, schema)).Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
}

// knownMigrations lists the migrations weir carries; Migrations needs no pool.
func knownMigrations() []weirdriver.Migration {
	return (&weirpgx.Driver{}).Migrations()
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		r := runWeir(t, nil, args...)
		wantOK(t, r)
		for _, s := range []string{"Usage:", "weir <command>", "migrate", "enqueue", "jobs", "queues", "version", "WEIR_DATABASE_URL"} {
			if !strings.Contains(r.stdout, s) {
				t.Errorf("weir %s: usage does not mention %q:\n%s", args, s, r.stdout)
			}
		}
	}

	r := runWeir(t, nil)
	if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "Usage:") {
		t.Errorf("weir without arguments: want usage on stderr and exit 2: %v", r)
	}

	for _, args := range [][]string{
		{"help", "migrate"}, {"migrate", "-h"}, {"migrate", "up", "-h"}, {"migrate", "down", "--help"},
	} {
		r := runWeir(t, nil, args...)
		wantOK(t, r)
		for _, s := range []string{"weir migrate up", "weir migrate down", "weir migrate status", "-database-url", "-steps", "-all", "-target-version"} {
			if !strings.Contains(r.stdout, s) {
				t.Errorf("weir %s: usage does not mention %q:\n%s", args, s, r.stdout)
			}
		}
	}
	for _, tt := range []struct {
		args     [][]string
		mentions []string
	}{
		{[][]string{{"help", "enqueue"}, {"enqueue", "-h"}, {"enqueue", "--kind", "k", "--help"}},
			[]string{"weir enqueue --kind", "-args", "-queue", "-priority", "-run-at", "-in", "-max-attempts", "-tags", "-count", "-database-url", "-schema"}},
		{[][]string{{"help", "jobs"}, {"jobs", "-h"}, {"jobs", "list", "-h"}, {"jobs", "show", "12", "-h"}, {"jobs", "cancel", "--help"}},
			[]string{"weir jobs list", "weir jobs show", "weir jobs retry", "weir jobs cancel", "weir jobs delete", "-state", "-after", "-limit", "-json", "-database-url"}},
		{[][]string{{"help", "queues"}, {"queues", "-h"}, {"queues", "pause", "-h"}},
			[]string{"weir queues list", "weir queues pause", "weir queues resume", "-json", "-database-url"}},
	} {
		for _, args := range tt.args {
			r := runWeir(t, nil, args...)
			wantOK(t, r)
			for _, s := range tt.mentions {
				if !strings.Contains(r.stdout, s) {
					t.Errorf("weir %s: usage does not mention %q:\n%s", args, s, r.stdout)
				}
			}
		}
	}
	for _, args := range [][]string{{"help", "version"}, {"version", "-h"}} {
		r := runWeir(t, nil, args...)
		wantOK(t, r)
		if !strings.Contains(r.stdout, "weir version") {
			t.Errorf("weir %s: %v", args, r)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := runWeir(t, nil, "version")
	wantOK(t, r)
	if v, ok := strings.CutPrefix(r.stdout, "weir "); !ok || strings.TrimSpace(v) == "" || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("weir version printed %q", r.stdout)
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	env := map[string]string{envDatabaseURL: dbtest.URL()}
	migrate := func(args ...string) result {
		t.Helper()
		return runWeir(t, env, append(append([]string{"migrate"}, args...), "--schema", schema)...)
	}

	r := migrate("status")
	if r.code != exitPending || r.stderr != "" {
		t.Fatalf("status before up: want exit %d and nothing on stderr: %v", exitPending, r)
	}
	if got, want := statusLines(t, r.stdout), wantStatus("pending"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("status before up: got %q, want %q", got, want)
	}

	r = migrate("up")
	wantOK(t, r)
	if want := migrations("applied", false); r.stdout != want {
		t.Fatalf("up printed %q, want %q", r.stdout, want)
	}
	r = migrate("up")
	wantOK(t, r)
	if r.stdout != "already up to date\n" {
		t.Fatalf("second up printed %q", r.stdout)
	}

	r = migrate("status")
	wantOK(t, r)
	if got, want := statusLines(t, r.stdout), wantStatus("applied"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("status after up: got %q, want %q", got, want)
	}

	r = migrate("down", "--all")
	wantOK(t, r)
	if want := migrations("reverted", true); r.stdout != want {
		t.Fatalf("down --all printed %q, want %q", r.stdout, want)
	}
	r = migrate("down")
	wantOK(t, r)
	if r.stdout != "nothing to revert\n" {
		t.Fatalf("down on an empty schema printed %q", r.stdout)
	}

	n := len(knownMigrations())
	r = migrate("up", "--target-version", fmt.Sprint(n))
	wantOK(t, r)
	if want := migrations("applied", false); r.stdout != want {
		t.Fatalf("up --target-version %d printed %q, want %q", n, r.stdout, want)
	}
	r = migrate("down", "--target-version", "0")
	wantOK(t, r)
	if want := migrations("reverted", true); r.stdout != want {
		t.Fatalf("down --target-version 0 printed %q, want %q", r.stdout, want)
	}
	migrate("up")
	r = migrate("down", "--steps", fmt.Sprint(n))
	wantOK(t, r)
	if want := migrations("reverted", true); r.stdout != want {
		t.Fatalf("down --steps %d printed %q, want %q", n, r.stdout, want)
	}
}

func TestDatabaseURLFlagWinsOverEnv(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)

	// The flag wins over a bad URL in the environment.
	r := runWeir(t, map[string]string{envDatabaseURL: "postgres://%zz"},
		"migrate", "status", "--schema", schema, "--database-url", dbtest.URL())
	if r.code != exitPending || r.stderr != "" { // the schema is empty: every migration is pending
		t.Fatalf("status with the URL in the flag: %v", r)
	}

	// A bad URL in the flag wins over a good one in the environment.
	r = runWeir(t, map[string]string{envDatabaseURL: dbtest.URL()},
		"migrate", "status", "--schema", schema, "--database-url", "postgres://%zz")
	wantFailure(t, r, exitUsage, "does not parse")

	// An empty flag does not fall back to the environment.
	r = runWeir(t, map[string]string{envDatabaseURL: dbtest.URL()},
		"migrate", "status", "--schema", schema, "--database-url", "")
	wantFailure(t, r, exitUsage, "no database URL")
}

// deadURL names a server that does not answer.
const deadURL = "postgres://postgres@127.0.0.1:1/test?connect_timeout=2"

func TestFailuresChangeNothing(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL()
	dbEnv := map[string]string{envDatabaseURL: dbURL}
	n := len(knownMigrations())
	tests := []struct {
		name     string
		env      map[string]string
		args     []string // "SCHEMA" stands for the test's schema
		code     int
		contains []string
	}{
		{"unknown command", nil, []string{"migrat", "down", "--database-url", dbURL, "--schema", "SCHEMA"}, exitUsage, []string{`unknown command "migrat"`}},
		{"flag before command", nil, []string{"--database-url", dbURL, "migrate", "down"}, exitUsage, []string{"--database-url"}},
		{"unknown flag", nil, []string{"migrate", "down", "--database-url", dbURL, "--schema", "SCHEMA", "--bogus"}, exitUsage, []string{"-bogus"}},
		{"unknown action", nil, []string{"migrate", "sideways", "--database-url", dbURL, "--schema", "SCHEMA"}, exitUsage, []string{`"sideways"`}},
		{"missing action", nil, []string{"migrate"}, exitUsage, []string{"up, down or status"}},
		{"extra argument", nil, []string{"migrate", "down", "--database-url", dbURL, "--schema", "SCHEMA", "now"}, exitUsage, []string{`"now"`}},
		{"missing URL", nil, []string{"migrate", "down", "--schema", "SCHEMA"}, exitUsage, []string{"--database-url", envDatabaseURL}},
		{"URL does not parse", nil, []string{"migrate", "down", "--database-url", "postgres://%zz", "--schema", "SCHEMA"}, exitUsage, []string{"database URL does not parse"}},
		{"URL in env does not parse", map[string]string{envDatabaseURL: "postgres://%zz"}, []string{"migrate", "down", "--schema", "SCHEMA"}, exitUsage, []string{"database URL does not parse"}},
		{"URL does not answer", nil, []string{"migrate", "down", "--database-url", "postgres://postgres@127.0.0.1:1/test?connect_timeout=2", "--schema", "SCHEMA"}, exitFailure, []string{"cannot reach the database"}},
		{"bad schema", nil, []string{"migrate", "down", "--database-url", dbURL, "--schema", "Bad-Name"}, exitUsage, []string{"Bad-Name"}},
		{"empty schema", nil, []string{"migrate", "down", "--database-url", dbURL, "--schema", ""}, exitUsage, []string{"--schema"}},
		{"negative steps", nil, []string{"migrate", "down", "--database-url", dbURL, "--schema", "SCHEMA", "--steps", "-1"}, exitUsage, []string{"--steps", "-1"}},
		{"zero steps", nil, []string{"migrate", "down", "--database-url", dbURL, "--schema", "SCHEMA", "--steps", "0"}, exitUsage, []string{"--steps"}},
		{"steps not a number", nil, []string{"migrate", "down", "--database-url", dbURL, "--schema", "SCHEMA", "--steps", "many"}, exitUsage, []string{"-steps"}},
		{"steps and all", nil, []string{"migrate", "down", "--database-url", dbURL, "--schema", "SCHEMA", "--steps", "1", "--all"}, exitUsage, []string{"at most one"}},
		{"all and target", nil, []string{"migrate", "down", "--database-url", dbURL, "--schema", "SCHEMA", "--all", "--target-version", "0"}, exitUsage, []string{"at most one"}},
		{"down target too high", nil, []string{"migrate", "down", "--database-url", dbURL, "--schema", "SCHEMA", "--target-version", fmt.Sprint(n + 1)}, exitUsage, []string{"out of range"}},
		{"down target negative", nil, []string{"migrate", "down", "--database-url", dbURL, "--schema", "SCHEMA", "--target-version", "-1"}, exitUsage, []string{"--target-version"}},
		{"up target too high", nil, []string{"migrate", "up", "--database-url", dbURL, "--schema", "SCHEMA", "--target-version", fmt.Sprint(n + 1)}, exitUsage, []string{"out of range"}},
		{"up target zero", nil, []string{"migrate", "up", "--database-url", dbURL, "--schema", "SCHEMA", "--target-version", "0"}, exitUsage, []string{"out of range"}},
		{"status takes no steps", nil, []string{"migrate", "status", "--database-url", dbURL, "--schema", "SCHEMA", "--steps", "1"}, exitUsage, []string{"-steps"}},
		{"version takes no arguments", nil, []string{"version", "extra"}, exitUsage, []string{`"extra"`}},
		{"help of unknown command", nil, []string{"help", "nope"}, exitUsage, []string{`"nope"`}},

		// weir enqueue.
		{"enqueue unknown flag", dbEnv, []string{"enqueue", "--kind", "k", "--schema", "SCHEMA", "--bogus"}, exitUsage, []string{"-bogus"}},
		{"enqueue extra argument", dbEnv, []string{"enqueue", "--kind", "k", "--schema", "SCHEMA", "now"}, exitUsage, []string{`"now"`}},
		{"enqueue without kind", dbEnv, []string{"enqueue", "--schema", "SCHEMA"}, exitUsage, []string{"--kind is required"}},
		{"enqueue malformed args", dbEnv, []string{"enqueue", "--kind", "k", "--args", `{"a":`, "--schema", "SCHEMA"}, exitUsage, []string{"--args is not valid JSON"}},
		{"enqueue empty args", dbEnv, []string{"enqueue", "--kind", "k", "--args", "", "--schema", "SCHEMA"}, exitUsage, []string{"--args is not valid JSON"}},
		{"enqueue array args", dbEnv, []string{"enqueue", "--kind", "k", "--args", "[1,2]", "--schema", "SCHEMA"}, exitUsage, []string{"JSON object", "an array"}},
		{"enqueue null args", dbEnv, []string{"enqueue", "--kind", "k", "--args", "null", "--schema", "SCHEMA"}, exitUsage, []string{"JSON object", "null"}},
		{"enqueue run-at and in", dbEnv, []string{"enqueue", "--kind", "k", "--in", "1h", "--run-at", "2030-01-02T15:04:05Z", "--schema", "SCHEMA"}, exitUsage, []string{"--run-at or --in"}},
		{"enqueue negative in", dbEnv, []string{"enqueue", "--kind", "k", "--in", "-5m", "--schema", "SCHEMA"}, exitUsage, []string{"--in -5m0s is negative"}},
		{"enqueue in not a duration", dbEnv, []string{"enqueue", "--kind", "k", "--in", "soon", "--schema", "SCHEMA"}, exitUsage, []string{"-in"}},
		{"enqueue bad run-at", dbEnv, []string{"enqueue", "--kind", "k", "--run-at", "2030-01-02 15:04", "--schema", "SCHEMA"}, exitUsage, []string{"--run-at", "RFC 3339"}},
		{"enqueue zero count", dbEnv, []string{"enqueue", "--kind", "k", "--count", "0", "--schema", "SCHEMA"}, exitUsage, []string{"--count 0 is out of range"}},
		{"enqueue huge count", dbEnv, []string{"enqueue", "--kind", "k", "--count", "100001", "--schema", "SCHEMA"}, exitUsage, []string{"--count 100001 is out of range 1..100000"}},
		{"enqueue zero priority", dbEnv, []string{"enqueue", "--kind", "k", "--priority", "0", "--schema", "SCHEMA"}, exitUsage, []string{"--priority 0"}},
		{"enqueue client rejects priority", dbEnv, []string{"enqueue", "--kind", "k", "--priority", "5", "--schema", "SCHEMA"}, exitUsage, []string{"weir: enqueue: priority 5 is out of range 1..4\n"}},
		{"enqueue client rejects priority of a batch", dbEnv, []string{"enqueue", "--kind", "k", "--priority", "5", "--count", "3", "--schema", "SCHEMA"}, exitUsage, []string{"weir: enqueue: priority 5 is out of range 1..4\n"}},
		{"enqueue client rejects kind", dbEnv, []string{"enqueue", "--kind", "no spaces", "--schema", "SCHEMA"}, exitUsage, []string{`weir: enqueue: kind "no spaces" has characters`}},
		{"enqueue client rejects queue", dbEnv, []string{"enqueue", "--kind", "k", "--queue", "-q", "--schema", "SCHEMA"}, exitUsage, []string{`queue "-q"`}},
		{"enqueue client rejects max attempts", dbEnv, []string{"enqueue", "--kind", "k", "--max-attempts", "10001", "--schema", "SCHEMA"}, exitUsage, []string{"max attempts 10001 is out of range"}},
		{"enqueue client rejects tag", dbEnv, []string{"enqueue", "--kind", "k", "--tags", "ok,not ok", "--schema", "SCHEMA"}, exitUsage, []string{`tag "not ok"`}},
		{"enqueue empty tag", dbEnv, []string{"enqueue", "--kind", "k", "--tags", "a,,b", "--schema", "SCHEMA"}, exitUsage, []string{"--tags", "empty item"}},
		{"enqueue URL does not parse", nil, []string{"enqueue", "--kind", "k", "--database-url", "postgres://%zz", "--schema", "SCHEMA"}, exitUsage, []string{"database URL does not parse"}},
		{"enqueue URL does not answer", nil, []string{"enqueue", "--kind", "k", "--database-url", deadURL, "--schema", "SCHEMA"}, exitFailure, []string{"cannot reach the database"}},
		{"enqueue missing URL", nil, []string{"enqueue", "--kind", "k", "--schema", "SCHEMA"}, exitUsage, []string{envDatabaseURL}},

		// weir jobs.
		{"jobs missing action", dbEnv, []string{"jobs"}, exitUsage, []string{"list, show, update, retry, cancel or delete"}},
		{"jobs unknown action", dbEnv, []string{"jobs", "purge", "--schema", "SCHEMA"}, exitUsage, []string{`unknown action "purge"`}},
		{"jobs list unknown flag", dbEnv, []string{"jobs", "list", "--schema", "SCHEMA", "--sort", "id"}, exitUsage, []string{"-sort"}},
		{"jobs list extra argument", dbEnv, []string{"jobs", "list", "--schema", "SCHEMA", "all"}, exitUsage, []string{`"all"`}},
		{"jobs list bad state", dbEnv, []string{"jobs", "list", "--state", "available,done", "--schema", "SCHEMA"}, exitUsage, []string{`"done" is not a job state`}},
		{"jobs list empty state", dbEnv, []string{"jobs", "list", "--state", "", "--schema", "SCHEMA"}, exitUsage, []string{"--state"}},
		{"jobs list bad queue", dbEnv, []string{"jobs", "list", "--queue", "a b", "--schema", "SCHEMA"}, exitUsage, []string{`queue "a b"`}},
		{"jobs list zero limit", dbEnv, []string{"jobs", "list", "--limit", "0", "--schema", "SCHEMA"}, exitUsage, []string{"--limit 0 is out of range 1..10000"}},
		{"jobs list huge limit", dbEnv, []string{"jobs", "list", "--limit", "10001", "--schema", "SCHEMA"}, exitUsage, []string{"--limit 10001"}},
		{"jobs list negative after", dbEnv, []string{"jobs", "list", "--after", "-1", "--schema", "SCHEMA"}, exitUsage, []string{"--after -1"}},
		{"jobs list URL does not answer", nil, []string{"jobs", "list", "--database-url", deadURL, "--schema", "SCHEMA"}, exitFailure, []string{"cannot reach the database"}},
		{"jobs show unknown id", dbEnv, []string{"jobs", "show", "999999", "--schema", "SCHEMA"}, exitFailure, []string{"weir: job 999999 not found\n"}},
		{"jobs show unknown id as JSON", dbEnv, []string{"jobs", "show", "999999", "--json", "--schema", "SCHEMA"}, exitFailure, []string{"weir: job 999999 not found\n"}},
		{"jobs show no id", dbEnv, []string{"jobs", "show", "--schema", "SCHEMA"}, exitUsage, []string{"want one job id"}},
		{"jobs show two ids", dbEnv, []string{"jobs", "show", "AVAILABLE", "RUNNING", "--schema", "SCHEMA"}, exitUsage, []string{"want one job id"}},
		{"jobs show not a number", dbEnv, []string{"jobs", "show", "twelve", "--schema", "SCHEMA"}, exitUsage, []string{`job id "twelve"`}},
		{"jobs show unknown flag", dbEnv, []string{"jobs", "show", "AVAILABLE", "--yaml", "--schema", "SCHEMA"}, exitUsage, []string{"-yaml"}},
		{"jobs show URL does not parse", nil, []string{"jobs", "show", "AVAILABLE", "--database-url", "postgres://%zz", "--schema", "SCHEMA"}, exitUsage, []string{"database URL does not parse"}},
		{"jobs show URL does not answer", nil, []string{"jobs", "show", "AVAILABLE", "--database-url", deadURL, "--schema", "SCHEMA"}, exitFailure, []string{"cannot reach the database"}},
		{"jobs cancel no id", dbEnv, []string{"jobs", "cancel", "--schema", "SCHEMA"}, exitUsage, []string{"missing job id"}},
		{"jobs cancel not a number", dbEnv, []string{"jobs", "cancel", "AVAILABLE", "x1", "--schema", "SCHEMA"}, exitUsage, []string{`job id "x1" is not a positive integer`}},
		{"jobs cancel zero", dbEnv, []string{"jobs", "cancel", "AVAILABLE", "0", "--schema", "SCHEMA"}, exitUsage, []string{`job id "0"`}},
		{"jobs cancel negative", dbEnv, []string{"jobs", "cancel", "AVAILABLE", "--", "-3", "--schema", "SCHEMA"}, exitUsage, []string{`job id "-3"`}},
		{"jobs cancel unknown id", dbEnv, []string{"jobs", "cancel", "999999", "--schema", "SCHEMA"}, exitFailure, []string{"weir: job 999999: not found\n"}},
		{"jobs cancel final", dbEnv, []string{"jobs", "cancel", "CANCELLED", "--schema", "SCHEMA"}, exitFailure, []string{"weir: job CANCELLED: already final (cancelled)\n"}},
		{"jobs cancel unknown flag", dbEnv, []string{"jobs", "cancel", "AVAILABLE", "--force", "--schema", "SCHEMA"}, exitUsage, []string{"-force"}},
		{"jobs cancel URL does not answer", nil, []string{"jobs", "cancel", "AVAILABLE", "--database-url", deadURL, "--schema", "SCHEMA"}, exitFailure, []string{"cannot reach the database"}},
		{"jobs retry running", dbEnv, []string{"jobs", "retry", "RUNNING", "--schema", "SCHEMA"}, exitFailure, []string{"weir: job RUNNING: running"}},
		{"jobs retry unique conflict", dbEnv, []string{"jobs", "retry", "UNIQUE", "--schema", "SCHEMA"}, exitFailure, []string{"weir: job UNIQUE: another job with the same unique key"}},
		{"jobs retry unknown id", dbEnv, []string{"jobs", "retry", "999999", "--schema", "SCHEMA"}, exitFailure, []string{"weir: job 999999: not found\n"}},
		{"jobs retry not a number", dbEnv, []string{"jobs", "retry", "CANCELLED", "1.5", "--schema", "SCHEMA"}, exitUsage, []string{`"1.5"`}},
		{"jobs retry URL does not answer", nil, []string{"jobs", "retry", "CANCELLED", "--database-url", deadURL, "--schema", "SCHEMA"}, exitFailure, []string{"cannot reach the database"}},
		{"jobs delete running", dbEnv, []string{"jobs", "delete", "RUNNING", "--schema", "SCHEMA"}, exitFailure, []string{"weir: job RUNNING: running: cancel it first\n"}},
		{"jobs delete unknown id", dbEnv, []string{"jobs", "delete", "999999", "--schema", "SCHEMA"}, exitFailure, []string{"weir: job 999999: not found\n"}},
		{"jobs delete not a number", dbEnv, []string{"jobs", "delete", "AVAILABLE", "all", "--schema", "SCHEMA"}, exitUsage, []string{`"all"`}},
		{"jobs delete URL does not parse", nil, []string{"jobs", "delete", "AVAILABLE", "--database-url", "postgres://%zz", "--schema", "SCHEMA"}, exitUsage, []string{"database URL does not parse"}},
		{"jobs delete URL does not answer", nil, []string{"jobs", "delete", "AVAILABLE", "--database-url", deadURL, "--schema", "SCHEMA"}, exitFailure, []string{"cannot reach the database"}},
		{"jobs delete bad schema", dbEnv, []string{"jobs", "delete", "AVAILABLE", "--schema", "Bad-Name"}, exitUsage, []string{"Bad-Name"}},

		// weir queues.
		{"queues missing action", dbEnv, []string{"queues"}, exitUsage, []string{"list, pause, resume or set"}},
		{"queues unknown action", dbEnv, []string{"queues", "drain", "default", "--schema", "SCHEMA"}, exitUsage, []string{`unknown action "drain"`}},
		{"queues list unknown flag", dbEnv, []string{"queues", "list", "--all", "--schema", "SCHEMA"}, exitUsage, []string{"-all"}},
		{"queues list extra argument", dbEnv, []string{"queues", "list", "default", "--schema", "SCHEMA"}, exitUsage, []string{`"default"`}},
		{"queues list URL does not parse", nil, []string{"queues", "list", "--database-url", "postgres://%zz", "--schema", "SCHEMA"}, exitUsage, []string{"database URL does not parse"}},
		{"queues list URL does not answer", nil, []string{"queues", "list", "--database-url", deadURL, "--schema", "SCHEMA"}, exitFailure, []string{"cannot reach the database"}},
		{"queues pause no name", dbEnv, []string{"queues", "pause", "--schema", "SCHEMA"}, exitUsage, []string{"want one queue name"}},
		{"queues pause two names", dbEnv, []string{"queues", "pause", "a", "b", "--schema", "SCHEMA"}, exitUsage, []string{"want one queue name"}},
		{"queues pause bad name", dbEnv, []string{"queues", "pause", "no good", "--schema", "SCHEMA"}, exitUsage, []string{`weir: queues pause: queue "no good" has characters`}},
		{"queues pause long name", dbEnv, []string{"queues", "pause", strings.Repeat("q", 129), "--schema", "SCHEMA"}, exitUsage, []string{"the limit is 128"}},
		{"queues pause unknown flag", dbEnv, []string{"queues", "pause", "default", "--json", "--schema", "SCHEMA"}, exitUsage, []string{"-json"}},
		{"queues pause URL does not answer", nil, []string{"queues", "pause", "default", "--database-url", deadURL, "--schema", "SCHEMA"}, exitFailure, []string{"cannot reach the database"}},
		{"queues resume bad name", dbEnv, []string{"queues", "resume", "_x", "--schema", "SCHEMA"}, exitUsage, []string{`queue "_x"`}},
		{"queues resume URL does not parse", nil, []string{"queues", "resume", "held", "--database-url", "postgres://%zz", "--schema", "SCHEMA"}, exitUsage, []string{"database URL does not parse"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			before := dbState(t, f.schema)
			r := runWeir(t, tt.env, f.replace(tt.args)...)
			wantFailure(t, r, tt.code, f.replace(tt.contains)...)
			if after := dbState(t, f.schema); after != before {
				t.Fatalf("the database changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// replace puts the fixture's schema and job ids in for SCHEMA, AVAILABLE,
// RUNNING, CANCELLED and UNIQUE.
func (f *fixture) replace(args []string) []string {
	r := strings.NewReplacer("SCHEMA", f.schema, "AVAILABLE", fmt.Sprint(f.available), "RUNNING", fmt.Sprint(f.running),
		"CANCELLED", fmt.Sprint(f.cancelled), "UNIQUE", fmt.Sprint(f.uniqueCancelled))
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = r.Replace(a)
	}
	return out
}

func TestPasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-pw"
	for _, dbURL := range []string{
		"postgres://u:" + secret + "@127.0.0.1/%zz",
		"postgres://u:" + secret + "@127.0.0.1:1/test?connect_timeout=2",
		"postgres://u@127.0.0.1:1/test?connect_timeout=2&password=" + secret,
		"postgres://u:" + secret + "@127.0.0.1:notaport/test",
		"postgres://u:" + secret + "@[::1/test",
		"host=127.0.0.1 port=1 user=u password=" + secret + " connect_timeout=2",
		"host=127.0.0.1 port=1 user=u password='" + secret + "' connect_timeout=2 bogus",
		"host=127.0.0.1 port=x user=u password=" + secret,
		// The server refuses the user.
		withUser(t, dbtest.URL(), url.UserPassword("nosuchuser", secret)),
	} {
		for _, args := range [][]string{
			{"migrate", "status"}, {"enqueue", "--kind", "k"}, {"jobs", "list"}, {"jobs", "cancel", "1", "2"}, {"queues", "pause", "q"},
		} {
			// A schema of its own, in case the server lets the user in.
			schema := dbtest.Schema(t)
			r := runWeir(t, map[string]string{envDatabaseURL: dbURL}, append(args, "--schema", schema)...)
			if r.code == 0 || r.code == exitPending && args[1] == "status" {
				// The server may trust the user; then there is nothing to check.
				continue
			}
			wantFailure(t, r, r.code)
			if strings.Contains(r.stderr, secret) {
				t.Errorf("URL %q: weir %s: stderr shows the password: %q", dbURL, args, r.stderr)
			}
		}
	}
}

func withUser(t *testing.T, raw string, user *url.Userinfo) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.User = user
	return u.String()
}

// TestClientOpErrors: an operation that the database fails is reported once
// under weir's name, after the client's step when the client names one, and
// without the client's own "weir: " prefix again.
func TestClientOpErrors(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	migrateUp(t, schema)
	pool := dbtest.Pool(t, nil)
	env := map[string]string{envDatabaseURL: dbtest.URL()}
	if _, err := pool.Exec(t.Context(), "ALTER TABLE "+pgx.Identifier{schema, "weir_job"}.Sanitize()+
		" ADD CONSTRAINT weir_test_refuses CHECK (kind <> 'refused')"); err != nil {
		t.Fatal(err)
	}
	r := runWeir(t, env, "enqueue", "--kind", "refused", "--schema", schema)
	wantFailure(t, r, exitFailure, "weir_test_refuses")
	if !strings.HasPrefix(r.stderr, "weir: insert: ") || strings.Contains(r.stderr, "weir: weir") {
		t.Errorf("enqueue the database refuses: %q, want one line from weir: insert: ", r.stderr)
	}

	if _, err := pool.Exec(t.Context(), "INSERT INTO "+pgx.Identifier{schema, "weir_migration"}.Sanitize()+
		" (version, name) VALUES (999, 'from_the_future')"); err != nil {
		t.Fatal(err)
	}
	r = runWeir(t, env, "jobs", "list", "--schema", schema)
	wantFailure(t, r, exitFailure, "999_from_the_future", "upgrade weir")
	if !strings.HasPrefix(r.stderr, "weir: schema is newer than this weir: ") {
		t.Errorf("jobs list on a newer schema: %q, want one line from weir: schema is newer than this weir: ", r.stderr)
	}
}

// TestInconsistentMigrationTable: a migration table that disagrees with this
// weir's migrations is reported under the command's name, with what is wrong.
func TestInconsistentMigrationTable(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	migrateUp(t, schema)
	if _, err := dbtest.Pool(t, nil).Exec(t.Context(), "UPDATE "+pgx.Identifier{schema, "weir_migration"}.Sanitize()+
		" SET name = 'renamed' WHERE version = 1"); err != nil {
		t.Fatal(err)
	}
	r := runWeir(t, map[string]string{envDatabaseURL: dbtest.URL()}, "migrate", "status", "--schema", schema)
	wantFailure(t, r, exitFailure, `weir: migrate status: database has migration 1 named "renamed" where this weir has `, "inconsistent")
}

func TestUnknownMigrationInDatabase(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	migrateUp(t, schema)
	pool := dbtest.Pool(t, nil)
	if _, err := pool.Exec(t.Context(), "INSERT INTO "+pgx.Identifier{schema, "weir_migration"}.Sanitize()+
		" (version, name) VALUES (999, 'from_the_future')"); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, schema)
	env := map[string]string{envDatabaseURL: dbtest.URL()}
	for _, action := range []string{"up", "down"} {
		r := runWeir(t, env, "migrate", action, "--schema", schema)
		wantFailure(t, r, exitFailure, "weir: migrate "+action+": database has migration 999_from_the_future, ", "upgrade weir")
	}
	// status fails the same way after listing the migration it does not know.
	r := runWeir(t, env, "migrate", "status", "--schema", schema)
	if r.code != exitFailure || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "999_from_the_future") ||
		!strings.Contains(r.stderr, "upgrade weir") {
		t.Errorf("status: %v", r)
	}
	if rows := statusLines(t, r.stdout); rows[len(rows)-1] != "999 from_the_future unknown-incompatible" {
		t.Errorf("status rows: %q", rows)
	}
	if after := snapshot(t, schema); after != before {
		t.Fatalf("the schema changed:\nbefore %s\nafter  %s", before, after)
	}
}

// fixture is a migrated database holding a job in each situation the operator
// commands meet, and a paused queue: a PostgreSQL schema (newFixture) or a
// SQLite file (newSQLiteFixture).
type fixture struct {
	schema string            // PostgreSQL only
	path   string            // SQLite only: the database file
	env    map[string]string // WEIR_DATABASE_URL
	client *weir.Client
	driver weirdriver.Driver

	available int64 // queue "default", kind "fix.available"
	scheduled int64 // queue "later", due in a day
	running   int64 // queue "busy", leased for an hour
	failed    int64 // retryable after one failed attempt with an error and a trace
	cancelled int64
	// uniqueCancelled is a cancelled unique job whose key a live job now holds,
	// so that retrying it conflicts.
	uniqueCancelled int64
}

// newFixture migrates a fresh schema and fills it.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{schema: dbtest.Schema(t), env: map[string]string{envDatabaseURL: dbtest.URL()}}
	migrateUp(t, f.schema)
	driver, err := weirpgx.New(dbtest.Pool(t, nil), &weirpgx.Config{Schema: f.schema})
	if err != nil {
		t.Fatal(err)
	}
	f.fill(t, driver)
	return f
}

// newSQLiteFixture creates, migrates and fills the SQLite file at path, and
// closes it, so that nothing but the test touches it afterwards.
func newSQLiteFixture(t *testing.T, path string) *fixture {
	t.Helper()
	f := &fixture{path: path, env: map[string]string{envDatabaseURL: "sqlite:" + path}}
	driver, err := weirsqlite.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := driver.Close(); err != nil {
			t.Error(err)
		}
	}()
	if _, err := weirmigrate.New(driver).Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	f.fill(t, driver)
	return f
}

// fill puts the fixture's jobs and paused queue in driver's migrated database.
func (f *fixture) fill(t *testing.T, driver weirdriver.Driver) {
	t.Helper()
	ctx := t.Context()
	f.driver = driver
	var err error
	if f.client, err = weir.NewClient(f.driver, &weir.Config{Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	insert := func(kind, args string, opts *weir.InsertOpts) int64 {
		t.Helper()
		res, err := f.client.Insert(ctx, weir.RawArgs{KindName: kind, JSON: json.RawMessage(args)}, opts)
		if err != nil {
			t.Fatal(err)
		}
		return res.Job.ID
	}
	claim := func(queue string) *weir.JobRow {
		t.Helper()
		jobs, _, err := f.driver.Executor().JobClaim(ctx, &weirdriver.JobClaimParams{
			Queue: queue, Max: 1, ClientID: "fixture", LeaseDuration: time.Hour,
		})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim from %s: %v, %d jobs", queue, err, len(jobs))
		}
		return jobs[0]
	}
	cancel := func(id int64) {
		t.Helper()
		if _, err := f.client.JobCancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	f.available = insert("fix.available", `{"n":1}`, nil)
	f.scheduled = insert("fix.scheduled", `{}`, &weir.InsertOpts{Queue: "later", ScheduledAt: time.Now().Add(24 * time.Hour)})
	f.running = insert("fix.running", `{}`, &weir.InsertOpts{Queue: "busy"})
	claim("busy")
	f.failed = insert("fix.failed", `{}`, &weir.InsertOpts{Queue: "flaky", Tags: []string{"t1", "t2"}})
	job := claim("flaky")
	applied, err := f.driver.Executor().JobFinalize(ctx, []*weirdriver.JobFinalizeParams{{
		ID: job.ID, LeaseToken: job.LeaseToken, Outcome: weirdriver.OutcomeRetry,
		ScheduledAt: time.Now().Add(24 * time.Hour),
		Error:       &weirtype.AttemptError{Error: "boom\nsecond line", Trace: "main.work()\n\twork.go:12"},
	}})
	if err != nil || !applied[0] {
		t.Fatalf("fail job %d: %v %v", job.ID, err, applied)
	}
	f.cancelled = insert("fix.cancelled", `{}`, nil)
	cancel(f.cancelled)
	unique := &weir.InsertOpts{Unique: weir.UniqueOpts{ByArgs: true}}
	f.uniqueCancelled = insert("fix.unique", `{"u":1}`, unique)
	cancel(f.uniqueCancelled)
	insert("fix.unique", `{"u":1}`, unique)
	if err := f.client.QueuePause(ctx, "held"); err != nil {
		t.Fatal(err)
	}
}

// weir runs weir in-process on the fixture's schema.
func (f *fixture) weir(t *testing.T, args ...string) result {
	t.Helper()
	return runWeir(t, f.env, append(args, "--schema", f.schema)...)
}

// shownJob is a job as `weir jobs show --json` prints it.
type shownJob struct {
	ID                int64             `json:"id"`
	State             string            `json:"state"`
	Queue             string            `json:"queue"`
	Kind              string            `json:"kind"`
	Args              json.RawMessage   `json:"args"`
	Priority          int               `json:"priority"`
	Attempt           int               `json:"attempt"`
	MaxAttempts       int               `json:"max_attempts"`
	ScheduledAt       time.Time         `json:"scheduled_at"`
	CreatedAt         time.Time         `json:"created_at"`
	AttemptedAt       *time.Time        `json:"attempted_at"`
	AttemptedBy       *string           `json:"attempted_by"`
	FinalizedAt       *time.Time        `json:"finalized_at"`
	LeaseToken        int64             `json:"lease_token"`
	LeaseExpiresAt    *time.Time        `json:"lease_expires_at"`
	CancelRequestedAt *time.Time        `json:"cancel_requested_at"`
	ReleaseCount      int               `json:"release_count"`
	Tags              []string          `json:"tags"`
	Metadata          json.RawMessage   `json:"metadata"`
	UniqueKey         *string           `json:"unique_key"`
	UniqueStates      []string          `json:"unique_states"`
	Errors            []json.RawMessage `json:"errors"`
	Output            json.RawMessage   `json:"output"`
	Progress          json.RawMessage   `json:"progress"`
}

// decodeJSON decodes out, which must hold exactly one JSON value, into v.
func decodeJSON(t *testing.T, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decoding %q: %v", out, err)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value in %q", out)
	}
}

// showJob returns the job as weir jobs show --json prints it.
func showJob(t *testing.T, run func(t *testing.T, args ...string) result, id int64) shownJob {
	t.Helper()
	r := run(t, "jobs", "show", fmt.Sprint(id), "--json")
	wantOK(t, r)
	var job shownJob
	decodeJSON(t, r.stdout, &job)
	return job
}

// dbState describes everything weir keeps in schema, so that two states differ
// when anything changed: the migrations, every job row and every queue row.
func dbState(t *testing.T, schema string) string {
	t.Helper()
	s := snapshot(t, schema)
	if !strings.Contains(s, "weir_job=true") {
		return s
	}
	pool := dbtest.Pool(t, nil)
	for _, table := range []string{"weir_job", "weir_queue"} {
		var exists bool
		if err := pool.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL",
			pgx.Identifier{schema, table}.Sanitize()).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if !exists {
			continue
		}
		rows, err := pool.Query(t.Context(), "SELECT to_jsonb(t)::text FROM "+
			pgx.Identifier{schema, table}.Sanitize()+" AS t ORDER BY 1")
		if err != nil {
			t.Fatal(err)
		}
		all, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		s += "\n" + table + ":\n" + strings.Join(all, "\n")
	}
	return s
}

// ids parses weir enqueue's output.
func ids(t *testing.T, out string) []int64 {
	t.Helper()
	var ids []int64
	for line := range strings.SplitSeq(strings.TrimSuffix(out, "\n"), "\n") {
		id, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			t.Fatalf("enqueue printed %q, not one id a line", out)
		}
		ids = append(ids, id)
	}
	return ids
}
