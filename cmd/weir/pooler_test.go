package main

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/internal/weirbench"
)

// TestPgBouncerFlags checks the flags of soak and bench that put a PgBouncer
// in front of the database: each bad command line fails before anything runs,
// naming what is wrong, and the help shows the flags.
func TestPgBouncerFlags(t *testing.T) {
	t.Parallel()
	const withPassword = "postgres://postgres:secret@127.0.0.1:1/none?sslmode=disable"
	const keywords = "host=127.0.0.1 port=1 user=postgres dbname=none"
	for _, tt := range []struct {
		args     []string
		contains string
	}{
		{[]string{"soak", "--pgbouncer", "--database-url", withPassword}, "authenticates nobody"},
		{[]string{"soak", "--pgbouncer", "--database-url", keywords}, "needs a postgres:// URL"},
		{[]string{"bench", "--start-pgbouncer", "--database-url", withPassword}, "authenticates nobody"},
		{[]string{"bench", "--start-pgbouncer", "--database-url", keywords}, "needs a postgres:// URL"},
		{[]string{"soak", "--poll-only=maybe", "--database-url", dbtest.URL()}, "-poll-only"},
	} {
		r := runWeir(t, nil, tt.args...)
		wantFailure(t, r, exitUsage, tt.contains)
		if strings.Contains(r.stderr, "secret") {
			t.Errorf("the password shows: %q", r.stderr)
		}
	}
	for cmd, flags := range map[string][]string{"soak": {"-pgbouncer", "-poll-only"}, "bench": {"-start-pgbouncer", "-poll-only"}} {
		r := runWeir(t, nil, "help", cmd)
		wantOK(t, r)
		for _, f := range flags {
			if !strings.Contains(r.stdout, f) {
				t.Errorf("weir help %s does not mention %s", cmd, f)
			}
		}
	}
}

// TestSoakThroughPgBouncer runs a short soak whose workers connect through a
// PgBouncer in transaction mode, poll-only, under restarts, kills and
// connection kills, and checks that every check of the contract passes.
func TestSoakThroughPgBouncer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a 8-second soak; skipped with -short")
	}
	dbtest.PgBouncer(t) // skips without pgbouncer (fails with WEIR_REQUIRE_PGBOUNCER=1)
	bin := buildWeir(t)
	schema := dbtest.SchemaName(t)
	r := bin.run(t, nil, "soak", "--pgbouncer", "--database-url", dbtest.URL(), "--schema", schema,
		"--duration", "8s", "--workers", "2", "--concurrency", "8", "--rate", "60",
		"--faults", "restart,kill,connkill", "--restart-every", "2s", "--kill-every", "5s", "--connkill-every", "3s",
		"--lease", "4s", "--heartbeat", "400ms", "--rescue", "500ms", "--stop-budget", "1500ms",
		"--job-timeout", "200ms", "--drain-timeout", "1m", "--log", filepath.Join(t.TempDir(), "soak.log"))
	if r.code != 0 {
		t.Fatalf("soak failed: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "PgBouncer (transaction mode)") {
		t.Errorf("the soak does not say it runs through PgBouncer:\n%s", r.stderr)
	}
	for _, check := range []string{"G1", "G2", "G3", "G4", "G9", "RUN"} {
		if !regexp.MustCompile(`(?m)^` + check + ` .*\sok$`).MatchString(r.stdout) {
			t.Errorf("check %s did not pass:\n%s", check, r.stdout)
		}
	}
}

// TestBenchThroughPgBouncer runs a few workloads once, tiny, through a
// PgBouncer that weir bench starts, with the built binary (W5 re-executes it).
// It asserts nothing about speed.
func TestBenchThroughPgBouncer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds weir and runs the benchmark; skipped with -short")
	}
	dbtest.PgBouncer(t) // skips without pgbouncer (fails with WEIR_REQUIRE_PGBOUNCER=1)
	b := buildWeir(t)
	schema := dbtest.Schema(t)
	t.Cleanup(func() {
		if err := weirbench.DropScratchSchema(context.Background(), dbtest.URL(), schema+"_sql"); err != nil {
			t.Errorf("drop W1's ceiling's schema: %v", err)
		}
	})
	r := b.run(t, nil, "bench", "--start-pgbouncer", "--database-url", dbtest.URL(), "--schema", schema,
		"--workloads", "drain,latency,bulk,rss", "--drain-jobs", "300", "--insert-jobs", "500", "--batch", "250",
		"--latency-rate", "100", "--latency-duration", "1s", "--rss-jobs", "300", "--rss-workers", "20", "--max-conns", "5")
	if r.code != 0 {
		t.Fatalf("weir bench --start-pgbouncer failed: %v", r)
	}
	for _, s := range []string{"through PgBouncer (transaction mode)"} {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr does not say %q:\n%s", s, r.stderr)
		}
	}
	if !strings.Contains(r.stdout, "\nW1 raw SQL ceiling, jobs/s ") {
		t.Errorf("the table has no W1 ceiling:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "weir poll-only") {
		t.Errorf("the table does not name the poll-only system:\n%s", r.stdout)
	}
}
