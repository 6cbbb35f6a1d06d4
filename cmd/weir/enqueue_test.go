package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/internal/dbtest"
)

// migrated returns a freshly migrated schema and an environment naming the
// test database, and a function that runs weir on that schema in-process.
func migrated(t *testing.T) (string, func(t *testing.T, args ...string) result) {
	t.Helper()
	schema := dbtest.Schema(t)
	migrateUp(t, schema)
	env := map[string]string{envDatabaseURL: dbtest.URL()}
	return schema, func(t *testing.T, args ...string) result {
		t.Helper()
		return runWeir(t, env, append(args, "--schema", schema)...)
	}
}

func TestEnqueueDefaults(t *testing.T) {
	t.Parallel()
	_, weir := migrated(t)

	r := weir(t, "enqueue", "--kind", "email.send")
	wantOK(t, r)
	got := ids(t, r.stdout)
	if len(got) != 1 {
		t.Fatalf("enqueue printed %q, want one id", r.stdout)
	}
	job := showJob(t, weir, got[0])
	if job.Kind != "email.send" || job.Queue != "default" || job.State != "available" ||
		job.Priority != 2 || job.MaxAttempts != 25 || job.Attempt != 0 ||
		string(job.Args) != "{}" || len(job.Tags) != 0 || job.Tags == nil {
		t.Fatalf("job with defaults: %+v", job)
	}
	if job.ScheduledAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("job scheduled at %s, want now", job.ScheduledAt)
	}
}

func TestEnqueueOptions(t *testing.T) {
	t.Parallel()
	_, weir := migrated(t)

	r := weir(t, "enqueue", "--kind", "report.build", "--args", `{ "b": [1, 2], "a": {"x": null} }`,
		"--queue", "reports", "--priority", "1", "--max-attempts", "3", "--tags", "nightly, eu",
		"--run-at", "2099-01-02T03:04:05+02:00")
	wantOK(t, r)
	job := showJob(t, weir, ids(t, r.stdout)[0])
	want := time.Date(2099, 1, 2, 1, 4, 5, 0, time.UTC)
	if job.Kind != "report.build" || job.Queue != "reports" || job.State != "scheduled" ||
		job.Priority != 1 || job.MaxAttempts != 3 || !slices.Equal(job.Tags, []string{"nightly", "eu"}) ||
		!job.ScheduledAt.Equal(want) || job.ScheduledAt.Location() != time.UTC {
		t.Fatalf("job: %+v", job)
	}
	var args struct {
		A map[string]any `json:"a"`
		B []int          `json:"b"`
	}
	decodeJSON(t, string(job.Args), &args)
	if !slices.Equal(args.B, []int{1, 2}) || len(args.A) != 1 {
		t.Fatalf("args %s", job.Args)
	}

	r = weir(t, "enqueue", "--kind", "later", "--in", "90m")
	wantOK(t, r)
	job = showJob(t, weir, ids(t, r.stdout)[0])
	// The client's clock sets the time, the database's the creation: allow for skew.
	if d := job.ScheduledAt.Sub(job.CreatedAt); job.State != "scheduled" || d < 89*time.Minute || d > 91*time.Minute {
		t.Fatalf("--in 90m: state %s, scheduled %s after creation", job.State, d)
	}

	// A time in the past makes the job due at once.
	r = weir(t, "enqueue", "--kind", "late", "--run-at", "2001-01-01T00:00:00Z")
	wantOK(t, r)
	if job := showJob(t, weir, ids(t, r.stdout)[0]); job.State != "available" {
		t.Fatalf("job scheduled in the past is %s", job.State)
	}
}

func TestEnqueueCount(t *testing.T) {
	t.Parallel()
	schema, weir := migrated(t)
	// 3 goes through one INSERT, 200 through COPY.
	for _, n := range []int{3, 200} {
		queue := fmt.Sprintf("q%d", n)
		r := weir(t, "enqueue", "--kind", "bulk", "--count", fmt.Sprint(n), "--queue", queue, "--args", `{"k":"v"}`)
		wantOK(t, r)
		got := ids(t, r.stdout)
		if len(got) != n || !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != n {
			t.Fatalf("--count %d printed %d ids: %q", n, len(got), r.stdout)
		}
		var count int
		var minID, maxID int64
		err := dbtest.Pool(t, nil).QueryRow(t.Context(), "SELECT count(*), min(id), max(id) FROM "+
			pgx.Identifier{schema, "weir_job"}.Sanitize()+" WHERE queue = $1 AND kind = 'bulk' AND args = '{\"k\":\"v\"}'", queue,
		).Scan(&count, &minID, &maxID)
		if err != nil {
			t.Fatal(err)
		}
		if count != n || minID != got[0] || maxID != got[n-1] {
			t.Fatalf("--count %d: the database holds %d jobs, ids %d..%d; printed %d..%d", n, count, minID, maxID, got[0], got[n-1])
		}
	}
}

func TestEnqueueURLFromEnvAndFlag(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	migrateUp(t, schema)

	r := runWeir(t, map[string]string{envDatabaseURL: dbtest.URL()}, "enqueue", "--kind", "k", "--schema", schema)
	wantOK(t, r)
	r = runWeir(t, map[string]string{envDatabaseURL: "postgres://%zz"}, "enqueue", "--kind", "k", "--schema", schema, "--database-url", dbtest.URL())
	wantOK(t, r)
	r = runWeir(t, nil, "jobs", "list", "--schema", schema, "--database-url", dbtest.URL())
	wantOK(t, r)
	if n := strings.Count(r.stdout, "\n"); n != 3 {
		t.Fatalf("want a header and 2 jobs: %q", r.stdout)
	}
}

// TestEnqueueUnique checks the --unique-* flags: a duplicate prints the
// existing job's id and says so on stderr, a key by some args keys ignores the
// others, and replace and debounce change the pending job as the client does.
func TestEnqueueUnique(t *testing.T) {
	t.Parallel()
	_, weir := migrated(t)
	enqueue := func(args ...string) (int64, string) {
		t.Helper()
		r := weir(t, append([]string{"enqueue", "--kind", "sync"}, args...)...)
		if r.code != 0 {
			t.Fatalf("enqueue %v: %v", args, r)
		}
		got := ids(t, r.stdout)
		if len(got) != 1 {
			t.Fatalf("enqueue %v printed %q", args, r.stdout)
		}
		return got[0], r.stderr
	}
	keys := []string{"--unique-args-key", "account", "--unique-args-key", "the region"}
	first, stderr := enqueue(append(keys, "--args", `{"account": "a", "the region": "eu", "note": 1}`, "--in", "1h")...)
	if stderr != "" {
		t.Fatalf("first insert said %q", stderr)
	}
	id, stderr := enqueue(append(keys, "--args", `{"the region": "eu", "account": "a", "note": 2}`)...)
	if id != first || stderr != fmt.Sprintf("weir: enqueue: job %d holds the unique key (scheduled); nothing inserted\n", first) {
		t.Fatalf("duplicate: id %d (want %d), stderr %q", id, first, stderr)
	}
	if job := showJob(t, weir, first); !strings.Contains(string(job.Args), `"note": 1`) {
		t.Fatalf("skip changed the job: %s", job.Args)
	}
	id, stderr = enqueue(append(keys, "--args", `{"account": "a", "the region": "eu", "note": 3}`, "--unique-on-conflict", "replace",
		"--priority", "4", "--in", "3h")...)
	job := showJob(t, weir, first)
	if id != first || stderr != fmt.Sprintf("weir: enqueue: job %d held the unique key and was replaced\n", first) ||
		!strings.Contains(string(job.Args), `"note": 3`) || job.Priority != 4 || job.ScheduledAt.After(time.Now().Add(2*time.Hour)) {
		t.Fatalf("replace: id %d stderr %q job %+v", id, stderr, job)
	}
	id, stderr = enqueue(append(keys, "--args", `{"account": "a", "the region": "eu"}`, "--unique-on-conflict", "debounce")...)
	if job := showJob(t, weir, first); id != first || !strings.Contains(stderr, "replaced") || job.State != "available" {
		t.Fatalf("debounce to now: id %d stderr %q job %+v", id, stderr, job)
	}
	// Other unique flags: by queue and period among the given states.
	byQueue := []string{"--unique-by-queue", "--unique-period", "1h", "--unique-states", "scheduled,available,running,retryable", "--queue", "uq"}
	q1, _ := enqueue(byQueue...)
	if q2, stderr := enqueue(append(byQueue, "--args", `{"other": true}`)...); q2 != q1 || !strings.Contains(stderr, "nothing inserted") {
		t.Fatalf("by queue: %d then %d, stderr %q", q1, q2, stderr)
	}
	if q3, stderr := enqueue(append(byQueue, "--run-at", "2099-01-01T00:00:00Z")...); q3 == q1 || stderr != "" {
		t.Fatalf("another period: %d (first %d), stderr %q", q3, q1, stderr)
	}
	// --count with a unique job: one job, the later copies its duplicates.
	r := weir(t, "enqueue", "--kind", "once", "--unique-by-args", "--count", "3")
	if got := ids(t, r.stdout); r.code != 0 || len(got) != 3 || got[0] != got[1] || got[1] != got[2] || strings.Count(r.stderr, "nothing inserted") != 2 {
		t.Fatalf("--count 3 of a unique job: %v", r)
	}
}

// TestEnqueueUniqueBadFlags checks that bad --unique-* values are refused with
// exit 2 and nothing inserted.
func TestEnqueueUniqueBadFlags(t *testing.T) {
	t.Parallel()
	schema, weir := migrated(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--unique-by-args", "--unique-on-conflict", "upsert"}, `weir: enqueue: unique conflict mode "upsert" is not one of skip, replace, debounce`},
		{[]string{"--unique-on-conflict", "replace"}, `weir: enqueue: unique conflict mode "replace" is set but the job is not unique`},
		{[]string{"--unique-args-key", ""}, "weir: enqueue: unique args key is empty"},
		{[]string{"--unique-args-key", "a", "--unique-args-key", "a"}, `weir: enqueue: unique args key "a" is listed twice`},
		{[]string{"--unique-states", "available,bogus"}, `weir: enqueue: unique state "bogus" is not a job state`},
		{[]string{"--unique-states", ""}, `weir: enqueue: --unique-states "" has an empty item`},
		{[]string{"--unique-period", "0s"}, "weir: enqueue: --unique-period 0s is under one second"},
		{[]string{"--unique-period", "10"}, "weir: enqueue: invalid value \"10\" for flag -unique-period: a duration needs a unit"},
	} {
		r := weir(t, append([]string{"enqueue", "--kind", "k"}, tt.args...)...)
		wantFailure(t, r, exitUsage, tt.want)
	}
	var n int
	if err := dbtest.Pool(t, nil).QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{schema, "weir_job"}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d jobs written by bad flags", n)
	}
}
