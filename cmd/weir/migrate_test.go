package main

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirsqlite"
)

// migrateDB is a database weir migrate runs on in these tests, on either
// backend.
type migrateDB struct {
	flags []string
	known []weirdriver.Migration
	// exec runs a statement on the database, outside weir; "TABLE" in it stands
	// for weir_migration, qualified where needed.
	exec func(t *testing.T, sql string, args ...any)
}

func migrateDBs(t *testing.T) map[string]*migrateDB {
	schema := dbtest.Schema(t)
	path := filepath.Join(t.TempDir(), "weir.db")
	return map[string]*migrateDB{
		"postgres": {
			flags: []string{"--database-url", dbtest.URL(), "--schema", schema},
			known: knownMigrations(),
			exec: func(t *testing.T, stmt string, args ...any) {
				t.Helper()
				stmt = strings.ReplaceAll(stmt, "TABLE", pgx.Identifier{schema, "weir_migration"}.Sanitize())
				if _, err := dbtest.Pool(t, nil).Exec(t.Context(), stmt, args...); err != nil {
					t.Fatal(err)
				}
			},
		},
		"sqlite": {
			flags: []string{"--database-url", "sqlite:" + path},
			known: (&weirsqlite.Driver{}).Migrations(),
			exec: func(t *testing.T, stmt string, args ...any) {
				t.Helper()
				db, err := sql.Open("sqlite", path)
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				stmt = strings.ReplaceAll(strings.ReplaceAll(stmt, "TABLE", "weir_migration"), "$", "?")
				if _, err := db.ExecContext(t.Context(), stmt, args...); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
}

// TestMigrateDownRefusesToDropUserData checks that every way of reverting the
// baseline fails while it would drop what users wrote (jobs; queue settings
// alone), saying what and how many and to pass --force, and changes nothing;
// --force drops them.
func TestMigrateDownRefusesToDropUserData(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		write []string
		says  string
	}{
		{"jobs", []string{"enqueue", "--kind", "k", "--count", "2"}, "would drop 2 jobs (with their outputs), in "},
		{"queue settings", []string{"queues", "pause", "mail", "--create"}, "would drop the settings (pauses and limits) of 1 queue, in "},
	} {
		for name, db := range migrateDBs(t) {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				t.Parallel()
				weir := func(args ...string) result { t.Helper(); return runWeir(t, nil, append(args, db.flags...)...) }
				wantOK(t, weir("migrate", "up"))
				wantOK(t, weir(c.write...))
				state := func() string {
					t.Helper()
					r := weir("migrate", "status", "--json")
					wantOK(t, r)
					jobs := weir("jobs", "list", "--json")
					wantOK(t, jobs)
					queues := weir("queues", "list", "--json")
					wantOK(t, queues)
					return r.stdout + jobs.stdout + queues.stdout
				}
				before := state()
				n := len(db.known)
				for _, args := range [][]string{{"--all"}, {"--target-version", "0"}, {"--steps", fmt.Sprint(n)}} {
					r := weir(append([]string{"migrate", "down"}, args...)...)
					wantFailure(t, r, exitFailure, "weir: migrate down: reverting 001_baseline "+c.says+name+" schema ",
						"; nothing was reverted (pass --force to drop them)")
				}
				if after := state(); after != before {
					t.Fatalf("refused downs changed the database:\nbefore %s\nafter  %s", before, after)
				}
				// Keeping weir's tables needs no force.
				r := weir("migrate", "down", "--target-version", "1")
				wantOK(t, r)
				r = weir("migrate", "down", "--all", "--force")
				wantOK(t, r)
				if r.stdout != "reverted 001_baseline\n" {
					t.Fatalf("down --all --force printed %q", r.stdout)
				}
			})
		}
	}
}

// statusReportOf decodes migrate status --json.
func statusReportOf(t *testing.T, out string) *statusReport {
	t.Helper()
	var r statusReport
	decodeJSON(t, out, &r)
	return &r
}

func versionsOf(ms []migrationJSON) []int {
	var out []int
	for _, m := range ms {
		out = append(out, m.Version)
	}
	return out
}

// TestMigrateStatusExit checks migrate status's exit status, which a deploy
// script gates on (0 ready, 3 pending, 1 newer and not compatible), its JSON,
// and that it lists migrations this weir does not know.
func TestMigrateStatusExit(t *testing.T) {
	t.Parallel()
	for name, db := range migrateDBs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			weir := func(args ...string) result { t.Helper(); return runWeir(t, nil, append(args, db.flags...)...) }
			n := len(db.known)
			all := make([]int, n)
			for i, m := range db.known {
				all[i] = m.Version
			}
			if name == "sqlite" {
				wantOK(t, weir("migrate", "up", "--target-version", "1"))
				wantOK(t, weir("migrate", "down", "--all"))
			}

			// Nothing applied: pending.
			r := weir("migrate", "status")
			if r.code != exitPending || r.stderr != "" {
				t.Fatalf("status before up: want exit 3 and nothing on stderr: %v", r)
			}
			if got, want := statusLines(t, r.stdout), wantStatusApplied(db.known, 0); !slices.Equal(got, want) {
				t.Fatalf("status before up: got %q, want %q", got, want)
			}
			r = weir("migrate", "status", "--json")
			if r.code != exitPending || r.stderr != "" {
				t.Fatalf("status --json before up: %v", r)
			}
			rep := statusReportOf(t, r.stdout)
			if rep.Version != 0 || len(rep.Applied) != 0 || !slices.Equal(versionsOf(rep.Pending), all) || len(rep.Unknown) != 0 {
				t.Fatalf("status --json before up: %+v", rep)
			}

			// Part way, where weir has more than one migration: still pending.
			if n > 1 {
				wantOK(t, weir("migrate", "up", "--target-version", fmt.Sprint(n-1)))
				r = weir("migrate", "status", "--json")
				rep = statusReportOf(t, r.stdout)
				if r.code != exitPending || rep.Version != n-1 || !slices.Equal(versionsOf(rep.Pending), all[n-1:]) {
					t.Fatalf("status --json part way: %v", r)
				}
			}

			// Up to date.
			wantOK(t, weir("migrate", "up"))
			r = weir("migrate", "status")
			wantOK(t, r)
			if got, want := statusLines(t, r.stdout), wantStatusApplied(db.known, n); !slices.Equal(got, want) {
				t.Fatalf("status after up: got %q, want %q", got, want)
			}
			r = weir("migrate", "status", "--json")
			wantOK(t, r)
			rep = statusReportOf(t, r.stdout)
			if rep.Version != n || !slices.Equal(versionsOf(rep.Applied), all) || len(rep.Pending) != 0 || len(rep.Unknown) != 0 {
				t.Fatalf("status --json after up: %+v", rep)
			}
			for _, a := range rep.Applied {
				if a.AppliedAt == nil || time.Since(*a.AppliedAt) > time.Hour || a.Compatible != nil {
					t.Errorf("applied migration in JSON: %+v", a)
				}
			}

			// A newer migration, marked compatible: this weir may run.
			next := n + 1
			newer := fmt.Sprintf("%03d add_column", next)
			db.exec(t, "INSERT INTO TABLE (version, name, applied_at, compatible) VALUES ($1, 'add_column', $2, $3)",
				next, appliedAt(name), true)
			r = weir("migrate", "status")
			wantOK(t, r)
			if got, want := statusLines(t, r.stdout), append(wantStatusApplied(db.known, n), newer+" unknown-compatible"); !slices.Equal(got, want) {
				t.Fatalf("status with a compatible newer migration: got %q, want %q", got, want)
			}
			r = weir("migrate", "status", "--json")
			wantOK(t, r)
			rep = statusReportOf(t, r.stdout)
			if rep.Version != next || len(rep.Applied) != n || len(rep.Unknown) != 1 || rep.Unknown[0].Version != next ||
				rep.Unknown[0].Name != "add_column" || rep.Unknown[0].Compatible == nil || !*rep.Unknown[0].Compatible {
				t.Fatalf("status --json with a compatible newer migration: %s", r.stdout)
			}
			wantOK(t, weir("jobs", "list"))

			// Not marked compatible: this weir must not run.
			db.exec(t, "UPDATE TABLE SET compatible = $1 WHERE version = $2", false, next)
			r = weir("migrate", "status")
			if r.code != exitFailure || strings.Count(r.stderr, "\n") != 1 ||
				!strings.Contains(r.stderr, fmt.Sprintf("%03d_add_column", next)) || !strings.Contains(r.stderr, "not marked compatible") {
				t.Fatalf("status with an incompatible newer migration: %v", r)
			}
			if got, want := statusLines(t, r.stdout), append(wantStatusApplied(db.known, n), newer+" unknown-incompatible"); !slices.Equal(got, want) {
				t.Fatalf("status with an incompatible newer migration: got %q, want %q", got, want)
			}
			wantFailure(t, weir("jobs", "list"), exitFailure, "weir: schema is newer than this weir: ",
				fmt.Sprintf("%03d_add_column", next), "upgrade weir")
			wantFailure(t, weir("migrate", "down"), exitFailure, fmt.Sprintf("%03d_add_column", next), "upgrade weir")
		})
	}
}

// appliedAt is a time as the backend's migration table holds it.
func appliedAt(backend string) any {
	if backend == "sqlite" {
		return time.Now().UnixMicro()
	}
	return time.Now()
}

// TestMigrateStatusEscapesNames: a migration's name comes from the migration
// table, which whoever can write to the schema can set; status shows it
// escaped, in its table and in its JSON, whose value stays exact.
func TestMigrateStatusEscapesNames(t *testing.T) {
	t.Parallel()
	const evil = "add\x1b]0;pwned\x07\u202egnp.exe\u0085\x7f"
	for name, db := range migrateDBs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			weir := func(args ...string) result { t.Helper(); return runWeir(t, nil, append(args, db.flags...)...) }
			wantOK(t, weir("migrate", "up"))
			next := len(db.known) + 1
			db.exec(t, "INSERT INTO TABLE (version, name, applied_at, compatible) VALUES ($1, $2, $3, $4)",
				next, evil, appliedAt(name), true)
			r := weir("migrate", "status")
			wantOK(t, r)
			wantTerminalSafe(t, r.stdout)
			want := fmt.Sprintf(`%03d add\x1b]0;pwned\x07\u202egnp.exe\u0085\x7f unknown-compatible`, next)
			if got := statusLines(t, r.stdout); got[len(got)-1] != want {
				t.Fatalf("status: got %q, want %q last", got, want)
			}
			r = weir("migrate", "status", "--json")
			wantOK(t, r)
			wantTerminalSafe(t, r.stdout)
			if rep := statusReportOf(t, r.stdout); len(rep.Unknown) != 1 || rep.Unknown[0].Name != evil {
				t.Fatalf("status --json: %s", r.stdout)
			}
		})
	}
}
