package weirdrivertest

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
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
		p.Tags = []string{"all", []string{"odd", "even"}[(i+1)%2]}
		if i%3 == 0 {
			p.Tags = append(p.Tags, "third")
		}
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
	// Tags: every one given; ids[i] is "even" for even i (0-based), "third" for i%3 == 0.
	if got := list(weirdriver.JobListParams{Tags: []string{"even", "third"}}); !slices.Equal(got, []int64{ids[0], ids[6]}) {
		t.Fatalf("tags even and third: %v", got)
	}
	if got := list(weirdriver.JobListParams{Tags: []string{"all"}, Kinds: []string{"b"}, Queues: []string{"q1"}}); !slices.Equal(got, []int64{ids[1], ids[3]}) {
		t.Fatalf("tag all, kind b in q1: %v", got)
	}
	if got := list(weirdriver.JobListParams{Tags: []string{"none"}}); len(got) != 0 {
		t.Fatalf("an unknown tag: %v", got)
	}
	if got := list(weirdriver.JobListParams{AfterID: ids[3], Limit: 3}); !slices.Equal(got, ids[4:7]) {
		t.Fatalf("page after %d: %v", ids[3], got)
	}
	if got := list(weirdriver.JobListParams{AfterID: ids[3], Descending: true}); !slices.Equal(got, []int64{ids[2], ids[1], ids[0]}) {
		t.Fatalf("descending page before %d: %v", ids[3], got)
	}
	// StopID ends the walk, inclusive, in either order.
	if got := list(weirdriver.JobListParams{AfterID: ids[1], StopID: ids[4]}); !slices.Equal(got, ids[2:5]) {
		t.Fatalf("ascending after %d up to %d: %v", ids[1], ids[4], got)
	}
	if got := list(weirdriver.JobListParams{AfterID: ids[8], StopID: ids[5], Descending: true}); !slices.Equal(got, []int64{ids[7], ids[6], ids[5]}) {
		t.Fatalf("descending before %d down to %d: %v", ids[8], ids[5], got)
	}
	if got := list(weirdriver.JobListParams{Kinds: []string{"a"}, StopID: ids[3], Descending: true}); !slices.Equal(got, []int64{ids[8], ids[6], ids[4]}) {
		t.Fatalf("kind a, descending down to %d: %v", ids[3], got)
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
	_, err = d.Executor().JobCancel(ctx(t), job.ID)
	if e, ok := errors.AsType[*weirdriver.JobFinalError](err); !ok || e.State != weirtype.JobStateCancelled || !errors.Is(err, weirdriver.ErrJobFinal) {
		t.Fatalf("second cancel: %v, want a *JobFinalError (ErrJobFinal) naming the state cancelled", err)
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
	if oldest := queues[0].OldestAvailableAt; oldest.IsZero() || oldest.Before(time.Now().Add(-time.Hour)) {
		t.Errorf("alpha's oldest available job at %v, want about now", queues[0].OldestAvailableAt)
	}
	if !queues[1].OldestAvailableAt.IsZero() {
		t.Errorf("beta has no available job but its oldest is at %v", queues[1].OldestAvailableAt)
	}
}

// testQueueListOldestAvailable checks that a queue's oldest available job is
// the one scheduled earliest among its available jobs, whatever the other
// states hold.
func testQueueListOldestAvailable(t *testing.T, d weirdriver.Driver) {
	base := time.Now().UTC().Truncate(time.Microsecond)
	at := func(q string, ago time.Duration) *weirdriver.JobInsertParams {
		p := params("k", q, `{}`)
		p.ScheduledAt = base.Add(-ago)
		return p
	}
	insertOne(t, d, at("q", time.Minute))
	insertOne(t, d, at("q", 3*time.Hour))
	insertOne(t, d, at("q", time.Hour))
	// Older, but not available: cancelled, and scheduled in the future.
	old := insertOne(t, d, at("q", 48*time.Hour))
	if _, err := d.Executor().JobCancel(ctx(t), old.ID); err != nil {
		t.Fatal(err)
	}
	insertOne(t, d, at("q", -time.Hour))
	future := at("later", -time.Hour)
	insertOne(t, d, future)
	queues, err := d.Executor().QueueList(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]time.Time{}
	for _, q := range queues {
		got[q.Name] = q.OldestAvailableAt
	}
	if want := base.Add(-3 * time.Hour); !got["q"].Equal(want) {
		t.Errorf("q's oldest available job at %v, want %v", got["q"], want)
	}
	if !got["later"].IsZero() {
		t.Errorf("a queue with only a scheduled job has its oldest available at %v, want none", got["later"])
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
	byName := map[string]*weirtype.QueueStats{}
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

// testUpdate: JobUpdate replaces the metadata or the tags of a job that is not
// running, final ones included, and leaves the other as it is; a running job
// and a missing one are refused.
func testUpdate(t *testing.T, d weirdriver.Driver) {
	p := params("k", "update", `{}`)
	p.Metadata = json.RawMessage(`{"a":1}`)
	p.Tags = []string{"x", "y"}
	job := insertOne(t, d, p)
	update := func(id int64, u weirdriver.JobUpdateParams) (*weirtype.JobRow, error) {
		t.Helper()
		return d.Executor().JobUpdate(ctx(t), id, &u)
	}
	metaOf := func(j *weirtype.JobRow) map[string]any {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal(j.Metadata, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	got, err := update(job.ID, weirdriver.JobUpdateParams{Metadata: json.RawMessage(`{"b":"two"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if m := metaOf(got); len(m) != 1 || m["b"] != "two" || !slices.Equal(got.Tags, []string{"x", "y"}) {
		t.Fatalf("after replacing the metadata: metadata %s tags %v", got.Metadata, got.Tags)
	}
	if got, err = update(job.ID, weirdriver.JobUpdateParams{Tags: []string{"z"}}); err != nil {
		t.Fatal(err)
	}
	if m := metaOf(got); m["b"] != "two" || !slices.Equal(got.Tags, []string{"z"}) {
		t.Fatalf("after replacing the tags: metadata %s tags %v", got.Metadata, got.Tags)
	}
	if got, err = update(job.ID, weirdriver.JobUpdateParams{Tags: []string{}}); err != nil {
		t.Fatal(err)
	}
	if len(got.Tags) != 0 || !reflect.DeepEqual(getJob(t, d, job.ID), got) {
		t.Fatalf("after clearing the tags: tags %v; stored %+v, returned %+v", got.Tags, getJob(t, d, job.ID), got)
	}

	if _, err := d.Executor().JobCancel(ctx(t), job.ID); err != nil {
		t.Fatal(err)
	}
	if got, err = update(job.ID, weirdriver.JobUpdateParams{Tags: []string{"final"}}); err != nil || got.State != weirtype.JobStateCancelled {
		t.Fatalf("update of a cancelled job: %v, %+v", err, got)
	}
	running := claimOne(t, d, "update-running", 3, time.Minute)
	if _, err := update(running.ID, weirdriver.JobUpdateParams{Tags: []string{"no"}}); !errors.Is(err, weirdriver.ErrJobRunning) {
		t.Fatalf("update of a running job: %v, want ErrJobRunning", err)
	}
	if after := getJob(t, d, running.ID); len(after.Tags) != 0 {
		t.Fatalf("a refused update changed the tags: %v", after.Tags)
	}
	if _, err := update(1<<50, weirdriver.JobUpdateParams{Tags: []string{"no"}}); !errors.Is(err, weirdriver.ErrNotFound) {
		t.Fatalf("update of a missing job: %v, want ErrNotFound", err)
	}
}
