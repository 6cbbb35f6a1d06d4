package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
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

// wantDemoSummary fails t unless out is the demo's, said from its start, and
// ends it as it should, its suggestions calling weir as self.
func wantDemoSummary(t *testing.T, out, self string) {
	t.Helper()
	if !strings.HasPrefix(out, "weir demo: migrating the ") {
		t.Errorf("demo output does not start by saying what it does:\n%s", out)
	}
	for _, want := range []string{
		"\nworking them with a client of 5 workers; a few fail and are retried, as planned\n",
		"\nSTATE       JOBS EXPECTED\n",
		"\ncompleted     27       27\n",
		"\ncancelled      1        1\n",
		"\ndiscarded      1        1\n",
		"\nevery demo job ended as expected\n",
		"\nFAILED ATTEMPTS\n",
		"(flaky, now completed) attempt 1: flaky: the first attempt fails\n",
		"(doomed, now discarded) attempt 3: doomed: attempt 3 fails too\n",
		"\nTry next:\n    " + self + " jobs list --database-url ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

// demoNextLine returns the demo's suggested command line that runs weir's
// action ("jobs show"), as printed.
func demoNextLine(t *testing.T, out, action string) string {
	t.Helper()
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, "    ") && strings.Contains(line, " "+action+" ") {
			return strings.TrimSpace(line)
		}
	}
	t.Fatalf("demo output suggests no %s:\n%s", action, out)
	return ""
}

// runShell runs line with sh in dir, with env added to the test's
// environment, as a reader who pastes it would.
func runShell(t *testing.T, dir string, env []string, line string) result {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "sh", "-c", line)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("sh -c %q: %v", line, err)
	}
	return result{code, stdout.String(), stderr.String()}
}

// TestSelfCommand: the demo's suggestions call weir the way it was run.
func TestSelfCommand(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		arg0    string
		inClone bool
		want    string
	}{
		{"/tmp/go-build4095654400/b001/exe/weir", true, "go run ./cmd/weir"},
		{"/root/.cache/go-build/ff/fff4434304fcbe97-d/weir", true, "go run ./cmd/weir"},
		{"/tmp/go-build4095654400/b001/exe/weir", false, "go run github.com/weirq/weir/cmd/weir@latest"},
		{"./weir", true, "'./weir'"},
		{"/opt/my tools/weir", false, "'/opt/my tools/weir'"},
		{"weir", false, "weir"},
	} {
		if got := selfCommand(c.arg0, c.inClone); got != c.want {
			t.Errorf("selfCommand(%q, %v) = %q, want %q", c.arg0, c.inClone, got, c.want)
		}
	}
	if !isClone("../..") || isClone(".") {
		t.Error("isClone does not tell the clone's top from cmd/weir")
	}
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
		wantDemoSummary(t, r.stdout, shellQuote(b.path))
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
		// The command the demo suggests works as printed on its store, and
		// shows the discarded job's attempts.
		show := runShell(t, "", []string{"HOME=" + home, "XDG_CACHE_HOME=" + cache}, demoNextLine(t, r.stdout, "jobs show"))
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
		wantDemoSummary(t, r.stdout, shellQuote(b.path))
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
		wantDemoSummary(t, r.stdout, shellQuote(b.path))
		for _, want := range []string{"enqueued 29 demo jobs in PostgreSQL schema " + schema + "\n", "store: PostgreSQL schema " + schema + "\n"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
			}
		}
	})

	// With no cache directory and no URL, there is nowhere to keep the jobs.
	// Run as the README says, with go run from the clone: the suggestions
	// work as printed there.
	t.Run("GoRun", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "demo.db")
		r := runShell(t, "../..", nil, "go run ./cmd/weir demo --database-url "+shellQuote(path))
		wantOK(t, r)
		wantDemoSummary(t, r.stdout, "go run ./cmd/weir")
		if !strings.Contains(r.stdout, "`go install ./cmd/weir` in the clone installs it as weir") {
			t.Errorf("the demo does not say how to install weir:\n%s", r.stdout)
		}
		show := runShell(t, "../..", nil, demoNextLine(t, r.stdout, "jobs show"))
		wantOK(t, show)
		if !strings.Contains(show.stdout, "doomed: attempt 3 fails too") {
			t.Errorf("weir jobs show, as the demo suggests it, shows:\n%s", show.stdout)
		}
	})

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
