package main

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weirq/weir/weirdriver/weirsqlite"
)

// sqliteMigrations are weirsqlite's migrations.
var sqliteMigrations = (&weirsqlite.Driver{}).Migrations()

// dbCommands are command lines that open a database, less the database.
var dbCommands = [][]string{
	{"migrate", "up"},
	{"migrate", "down"},
	{"migrate", "down", "--all"},
	{"migrate", "status"},
	{"enqueue", "--kind", "k"},
	{"enqueue", "--kind", "k", "--count", "3"},
	{"jobs", "list"},
	{"jobs", "list", "--json"},
	{"jobs", "show", "1"},
	{"jobs", "show", "1", "--json"},
	{"jobs", "retry", "1"},
	{"jobs", "cancel", "1", "2"},
	{"jobs", "delete", "1"},
	{"queues", "list"},
	{"queues", "list", "--json"},
	{"queues", "pause", "default"},
	{"queues", "resume", "default"},
	{"demo"},
}

// creates reports whether the command creates a SQLite file that does not exist.
func creates(args []string) bool {
	return args[0] == "demo" || slices.Equal(args, []string{"migrate", "up"})
}

// testBinarySQLite runs the binary on SQLite files that are not weir's
// databases, and on the spellings of a SQLite URL.
func testBinarySQLite(t *testing.T, b *weirBinary) {
	// sqliteURL alternates the two spellings of a file's URL.
	sqliteURL := func(i int, path string) string {
		if i%2 == 0 {
			return path
		}
		return "sqlite:" + path
	}

	// A text file named like a database: every command fails and leaves it be.
	t.Run("NotADatabase", func(t *testing.T) {
		t.Parallel()
		for i, args := range dbCommands {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				path := filepath.Join(dir, "x.db")
				if err := os.WriteFile(path, []byte("this is a text file, not a database\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				before := sqliteState(t, dir)
				r := b.run(t, nil, append(args, "--database-url", sqliteURL(i, path))...)
				wantFailure(t, r, exitFailure, "weir: cannot open the SQLite database: "+path+": not a usable SQLite database: ")
				// The same, named in the environment (demo does not read it).
				if args[0] != "demo" {
					r = b.run(t, []string{envDatabaseURL + "=" + sqliteURL(i+1, path)}, args...)
					wantFailure(t, r, exitFailure, "weir: cannot open the SQLite database: "+path+": not a usable SQLite database: ")
				}
				if after := sqliteState(t, dir); after != before {
					t.Fatalf("the directory changed:\nbefore %s\nafter  %s", before, after)
				}
			})
		}
	})

	// A path where no file exists: only migrate up and demo create one.
	t.Run("MissingFile", func(t *testing.T) {
		t.Parallel()
		for i, args := range dbCommands {
			if creates(args) {
				continue
			}
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				path := filepath.Join(dir, "missing.db")
				r := b.run(t, nil, append(args, "--database-url", sqliteURL(i, path))...)
				wantFailure(t, r, exitFailure, "weir: no SQLite database at "+path+" (run `weir migrate up` to create one)\n")
				if s := sqliteState(t, dir); s != "(no files)" {
					t.Fatalf("the directory holds %s", s)
				}
			})
		}
	})

	// An empty file, which SQLite would take for an empty database and write
	// to: only migrate up and demo make it a database.
	t.Run("EmptyFile", func(t *testing.T) {
		t.Parallel()
		for i, args := range dbCommands {
			if creates(args) {
				continue
			}
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				path := filepath.Join(dir, "empty.db")
				if err := os.WriteFile(path, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				before := sqliteState(t, dir)
				r := b.run(t, nil, append(args, "--database-url", sqliteURL(i, path))...)
				wantFailure(t, r, exitFailure, "weir: no SQLite database at "+path+": the file is empty", "run `weir migrate up`")
				if after := sqliteState(t, dir); after != before {
					t.Fatalf("the directory changed:\nbefore %s\nafter  %s", before, after)
				}
			})
		}
		t.Run("migrate up", func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "empty.db")
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			r := b.run(t, nil, "migrate", "up", "--database-url", path)
			wantOK(t, r)
			if r.stdout != migrationLines(sqliteMigrations, "applied", false) {
				t.Fatalf("migrate up of an empty file printed %q", r.stdout)
			}
			wantOK(t, b.run(t, nil, "enqueue", "--kind", "k", "--database-url", path))
		})
	})

	// migrate up creates the file, but not when it fails.
	t.Run("MigrateUpFailsCreatingNothing", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			name     string
			args     []string // PATH stands for the database file
			mkdir    bool     // PATH is a directory
			code     int
			contains []string
		}{
			{"TargetVersionZero", []string{"--database-url", "PATH", "--target-version", "0"}, false, exitUsage, []string{"weir: migrate up: --target-version 0 is out of range 1.."}},
			{"TargetVersionTooHigh", []string{"--database-url", "sqlite:PATH", "--target-version", "99"}, false, exitUsage, []string{"weir: migrate up: --target-version 99 is out of range 1.."}},
			{"UnknownFlag", []string{"--database-url", "PATH", "--steps", "1"}, false, exitUsage, []string{"weir: migrate up: ", "-steps"}},
			{"BadSchema", []string{"--database-url", "PATH", "--schema", "Bad;Name"}, false, exitUsage, []string{"weir: migrate up: bad --schema: "}},
			{"DirectoryMissing", []string{"--database-url", "PATH/nodir/weir.db"}, false, exitFailure, []string{"weir: cannot open the SQLite database: ", "nodir"}},
			{"PathIsADirectory", []string{"--database-url", "sqlite:PATH"}, true, exitFailure, []string{"weir: cannot open the SQLite database: "}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				path := filepath.Join(dir, "weir.db")
				if tt.mkdir {
					if err := os.Mkdir(path, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				before := sqliteState(t, dir)
				args := []string{"migrate", "up"}
				for _, a := range tt.args {
					args = append(args, strings.ReplaceAll(a, "PATH", path))
				}
				r := b.run(t, nil, args...)
				wantFailure(t, r, tt.code, tt.contains...)
				if after := sqliteState(t, dir); after != before {
					t.Fatalf("the directory changed:\nbefore %s\nafter  %s", before, after)
				}
			})
		}
	})

	// Another program's SQLite database: weir reports that it is not migrated,
	// and leaves its tables and rows alone.
	t.Run("ForeignDatabase", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "app.db")
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(t.Context(), "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes (body) VALUES ('keep me')"); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		// What the file holds, and which files there are. Not the bytes: the
		// SQLite driver puts a database it opens in WAL mode, which changes
		// the header even when weir then fails.
		content := func() string {
			var names []string
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				names = append(names, e.Name())
			}
			return strings.Join(names, " ") + "\n" + sqliteRows(t, path)
		}
		before := content()
		for i, args := range dbCommands {
			if creates(args) {
				continue
			}
			r := b.run(t, nil, append(args, "--database-url", sqliteURL(i, path))...)
			if args[0] == "migrate" {
				// status lists every migration as pending; down has nothing to revert.
				if code := map[bool]int{true: exitPending, false: exitOK}[args[1] == "status"]; r.code != code || r.stderr != "" {
					t.Errorf("weir %s: want exit %d and nothing on stderr: %v", args, code, r)
				}
				continue
			}
			wantFailure(t, r, exitFailure, "weir: schema is not migrated: ", "001_baseline", "run `weir migrate up`")
		}
		if after := content(); after != before {
			t.Fatalf("the database changed:\nbefore %s\nafter  %s", before, after)
		}
	})

	// sqlite:relative, a relative path.db, sqlite:///absolute, and either in
	// WEIR_DATABASE_URL, all name the same file.
	t.Run("URLSpellings", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		abs := filepath.Join(dir, "jobs.db")

		r := b.runIn(t, dir, nil, "migrate", "up", "--database-url", "sqlite:jobs.db")
		wantOK(t, r)
		if fi, err := os.Stat(abs); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("migrate up --database-url sqlite:jobs.db made no file %s: %v", abs, err)
		}
		r = b.runIn(t, dir, nil, "enqueue", "--kind", "spelled", "--database-url", "jobs.db")
		wantOK(t, r)
		id := ids(t, r.stdout)[0]

		r = b.run(t, nil, "jobs", "show", fmt.Sprint(id), "--json", "--database-url", "sqlite://"+abs)
		wantOK(t, r)
		var job shownJob
		decodeJSON(t, r.stdout, &job)
		if job.ID != id || job.Kind != "spelled" {
			t.Fatalf("jobs show through sqlite://%s: %+v", abs, job)
		}
		r = b.run(t, []string{envDatabaseURL + "=" + abs}, "jobs", "list")
		wantOK(t, r)
		if _, rows := tableRows(t, r.stdout); len(rows) != 1 || rows[0][1] != "spelled" {
			t.Fatalf("jobs list through %s=%s printed %q", envDatabaseURL, abs, r.stdout)
		}
		r = b.runIn(t, dir, []string{envDatabaseURL + "=sqlite:jobs.db"}, "queues", "list")
		wantOK(t, r)
		if _, rows := tableRows(t, r.stdout); len(rows) != 1 || strings.Join(rows[0], " ") != "default no - - - 0 1 0 0 0 0 0" {
			t.Fatalf("queues list through %s=sqlite:jobs.db printed %q", envDatabaseURL, r.stdout)
		}
		// The flag wins over the environment.
		r = b.runIn(t, dir, []string{envDatabaseURL + "=postgres://%zz"}, "migrate", "status", "--database-url", "jobs.db")
		wantOK(t, r)
		if got, want := statusLines(t, r.stdout), wantStatusApplied(sqliteMigrations, len(sqliteMigrations)); !slices.Equal(got, want) {
			t.Fatalf("status: got %q, want %q", got, want)
		}

		// A relative path is relative to the working directory: elsewhere it
		// names nothing, and weir creates nothing there.
		elsewhere := t.TempDir()
		r = b.runIn(t, elsewhere, nil, "jobs", "list", "--database-url", "jobs.db")
		wantFailure(t, r, exitFailure, "weir: no SQLite database at jobs.db (run `weir migrate up` to create one)\n")
		if s := sqliteState(t, elsewhere); s != "(no files)" {
			t.Fatalf("the directory holds %s", s)
		}
		for _, url := range []string{"sqlite:", "sqlite://"} {
			r = b.runIn(t, elsewhere, nil, "migrate", "up", "--database-url", url)
			wantFailure(t, r, exitUsage, "weir: database URL does not parse: a sqlite: URL needs a file path\n")
		}
		if s := sqliteState(t, elsewhere); s != "(no files)" {
			t.Fatalf("the directory holds %s", s)
		}
	})
}
