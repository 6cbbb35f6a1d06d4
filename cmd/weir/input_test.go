package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirq/weir/internal/dbtest"
)

// TestInputMistakes: small mistakes on the command line get a line that says
// what is wrong, exit 2, and change nothing.
func TestInputMistakes(t *testing.T) {
	t.Parallel()
	schema, weir := migrated(t)
	wantOK(t, weir(t, "enqueue", "--kind", "k"))
	before := dbState(t, schema)
	for _, tt := range []struct {
		args     []string
		contains []string
	}{
		{[]string{"enqueue", "--kind", "k", "--in", "10"}, []string{`invalid value "10" for flag -in: a duration needs a unit: 10s, 10m or 10h`}},
		{[]string{"enqueue", "--kind", "k", "--in", "1.5"}, []string{"a duration needs a unit: 1.5s"}},
		{[]string{"enqueue", "--kind", "k", "--in", "soon"}, []string{`invalid value "soon" for flag -in: not a duration such as 90s`}},
		{[]string{"jobs", "show", "-1"}, []string{`jobs show: job id "-1" is not a positive integer`}},
		{[]string{"jobs", "show", "--json", "-1"}, []string{`jobs show: job id "-1" is not a positive integer`}},
		{[]string{"jobs", "cancel", "1", "-5"}, []string{`jobs cancel: job id "-5" is not a positive integer`}},
		{[]string{"jobs", "show", "9223372036854775808"}, []string{"jobs show: job id 9223372036854775808 is out of range: ids go up to 9223372036854775807"}},
		{[]string{"jobs", "delete", "1", "99999999999999999999999"}, []string{"jobs delete: job id 99999999999999999999999 is out of range"}},
		{[]string{"jobs", "show", "-99999999999999999999"}, []string{`job id "-99999999999999999999" is not a positive integer`}},
		{[]string{"jobs", "show", "-x"}, []string{"flag provided but not defined: -x"}},
		{[]string{"enqueue", "--kind", "k", "--args", "@"}, []string{"--args @ needs a file name"}},
		{[]string{"enqueue", "--kind", "k", "--args", "@" + filepath.Join(t.TempDir(), "missing.json")}, []string{"--args: open ", "missing.json: no such file"}},
		{[]string{"jobs", "list", "--schema", "information_schema"}, []string{`bad --schema: schema "information_schema" is one of PostgreSQL's system schemas`}},
		{[]string{"migrate", "up", "--schema", "pg_catalog"}, []string{`bad --schema: schema "pg_catalog" is one of PostgreSQL's system schemas`}},
		{[]string{"migrate", "up", "--schema", "pg_temp_1"}, []string{`schema "pg_temp_1" is one of PostgreSQL's system schemas`}},
		{[]string{"queues", "list", "--schema", "pg_toast"}, []string{`schema "pg_toast" is one of PostgreSQL's system schemas`}},
	} {
		// The schema flag comes last and wins over the one weir adds.
		r := weir(t, tt.args...)
		if i := len(tt.args); i >= 2 && tt.args[i-2] == "--schema" {
			r = runWeir(t, map[string]string{envDatabaseURL: dbtest.URL()}, tt.args...)
		}
		wantFailure(t, r, exitUsage, tt.contains...)
	}
	if after := dbState(t, schema); after != before {
		t.Errorf("the database changed:\nbefore %s\nafter  %s", before, after)
	}
}

// TestEnqueueArgsFromFileAndStdin: --args @FILE and --args - take args too
// long for a command line.
func TestEnqueueArgsFromFileAndStdin(t *testing.T) {
	t.Parallel()
	schema, weir := migrated(t)
	env := map[string]string{envDatabaseURL: dbtest.URL()}
	// Longer than the 128 KiB a single argument may have on Linux.
	big := `{"blob": "` + strings.Repeat("x", 200_000) + `"}`
	path := filepath.Join(t.TempDir(), "args.json")
	if err := os.WriteFile(path, []byte(" "+big+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, r := range []result{
		weir(t, "enqueue", "--kind", "k", "--args", "@"+path),
		runWeirStdin(t, env, big+"\n", "enqueue", "--kind", "k", "--args", "-", "--schema", schema),
	} {
		wantOK(t, r)
		job := showJob(t, weir, ids(t, r.stdout)[0])
		if canonicalJSON(t, string(job.Args)) != canonicalJSON(t, big) {
			t.Errorf("args of %d bytes stored as %d bytes", len(big), len(job.Args))
		}
	}
	before := dbState(t, schema)
	for _, tt := range []struct {
		stdin, contains string
	}{
		{"", "--args is not valid JSON"},
		{"[1]", "--args must be a JSON object, got an array"},
		{strings.Repeat(" ", maxArgsInput+1), "--args: the standard input holds more than"},
	} {
		r := runWeirStdin(t, env, tt.stdin, "enqueue", "--kind", "k", "--args", "-", "--schema", schema)
		wantFailure(t, r, exitUsage, tt.contains)
	}
	if after := dbState(t, schema); after != before {
		t.Errorf("the database changed:\nbefore %s\nafter  %s", before, after)
	}
}

// TestDemoSchemaChecked: the demo checks --schema before anything runs, and
// refuses it with a SQLite store, which has no schemas.
func TestDemoSchemaChecked(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "demo.db")
	for _, tt := range []struct {
		args     []string
		contains string
	}{
		{[]string{"demo", "--database-url", dbtest.URL(), "--schema", `x"`}, `demo: bad --schema: schema "x\"" is not a lower-case SQL identifier`},
		{[]string{"demo", "--database-url", dbtest.URL(), "--schema", "pg_catalog"}, "is one of PostgreSQL's system schemas"},
		{[]string{"demo", "--database-url", path, "--schema", "other"}, "demo: --schema is for PostgreSQL; the demo's SQLite file has no schemas"},
		{[]string{"demo", "--database-url", "sqlite:" + path, "--schema", "weir_demo"}, "--schema is for PostgreSQL"},
		{[]string{"demo", "--schema", "other"}, "--schema is for PostgreSQL"},
	} {
		wantFailure(t, runWeir(t, nil, tt.args...), exitUsage, tt.contains)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the demo made %s: %v", path, err)
	}
}
