package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

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

	t.Run("EnqueueJobsQueues", func(t *testing.T) {
		t.Parallel()
		schema := dbtest.Schema(t)
		env := []string{envDatabaseURL + "=" + dbtest.URL()}
		wantOK(t, weir(t, env, "migrate", "up", "--schema", schema))
		pool := dbtest.Pool(t, nil)
		jobTable := pgx.Identifier{schema, "weir_job"}.Sanitize()
		stateOf := func(id int64) string {
			t.Helper()
			var state string
			err := pool.QueryRow(t.Context(), "SELECT state FROM "+jobTable+" WHERE id = $1", id).Scan(&state)
			if errors.Is(err, pgx.ErrNoRows) {
				return "gone"
			}
			if err != nil {
				t.Fatal(err)
			}
			return state
		}
		run := func(t *testing.T, args ...string) result {
			t.Helper()
			return weir(t, env, append(args, "--schema", schema)...)
		}

		r := run(t, "enqueue", "--kind", "email.send", "--args", `{"to":"ada@example.com"}`, "--queue", "mail", "--tags", "a,b", "--priority", "3")
		wantOK(t, r)
		id := ids(t, r.stdout)[0]
		var (
			kind, queue, args string
			tags              []string
			priority          int
		)
		if err := pool.QueryRow(t.Context(), "SELECT kind, queue, args::text, tags, priority FROM "+jobTable+" WHERE id = $1", id).
			Scan(&kind, &queue, &args, &tags, &priority); err != nil {
			t.Fatal(err)
		}
		if kind != "email.send" || queue != "mail" || args != `{"to": "ada@example.com"}` || strings.Join(tags, ",") != "a,b" || priority != 3 {
			t.Fatalf("row: %s %s %s %v %d", kind, queue, args, tags, priority)
		}

		r = run(t, "enqueue", "--kind", "k", "--count", "5", "--in", "1h")
		wantOK(t, r)
		var scheduled int
		if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+jobTable+" WHERE kind = 'k' AND state = 'scheduled' AND scheduled_at > now() + interval '50 minutes'").Scan(&scheduled); err != nil {
			t.Fatal(err)
		}
		if got := ids(t, r.stdout); len(got) != 5 || scheduled != 5 {
			t.Fatalf("--count 5 --in 1h printed %d ids; %d jobs are scheduled", len(got), scheduled)
		}

		r = run(t, "jobs", "list", "--json", "--kind", "email.send")
		wantOK(t, r)
		var listed []shownJob
		decodeJSON(t, r.stdout, &listed)
		if len(listed) != 1 || listed[0].ID != id {
			t.Fatalf("jobs list --json: %+v", listed)
		}
		r = run(t, "jobs", "list", "--limit", "4")
		wantOK(t, r)
		if !strings.HasSuffix(r.stdout, "more jobs follow: add --after "+fmt.Sprint(id+3)+" for the next page\n") {
			t.Fatalf("jobs list --limit 4 printed %q", r.stdout)
		}
		job := showJob(t, run, id)
		if job.ID != id || job.Kind != "email.send" || job.Priority != 3 || job.State != "available" {
			t.Fatalf("jobs show --json: %+v", job)
		}

		r = run(t, "jobs", "cancel", fmt.Sprint(id))
		wantOK(t, r)
		if want := fmt.Sprintf("job %d: cancelled\n", id); r.stdout != want || stateOf(id) != "cancelled" {
			t.Fatalf("cancel printed %q; the job is %s", r.stdout, stateOf(id))
		}
		r = run(t, "jobs", "retry", fmt.Sprint(id))
		wantOK(t, r)
		if want := fmt.Sprintf("job %d: retried\n", id); r.stdout != want || stateOf(id) != "available" {
			t.Fatalf("retry printed %q; the job is %s", r.stdout, stateOf(id))
		}
		r = run(t, "jobs", "delete", fmt.Sprint(id), fmt.Sprint(id+1))
		wantOK(t, r)
		if want := fmt.Sprintf("job %d: deleted\njob %d: deleted\n", id, id+1); r.stdout != want || stateOf(id) != "gone" || stateOf(id+1) != "gone" {
			t.Fatalf("delete printed %q; the jobs are %s, %s", r.stdout, stateOf(id), stateOf(id+1))
		}

		pausedOf := func() bool {
			t.Helper()
			var paused bool
			err := pool.QueryRow(t.Context(), "SELECT paused_at IS NOT NULL FROM "+pgx.Identifier{schema, "weir_queue"}.Sanitize()+" WHERE name = 'default'").Scan(&paused)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				t.Fatal(err)
			}
			return paused
		}
		r = run(t, "queues", "pause", "default")
		wantOK(t, r)
		if r.stdout != "queue default paused\n" || !pausedOf() {
			t.Fatalf("pause printed %q; paused=%v", r.stdout, pausedOf())
		}
		r = run(t, "queues", "list")
		wantOK(t, r)
		if _, rows := tableRows(t, r.stdout); len(rows) != 1 || strings.Join(rows[0], " ") != "default yes 4 0 0 0 0 0 0" {
			t.Fatalf("queues list printed %q", r.stdout)
		}
		r = run(t, "queues", "resume", "default")
		wantOK(t, r)
		if r.stdout != "queue default resumed\n" || pausedOf() {
			t.Fatalf("resume printed %q; paused=%v", r.stdout, pausedOf())
		}
		r = run(t, "queues", "list", "--json")
		wantOK(t, r)
		var queues []listedQueue
		decodeJSON(t, r.stdout, &queues)
		if len(queues) != 1 || queues[0].Paused || queues[0].Counts["scheduled"] != 4 {
			t.Fatalf("queues list --json: %+v", queues)
		}
	})

	t.Run("NotMigrated", func(t *testing.T) {
		t.Parallel()
		schema := dbtest.Schema(t)
		before := dbState(t, schema)
		env := []string{envDatabaseURL + "=" + dbtest.URL()}
		for _, args := range [][]string{
			{"enqueue", "--kind", "k"}, {"jobs", "list"}, {"jobs", "show", "1"}, {"jobs", "cancel", "1", "2"},
			{"queues", "list"}, {"queues", "pause", "default"},
		} {
			r := weir(t, env, append(args, "--schema", schema)...)
			wantFailure(t, r, exitFailure, "weir: schema is not migrated: ", "run `weir migrate up`")
		}
		if after := dbState(t, schema); after != before {
			t.Fatalf("the database changed:\nbefore %s\nafter  %s", before, after)
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

		{"EnqueueUnknownFlag", nil, []string{"enqueue", "--kind", "k", "--database-url", "URL", "--schema", "SCHEMA", "--urgent"}, exitUsage, "-urgent"},
		{"EnqueueMalformedArgs", nil, []string{"enqueue", "--kind", "k", "--args", "{to: ada}", "--database-url", "URL", "--schema", "SCHEMA"}, exitUsage, "weir: enqueue: --args is not valid JSON: "},
		{"EnqueueArgsNotAnObject", nil, []string{"enqueue", "--kind", "k", "--args", `"ada"`, "--database-url", "URL", "--schema", "SCHEMA"}, exitUsage, "weir: enqueue: --args must be a JSON object, got a string"},
		{"EnqueueRunAtAndIn", nil, []string{"enqueue", "--kind", "k", "--in", "1m", "--run-at", "2030-01-01T00:00:00Z", "--database-url", "URL", "--schema", "SCHEMA"}, exitUsage, "not both"},
		{"EnqueueNegativeIn", nil, []string{"enqueue", "--kind", "k", "--in", "-1m", "--database-url", "URL", "--schema", "SCHEMA"}, exitUsage, "negative"},
		{"EnqueueCountTooHigh", nil, []string{"enqueue", "--kind", "k", "--count", "1000000", "--database-url", "URL", "--schema", "SCHEMA"}, exitUsage, "--count"},
		{"EnqueueClientRejects", nil, []string{"enqueue", "--kind", "k", "--priority", "9", "--count", "100", "--database-url", "URL", "--schema", "SCHEMA"}, exitUsage, "weir: enqueue: priority 9 is out of range 1..4\n"},
		{"EnqueueURLDoesNotParse", nil, []string{"enqueue", "--kind", "k", "--database-url", "postgres://%zz", "--schema", "SCHEMA"}, exitUsage, "weir: database URL does not parse: "},
		{"EnqueueURLDoesNotAnswer", []string{envDatabaseURL + "=postgres://postgres:hunter22@127.0.0.1:1/test?connect_timeout=2"}, []string{"enqueue", "--kind", "k", "--schema", "SCHEMA"}, exitFailure, "weir: cannot reach the database: "},
		{"JobsUnknownAction", nil, []string{"jobs", "remove", "1", "--database-url", "URL", "--schema", "SCHEMA"}, exitUsage, `unknown action "remove"`},
		{"JobsListBadState", nil, []string{"jobs", "list", "--state", "queued", "--database-url", "URL", "--schema", "SCHEMA"}, exitUsage, `"queued" is not a job state`},
		{"JobsListUnknownFlag", nil, []string{"jobs", "list", "--database-url", "URL", "--schema", "SCHEMA", "--page", "2"}, exitUsage, "-page"},
		{"JobsShowUnknownID", nil, []string{"jobs", "show", "987654", "--json", "--database-url", "URL", "--schema", "SCHEMA"}, exitFailure, "weir: job 987654 not found\n"},
		{"JobsShowURLDoesNotAnswer", nil, []string{"jobs", "show", "AVAILABLE", "--database-url", "postgres://postgres@127.0.0.1:1/test?connect_timeout=2", "--schema", "SCHEMA"}, exitFailure, "weir: cannot reach the database: "},
		{"JobsCancelUnknownID", nil, []string{"jobs", "cancel", "987654", "--database-url", "URL", "--schema", "SCHEMA"}, exitFailure, "weir: job 987654: not found\n"},
		{"JobsCancelNotANumber", nil, []string{"jobs", "cancel", "AVAILABLE", "last", "--database-url", "URL", "--schema", "SCHEMA"}, exitUsage, `job id "last"`},
		{"JobsRetryRunning", nil, []string{"jobs", "retry", "RUNNING", "--database-url", "URL", "--schema", "SCHEMA"}, exitFailure, "weir: job RUNNING: running"},
		{"JobsRetryUniqueConflict", nil, []string{"jobs", "retry", "UNIQUE", "--database-url", "URL", "--schema", "SCHEMA"}, exitFailure, "weir: job UNIQUE: another job with the same unique key"},
		{"JobsDeleteRunning", nil, []string{"jobs", "delete", "RUNNING", "--database-url", "URL", "--schema", "SCHEMA"}, exitFailure, "weir: job RUNNING: running: cancel it first\n"},
		{"JobsDeleteURLDoesNotParse", nil, []string{"jobs", "delete", "AVAILABLE", "--database-url", "postgres://%zz", "--schema", "SCHEMA"}, exitUsage, "weir: database URL does not parse: "},
		{"QueuesUnknownAction", nil, []string{"queues", "stop", "default", "--database-url", "URL", "--schema", "SCHEMA"}, exitUsage, `unknown action "stop"`},
		{"QueuesPauseBadName", nil, []string{"queues", "pause", "mail queue", "--database-url", "URL", "--schema", "SCHEMA"}, exitUsage, `weir: queues pause: queue "mail queue"`},
		{"QueuesListURLDoesNotAnswer", nil, []string{"queues", "list", "--database-url", "postgres://postgres@127.0.0.1:1/test?connect_timeout=2", "--schema", "SCHEMA"}, exitFailure, "weir: cannot reach the database: "},
		{"QueuesResumeUnknownFlag", nil, []string{"queues", "resume", "held", "--all", "--database-url", "URL", "--schema", "SCHEMA"}, exitUsage, "-all"},
	}
	for _, tt := range failures {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			schema := f.schema
			before := dbState(t, schema)
			args := f.replace(tt.args)
			for i, a := range args {
				args[i] = strings.ReplaceAll(a, "URL", dbtest.URL())
			}
			r := weir(t, tt.env, args...)
			wantFailure(t, r, tt.code, f.replace([]string{tt.contains})...)
			if strings.Contains(r.stderr, "hunter22") {
				t.Errorf("stderr shows the password: %q", r.stderr)
			}
			if after := dbState(t, schema); after != before {
				t.Fatalf("the database changed:\nbefore %s\nafter  %s", before, after)
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
