package drivertest

import (
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

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
