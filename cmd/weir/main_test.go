package main

import (
	"bytes"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
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

// runWeir runs weir in-process with env as its environment.
func runWeir(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), args, &stdout, &stderr, func(k string) string { return env[k] })
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
	known := knownMigrations()
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

// migrateUp migrates schema with the library.
func migrateUp(t *testing.T, schema string) {
	t.Helper()
	d, err := weirpgx.New(dbtest.Pool(t, nil), &weirpgx.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(d).Up(t.Context(), nil); err != nil {
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
		for _, s := range []string{"Usage:", "weir <command>", "migrate", "version", "WEIR_DATABASE_URL"} {
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
	wantOK(t, r)
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
	wantOK(t, r)

	// A bad URL in the flag wins over a good one in the environment.
	r = runWeir(t, map[string]string{envDatabaseURL: dbtest.URL()},
		"migrate", "status", "--schema", schema, "--database-url", "postgres://%zz")
	wantFailure(t, r, exitUsage, "does not parse")

	// An empty flag does not fall back to the environment.
	r = runWeir(t, map[string]string{envDatabaseURL: dbtest.URL()},
		"migrate", "status", "--schema", schema, "--database-url", "")
	wantFailure(t, r, exitUsage, "no database URL")
}

func TestFailuresChangeNothing(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL()
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			schema := dbtest.Schema(t)
			migrateUp(t, schema)
			before := snapshot(t, schema)
			args := make([]string, len(tt.args))
			for i, a := range tt.args {
				args[i] = strings.ReplaceAll(a, "SCHEMA", schema)
			}
			wantFailure(t, runWeir(t, tt.env, args...), tt.code, tt.contains...)
			if after := snapshot(t, schema); after != before {
				t.Fatalf("the schema changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
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
		r := runWeir(t, map[string]string{envDatabaseURL: dbURL}, "migrate", "status")
		if r.code == 0 {
			// The server may trust the user; then there is nothing to check.
			continue
		}
		wantFailure(t, r, r.code)
		if strings.Contains(r.stderr, secret) {
			t.Errorf("URL %q: stderr shows the password: %q", dbURL, r.stderr)
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
	for _, action := range []string{"up", "down", "status"} {
		r := runWeir(t, env, "migrate", action, "--schema", schema)
		wantFailure(t, r, exitFailure, "999", "upgrade weir")
	}
	if after := snapshot(t, schema); after != before {
		t.Fatalf("the schema changed:\nbefore %s\nafter  %s", before, after)
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	in := "failed to connect to `user=u database=d`:\n\ta: refused\n\ta: refused\n\tb: refused"
	if got, want := oneLine(in), "failed to connect to `user=u database=d`: a: refused b: refused"; got != want {
		t.Fatalf("oneLine = %q, want %q", got, want)
	}
}
