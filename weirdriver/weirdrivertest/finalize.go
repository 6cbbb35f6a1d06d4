package weirdrivertest

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

func finalize(t *testing.T, d weirdriver.Driver, params ...*weirdriver.JobFinalizeParams) []bool {
	t.Helper()
	applied, err := d.Executor().JobFinalize(ctx(t), params)
	if err != nil {
		t.Fatalf("finalize: %v", err)
	}
	if len(applied) != len(params) {
		t.Fatalf("finalize: %d results for %d params", len(applied), len(params))
	}
	return applied
}

func testFinalizeOutcomes(t *testing.T, d weirdriver.Driver) {
	now := time.Now()
	later := now.Add(time.Hour).Truncate(time.Microsecond)
	earlier := now.Add(-time.Hour).Truncate(time.Microsecond)
	given := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)

	cases := []struct {
		name      string
		outcome   weirdriver.Outcome
		at        time.Time
		err       *weirtype.AttemptError
		state     weirtype.JobState
		attempt   int
		final     bool
		scheduled time.Time // zero: unchanged
		released  int
	}{
		{name: "completed", outcome: weirdriver.OutcomeCompleted, state: weirtype.JobStateCompleted, attempt: 1, final: true},
		{name: "retry-later", outcome: weirdriver.OutcomeRetry, at: later, err: &weirtype.AttemptError{Error: "boom", Trace: "stack"},
			state: weirtype.JobStateRetryable, attempt: 1, scheduled: later},
		{name: "retry-due", outcome: weirdriver.OutcomeRetry, at: earlier, err: &weirtype.AttemptError{Error: "boom"},
			state: weirtype.JobStateAvailable, attempt: 1, scheduled: earlier},
		{name: "snooze-later", outcome: weirdriver.OutcomeSnooze, at: later, state: weirtype.JobStateScheduled, attempt: 0, scheduled: later},
		{name: "snooze-due", outcome: weirdriver.OutcomeSnooze, at: earlier, state: weirtype.JobStateAvailable, attempt: 0, scheduled: earlier},
		{name: "discard", outcome: weirdriver.OutcomeDiscard, err: &weirtype.AttemptError{Attempt: 7, At: given, Error: "bad input"},
			state: weirtype.JobStateDiscarded, attempt: 1, final: true},
		{name: "cancel", outcome: weirdriver.OutcomeCancel, state: weirtype.JobStateCancelled, attempt: 1, final: true},
		{name: "release", outcome: weirdriver.OutcomeRelease, state: weirtype.JobStateAvailable, attempt: 0, released: 1},
		{name: "return", outcome: weirdriver.OutcomeReturn, state: weirtype.JobStateAvailable, attempt: 0, released: 0},
	}
	claimed := make([]*weirtype.JobRow, len(cases))
	var batch []*weirdriver.JobFinalizeParams
	for i, c := range cases {
		claimed[i] = claimOne(t, d, "fin-"+c.name, 3, time.Minute)
		batch = append(batch, &weirdriver.JobFinalizeParams{
			ID: claimed[i].ID, LeaseToken: claimed[i].LeaseToken, Outcome: c.outcome, ScheduledAt: c.at, Error: c.err,
		})
	}
	// A stale outcome in the middle of the batch is reported in its place.
	stale := claimOne(t, d, "fin-stale", 3, time.Minute)
	staleParam := &weirdriver.JobFinalizeParams{ID: stale.ID, LeaseToken: stale.LeaseToken + 1, Outcome: weirdriver.OutcomeCompleted}
	batch = slices.Insert(batch, 3, staleParam)

	applied := finalize(t, d, batch...)
	for i, ok := range applied {
		if want := i != 3; ok != want {
			t.Fatalf("applied[%d] = %v, want %v (all %v)", i, ok, want, applied)
		}
	}
	sameRow(t, d, "a stale outcome", stale)

	for i, c := range cases {
		before := claimed[i]
		got := getJob(t, d, before.ID)
		if got.State != c.state || got.Attempt != c.attempt || got.ReleaseCount != c.released {
			t.Errorf("%s: state %s attempt %d released %d, want %s %d %d", c.name, got.State, got.Attempt, got.ReleaseCount, c.state, c.attempt, c.released)
		}
		if (got.FinalizedAt != nil) != c.final || (c.final && !near(*got.FinalizedAt, now)) {
			t.Errorf("%s: finalized_at %v, want set: %v", c.name, got.FinalizedAt, c.final)
		}
		if got.LeaseExpiresAt != nil {
			t.Errorf("%s: lease_expires_at %v, want cleared", c.name, got.LeaseExpiresAt)
		}
		// The row keeps the lease that finished it, for audit.
		if got.LeaseToken != before.LeaseToken || got.AttemptedBy != before.AttemptedBy ||
			got.AttemptedAt == nil || !got.AttemptedAt.Equal(*before.AttemptedAt) {
			t.Errorf("%s: token %d by %q at %v, want %d by %q at %v", c.name, got.LeaseToken, got.AttemptedBy, got.AttemptedAt,
				before.LeaseToken, before.AttemptedBy, before.AttemptedAt)
		}
		wantScheduled := before.ScheduledAt
		if !c.scheduled.IsZero() {
			wantScheduled = c.scheduled
		}
		if !got.ScheduledAt.Equal(wantScheduled) {
			t.Errorf("%s: scheduled_at %v, want %v", c.name, got.ScheduledAt, wantScheduled)
		}
		if c.err == nil {
			if len(got.Errors) != 0 {
				t.Errorf("%s: errors %+v, want none", c.name, got.Errors)
			}
			continue
		}
		if len(got.Errors) != 1 {
			t.Errorf("%s: errors %+v, want one", c.name, got.Errors)
			continue
		}
		e := got.Errors[0]
		wantAttempt, wantAt := c.err.Attempt, c.err.At
		if wantAttempt == 0 {
			wantAttempt = before.Attempt // the attempt being finalized
		}
		if e.Error != c.err.Error || e.Trace != c.err.Trace || e.Attempt != wantAttempt {
			t.Errorf("%s: error entry %+v, want %+v attempt %d", c.name, e, *c.err, wantAttempt)
		}
		if (!wantAt.IsZero() && !e.At.Equal(wantAt)) || (wantAt.IsZero() && !near(e.At, now)) {
			t.Errorf("%s: error at %v, want %v (zero: now)", c.name, e.At, wantAt)
		}
	}
}

// testFinalizeStaleChangesNothing is G3: once a lease is lost, nothing its owner
// writes changes the job.
func testFinalizeStaleChangesNothing(t *testing.T, d weirdriver.Driver) {
	outcomes := []weirdriver.Outcome{
		weirdriver.OutcomeCompleted, weirdriver.OutcomeRetry, weirdriver.OutcomeSnooze,
		weirdriver.OutcomeDiscard, weirdriver.OutcomeCancel, weirdriver.OutcomeRelease,
	}
	// tryAll sends every outcome and a renewal under (id, token) and checks that
	// none applied and the row is untouched.
	tryAll := func(what string, id, token int64) {
		t.Helper()
		before := getJob(t, d, id)
		for _, o := range outcomes {
			applied := finalize(t, d, &weirdriver.JobFinalizeParams{
				ID: id, LeaseToken: token, Outcome: o, ScheduledAt: time.Now().Add(-time.Minute),
				Error: &weirtype.AttemptError{Error: "stale"},
			})
			if applied[0] {
				t.Fatalf("%s: %s applied", what, o)
			}
		}
		res, err := d.Executor().JobRenew(ctx(t), &weirdriver.JobRenewParams{
			IDs: []int64{id}, LeaseTokens: []int64{token}, LeaseDuration: time.Hour,
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Renewed) != 0 || !slices.Equal(res.Lost, []int64{id}) {
			t.Fatalf("%s: renew %+v, want lost", what, res)
		}
		sameRow(t, d, what, before)
	}

	// A token that was never this lease's.
	running := claimOne(t, d, "wrong-token", 3, time.Hour)
	tryAll("wrong token (newer)", running.ID, running.LeaseToken+1)
	tryAll("wrong token (older)", running.ID, running.LeaseToken-1)

	// The job is no longer running: the lease was used up by a completion.
	done := claimOne(t, d, "finished", 3, time.Hour)
	if applied := finalize(t, d, &weirdriver.JobFinalizeParams{ID: done.ID, LeaseToken: done.LeaseToken, Outcome: weirdriver.OutcomeCompleted}); !applied[0] {
		t.Fatal("first completion did not apply")
	}
	tryAll("job no longer running", done.ID, done.LeaseToken)

	// The lease expired, rescue took the job back and another worker claimed it.
	old := claimOne(t, d, "rescued", 3, time.Microsecond)
	rescueUntil(t, d, weirdriver.JobRescueParams{Limit: 10}, old.ID)
	if n, err := d.Executor().JobSchedule(ctx(t), 10); err != nil || n != 1 {
		t.Fatalf("schedule the rescued job: %d, %v", n, err)
	}
	reclaimed := claim(t, d, "rescued", 1, time.Hour)
	if len(reclaimed) != 1 || reclaimed[0].ID != old.ID || reclaimed[0].LeaseToken <= old.LeaseToken {
		t.Fatalf("re-claim: %+v, want job %d with a token over %d", reclaimed, old.ID, old.LeaseToken)
	}
	tryAll("old owner after rescue and re-claim", old.ID, old.LeaseToken)
	// The new owner's lease is intact and its write applies.
	if applied := finalize(t, d, &weirdriver.JobFinalizeParams{ID: old.ID, LeaseToken: reclaimed[0].LeaseToken, Outcome: weirdriver.OutcomeCompleted}); !applied[0] {
		t.Fatal("the new owner's completion did not apply")
	}
	if got := getJob(t, d, old.ID); got.State != weirtype.JobStateCompleted || got.Attempt != 2 || len(got.Errors) != 1 {
		t.Fatalf("after the new owner completed: state %s attempt %d errors %d", got.State, got.Attempt, len(got.Errors))
	}

	// A missing job is stale too.
	if applied := finalize(t, d, &weirdriver.JobFinalizeParams{ID: 987654321, LeaseToken: 1, Outcome: weirdriver.OutcomeCompleted}); applied[0] {
		t.Fatal("finalize of a missing job applied")
	}
}

func testFinalizeCancelRequested(t *testing.T, d weirdriver.Driver) {
	jobs := make([]*weirtype.JobRow, 0, 3)
	outcomes := []weirdriver.Outcome{weirdriver.OutcomeCompleted, weirdriver.OutcomeRelease, weirdriver.OutcomeRetry}
	for _, o := range outcomes {
		job := claimOne(t, d, "cr-"+string(o), 3, time.Minute)
		cancelled, err := d.Executor().JobCancel(ctx(t), job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if cancelled.State != weirtype.JobStateRunning || cancelled.CancelRequestedAt == nil {
			t.Fatalf("cancel of a running job: state %s requested %v", cancelled.State, cancelled.CancelRequestedAt)
		}
		jobs = append(jobs, job)
	}
	var batch []*weirdriver.JobFinalizeParams
	for i, j := range jobs {
		batch = append(batch, &weirdriver.JobFinalizeParams{ID: j.ID, LeaseToken: j.LeaseToken, Outcome: outcomes[i]})
	}
	for i, ok := range finalize(t, d, batch...) {
		if !ok {
			t.Fatalf("%s of a cancel-requested job did not apply", outcomes[i])
		}
	}
	for i, j := range jobs {
		got := getJob(t, d, j.ID)
		if got.State != weirtype.JobStateCancelled || got.FinalizedAt == nil || got.LeaseExpiresAt != nil ||
			got.Attempt != 1 || got.ReleaseCount != 0 {
			t.Fatalf("%s after a cancel request: state %s finalized %v lease %v attempt %d released %d, want cancelled",
				outcomes[i], got.State, got.FinalizedAt, got.LeaseExpiresAt, got.Attempt, got.ReleaseCount)
		}
	}
}

// testFinalizeCompletionsBatch is a batch of completions only, which a driver
// may write with a statement of its own: each row is fenced by its own token,
// a cancel request still wins, an unknown job changes nothing, and the result
// follows the input's order.
func testFinalizeCompletionsBatch(t *testing.T, d weirdriver.Driver) {
	done := claimOne(t, d, "cb-done", 3, time.Minute)
	stale := claimOne(t, d, "cb-stale", 3, time.Minute)
	wanted := claimOne(t, d, "cb-cancel", 3, time.Minute)
	if _, err := d.Executor().JobCancel(ctx(t), wanted.ID); err != nil {
		t.Fatal(err)
	}
	before := getJob(t, d, stale.ID)
	applied := finalize(t, d,
		&weirdriver.JobFinalizeParams{ID: stale.ID, LeaseToken: stale.LeaseToken + 1, Outcome: weirdriver.OutcomeCompleted},
		&weirdriver.JobFinalizeParams{ID: done.ID, LeaseToken: done.LeaseToken, Outcome: weirdriver.OutcomeCompleted},
		&weirdriver.JobFinalizeParams{ID: 987654321, LeaseToken: 1, Outcome: weirdriver.OutcomeCompleted},
		&weirdriver.JobFinalizeParams{ID: wanted.ID, LeaseToken: wanted.LeaseToken, Outcome: weirdriver.OutcomeCompleted},
	)
	if want := []bool{false, true, false, true}; !slices.Equal(applied, want) {
		t.Fatalf("applied %v, want %v", applied, want)
	}
	if got := getJob(t, d, stale.ID); !reflect.DeepEqual(got, before) {
		t.Fatalf("a stale completion changed the job:\n%+v\nwas\n%+v", got, before)
	}
	for _, c := range []struct {
		id    int64
		state weirtype.JobState
	}{{done.ID, weirtype.JobStateCompleted}, {wanted.ID, weirtype.JobStateCancelled}} {
		got := getJob(t, d, c.id)
		if got.State != c.state || got.FinalizedAt == nil || got.LeaseExpiresAt != nil || got.Attempt != 1 {
			t.Fatalf("job %d: state %s finalized %v lease %v attempt %d, want %s",
				c.id, got.State, got.FinalizedAt, got.LeaseExpiresAt, got.Attempt, c.state)
		}
	}
}

// testFinalizeRetryPastMaxAttempts documents that the store writes a retry as asked
// even when the job has used all its attempts: whether to discard instead is the
// runtime's decision, made before it writes.
func testFinalizeRetryPastMaxAttempts(t *testing.T, d weirdriver.Driver) {
	job := claimOne(t, d, "q", 1, time.Minute)
	applied := finalize(t, d, &weirdriver.JobFinalizeParams{
		ID: job.ID, LeaseToken: job.LeaseToken, Outcome: weirdriver.OutcomeRetry,
		ScheduledAt: time.Now().Add(time.Hour), Error: &weirtype.AttemptError{Error: "boom"},
	})
	if !applied[0] {
		t.Fatal("retry did not apply")
	}
	got := getJob(t, d, job.ID)
	if got.State != weirtype.JobStateRetryable || got.Attempt != 1 || got.MaxAttempts != 1 || got.FinalizedAt != nil {
		t.Fatalf("retry with no attempts left: state %s attempt %d/%d finalized %v, want retryable as written",
			got.State, got.Attempt, got.MaxAttempts, got.FinalizedAt)
	}
}

func testRuntimeNotifies(t *testing.T, d weirdriver.Driver) {
	lease := time.Minute
	retry := claimOne(t, d, "n-retry", 3, lease)
	snooze := claimOne(t, d, "n-snooze", 3, lease)
	release := claimOne(t, d, "n-release", 3, lease)
	done := claimOne(t, d, "n-done", 3, lease)
	later := claimOne(t, d, "n-later", 3, lease)
	rescued := claimOne(t, d, "n-rescue", 3, time.Microsecond)
	rescueUntil(t, d, weirdriver.JobRescueParams{Limit: 10}, rescued.ID)
	l := listen(t, d, d.InsertChannel())

	past, future := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	finalize(t, d,
		&weirdriver.JobFinalizeParams{ID: retry.ID, LeaseToken: retry.LeaseToken, Outcome: weirdriver.OutcomeRetry, ScheduledAt: past},
		&weirdriver.JobFinalizeParams{ID: snooze.ID, LeaseToken: snooze.LeaseToken, Outcome: weirdriver.OutcomeSnooze, ScheduledAt: past},
		&weirdriver.JobFinalizeParams{ID: release.ID, LeaseToken: release.LeaseToken, Outcome: weirdriver.OutcomeRelease},
		&weirdriver.JobFinalizeParams{ID: done.ID, LeaseToken: done.LeaseToken, Outcome: weirdriver.OutcomeCompleted},
		&weirdriver.JobFinalizeParams{ID: later.ID, LeaseToken: later.LeaseToken, Outcome: weirdriver.OutcomeRetry, ScheduledAt: future},
	)
	got := notificationsBefore(t, d, l, "marker-1")
	slices.Sort(got)
	if want := []string{"n-release", "n-retry", "n-snooze"}; !slices.Equal(got, want) {
		t.Fatalf("finalize notified %v, want %v", got, want)
	}

	if n, err := d.Executor().JobSchedule(ctx(t), 10); err != nil || n != 1 {
		t.Fatalf("schedule: %d, %v; want the rescued job", n, err)
	}
	if got := notificationsBefore(t, d, l, "marker-2"); !slices.Equal(got, []string{"n-rescue"}) {
		t.Fatalf("schedule notified %v, want [n-rescue]", got)
	}
}

// testJobComplete: the completion a handler makes in its own transaction is
// fenced like the runtime's (wrong token, or a job not running: nothing
// changes), takes effect only when the transaction commits, makes a
// cancel-requested job cancelled, and JobStatesUnder then says so.
func testJobComplete(t *testing.T, d weirdriver.Driver) {
	job := claimOne(t, d, "complete-tx", 3, time.Minute)
	other := claimOne(t, d, "complete-tx-other", 3, time.Minute)

	complete := func(id, token int64, commit bool) bool {
		t.Helper()
		tx, err := d.Executor().Begin(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx(t)) //nolint:errcheck // a no-op after Commit
		ok, err := tx.JobComplete(ctx(t), &weirdriver.JobCompleteParams{ID: id, LeaseToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx(t)); err != nil {
				t.Fatal(err)
			}
		}
		return ok
	}
	if complete(job.ID, job.LeaseToken+1, true) {
		t.Fatal("a completion under another lease token applied")
	}
	if !complete(job.ID, job.LeaseToken, false) {
		t.Fatal("a completion under the job's lease did not apply")
	}
	if got := getJob(t, d, job.ID); got.State != weirtype.JobStateRunning || got.LeaseExpiresAt == nil {
		t.Fatalf("after a rolled back completion: state %s lease %v, want running and leased", got.State, got.LeaseExpiresAt)
	}
	if !complete(job.ID, job.LeaseToken, true) {
		t.Fatal("a completion under the job's lease did not apply")
	}
	got := getJob(t, d, job.ID)
	if got.State != weirtype.JobStateCompleted || got.FinalizedAt == nil || got.LeaseExpiresAt != nil || got.LeaseToken != job.LeaseToken {
		t.Fatalf("after a committed completion: state %s finalized %v lease %v token %d", got.State, got.FinalizedAt, got.LeaseExpiresAt, got.LeaseToken)
	}
	if complete(job.ID, job.LeaseToken, true) {
		t.Fatal("a completion of a completed job applied")
	}

	if _, err := d.Executor().JobCancel(ctx(t), other.ID); err != nil {
		t.Fatal(err)
	}
	if !complete(other.ID, other.LeaseToken, true) {
		t.Fatal("a completion of a cancel-requested job did not apply")
	}
	if got := getJob(t, d, other.ID); got.State != weirtype.JobStateCancelled {
		t.Fatalf("completion of a cancel-requested job: state %s, want cancelled", got.State)
	}

	waiting := insertOne(t, d, params("k", "complete-tx-waiting", `{}`))
	states, err := d.Executor().JobStatesUnder(ctx(t),
		[]int64{job.ID, other.ID, job.ID, waiting.ID, 1 << 50},
		[]int64{job.LeaseToken, other.LeaseToken, job.LeaseToken + 1, waiting.LeaseToken, 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []weirtype.JobState{weirtype.JobStateCompleted, weirtype.JobStateCancelled, "", weirtype.JobStateAvailable, ""}
	if !slices.Equal(states, want) {
		t.Fatalf("JobStatesUnder = %v, want %v", states, want)
	}
}
