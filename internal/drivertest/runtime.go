package drivertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// Tests of the worker runtime's statements: claim, finalize, renew, rescue,
// schedule, prune, leader election and listening. Expiry is always the database's
// clock, so tests that need an expired lease claim with a 1 µs lease and poll
// rescue until it takes the job back, with a deadline, instead of sleeping.

const testClient = "client-1"

// insertAt inserts a job into queue with the given priority and schedule.
func insertAt(t *testing.T, d weirdriver.Driver, queue string, priority int, at time.Time) *weirtype.JobRow {
	t.Helper()
	p := params("k", queue, `{}`)
	p.Priority = priority
	p.ScheduledAt = at
	return insertOne(t, d, p)
}

func claim(t *testing.T, d weirdriver.Driver, queue string, limit int, lease time.Duration) []*weirtype.JobRow {
	t.Helper()
	jobs, err := d.Executor().JobClaim(ctx(t), &weirdriver.JobClaimParams{
		Queue: queue, Max: limit, ClientID: testClient, LeaseDuration: lease,
	})
	if err != nil {
		t.Fatalf("claim %s: %v", queue, err)
	}
	return jobs
}

// claimOne inserts a job into queue and claims it.
func claimOne(t *testing.T, d weirdriver.Driver, queue string, maxAttempts int, lease time.Duration) *weirtype.JobRow {
	t.Helper()
	p := params("k", queue, `{}`)
	p.MaxAttempts = maxAttempts
	job := insertOne(t, d, p)
	jobs := claim(t, d, queue, 1, lease)
	if len(jobs) != 1 || jobs[0].ID != job.ID {
		t.Fatalf("claim %s: got %v, want job %d", queue, ids(jobs), job.ID)
	}
	return jobs[0]
}

func getJob(t *testing.T, d weirdriver.Driver, id int64) *weirtype.JobRow {
	t.Helper()
	job, err := d.Executor().JobGet(ctx(t), id)
	if err != nil {
		t.Fatalf("get job %d: %v", id, err)
	}
	return job
}

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

func ids(jobs []*weirtype.JobRow) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// rowJSON renders a job for whole-row comparison. JSON rather than DeepEqual,
// because equal times may carry different *time.Location values.
func rowJSON(t *testing.T, job *weirtype.JobRow) string {
	t.Helper()
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sameRow fails unless job id is stored exactly as before.
func sameRow(t *testing.T, d weirdriver.Driver, what string, before *weirtype.JobRow) {
	t.Helper()
	if after := rowJSON(t, getJob(t, d, before.ID)); after != rowJSON(t, before) {
		t.Fatalf("%s changed job %d:\nbefore %s\nafter  %s", what, before.ID, rowJSON(t, before), after)
	}
}

// near reports whether got is within a minute of want; it compares the database
// clock with the test's, so it allows for skew.
func near(got, want time.Time) bool {
	d := got.Sub(want)
	return d > -time.Minute && d < time.Minute
}

// rescueUntil runs rescue until every job in want has been rescued, and returns the
// rescued rows. It fails if rescue takes any other job or returns more than
// p.Limit rows at once.
func rescueUntil(t *testing.T, d weirdriver.Driver, p weirdriver.JobRescueParams, want ...int64) map[int64]*weirtype.JobRow {
	t.Helper()
	got := make(map[int64]*weirtype.JobRow)
	deadline := time.Now().Add(10 * time.Second)
	for {
		rows, err := d.Executor().JobRescue(ctx(t), &p)
		if err != nil {
			t.Fatalf("rescue: %v", err)
		}
		if len(rows) > p.Limit {
			t.Fatalf("rescue returned %d jobs, limit %d", len(rows), p.Limit)
		}
		for _, r := range rows {
			if !slices.Contains(want, r.ID) {
				t.Fatalf("rescue took job %d (state before: leased until %v), want only %v", r.ID, r.LeaseExpiresAt, want)
			}
			if _, dup := got[r.ID]; dup {
				t.Fatalf("rescue took job %d twice", r.ID)
			}
			got[r.ID] = r
		}
		if len(got) == len(want) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("rescued %d of %v within 10s", len(got), want)
		}
		time.Sleep(5 * time.Millisecond) // the database clock has to pass a 1 µs lease
	}
}

// notificationsBefore sends marker on the insert channel and returns the payloads
// that l receives on that channel before it. Notifications arrive in commit order,
// so everything committed before the marker is in the result, without a timeout.
func notificationsBefore(t *testing.T, d weirdriver.Driver, l weirdriver.Listener, marker string) []string {
	t.Helper()
	if err := d.Executor().NotifyInsert(ctx(t), []string{marker}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		n, err := l.WaitForNotification(ctx(t))
		if err != nil {
			t.Fatalf("wait for notification: %v (got %v so far)", err, got)
		}
		if n.Channel != d.InsertChannel() {
			continue
		}
		if n.Payload == marker {
			return got
		}
		got = append(got, n.Payload)
	}
}

func listen(t *testing.T, d weirdriver.Driver, channels ...string) weirdriver.Listener {
	t.Helper()
	l, err := d.Listen(ctx(t), channels...)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(context.Background()); err != nil {
			t.Errorf("close listener: %v", err)
		}
	})
	return l
}

func testClaimOrderAndMax(t *testing.T, d weirdriver.Driver) {
	now := time.Now()
	j1 := insertAt(t, d, "q", 2, now.Add(-time.Hour))
	j2 := insertAt(t, d, "q", 1, now.Add(-time.Hour))
	j3 := insertAt(t, d, "q", 1, now.Add(-2*time.Hour))
	j4 := insertAt(t, d, "q", 1, now.Add(-2*time.Hour)) // same time as j3: id decides
	j5 := insertAt(t, d, "q", 3, now.Add(-3*time.Hour))
	other := insertAt(t, d, "other", 1, now.Add(-5*time.Hour))
	future := insertAt(t, d, "q", 1, now.Add(time.Hour))

	if got := ids(claim(t, d, "q", 2, time.Minute)); !slices.Equal(got, []int64{j3.ID, j4.ID}) {
		t.Fatalf("first claim of 2: %v, want %v", got, []int64{j3.ID, j4.ID})
	}
	if got := ids(claim(t, d, "q", 10, time.Minute)); !slices.Equal(got, []int64{j2.ID, j1.ID, j5.ID}) {
		t.Fatalf("second claim: %v, want %v", got, []int64{j2.ID, j1.ID, j5.ID})
	}
	if got := claim(t, d, "q", 10, time.Minute); len(got) != 0 {
		t.Fatalf("third claim: %v, want nothing", ids(got))
	}
	if got := getJob(t, d, other.ID); got.State != weirtype.JobStateAvailable {
		t.Fatalf("job of another queue: state %s", got.State)
	}
	if got := getJob(t, d, future.ID); got.State != weirtype.JobStateScheduled || got.Attempt != 0 {
		t.Fatalf("job scheduled in the future: state %s attempt %d", got.State, got.Attempt)
	}
}

func testClaimSetsLease(t *testing.T, d weirdriver.Driver) {
	const lease = 90 * time.Second
	job := insertOne(t, d, params("k", "q", `{}`))
	jobs := claim(t, d, "q", 5, lease)
	if len(jobs) != 1 {
		t.Fatalf("claimed %d jobs, want 1", len(jobs))
	}
	got := jobs[0]
	if got.State != weirtype.JobStateRunning || got.Attempt != 1 || got.LeaseToken != job.LeaseToken+1 ||
		got.AttemptedBy != testClient {
		t.Fatalf("claimed: state %s attempt %d token %d (was %d) by %q", got.State, got.Attempt, got.LeaseToken, job.LeaseToken, got.AttemptedBy)
	}
	if got.AttemptedAt == nil || got.LeaseExpiresAt == nil {
		t.Fatalf("claimed: attempted_at %v lease_expires_at %v", got.AttemptedAt, got.LeaseExpiresAt)
	}
	// Both come from the claim's now(), so the lease is exactly the duration asked.
	if !got.LeaseExpiresAt.Equal(got.AttemptedAt.Add(lease)) {
		t.Fatalf("lease expires %v, attempted %v: want %v apart", got.LeaseExpiresAt, got.AttemptedAt, lease)
	}
	if !near(*got.AttemptedAt, time.Now()) {
		t.Fatalf("attempted_at %v is not near now", got.AttemptedAt)
	}
	if rowJSON(t, got) != rowJSON(t, getJob(t, d, job.ID)) {
		t.Fatal("claim returned a row that differs from the stored one")
	}

	// A job released back and claimed again gets a new token, never an old one.
	if applied := finalize(t, d, &weirdriver.JobFinalizeParams{ID: got.ID, LeaseToken: got.LeaseToken, Outcome: weirdriver.OutcomeRelease}); !applied[0] {
		t.Fatal("release did not apply")
	}
	again := claim(t, d, "q", 1, lease)
	if len(again) != 1 || again[0].LeaseToken != got.LeaseToken+1 || again[0].Attempt != 1 {
		t.Fatalf("second claim: %+v, want token %d attempt 1", again, got.LeaseToken+1)
	}
}

func testClaimConcurrentNoOverlap(t *testing.T, d weirdriver.Driver) {
	const n = 1000
	batch := make([]*weirdriver.JobInsertParams, n)
	for i := range batch {
		batch[i] = params("k", "c", fmt.Sprintf(`{"n":%d}`, i))
	}
	inserted, err := d.Executor().JobInsertBulk(ctx(t), batch)
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		client string
		jobs   []*weirtype.JobRow
		err    error
	}
	results := make([]result, 2)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range results {
		client := "claimer-" + strconv.Itoa(i)
		exec := d.Executor() // each claimer on its own executor
		wg.Go(func() {
			<-start
			res := result{client: client}
			for {
				jobs, err := exec.JobClaim(ctx(t), &weirdriver.JobClaimParams{
					Queue: "c", Max: 10, ClientID: client, LeaseDuration: time.Minute,
				})
				if err != nil {
					res.err = err
					break
				}
				if len(jobs) == 0 {
					break
				}
				res.jobs = append(res.jobs, jobs...)
			}
			results[i] = res
		})
	}
	close(start)
	wg.Wait()

	owner := make(map[int64]string, n)
	for _, r := range results {
		if r.err != nil {
			t.Fatalf("%s: %v", r.client, r.err)
		}
		if len(r.jobs) == 0 {
			t.Logf("%s claimed nothing (the other claimer was faster)", r.client)
		}
		for _, j := range r.jobs {
			if prev, ok := owner[j.ID]; ok {
				t.Fatalf("job %d claimed by %s and %s", j.ID, prev, r.client)
			}
			owner[j.ID] = r.client
			if j.AttemptedBy != r.client || j.Attempt != 1 {
				t.Fatalf("job %d: attempted_by %q attempt %d, claimed by %s", j.ID, j.AttemptedBy, j.Attempt, r.client)
			}
		}
	}
	for _, j := range inserted {
		if _, ok := owner[j.ID]; !ok {
			t.Fatalf("job %d was never claimed", j.ID)
		}
	}
	if len(owner) != n {
		t.Fatalf("claimed %d distinct jobs, want %d", len(owner), n)
	}
	left, err := d.Executor().JobList(ctx(t), &weirdriver.JobListParams{
		States: []weirtype.JobState{weirtype.JobStateAvailable}, Limit: n,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("%d jobs still available", len(left))
	}
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
	if len(reclaimed) != 1 || reclaimed[0].ID != old.ID || reclaimed[0].LeaseToken != old.LeaseToken+1 {
		t.Fatalf("re-claim: %+v, want job %d with token %d", reclaimed, old.ID, old.LeaseToken+1)
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

// testRuntimeNotifies checks that the statements that make jobs available wake
// workers of those queues, and the others do not.
// testInsertNotifies: an insert outside a transaction wakes the workers of each
// queue that got an available job, once it has committed; a scheduled job and
// a duplicate wake nobody.
func testInsertNotifies(t *testing.T, d weirdriver.Driver) {
	l := listen(t, d, d.InsertChannel())
	unique := func() *weirdriver.JobInsertParams {
		p := params("u", "ins-unique", `{}`)
		p.UniqueKey = []byte("notify-key")
		p.UniqueStates = []weirtype.JobState{weirtype.JobStateAvailable}
		return p
	}
	later := params("k", "ins-later", `{}`)
	later.ScheduledAt = time.Now().Add(time.Hour)
	insertOne(t, d, params("k", "ins-now", `{}`))
	insertOne(t, d, later)
	insertOne(t, d, unique())
	if got := notificationsBefore(t, d, l, "marker-1"); !slices.Equal(got, []string{"ins-now", "ins-unique"}) {
		t.Fatalf("inserts notified %v, want [ins-now ins-unique]", got)
	}
	if res, err := d.Executor().JobInsert(ctx(t), []*weirdriver.JobInsertParams{unique()}); err != nil || !res[0].Duplicate {
		t.Fatalf("second unique insert: %+v, %v; want a duplicate", res, err)
	}
	if got := notificationsBefore(t, d, l, "marker-2"); len(got) != 0 {
		t.Fatalf("a duplicate insert notified %v", got)
	}
}

// testInsertNotifiesConcurrently: inserts from many goroutines at once, which a
// driver may notify for together, still wake the workers of every queue.
func testInsertNotifiesConcurrently(t *testing.T, d weirdriver.Driver) {
	l := listen(t, d, d.InsertChannel())
	const goroutines, each = 16, 10
	var wg sync.WaitGroup
	errs := make([]error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				p := params("k", fmt.Sprintf("conc-%d", g), `{}`)
				if _, err := d.Executor().JobInsert(ctx(t), []*weirdriver.JobInsertParams{p}); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, q := range notificationsBefore(t, d, l, "marker") {
		got[q] = true
	}
	for g := range goroutines {
		if q := fmt.Sprintf("conc-%d", g); !got[q] {
			t.Errorf("no notification for queue %s (got %v)", q, got)
		}
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

func testRenew(t *testing.T, d weirdriver.Driver) {
	for range 4 {
		insertOne(t, d, params("k", "r", `{}`))
	}
	jobs := claim(t, d, "r", 4, time.Minute)
	if len(jobs) != 4 {
		t.Fatalf("claimed %d, want 4", len(jobs))
	}
	a, b, c, done := jobs[0], jobs[1], jobs[2], jobs[3]
	if _, err := d.Executor().JobCancel(ctx(t), c.ID); err != nil {
		t.Fatal(err)
	}
	finalize(t, d, &weirdriver.JobFinalizeParams{ID: done.ID, LeaseToken: done.LeaseToken, Outcome: weirdriver.OutcomeCompleted})
	bBefore, doneBefore := getJob(t, d, b.ID), getJob(t, d, done.ID)

	const missing = 987654321
	res, err := d.Executor().JobRenew(ctx(t), &weirdriver.JobRenewParams{
		IDs:           []int64{a.ID, b.ID, c.ID, done.ID, missing},
		LeaseTokens:   []int64{a.LeaseToken, b.LeaseToken + 1, c.LeaseToken, done.LeaseToken, 1},
		LeaseDuration: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Renewed, []int64{a.ID, c.ID}) || !slices.Equal(res.Lost, []int64{b.ID, done.ID, missing}) ||
		!slices.Equal(res.CancelRequested, []int64{c.ID}) {
		t.Fatalf("renew: %+v; want renewed [%d %d], lost [%d %d %d], cancel requested [%d]",
			res, a.ID, c.ID, b.ID, done.ID, missing, c.ID)
	}
	for _, j := range []*weirtype.JobRow{a, c} {
		got := getJob(t, d, j.ID)
		if got.State != weirtype.JobStateRunning || got.LeaseToken != j.LeaseToken ||
			!got.LeaseExpiresAt.After(j.LeaseExpiresAt.Add(50*time.Minute)) {
			t.Fatalf("renewed job %d: state %s token %d lease %v (was %v), want about an hour from now",
				j.ID, got.State, got.LeaseToken, got.LeaseExpiresAt, j.LeaseExpiresAt)
		}
	}
	sameRow(t, d, "renew with a wrong token", bBefore)
	sameRow(t, d, "renew of a finished job", doneBefore)

	if res, err := d.Executor().JobRenew(ctx(t), &weirdriver.JobRenewParams{LeaseDuration: time.Minute}); err != nil ||
		len(res.Renewed)+len(res.Lost) != 0 {
		t.Fatalf("empty renew: %+v, %v", res, err)
	}
}

func testRescue(t *testing.T, d weirdriver.Driver) {
	const msg = "lease expired (worker lost)"
	start := time.Now()
	retry := claimOne(t, d, "res-retry", 3, time.Microsecond)
	exhausted := claimOne(t, d, "res-exhausted", 1, time.Microsecond)
	cancel := claimOne(t, d, "res-cancel", 3, time.Microsecond)
	if _, err := d.Executor().JobCancel(ctx(t), cancel.ID); err != nil {
		t.Fatal(err)
	}
	alive := claimOne(t, d, "res-alive", 3, time.Hour)
	waiting := insertOne(t, d, params("k", "res-waiting", `{}`))

	rescued := rescueUntil(t, d, weirdriver.JobRescueParams{Limit: 10, Error: msg}, retry.ID, exhausted.ID, cancel.ID)
	for id, r := range rescued {
		if stored := getJob(t, d, id); rowJSON(t, stored) != rowJSON(t, r) {
			t.Fatalf("rescue returned %s, stored %s", rowJSON(t, r), rowJSON(t, stored))
		}
	}
	check := func(name string, before *weirtype.JobRow, state weirtype.JobState) *weirtype.JobRow {
		t.Helper()
		got := rescued[before.ID]
		if got.State != state || got.LeaseExpiresAt != nil || got.Attempt != 1 || got.LeaseToken != before.LeaseToken {
			t.Fatalf("%s: state %s lease %v attempt %d token %d, want %s, lease cleared, attempt 1, token %d",
				name, got.State, got.LeaseExpiresAt, got.Attempt, got.LeaseToken, state, before.LeaseToken)
		}
		if (got.FinalizedAt != nil) != state.Final() {
			t.Fatalf("%s: finalized_at %v in state %s", name, got.FinalizedAt, state)
		}
		if len(got.Errors) != 1 || got.Errors[0].Attempt != 1 || got.Errors[0].Error != msg || !near(got.Errors[0].At, start) {
			t.Fatalf("%s: errors %+v, want one entry for attempt 1", name, got.Errors)
		}
		return got
	}
	r := check("attempts left", retry, weirtype.JobStateRetryable)
	// Due at once: scheduled at the rescue's now(), which is after the claim.
	if r.ScheduledAt.Before(*retry.AttemptedAt) || !near(r.ScheduledAt, start) {
		t.Fatalf("rescued job scheduled at %v, want the rescue's now (claimed %v)", r.ScheduledAt, retry.AttemptedAt)
	}
	check("no attempts left", exhausted, weirtype.JobStateDiscarded)
	check("cancel requested", cancel, weirtype.JobStateCancelled)
	sameRow(t, d, "rescue (lease not expired)", alive)
	sameRow(t, d, "rescue (job not running)", waiting)

	// Limit bounds each statement; an empty Error records the default message.
	var batch []int64
	for range 3 {
		batch = append(batch, claimOne(t, d, "res-limit", 3, time.Microsecond).ID)
	}
	for _, got := range rescueUntil(t, d, weirdriver.JobRescueParams{Limit: 1}, batch...) {
		if len(got.Errors) != 1 || got.Errors[0].Error != weirdriver.DefaultRescueError {
			t.Fatalf("errors %+v, want the default message", got.Errors)
		}
	}
}

func testSchedule(t *testing.T, d weirdriver.Driver) {
	// Due retryable jobs: rescue makes them retryable at its now().
	var due []int64
	for range 3 {
		due = append(due, claimOne(t, d, "s-due", 3, time.Microsecond).ID)
	}
	rescueUntil(t, d, weirdriver.JobRescueParams{Limit: 10}, due...)
	// Jobs that are not due, or not pending.
	future := insertAt(t, d, "s-future", 2, time.Now().Add(time.Hour))
	later := claimOne(t, d, "s-later", 3, time.Minute)
	finalize(t, d, &weirdriver.JobFinalizeParams{ID: later.ID, LeaseToken: later.LeaseToken, Outcome: weirdriver.OutcomeRetry, ScheduledAt: time.Now().Add(time.Hour)})
	running := claimOne(t, d, "s-running", 3, time.Hour)
	untouched := []*weirtype.JobRow{getJob(t, d, future.ID), getJob(t, d, later.ID), getJob(t, d, running.ID)}

	for i, want := range []int{2, 1, 0} {
		n, err := d.Executor().JobSchedule(ctx(t), 2)
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("schedule #%d: %d, want %d", i+1, n, want)
		}
	}
	for _, id := range due {
		if got := getJob(t, d, id); got.State != weirtype.JobStateAvailable {
			t.Fatalf("due job %d: state %s, want available", id, got.State)
		}
	}
	for _, j := range untouched {
		sameRow(t, d, "schedule", j)
	}
	if got := claim(t, d, "s-due", 10, time.Minute); len(got) != 3 {
		t.Fatalf("claimed %d promoted jobs, want 3", len(got))
	}

	// A scheduled job is promoted once the database clock reaches its time.
	soon := insertAt(t, d, "s-soon", 2, time.Now().Add(300*time.Millisecond))
	if soon.State != weirtype.JobStateScheduled {
		t.Logf("job scheduled 300 ms ahead was inserted %s (database clock ahead of the test's); skipping the wait", soon.State)
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := d.Executor().JobSchedule(ctx(t), 10)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if n != 0 || time.Now().After(deadline) {
			t.Fatalf("schedule: %d, want the job scheduled 300 ms ahead within 10 s", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := getJob(t, d, soon.ID); got.State != weirtype.JobStateAvailable {
		t.Fatalf("scheduled job after promotion: %s", got.State)
	}
}

func testPrune(t *testing.T, d weirdriver.Driver) {
	var completed, cancelled, discarded []int64
	for range 3 {
		j := claimOne(t, d, "p", 3, time.Minute)
		finalize(t, d, &weirdriver.JobFinalizeParams{ID: j.ID, LeaseToken: j.LeaseToken, Outcome: weirdriver.OutcomeCompleted})
		completed = append(completed, j.ID)
	}
	for range 2 {
		j := insertOne(t, d, params("k", "p-cancel", `{}`))
		if _, err := d.Executor().JobCancel(ctx(t), j.ID); err != nil {
			t.Fatal(err)
		}
		cancelled = append(cancelled, j.ID)
		j = claimOne(t, d, "p", 3, time.Minute)
		finalize(t, d, &weirdriver.JobFinalizeParams{ID: j.ID, LeaseToken: j.LeaseToken, Outcome: weirdriver.OutcomeDiscard})
		discarded = append(discarded, j.ID)
	}
	available := insertOne(t, d, params("k", "p-live", `{}`))
	running := claimOne(t, d, "p-running", 3, time.Minute)
	scheduled := insertAt(t, d, "p-live", 2, time.Now().Add(time.Hour))
	retryable := claimOne(t, d, "p-retry", 3, time.Minute)
	finalize(t, d, &weirdriver.JobFinalizeParams{ID: retryable.ID, LeaseToken: retryable.LeaseToken, Outcome: weirdriver.OutcomeRetry, ScheduledAt: time.Now().Add(time.Hour)})
	live := []int64{available.ID, running.ID, scheduled.ID, retryable.ID}

	prune := func(p weirdriver.JobPruneParams) int {
		t.Helper()
		n, err := d.Executor().JobPrune(ctx(t), &p)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	if n := prune(weirdriver.JobPruneParams{CompletedBefore: past, CancelledBefore: past, DiscardedBefore: past, Limit: 100}); n != 0 {
		t.Fatalf("prune before an hour ago: %d, want 0", n)
	}
	if n := prune(weirdriver.JobPruneParams{Limit: 100}); n != 0 {
		t.Fatalf("prune with no cutoffs: %d, want 0", n)
	}
	for i, want := range []int{2, 1, 0} {
		if n := prune(weirdriver.JobPruneParams{CompletedBefore: future, CancelledBefore: past, Limit: 2}); n != want {
			t.Fatalf("prune completed #%d: %d, want %d", i+1, n, want)
		}
	}
	for _, id := range completed {
		if _, err := d.Executor().JobGet(ctx(t), id); !errors.Is(err, weirdriver.ErrNotFound) {
			t.Fatalf("completed job %d after prune: %v", id, err)
		}
	}
	for _, id := range slices.Concat(cancelled, discarded, live) {
		getJob(t, d, id)
	}
	if n := prune(weirdriver.JobPruneParams{CompletedBefore: future, CancelledBefore: future, DiscardedBefore: future, Limit: 100}); n != 4 {
		t.Fatalf("prune cancelled and discarded: %d, want 4", n)
	}
	left, err := d.Executor().JobList(ctx(t), &weirdriver.JobListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	got := ids(left)
	slices.Sort(live)
	if !slices.Equal(got, live) {
		t.Fatalf("jobs left: %v, want the live ones %v", got, live)
	}
}

func testLeaderElection(t *testing.T, d weirdriver.Driver) {
	exec := d.Executor()
	const name = "maintenance"
	elect := func(id string, ttl time.Duration) bool {
		t.Helper()
		ok, err := exec.LeaderElect(ctx(t), &weirdriver.LeaderElectParams{Name: name, LeaderID: id, TTL: ttl})
		if err != nil {
			t.Fatalf("elect %s: %v", id, err)
		}
		return ok
	}
	leader := func() (string, time.Time) {
		t.Helper()
		id, expires, err := exec.LeaderGet(ctx(t), name)
		if errors.Is(err, weirdriver.ErrNotFound) {
			return "", time.Time{}
		}
		if err != nil {
			t.Fatal(err)
		}
		return id, expires
	}
	resign := func(id string) {
		t.Helper()
		if err := exec.LeaderResign(ctx(t), name, id); err != nil {
			t.Fatalf("resign %s: %v", id, err)
		}
	}

	if id, _ := leader(); id != "" {
		t.Fatalf("leader before any election: %q", id)
	}
	if !elect("a", time.Minute) {
		t.Fatal("a did not win an empty election")
	}
	if elect("b", time.Minute) {
		t.Fatal("b won while a leads")
	}
	id, first := leader()
	if id != "a" || !near(first, time.Now().Add(time.Minute)) {
		t.Fatalf("leader %q until %v, want a for a minute", id, first)
	}
	// Renewal by the holder extends its term.
	if !elect("a", 2*time.Minute) {
		t.Fatal("a could not renew")
	}
	if id, renewed := leader(); id != "a" || !renewed.After(first.Add(50*time.Second)) {
		t.Fatalf("after renewal: %q until %v, want a until about a minute after %v", id, renewed, first)
	}
	// Only the holder can resign.
	resign("b")
	if id, _ := leader(); id != "a" {
		t.Fatalf("after b resigned: leader %q, want a", id)
	}
	resign("a")
	if id, _ := leader(); id != "" {
		t.Fatalf("after a resigned: leader %q, want none", id)
	}
	if !elect("b", time.Minute) || elect("a", time.Minute) {
		t.Fatal("after a resigned, b should win and a lose")
	}

	// Once the holder's term expires (database clock), another candidate wins.
	if !elect("b", time.Millisecond) {
		t.Fatal("b could not renew with a short term")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !elect("a", time.Minute) {
		if time.Now().After(deadline) {
			t.Fatal("a did not win within 10 s of b's 1 ms term")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if id, _ := leader(); id != "a" {
		t.Fatalf("after b's term expired: leader %q, want a", id)
	}
	if elect("b", time.Minute) {
		t.Fatal("b took over a's fresh term")
	}
	// Names are independent.
	ok, err := exec.LeaderElect(ctx(t), &weirdriver.LeaderElectParams{Name: "other", LeaderID: "b", TTL: time.Minute})
	if err != nil || !ok {
		t.Fatalf("b electing another name: %v, %v", ok, err)
	}
}

func testLeaderElectionConcurrent(t *testing.T, d weirdriver.Driver) {
	const candidates = 8
	won := make([]bool, candidates)
	errs := make([]error, candidates)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range candidates {
		exec := d.Executor()
		wg.Go(func() {
			<-start
			won[i], errs[i] = exec.LeaderElect(ctx(t), &weirdriver.LeaderElectParams{
				Name: "race", LeaderID: "candidate-" + strconv.Itoa(i), TTL: time.Minute,
			})
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i := range candidates {
		if errs[i] != nil {
			t.Fatalf("candidate %d: %v", i, errs[i])
		}
		if won[i] {
			if winner >= 0 {
				t.Fatalf("candidates %d and %d both won", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("nobody won")
	}
	if id, _, err := d.Executor().LeaderGet(ctx(t), "race"); err != nil || id != "candidate-"+strconv.Itoa(winner) {
		t.Fatalf("leader %q, %v; want candidate-%d", id, err, winner)
	}
}

func testListen(t *testing.T, d weirdriver.Driver) {
	if _, err := d.Listen(ctx(t)); err == nil {
		t.Fatal("listen without channels succeeded")
	}
	if d.InsertChannel() == "" || d.ControlChannel() == "" || d.InsertChannel() == d.ControlChannel() {
		t.Fatalf("channels %q and %q", d.InsertChannel(), d.ControlChannel())
	}
	l := listen(t, d, d.InsertChannel(), d.ControlChannel())

	// A wait that times out leaves the listener usable.
	short, cancel := context.WithTimeout(ctx(t), 20*time.Millisecond)
	defer cancel()
	if n, err := l.WaitForNotification(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with nothing sent: %+v, %v; want a deadline error", n, err)
	}

	// A notification sent in a transaction arrives at its commit, not before;
	// one sent outside a transaction arrives meanwhile.
	tx, err := d.Executor().Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // a no-op after Commit
	if err := tx.NotifyInsert(ctx(t), []string{"in-tx"}); err != nil {
		t.Fatal(err)
	}
	if err := d.Executor().NotifyInsert(ctx(t), []string{"outside"}); err != nil {
		t.Fatal(err)
	}
	expect := func(want string) {
		t.Helper()
		n, err := l.WaitForNotification(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if n.Channel != d.InsertChannel() || n.Payload != want {
			t.Fatalf("got %+v, want %q on %s", n, want, d.InsertChannel())
		}
	}
	expect("outside")
	if err := tx.Commit(ctx(t)); err != nil {
		t.Fatal(err)
	}
	expect("in-tx")

	// Cancelling a running job tells its client on the control channel.
	job := claimOne(t, d, "l", 3, time.Minute)
	if _, err := d.Executor().JobCancel(ctx(t), job.ID); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := l.WaitForNotification(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if n.Channel == d.ControlChannel() {
			if want := fmt.Sprintf("cancel %d", job.ID); n.Payload != want {
				t.Fatalf("control payload %q, want %q", n.Payload, want)
			}
			break
		}
	}

	if err := l.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(ctx(t)); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := l.WaitForNotification(ctx(t)); err == nil {
		t.Fatal("wait after close succeeded")
	}
}

func testRuntimeRejectsBadParams(t *testing.T, d weirdriver.Driver) {
	exec := d.Executor()
	job := claimOne(t, d, "bad", 3, time.Minute)
	good := weirdriver.JobClaimParams{Queue: "bad", Max: 1, ClientID: testClient, LeaseDuration: time.Minute}
	for name, mod := range map[string]func(*weirdriver.JobClaimParams){
		"max 0":      func(p *weirdriver.JobClaimParams) { p.Max = 0 },
		"no queue":   func(p *weirdriver.JobClaimParams) { p.Queue = "" },
		"no client":  func(p *weirdriver.JobClaimParams) { p.ClientID = "" },
		"zero lease": func(p *weirdriver.JobClaimParams) { p.LeaseDuration = 0 },
	} {
		p := good
		mod(&p)
		if _, err := exec.JobClaim(ctx(t), &p); err == nil {
			t.Errorf("claim with %s succeeded", name)
		}
	}
	ok := &weirdriver.JobFinalizeParams{ID: job.ID, LeaseToken: job.LeaseToken, Outcome: weirdriver.OutcomeCompleted}
	for name, batch := range map[string][]*weirdriver.JobFinalizeParams{
		"unknown outcome": {ok, {ID: job.ID + 1, LeaseToken: 1, Outcome: "done"}},
		"duplicate id":    {ok, ok},
	} {
		if _, err := exec.JobFinalize(ctx(t), batch); err == nil {
			t.Errorf("finalize with %s succeeded", name)
		}
	}
	sameRow(t, d, "rejected finalize", job)
	if _, err := exec.JobRenew(ctx(t), &weirdriver.JobRenewParams{IDs: []int64{job.ID}, LeaseDuration: time.Minute}); err == nil {
		t.Error("renew with more ids than tokens succeeded")
	}
	if _, err := exec.JobRescue(ctx(t), &weirdriver.JobRescueParams{}); err == nil {
		t.Error("rescue with limit 0 succeeded")
	}
	if _, err := exec.JobSchedule(ctx(t), 0); err == nil {
		t.Error("schedule with limit 0 succeeded")
	}
	if _, err := exec.JobPrune(ctx(t), &weirdriver.JobPruneParams{CompletedBefore: time.Now()}); err == nil {
		t.Error("prune with limit 0 succeeded")
	}
	if _, err := exec.LeaderElect(ctx(t), &weirdriver.LeaderElectParams{Name: "x", LeaderID: "a"}); err == nil {
		t.Error("elect with a zero TTL succeeded")
	}
}
