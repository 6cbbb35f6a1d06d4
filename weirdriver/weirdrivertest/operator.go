package weirdrivertest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

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

// testQueuePauseResume checks that a paused queue claims nothing, shows as paused
// (even without jobs), and claims again once resumed; other queues are unaffected.
func testQueuePauseResume(t *testing.T, d weirdriver.Driver) {
	ex := d.Executor()
	insertOne(t, d, params("k", "paused", `{}`))
	insertOne(t, d, params("k", "other", `{}`))
	for range 2 { // pausing twice changes nothing
		if err := ex.QueuePause(ctx(t), "paused"); err != nil {
			t.Fatal(err)
		}
	}
	if err := ex.QueuePause(ctx(t), "empty"); err != nil {
		t.Fatal(err)
	}
	if jobs := claim(t, d, "paused", 10, time.Minute); len(jobs) != 0 {
		t.Fatalf("claimed %d jobs from a paused queue", len(jobs))
	}
	if jobs := claim(t, d, "other", 10, time.Minute); len(jobs) != 1 {
		t.Fatalf("claimed %d jobs from another queue, want 1", len(jobs))
	}
	queues, err := ex.QueueList(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*weirdriver.QueueStats{}
	for _, q := range queues {
		byName[q.Name] = q
	}
	if q := byName["paused"]; q == nil || !q.Paused || q.Counts[weirtype.JobStateAvailable] != 1 {
		t.Fatalf("paused queue listed as %+v", q)
	}
	if q := byName["empty"]; q == nil || !q.Paused || len(q.Counts) != 0 {
		t.Fatalf("paused empty queue listed as %+v", q)
	}
	if q := byName["other"]; q == nil || q.Paused {
		t.Fatalf("other queue listed as %+v", q)
	}
	for range 2 { // resuming twice changes nothing
		if err := ex.QueueResume(ctx(t), "paused"); err != nil {
			t.Fatal(err)
		}
	}
	if err := ex.QueueResume(ctx(t), "never-paused"); err != nil {
		t.Fatal(err)
	}
	if jobs := claim(t, d, "paused", 10, time.Minute); len(jobs) != 1 {
		t.Fatalf("claimed %d jobs after resume, want 1", len(jobs))
	}
}
