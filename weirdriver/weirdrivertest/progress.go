package weirdrivertest

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// sameJSON fails unless got holds the JSON value want (nil: no value). Stores
// may space JSON differently (PostgreSQL's jsonb rewrites it), so the values
// are compared, not the bytes.
func sameJSON(t *testing.T, what string, got json.RawMessage, want string) {
	t.Helper()
	if want == "" || got == nil {
		if (want == "") != (got == nil) {
			t.Fatalf("%s: got %s, want %q", what, got, want)
		}
		return
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %s is not JSON: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s: got %s, want %s", what, got, want)
	}
}

// testRenewWritesProgress: a renewal writes the progress it carries for the
// leases it renews, in the same fenced update, leaves the progress of entries
// without one as it is, writes nothing under a wrong token or for a job no
// longer running, and the next claim (after a retry, or a rescue) returns it.
func testRenewWritesProgress(t *testing.T, d weirdriver.Driver) {
	for range 3 {
		insertOne(t, d, params("k", "rp", `{}`))
	}
	jobs := claim(t, d, "rp", 3, time.Minute)
	if len(jobs) != 3 {
		t.Fatalf("claimed %d, want 3", len(jobs))
	}
	a, b, stale := jobs[0], jobs[1], jobs[2]
	for _, j := range jobs {
		if j.Progress != nil || j.Output != nil {
			t.Fatalf("claimed job %d: progress %s output %s, want none", j.ID, j.Progress, j.Output)
		}
	}
	renew := func(ids, tokens []int64, progress ...json.RawMessage) *weirdriver.JobRenewResult {
		t.Helper()
		res, err := d.Executor().JobRenew(ctx(t), &weirdriver.JobRenewParams{
			IDs: ids, LeaseTokens: tokens, LeaseDuration: time.Minute, Progress: progress,
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	staleBefore := getJob(t, d, stale.ID)
	res := renew([]int64{a.ID, b.ID, stale.ID}, []int64{a.LeaseToken, b.LeaseToken, stale.LeaseToken + 1},
		json.RawMessage(`{"step":1}`), nil, json.RawMessage(`{"step":99}`))
	if !slices.Equal(res.Renewed, []int64{a.ID, b.ID}) || !slices.Equal(res.Lost, []int64{stale.ID}) {
		t.Fatalf("renew: %+v", res)
	}
	sameJSON(t, "renewed progress", getJob(t, d, a.ID).Progress, `{"step":1}`)
	sameJSON(t, "renewal without progress", getJob(t, d, b.ID).Progress, "")
	sameRow(t, d, "a renewal with progress under a wrong token", staleBefore)

	// A later renewal without progress keeps it; one with progress replaces it.
	renew([]int64{a.ID}, []int64{a.LeaseToken})
	sameJSON(t, "renewal without progress", getJob(t, d, a.ID).Progress, `{"step":1}`)
	renew([]int64{a.ID, b.ID}, []int64{a.LeaseToken, b.LeaseToken}, json.RawMessage(`[2,"two"]`), json.RawMessage(`"b"`))
	sameJSON(t, "replaced progress", getJob(t, d, a.ID).Progress, `[2,"two"]`)

	// A retry hands it to the next attempt's claim.
	finalize(t, d, &weirdriver.JobFinalizeParams{ID: a.ID, LeaseToken: a.LeaseToken, Outcome: weirdriver.OutcomeRetry,
		Error: &weirtype.AttemptError{Error: "boom"}})
	next := claim(t, d, "rp", 1, time.Minute)
	if len(next) != 1 || next[0].ID != a.ID {
		t.Fatalf("claim after retry: %v, want job %d", ids(next), a.ID)
	}
	sameJSON(t, "progress claimed by the next attempt", next[0].Progress, `[2,"two"]`)
	// The old lease's renewal writes nothing now.
	before := getJob(t, d, a.ID)
	if res := renew([]int64{a.ID}, []int64{a.LeaseToken}, json.RawMessage(`{"old":true}`)); len(res.Lost) != 1 {
		t.Fatalf("renewal under the previous lease: %+v, want lost", res)
	}
	sameRow(t, d, "a renewal under the previous lease", before)

	// A rescue keeps the last renewal's progress for the next claim.
	res = renew([]int64{b.ID}, []int64{b.LeaseToken}, json.RawMessage(`{"b":3}`))
	if len(res.Renewed) != 1 {
		t.Fatalf("renew b: %+v", res)
	}
	if _, err := d.Executor().JobRenew(ctx(t), &weirdriver.JobRenewParams{
		IDs: []int64{b.ID}, LeaseTokens: []int64{b.LeaseToken}, LeaseDuration: time.Microsecond,
	}); err != nil {
		t.Fatal(err)
	}
	rescueUntil(t, d, weirdriver.JobRescueParams{Limit: 10}, b.ID)
	if n, err := d.Executor().JobSchedule(ctx(t), 10); err != nil || n < 1 {
		t.Fatalf("schedule: %d, %v", n, err)
	}
	again := claim(t, d, "rp", 2, time.Minute)
	if len(again) != 1 || again[0].ID != b.ID {
		t.Fatalf("claim after rescue: %v, want job %d", ids(again), b.ID)
	}
	sameJSON(t, "progress claimed after a rescue", again[0].Progress, `{"b":3}`)
}

// testFinalizeOutputProgress: an outcome writes the progress it carries
// whatever the outcome, and the output only with a completion that applies as
// one (not with a retry, nor when a requested cancel wins); a completion
// without output or progress leaves them as they were; a stale outcome writes
// neither. Both paths are covered: a batch of plain completions and a mixed
// batch.
func testFinalizeOutputProgress(t *testing.T, d weirdriver.Driver) {
	var jobs []*weirtype.JobRow
	for range 6 {
		insertOne(t, d, params("k", "fo", `{}`))
	}
	jobs = claim(t, d, "fo", 6, time.Minute)
	if len(jobs) != 6 {
		t.Fatalf("claimed %d, want 6", len(jobs))
	}
	plain, bare, cancelled, retried, staleJob, mixedDone := jobs[0], jobs[1], jobs[2], jobs[3], jobs[4], jobs[5]
	if _, err := d.Executor().JobCancel(ctx(t), cancelled.ID); err != nil {
		t.Fatal(err)
	}
	// Plain completions only: the completion path.
	applied := finalize(t, d,
		&weirdriver.JobFinalizeParams{ID: plain.ID, LeaseToken: plain.LeaseToken, Outcome: weirdriver.OutcomeCompleted,
			Output: json.RawMessage(`{"rows":3}`), Progress: json.RawMessage(`{"done":3}`)},
		&weirdriver.JobFinalizeParams{ID: bare.ID, LeaseToken: bare.LeaseToken, Outcome: weirdriver.OutcomeCompleted},
		&weirdriver.JobFinalizeParams{ID: cancelled.ID, LeaseToken: cancelled.LeaseToken, Outcome: weirdriver.OutcomeCompleted,
			Output: json.RawMessage(`{"rows":1}`), Progress: json.RawMessage(`{"done":1}`)},
	)
	if !slices.Equal(applied, []bool{true, true, true}) {
		t.Fatalf("applied %v", applied)
	}
	got := getJob(t, d, plain.ID)
	if got.State != weirtype.JobStateCompleted {
		t.Fatalf("state %s, want completed", got.State)
	}
	sameJSON(t, "completion's output", got.Output, `{"rows":3}`)
	sameJSON(t, "completion's progress", got.Progress, `{"done":3}`)
	got = getJob(t, d, bare.ID)
	sameJSON(t, "output of a completion without one", got.Output, "")
	sameJSON(t, "progress of a completion without one", got.Progress, "")
	got = getJob(t, d, cancelled.ID)
	if got.State != weirtype.JobStateCancelled {
		t.Fatalf("cancel-requested completion: state %s, want cancelled", got.State)
	}
	sameJSON(t, "output of a completion a cancel overrode", got.Output, "")
	sameJSON(t, "progress of a completion a cancel overrode", got.Progress, `{"done":1}`)

	// A mixed batch: the general path.
	staleBefore := getJob(t, d, staleJob.ID)
	applied = finalize(t, d,
		&weirdriver.JobFinalizeParams{ID: retried.ID, LeaseToken: retried.LeaseToken, Outcome: weirdriver.OutcomeRetry,
			Error: &weirtype.AttemptError{Error: "boom"}, Output: json.RawMessage(`{"no":1}`), Progress: json.RawMessage(`{"page":7}`)},
		&weirdriver.JobFinalizeParams{ID: staleJob.ID, LeaseToken: staleJob.LeaseToken + 1, Outcome: weirdriver.OutcomeCompleted,
			Output: json.RawMessage(`{"no":2}`), Progress: json.RawMessage(`{"no":3}`)},
		&weirdriver.JobFinalizeParams{ID: mixedDone.ID, LeaseToken: mixedDone.LeaseToken, Outcome: weirdriver.OutcomeCompleted,
			Output: json.RawMessage(`"done"`), Progress: json.RawMessage(`100`)},
	)
	if !slices.Equal(applied, []bool{true, false, true}) {
		t.Fatalf("applied %v", applied)
	}
	got = getJob(t, d, retried.ID)
	sameJSON(t, "output of a retry", got.Output, "")
	sameJSON(t, "progress of a retry", got.Progress, `{"page":7}`)
	sameRow(t, d, "a stale outcome with output and progress", staleBefore)
	got = getJob(t, d, mixedDone.ID)
	sameJSON(t, "output in a mixed batch", got.Output, `"done"`)
	sameJSON(t, "progress in a mixed batch", got.Progress, `100`)

	// The retried job's next attempt sees the progress; its completion without
	// progress keeps it.
	next := claim(t, d, "fo", 1, time.Minute)
	if len(next) != 1 || next[0].ID != retried.ID {
		t.Fatalf("claim: %v, want job %d", ids(next), retried.ID)
	}
	sameJSON(t, "progress handed to the next attempt", next[0].Progress, `{"page":7}`)
	finalize(t, d, &weirdriver.JobFinalizeParams{ID: retried.ID, LeaseToken: next[0].LeaseToken, Outcome: weirdriver.OutcomeCompleted})
	sameJSON(t, "progress after a completion without one", getJob(t, d, retried.ID).Progress, `{"page":7}`)
}

// testJobCompleteOutputProgress: a completion in the caller's transaction
// writes output and progress with it, and nothing when rolled back.
func testJobCompleteOutputProgress(t *testing.T, d weirdriver.Driver) {
	job := claimOne(t, d, "complete-out", 3, time.Minute)
	complete := func(commit bool) {
		t.Helper()
		tx, err := d.Executor().Begin(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx(t)) //nolint:errcheck // a no-op after Commit
		ok, err := tx.JobComplete(ctx(t), &weirdriver.JobCompleteParams{ID: job.ID, LeaseToken: job.LeaseToken,
			Output: json.RawMessage(`{"sent":2}`), Progress: json.RawMessage(`{"at":2}`)})
		if err != nil || !ok {
			t.Fatalf("complete: %v, %v", ok, err)
		}
		if commit {
			if err := tx.Commit(ctx(t)); err != nil {
				t.Fatal(err)
			}
		}
	}
	complete(false)
	got := getJob(t, d, job.ID)
	sameJSON(t, "output after a rollback", got.Output, "")
	sameJSON(t, "progress after a rollback", got.Progress, "")
	complete(true)
	got = getJob(t, d, job.ID)
	sameJSON(t, "output of a completion in a transaction", got.Output, `{"sent":2}`)
	sameJSON(t, "progress of a completion in a transaction", got.Progress, `{"at":2}`)
}
