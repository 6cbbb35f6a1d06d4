// Package drivertest is the conformance suite that every weir driver passes. A
// driver's own tests call Run with a function that returns a driver on a fresh,
// migrated schema.
package drivertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// Setup returns a driver on a fresh schema with every migration applied. Each call
// must be independent of the others, so that subtests run in parallel.
type Setup func(t *testing.T) weirdriver.Driver

// Run runs the suite.
func Run(t *testing.T, setup Setup) {
	tests := []struct {
		name string
		fn   func(t *testing.T, d weirdriver.Driver)
	}{
		{"InsertReturnsJobsInOrder", testInsertReturnsJobsInOrder},
		{"InsertScheduledInFuture", testInsertScheduledInFuture},
		{"InsertUnique", testInsertUnique},
		{"InsertBulk", testInsertBulk},
		{"TxRollbackLeavesNothing", testTxRollbackLeavesNothing},
		{"GetNotFound", testGetNotFound},
		{"ListFiltersAndPages", testListFiltersAndPages},
		{"Cancel", testCancel},
		{"Retry", testRetry},
		{"Delete", testDelete},
		{"QueueList", testQueueList},
		{"MigrationsApplied", testMigrationsApplied},
		{"QueuePauseResume", testQueuePauseResume},

		// The worker runtime's statements (runtime.go).
		{"ClaimOrderAndMax", testClaimOrderAndMax},
		{"ClaimSetsLease", testClaimSetsLease},
		{"ClaimConcurrentNoOverlap", testClaimConcurrentNoOverlap},
		{"FinalizeOutcomes", testFinalizeOutcomes},
		{"FinalizeStaleChangesNothing", testFinalizeStaleChangesNothing},
		{"FinalizeCancelRequested", testFinalizeCancelRequested},
		{"FinalizeCompletionsBatch", testFinalizeCompletionsBatch},
		{"InsertNotifies", testInsertNotifies},
		{"InsertNotifiesConcurrently", testInsertNotifiesConcurrently},
		{"FinalizeRetryPastMaxAttempts", testFinalizeRetryPastMaxAttempts},
		{"RuntimeNotifies", testRuntimeNotifies},
		{"Renew", testRenew},
		{"Rescue", testRescue},
		{"Schedule", testSchedule},
		{"Prune", testPrune},
		{"LeaderElection", testLeaderElection},
		{"LeaderElectionConcurrent", testLeaderElectionConcurrent},
		{"Listen", testListen},
		{"RuntimeRejectsBadParams", testRuntimeRejectsBadParams},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, setup(t))
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func params(kind, queue string, args string) *weirdriver.JobInsertParams {
	return &weirdriver.JobInsertParams{
		Kind: kind, Queue: queue, Args: json.RawMessage(args), Priority: 2, MaxAttempts: 3,
	}
}

func insertOne(t *testing.T, d weirdriver.Driver, p *weirdriver.JobInsertParams) *weirtype.JobRow {
	t.Helper()
	res, err := d.Executor().JobInsert(ctx(t), []*weirdriver.JobInsertParams{p})
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	return res[0].Job
}

func testInsertReturnsJobsInOrder(t *testing.T, d weirdriver.Driver) {
	var batch []*weirdriver.JobInsertParams
	for i := range 20 {
		p := params(fmt.Sprintf("kind%d", i), "q", fmt.Sprintf(`{"n":%d}`, i))
		p.Tags = []string{"t", fmt.Sprint(i)}
		p.Metadata = json.RawMessage(`{"m":1}`)
		p.Priority = 1 + i%4
		batch = append(batch, p)
	}
	res, err := d.Executor().JobInsert(ctx(t), batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(batch) {
		t.Fatalf("got %d results for %d jobs", len(res), len(batch))
	}
	for i, r := range res {
		j := r.Job
		if r.Duplicate {
			t.Errorf("job %d: duplicate", i)
		}
		if j.Kind != batch[i].Kind || j.Priority != batch[i].Priority || j.State != weirtype.JobStateAvailable {
			t.Errorf("job %d: got kind %s priority %d state %s", i, j.Kind, j.Priority, j.State)
		}
		var args struct{ N int }
		if err := json.Unmarshal(j.Args, &args); err != nil || args.N != i {
			t.Errorf("job %d: args %s", i, j.Args)
		}
		if !slices.Equal(j.Tags, []string{"t", fmt.Sprint(i)}) {
			t.Errorf("job %d: tags %v", i, j.Tags)
		}
		if j.Attempt != 0 || j.MaxAttempts != 3 || j.LeaseToken != 0 || j.LeaseExpiresAt != nil || len(j.Errors) != 0 {
			t.Errorf("job %d: not fresh: %+v", i, j)
		}
		if i > 0 && j.ID <= res[i-1].Job.ID {
			t.Errorf("ids not increasing: %d after %d", j.ID, res[i-1].Job.ID)
		}
		got, err := d.Executor().JobGet(ctx(t), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Metadata) != `{"m": 1}` && string(got.Metadata) != `{"m":1}` {
			t.Errorf("job %d: metadata %s", i, got.Metadata)
		}
	}
}

func testInsertScheduledInFuture(t *testing.T, d weirdriver.Driver) {
	p := params("k", "q", `{}`)
	p.ScheduledAt = time.Now().Add(time.Hour)
	job := insertOne(t, d, p)
	if job.State != weirtype.JobStateScheduled {
		t.Fatalf("state %s, want scheduled", job.State)
	}
	if !job.ScheduledAt.Equal(p.ScheduledAt.Truncate(time.Microsecond)) {
		t.Fatalf("scheduled_at %v, want %v", job.ScheduledAt, p.ScheduledAt)
	}
	p.ScheduledAt = time.Now().Add(-time.Hour)
	if job := insertOne(t, d, p); job.State != weirtype.JobStateAvailable {
		t.Fatalf("past schedule: state %s, want available", job.State)
	}
}

func testInsertUnique(t *testing.T, d weirdriver.Driver) {
	unique := func() *weirdriver.JobInsertParams {
		p := params("u", "q", `{}`)
		p.UniqueKey = []byte("key-1")
		p.UniqueStates = []weirtype.JobState{
			weirtype.JobStateScheduled, weirtype.JobStateAvailable,
			weirtype.JobStateRunning, weirtype.JobStateRetryable,
		}
		return p
	}
	first := insertOne(t, d, unique())
	res, err := d.Executor().JobInsert(ctx(t), []*weirdriver.JobInsertParams{unique(), params("other", "q", `{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Duplicate || res[0].Job.ID != first.ID {
		t.Fatalf("second insert: duplicate=%v id=%d, want duplicate of %d", res[0].Duplicate, res[0].Job.ID, first.ID)
	}
	if res[1].Duplicate {
		t.Fatal("a job without a unique key was reported as a duplicate")
	}
	if !slices.Equal(first.UniqueStates, unique().UniqueStates) || string(first.UniqueKey) != "key-1" {
		t.Fatalf("unique fields not stored: %q %v", first.UniqueKey, first.UniqueStates)
	}
	// Once the holder leaves the unique states, the key is free again.
	if _, err := d.Executor().JobCancel(ctx(t), first.ID); err != nil {
		t.Fatal(err)
	}
	again := insertOne(t, d, unique())
	if again.ID == first.ID {
		t.Fatal("insert after cancel returned the cancelled job")
	}
	// Retrying the cancelled job would give two live jobs the same key.
	if _, err := d.Executor().JobRetry(ctx(t), first.ID); !errors.Is(err, weirdriver.ErrUniqueConflict) {
		t.Fatalf("retry of a job whose key is taken: %v, want ErrUniqueConflict", err)
	}
}

func testInsertBulk(t *testing.T, d weirdriver.Driver) {
	var batch []*weirdriver.JobInsertParams
	for i := range 500 {
		p := params("bulk", fmt.Sprintf("q%d", i%3), fmt.Sprintf(`{"n":%d}`, i))
		if i%10 == 0 {
			p.ScheduledAt = time.Now().Add(time.Hour)
		}
		p.Tags = []string{"b"}
		batch = append(batch, p)
	}
	jobs, err := d.Executor().JobInsertBulk(ctx(t), batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != len(batch) {
		t.Fatalf("got %d jobs for %d", len(jobs), len(batch))
	}
	for i, j := range jobs {
		got, err := d.Executor().JobGet(ctx(t), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != j.State || got.Queue != batch[i].Queue || !slices.Equal(got.Tags, []string{"b"}) ||
			!got.CreatedAt.Equal(j.CreatedAt) || !got.ScheduledAt.Equal(j.ScheduledAt) {
			t.Fatalf("job %d: stored %+v, returned %+v", i, got, j)
		}
		want := weirtype.JobStateAvailable
		if i%10 == 0 {
			want = weirtype.JobStateScheduled
		}
		if got.State != want {
			t.Fatalf("job %d: state %s, want %s", i, got.State, want)
		}
	}
}

func testTxRollbackLeavesNothing(t *testing.T, d weirdriver.Driver) {
	tx, err := d.Executor().Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tx.JobInsert(ctx(t), []*weirdriver.JobInsertParams{params("k", "q", `{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Executor().JobGet(ctx(t), res[0].Job.ID); !errors.Is(err, weirdriver.ErrNotFound) {
		t.Fatalf("job after rollback: %v, want ErrNotFound", err)
	}
}

func testGetNotFound(t *testing.T, d weirdriver.Driver) {
	for name, op := range map[string]func(context.Context, int64) (*weirtype.JobRow, error){
		"get": d.Executor().JobGet, "cancel": d.Executor().JobCancel,
		"retry": d.Executor().JobRetry, "delete": d.Executor().JobDelete,
	} {
		if _, err := op(ctx(t), 424242); !errors.Is(err, weirdriver.ErrNotFound) {
			t.Errorf("%s of a missing job: %v, want ErrNotFound", name, err)
		}
	}
}

func testListFiltersAndPages(t *testing.T, d weirdriver.Driver) {
	var ids []int64
	for i := range 10 {
		p := params([]string{"a", "b"}[i%2], []string{"q1", "q2"}[i/5], `{}`)
		ids = append(ids, insertOne(t, d, p).ID)
	}
	list := func(p weirdriver.JobListParams) []int64 {
		t.Helper()
		if p.Limit == 0 {
			p.Limit = 100
		}
		jobs, err := d.Executor().JobList(ctx(t), &p)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		return out
	}
	if got := list(weirdriver.JobListParams{}); !slices.Equal(got, ids) {
		t.Fatalf("all: %v, want %v", got, ids)
	}
	if got := list(weirdriver.JobListParams{Kinds: []string{"a"}, Queues: []string{"q2"}}); !slices.Equal(got, []int64{ids[6], ids[8]}) {
		t.Fatalf("kind a in q2: %v", got)
	}
	if got := list(weirdriver.JobListParams{AfterID: ids[3], Limit: 3}); !slices.Equal(got, ids[4:7]) {
		t.Fatalf("page after %d: %v", ids[3], got)
	}
	if got := list(weirdriver.JobListParams{AfterID: ids[3], Descending: true}); !slices.Equal(got, []int64{ids[2], ids[1], ids[0]}) {
		t.Fatalf("descending page before %d: %v", ids[3], got)
	}
	if _, err := d.Executor().JobCancel(ctx(t), ids[0]); err != nil {
		t.Fatal(err)
	}
	if got := list(weirdriver.JobListParams{States: []weirtype.JobState{weirtype.JobStateCancelled}}); !slices.Equal(got, ids[:1]) {
		t.Fatalf("cancelled: %v", got)
	}
	if got := list(weirdriver.JobListParams{CreatedAfter: time.Now().Add(time.Hour)}); len(got) != 0 {
		t.Fatalf("created in the future: %v", got)
	}
	if got := list(weirdriver.JobListParams{CreatedBefore: time.Now().Add(time.Hour)}); len(got) != 10 {
		t.Fatalf("created before an hour from now: %v", got)
	}
}

func testCancel(t *testing.T, d weirdriver.Driver) {
	job := insertOne(t, d, params("k", "q", `{}`))
	got, err := d.Executor().JobCancel(ctx(t), job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != weirtype.JobStateCancelled || got.FinalizedAt == nil {
		t.Fatalf("after cancel: state %s finalized %v", got.State, got.FinalizedAt)
	}
	if _, err := d.Executor().JobCancel(ctx(t), job.ID); !errors.Is(err, weirdriver.ErrJobFinal) {
		t.Fatalf("second cancel: %v, want ErrJobFinal", err)
	}
}

func testRetry(t *testing.T, d weirdriver.Driver) {
	p := params("k", "q", `{}`)
	p.ScheduledAt = time.Now().Add(time.Hour)
	job := insertOne(t, d, p)
	if _, err := d.Executor().JobCancel(ctx(t), job.ID); err != nil {
		t.Fatal(err)
	}
	got, err := d.Executor().JobRetry(ctx(t), job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != weirtype.JobStateAvailable || got.FinalizedAt != nil || got.CancelRequestedAt != nil ||
		got.ScheduledAt.After(time.Now().Add(time.Minute)) {
		t.Fatalf("after retry: %+v", got)
	}
}

func testDelete(t *testing.T, d weirdriver.Driver) {
	job := insertOne(t, d, params("k", "q", `{}`))
	got, err := d.Executor().JobDelete(ctx(t), job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != job.ID {
		t.Fatalf("deleted %d, want %d", got.ID, job.ID)
	}
	if _, err := d.Executor().JobGet(ctx(t), job.ID); !errors.Is(err, weirdriver.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
}

func testQueueList(t *testing.T, d weirdriver.Driver) {
	for range 3 {
		insertOne(t, d, params("k", "alpha", `{}`))
	}
	j := insertOne(t, d, params("k", "beta", `{}`))
	if _, err := d.Executor().JobCancel(ctx(t), j.ID); err != nil {
		t.Fatal(err)
	}
	queues, err := d.Executor().QueueList(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(queues) != 2 || queues[0].Name != "alpha" || queues[0].Counts[weirtype.JobStateAvailable] != 3 ||
		queues[1].Name != "beta" || queues[1].Counts[weirtype.JobStateCancelled] != 1 {
		t.Fatalf("queues: %+v %+v", queues[0], queues[len(queues)-1])
	}
}

func testMigrationsApplied(t *testing.T, d weirdriver.Driver) {
	applied, err := d.MigrationsApplied(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	known := d.Migrations()
	if len(applied) != len(known) {
		t.Fatalf("applied %d migrations, driver knows %d", len(applied), len(known))
	}
	for i := range known {
		// On a fresh schema every marked migration came after the column that
		// records the mark (the column's own migration is the first marked).
		if applied[i].Version != known[i].Version || applied[i].Name != known[i].Name ||
			applied[i].Compatible != known[i].Compatible {
			t.Fatalf("applied[%d] = %+v, known %03d_%s compatible=%v", i, applied[i], known[i].Version, known[i].Name, known[i].Compatible)
		}
	}
}
