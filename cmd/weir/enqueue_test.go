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
