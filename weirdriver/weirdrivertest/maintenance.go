package weirdrivertest

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

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
	// Due at once, and in its place in line: its scheduled time is kept.
	if !r.ScheduledAt.Equal(retry.ScheduledAt) {
		t.Fatalf("rescued job scheduled at %v, want its own time %v", r.ScheduledAt, retry.ScheduledAt)
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

// testRescueKeepsPlace: a job rescued from a crashed worker is claimed before
// the jobs inserted after it, as if it had not been claimed: crash recovery
// does not wait behind the backlog.
func testRescueKeepsPlace(t *testing.T, d weirdriver.Driver) {
	lost := claimOne(t, d, "place", 3, time.Microsecond)
	var later []int64
	for range 5 {
		later = append(later, insertOne(t, d, params("k", "place", `{}`)).ID)
	}
	rescueUntil(t, d, weirdriver.JobRescueParams{Limit: 10}, lost.ID)
	if _, err := d.Executor().JobSchedule(ctx(t), 100); err != nil {
		t.Fatal(err)
	}
	jobs := claim(t, d, "place", 1, time.Minute)
	if len(jobs) != 1 || jobs[0].ID != lost.ID {
		t.Fatalf("first claim after the rescue: %v, want the rescued job %d before %v", ids(jobs), lost.ID, later)
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
	term := func() *weirtype.LeaderRow {
		t.Helper()
		l, err := exec.LeaderGet(ctx(t), name)
		if errors.Is(err, weirdriver.ErrNotFound) {
			return &weirtype.LeaderRow{}
		}
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	leader := func() (string, time.Time) {
		t.Helper()
		l := term()
		return l.ID, l.ExpiresAt
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
	aTerm := term()
	id, first := aTerm.ID, aTerm.ExpiresAt
	if id != "a" || !near(first, time.Now().Add(time.Minute)) || first.Sub(aTerm.ElectedAt) != time.Minute {
		t.Fatalf("leader %q from %v until %v, want a for a minute from its election", id, aTerm.ElectedAt, first)
	}
	// Renewal by the holder extends its term, which still began at the election.
	if !elect("a", 2*time.Minute) {
		t.Fatal("a could not renew")
	}
	if l := term(); l.ID != "a" || !l.ExpiresAt.After(first.Add(50*time.Second)) || !l.ElectedAt.Equal(aTerm.ElectedAt) {
		t.Fatalf("after renewal: %q from %v until %v, want a from %v until about a minute after %v",
			l.ID, l.ElectedAt, l.ExpiresAt, aTerm.ElectedAt, first)
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
	// A new leader's term begins at its election.
	if l := term(); l.ID != "b" || !l.ElectedAt.After(aTerm.ElectedAt) || l.ExpiresAt.Sub(l.ElectedAt) != time.Minute {
		t.Fatalf("after b won: %q from %v until %v, want b for a minute from after a's election at %v",
			l.ID, l.ElectedAt, l.ExpiresAt, aTerm.ElectedAt)
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
	if l, err := d.Executor().LeaderGet(ctx(t), "race"); err != nil || l.ID != "candidate-"+strconv.Itoa(winner) {
		t.Fatalf("leader %+v, %v; want candidate-%d", l, err, winner)
	}
}

// testNextExpiry: JobNextExpiry is the time until the earliest lease of a
// running job expires, by the store's clock, and nothing when no job runs.
func testNextExpiry(t *testing.T, d weirdriver.Driver) {
	next := func() (time.Duration, bool) {
		t.Helper()
		wait, ok, err := d.Executor().JobNextExpiry(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		return wait, ok
	}
	if wait, ok := next(); ok {
		t.Fatalf("empty store: next expiry in %s", wait)
	}
	insertOne(t, d, params("k", "exp-waiting", `{}`))
	if wait, ok := next(); ok {
		t.Fatalf("no job running: next expiry in %s", wait)
	}
	claimOne(t, d, "exp-hour", 3, time.Hour)
	claimOne(t, d, "exp-minute", 3, time.Minute)
	if wait, ok := next(); !ok || wait <= 50*time.Second || wait > time.Minute {
		t.Fatalf("leases of a minute and an hour: next expiry in %s (%v), want the minute's", wait, ok)
	}
	claimOne(t, d, "exp-gone", 3, time.Microsecond)
	time.Sleep(time.Millisecond) // the lease's whole length, so that it has expired
	if wait, ok := next(); !ok || wait > 0 {
		t.Fatalf("an expired lease: next expiry in %s (%v), want it past", wait, ok)
	}
}

// testLeaderTermLeft: LeaderTermLeft is the time the unexpired term has left
// by the store's clock, and nothing once it ended or expired.
func testLeaderTermLeft(t *testing.T, d weirdriver.Driver) {
	exec := d.Executor()
	left := func() (time.Duration, bool) {
		t.Helper()
		d, ok, err := exec.LeaderTermLeft(ctx(t), "maintenance")
		if err != nil {
			t.Fatal(err)
		}
		return d, ok
	}
	if d, ok := left(); ok {
		t.Fatalf("no term: %s left", d)
	}
	if ok, err := exec.LeaderElect(ctx(t), &weirdriver.LeaderElectParams{Name: "maintenance", LeaderID: "a", TTL: time.Minute}); err != nil || !ok {
		t.Fatalf("elect: %v %v", ok, err)
	}
	if d, ok := left(); !ok || d <= 50*time.Second || d > time.Minute {
		t.Fatalf("a minute's term: %s left (%v)", d, ok)
	}
	if d, ok, err := exec.LeaderTermLeft(ctx(t), "other"); err != nil || ok {
		t.Fatalf("another name: %s left (%v), %v", d, ok, err)
	}
	if err := exec.LeaderResign(ctx(t), "maintenance", "a"); err != nil {
		t.Fatal(err)
	}
	if d, ok := left(); ok {
		t.Fatalf("after resigning: %s left", d)
	}
	if ok, err := exec.LeaderElect(ctx(t), &weirdriver.LeaderElectParams{Name: "maintenance", LeaderID: "a", TTL: time.Microsecond}); err != nil || !ok {
		t.Fatalf("elect: %v %v", ok, err)
	}
	time.Sleep(time.Millisecond) // the term's whole length, so that it has expired
	if d, ok := left(); ok {
		t.Fatalf("after the term expired: %s left", d)
	}
}
