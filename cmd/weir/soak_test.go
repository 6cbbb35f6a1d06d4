package main

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/internal/dbtest"
)

func TestSoakFlags(t *testing.T) {
	t.Parallel()
	url := map[string]string{envDatabaseURL: dbtest.URL()}
	for _, tt := range []struct {
		env      map[string]string
		args     []string
		contains string
	}{
		{nil, nil, "no database URL"},
		{url, []string{"--workers", "0"}, "--workers 0 is outside 1..32"},
		{url, []string{"--rate", "0"}, "--rate 0 is outside"},
		{url, []string{"--concurrency", "0"}, "--concurrency 0 is outside 1..1000"},
		{url, []string{"--duration", "0s"}, "--duration 0s must be positive"},
		{url, []string{"--kill-every", "-1s"}, "--kill-every -1s must be positive"},
		{url, []string{"--pause-for", "0s"}, "--pause-for 0s must be positive"},
		{url, []string{"--lease", "1s", "--heartbeat", "500ms"}, "--lease 1s is under 3× --heartbeat 500ms"},
		{url, []string{"--g9-slack", "-1ms"}, "--g9-slack -1ms is negative"},
		{url, []string{"--faults", "restart,flood"}, `unknown fault "flood"`},
		{url, []string{"--faults", "pgrestart"}, "the pgrestart fault needs --start-postgres"},
		{nil, []string{"--start-postgres", "--database-url", dbtest.URL()}, "--start-postgres and --database-url exclude each other"},
		{nil, []string{"--database-url", "jobs.db"}, "runs on PostgreSQL only"},
		{nil, []string{"--database-url", "sqlite:jobs.db"}, "runs on PostgreSQL only"},
		{url, []string{"--schema", "Bad"}, "bad --schema"},
		{url, []string{"--duration", "soon"}, "invalid value \"soon\" for flag -duration"},
		{url, []string{"--faults", "failover"}, "the failover fault needs --start-postgres"},
		{nil, []string{"--start-postgres", "--faults", "failover", "--standby", "later"}, `--standby "later" is neither sync nor async`},
		{nil, []string{"--start-postgres", "--faults", "failover", "--failover-every", "0s"}, "--failover-every 0s must be positive"},
		{nil, []string{"--start-postgres", "--faults", "kill", "--standby", "async"}, "--standby is only for the failover fault"},
		{nil, []string{"--start-postgres", "--failover-every", "1m"}, "--failover-every is only for the failover fault"},
		{nil, []string{"--start-postgres", "--faults", "all", "--pgbouncer"}, "the failover fault and --pgbouncer do not go together"},
		{url, []string{"--keep-postgres"}, "--keep-postgres is only for --start-postgres"},
		{url, []string{"--pgrestart-down", "-1s"}, "--pgrestart-down -1s is negative"},
		{url, []string{"--worker"}, "--worker needs --worker-name"},
		{url, []string{"--worker-name", "w1.1"}, "--worker-name is only for --worker"},
		{url, []string{"extra"}, `unexpected argument "extra"`},
	} {
		r := runWeir(t, tt.env, append([]string{"soak"}, tt.args...)...)
		wantFailure(t, r, exitUsage, tt.contains)
	}
	r := runWeir(t, nil, "help", "soak")
	wantOK(t, r)
	for _, s := range []string{"weir soak", "-faults", "-restart-every", "-kill-every", "-pause-every", "-connkill-every", "-pgrestart-every",
		"-failover-every", "-standby", "-start-postgres", "-stop-budget", "-lease", "G9"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("help does not mention %q", s)
		}
	}
	if strings.Contains(r.stdout, "-worker-name") {
		t.Errorf("help shows the hidden worker flags")
	}
}

// TestSoakRefusesForeignSchema: a schema holding tables the soak did not make
// is left alone.
func TestSoakRefusesForeignSchema(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	pool := dbtest.Pool(t, nil)
	if _, err := pool.Exec(t.Context(), "CREATE TABLE "+pgx.Identifier{schema, "orders"}.Sanitize()+" (id int)"); err != nil {
		t.Fatal(err)
	}
	r := runWeir(t, map[string]string{envDatabaseURL: dbtest.URL()}, "soak", "--schema", schema)
	wantFailure(t, r, exitFailure, "holds tables that weir soak did not make (orders)")
}

// TestSoakEndToEnd runs a short soak with the built binary: two workers,
// graceful restarts, a kill, a pause and connection kills, in a schema of its
// own.
func TestSoakEndToEnd(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a 10-second soak; skipped with -short")
	}
	bin := buildWeir(t)
	schema := dbtest.SchemaName(t)
	r := bin.run(t, nil, "soak", "--database-url", dbtest.URL(), "--schema", schema,
		"--duration", "8s", "--workers", "2", "--concurrency", "8", "--rate", "60",
		"--restart-every", "2s", "--kill-every", "5s", "--connkill-every", "3s", "--pause-every", "4s", "--pause-for", "5s",
		// A lease of ten heartbeats (a pause outlasts it): under the full suite's load (a load
		// average of 6 on 2 cores, other suites' checkpoints) a 2 s lease once
		// lapsed with no fault injected, a stall the checker rightly cannot
		// tell from a bug.
		"--lease", "4s", "--heartbeat", "400ms", "--rescue", "500ms", "--stop-budget", "1500ms",
		"--job-timeout", "200ms", "--drain-timeout", "1m", "--log", filepath.Join(t.TempDir(), "soak.log"))
	if r.code != 0 {
		t.Fatalf("soak failed: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	value := func(name string) int {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+(\d+)`).FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("no %q in the table:\n%s", name, r.stdout)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	if value("graceful restarts") < 2 || value("kills (SIGKILL)") < 1 || value("pauses (SIGSTOP)") < 1 || value("connection kills") < 1 {
		t.Errorf("too few faults:\n%s", r.stdout)
	}
	for _, check := range []string{"G1", "G2", "G3", "G4", "G9", "G10", "RUN"} {
		if !regexp.MustCompile(`(?m)^` + check + ` .*\sok$`).MatchString(r.stdout) {
			t.Errorf("check %s did not pass:\n%s", check, r.stdout)
		}
	}
	// The table's counts are the audit trail's.
	pool := dbtest.Pool(t, nil)
	var execs, jobs, final int
	if err := pool.QueryRow(t.Context(), "SELECT (SELECT count(*) FROM "+pgx.Identifier{schema, "soak_exec"}.Sanitize()+
		"), count(*), count(*) FILTER (WHERE state = 'completed') FROM "+pgx.Identifier{schema, "weir_job"}.Sanitize()+
		" WHERE queue = 'soak'"). // the periodic workload's jobs have a queue of their own
		Scan(&execs, &jobs, &final); err != nil {
		t.Fatal(err)
	}
	if execs != value("executions") || jobs != value("jobs inserted") || final != jobs || jobs < 300 {
		t.Errorf("audit trail: %d executions, %d jobs, %d completed; table:\n%s", execs, jobs, final, r.stdout)
	}
}
