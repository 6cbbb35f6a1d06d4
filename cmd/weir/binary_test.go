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
	"github.com/weirq/weir/weirmigrate"
)

// TestBinary builds the weir command once and runs it as a user would.
func TestBinary(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the weir binary")
	}
	bin := filepath.Join(t.TempDir(), "weir")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The environment without WEIR_DATABASE_URL, so that only what a test passes counts.
	var baseEnv []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envDatabaseURL+"=") {
			baseEnv = append(baseEnv, kv)
		}
	}
	weir := func(t *testing.T, env []string, args ...string) result {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Env = append(baseEnv[:len(baseEnv):len(baseEnv)], env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("running weir %s: %v", args, err)
		}
		return result{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
	}

	t.Run("MigrateUpStatusDownUp", func(t *testing.T) {
		t.Parallel()
		schema := dbtest.Schema(t)
		url := dbtest.URL()

		r := weir(t, nil, "migrate", "up", "--database-url", url, "--schema", schema)
		wantOK(t, r)
		if want := migrations("applied", false); r.stdout != want {
			t.Fatalf("up printed %q, want %q", r.stdout, want)
		}

		// The URL from the environment.
		env := []string{envDatabaseURL + "=" + url}
		r = weir(t, env, "migrate", "status", "--schema", schema)
		wantOK(t, r)
		if got, want := statusLines(t, r.stdout), wantStatus("applied"); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("status after up: got %q, want %q", got, want)
		}

		r = weir(t, env, "migrate", "down", "--schema", schema)
		wantOK(t, r)
		known := knownMigrations()
		last := weirmigrate.Migration{Version: known[len(known)-1].Version, Name: known[len(known)-1].Name}
		if want := "reverted " + last.String() + "\n"; r.stdout != want {
			t.Fatalf("down printed %q, want %q", r.stdout, want)
		}
		if len(known) == 1 {
			r = weir(t, env, "migrate", "status", "--schema", schema)
			wantOK(t, r)
			if got, want := statusLines(t, r.stdout), wantStatus("pending"); strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("status after down: got %q, want %q", got, want)
			}
		}

		r = weir(t, env, "migrate", "up", "--schema", schema)
		wantOK(t, r)
		if want := "applied " + last.String() + "\n"; r.stdout != want {
			t.Fatalf("second up printed %q, want %q", r.stdout, want)
		}
		r = weir(t, env, "migrate", "up", "--schema", schema)
		wantOK(t, r)
		if r.stdout != "already up to date\n" {
			t.Fatalf("third up printed %q", r.stdout)
		}
	})

	t.Run("VersionAndHelp", func(t *testing.T) {
		t.Parallel()
		r := weir(t, nil, "version")
		wantOK(t, r)
		if r.stdout != "weir (devel)\n" && !strings.HasPrefix(r.stdout, "weir v") {
			t.Errorf("version printed %q", r.stdout)
		}
		r = weir(t, nil, "help")
		wantOK(t, r)
		if !strings.Contains(r.stdout, "weir <command>") {
			t.Errorf("help printed %q", r.stdout)
		}
		r = weir(t, nil)
		if r.code != exitUsage || !strings.Contains(r.stderr, "weir <command>") {
			t.Errorf("weir without arguments: %v", r)
		}
	})

	failures := []struct {
		name     string
		env      []string
		args     []string // "URL" and "SCHEMA" stand for the test's database and schema
		code     int
		contains string
	}{
		{"UnknownCommand", nil, []string{"migrat", "down", "--database-url", "URL", "--schema", "SCHEMA"}, exitUsage, "unknown command"},
		{"UnknownFlag", nil, []string{"migrate", "down", "--database-url", "URL", "--schema", "SCHEMA", "--force"}, exitUsage, "-force"},
		{"MissingURL", nil, []string{"migrate", "down", "--schema", "SCHEMA"}, exitUsage, envDatabaseURL},
		{"URLDoesNotParse", nil, []string{"migrate", "down", "--database-url", "postgres://%zz", "--schema", "SCHEMA"}, exitUsage, "weir: database URL does not parse: "},
		{"URLDoesNotAnswer", nil, []string{"migrate", "down", "--database-url", "postgres://postgres@127.0.0.1:1/test?connect_timeout=2", "--schema", "SCHEMA"}, exitFailure, "weir: cannot reach the database: "},
		{"URLInEnvDoesNotAnswer", []string{envDatabaseURL + "=postgres://postgres:hunter22@127.0.0.1:1/test?connect_timeout=2"}, []string{"migrate", "status", "--schema", "SCHEMA"}, exitFailure, "weir: cannot reach the database: "},
		{"BadSchema", nil, []string{"migrate", "down", "--database-url", "URL", "--schema", "Bad;Name"}, exitUsage, "Bad;Name"},
		{"NegativeSteps", nil, []string{"migrate", "down", "--database-url", "URL", "--schema", "SCHEMA", "--steps", "-1"}, exitUsage, "--steps"},
	}
	for _, tt := range failures {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			schema := dbtest.Schema(t)
			migrateUp(t, schema)
			before := snapshot(t, schema)
			args := make([]string, len(tt.args))
			for i, a := range tt.args {
				args[i] = strings.NewReplacer("URL", dbtest.URL(), "SCHEMA", schema).Replace(a)
			}
			r := weir(t, tt.env, args...)
			wantFailure(t, r, tt.code, tt.contains)
			if strings.Contains(r.stderr, "hunter22") {
				t.Errorf("stderr shows the password: %q", r.stderr)
			}
			if after := snapshot(t, schema); after != before {
				t.Fatalf("the schema changed:\nbefore %s\nafter  %s", before, after)
			}
			// The status weir prints is unchanged too.
			r = weir(t, nil, "migrate", "status", "--database-url", dbtest.URL(), "--schema", schema)
			wantOK(t, r)
			if got, want := statusLines(t, r.stdout), wantStatus("applied"); strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("status after the failure: got %q, want %q", got, want)
			}
		})
	}
}
