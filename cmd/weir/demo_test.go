package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirq/weir/internal/dbtest"
)

// TestDemoPostgres runs the demo on PostgreSQL in a fresh schema.
func TestDemoPostgres(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	r := runWeir(t, nil, "demo", "--database-url", dbtest.URL(), "--schema", schema)
	wantOK(t, r)
	for _, want := range []string{
		"enqueued 29 demo jobs in PostgreSQL schema " + schema,
		"completed     27       27",
		"cancelled      1        1",
		"discarded      1        1",
		"every demo job ended as expected",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
		}
	}
	// A second run in the same schema works too, counting only its own jobs.
	wantOK(t, runWeir(t, nil, "demo", "--database-url", dbtest.URL(), "--schema", schema))
}

func TestDemoFailures(t *testing.T) {
	t.Parallel()
	wantFailure(t, runWeir(t, nil, "demo", "--database-url", "postgres://%zz"), 2, "does not parse")
	wantFailure(t, runWeir(t, nil, "demo", "--bogus"), 2, "bogus")
	wantFailure(t, runWeir(t, nil, "demo", "--database-url", "postgres://postgres@127.0.0.1:1/test?connect_timeout=2"), 1, "cannot reach")
}

// wantDemoSummary fails t unless out ends the demo as it should.
func wantDemoSummary(t *testing.T, out string) {
	t.Helper()
	for _, want := range []string{
		"\nSTATE       JOBS EXPECTED\n",
		"\ncompleted     27       27\n",
		"\ncancelled      1        1\n",
		"\ndiscarded      1        1\n",
		"\nevery demo job ended as expected\n",
		"\nFAILED ATTEMPTS\n",
		"(flaky, now completed) attempt 1: flaky: the first attempt fails\n",
		"(doomed, now discarded) attempt 3: doomed: attempt 3 fails too\n",
		"\nTry next:\n    weir jobs list --database-url ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

// demoNextCommand returns the arguments of the demo's suggested command that
// starts with prefix ("jobs show"), unquoted.
func demoNextCommand(t *testing.T, out, prefix string) []string {
	t.Helper()
	for line := range strings.SplitSeq(out, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "weir "+prefix); ok {
			args := strings.Fields(prefix)
			for _, f := range strings.Fields(rest) {
				args = append(args, strings.Trim(f, "'"))
			}
			return args
		}
	}
	t.Fatalf("demo output suggests no `weir %s`:\n%s", prefix, out)
	return nil
}

// demoStore returns the SQLite file that the demo's output names.
func demoStore(t *testing.T, out string) string {
	t.Helper()
	for line := range strings.SplitSeq(out, "\n") {
		if path, ok := strings.CutPrefix(line, "store: SQLite file "); ok {
			if !strings.Contains(out, "enqueued 29 demo jobs in SQLite file "+path+"\n") {
				t.Errorf("demo output names the store %s at the end only:\n%s", path, out)
			}
			return path
		}
	}
	t.Fatalf("demo output names no SQLite file:\n%s", out)
	return ""
}

// testBinaryDemo runs weir demo's binary.
func testBinaryDemo(t *testing.T, b *weirBinary) {
	// From a clean state, with no database running: the store is a SQLite file
	// in the cache directory.
	t.Run("DefaultStore", func(t *testing.T) {
		t.Parallel()
		home, cache := t.TempDir(), t.TempDir()
		r := b.run(t, []string{"HOME=" + home, "XDG_CACHE_HOME=" + cache}, "demo")
		wantOK(t, r)
		wantDemoSummary(t, r.stdout)
		store := demoStore(t, r.stdout)
		if rel, err := filepath.Rel(cache, store); err != nil || !filepath.IsLocal(rel) {
			t.Fatalf("the store %s is not inside the cache directory %s", store, cache)
		}
		if data, err := os.ReadFile(store); err != nil || !strings.HasPrefix(string(data), sqliteHeader) {
			t.Fatalf("the store %s is not a SQLite file: %v", store, err)
		}
		// The jobs are the user's alone: the file, and the directory weir made.
		for name, want := range map[string]os.FileMode{store: 0o600, filepath.Dir(store): 0o700} {
			if fi, err := os.Stat(name); err != nil || fi.Mode().Perm() != want {
				t.Errorf("%s: %v; want mode %v", name, fileMode(fi, err), want)
			}
		}
		if entries, err := os.ReadDir(home); err != nil || len(entries) != 0 {
			t.Fatalf("the demo wrote in HOME: %v %v", entries, err)
		}
		// The command the demo suggests works on its store, and shows the
		// discarded job's attempts.
		show := b.run(t, []string{"HOME=" + home, "XDG_CACHE_HOME=" + cache}, demoNextCommand(t, r.stdout, "jobs show")...)
		wantOK(t, show)
		if !strings.Contains(show.stdout, "doomed: attempt 3 fails too") || !strings.Contains(show.stdout, "discarded") {
			t.Errorf("weir jobs show, as the demo suggests it, shows:\n%s", show.stdout)
		}
	})

	// A .db path names a SQLite file, which the demo creates. WEIR_DATABASE_URL
	// does not count.
	t.Run("SQLitePath", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "demo.db")
		r := b.run(t, []string{envDatabaseURL + "=" + deadURL}, "demo", "--database-url", path)
		wantOK(t, r)
		wantDemoSummary(t, r.stdout)
		if store := demoStore(t, r.stdout); store != path {
			t.Fatalf("the demo names the store %s, want %s", store, path)
		}
		if _, err := os.Stat(path); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("Postgres", func(t *testing.T) {
		t.Parallel()
		schema := dbtest.Schema(t)
		r := b.run(t, nil, "demo", "--database-url", dbtest.URL(), "--schema", schema)
		wantOK(t, r)
		wantDemoSummary(t, r.stdout)
		for _, want := range []string{"enqueued 29 demo jobs in PostgreSQL schema " + schema + "\n", "store: PostgreSQL schema " + schema + "\n"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
			}
		}
	})

	// With no cache directory and no URL, there is nowhere to keep the jobs.
	t.Run("NoCacheDirectory", func(t *testing.T) {
		t.Parallel()
		r := b.run(t, []string{"HOME=", "XDG_CACHE_HOME="}, "demo")
		wantFailure(t, r, exitFailure, "weir: demo: no cache directory for the embedded store: ", "(pass --database-url)")
	})
}

// fileMode describes the permissions of fi, or err when Stat failed.
func fileMode(fi os.FileInfo, err error) string {
	if err != nil {
		return err.Error()
	}
	return "mode " + fi.Mode().Perm().String()
}
