package weirdrivertest

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

func claim(t *testing.T, d weirdriver.Driver, queue string, limit int, lease time.Duration) []*weirtype.JobRow {
	t.Helper()
	jobs, _, err := d.Executor().JobClaim(ctx(t), &weirdriver.JobClaimParams{
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
	if got.State != weirtype.JobStateRunning || got.Attempt != 1 || got.LeaseToken <= job.LeaseToken ||
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
	if len(again) != 1 || again[0].LeaseToken <= got.LeaseToken || again[0].Attempt != 1 {
		t.Fatalf("second claim: %+v, want a token over %d, attempt 1", again, got.LeaseToken)
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
				jobs, _, err := exec.JobClaim(ctx(t), &weirdriver.JobClaimParams{
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

// testClaimID: JobClaimID leases the one job named, scheduled or available,
// due or not, its queue paused or not; it leaves a running or final job as it
// is, and a bad call changes nothing.
func testClaimID(t *testing.T, d weirdriver.Driver) {
	ex := d.Executor()
	claimID := func(id int64) (*weirtype.JobRow, bool) {
		t.Helper()
		job, ok, err := ex.JobClaimID(ctx(t), &weirdriver.JobClaimIDParams{ID: id, ClientID: testClient, LeaseDuration: time.Minute})
		if err != nil {
			t.Fatalf("claim job %d: %v", id, err)
		}
		return job, ok
	}
	future := insertAt(t, d, "q", 2, time.Now().Add(time.Hour))
	other := insertAt(t, d, "q", 1, time.Now().Add(-time.Hour)) // first in claim order
	got, ok := claimID(future.ID)
	if !ok || got.ID != future.ID || got.State != weirtype.JobStateRunning || got.Attempt != 1 ||
		got.LeaseToken <= future.LeaseToken || got.AttemptedBy != testClient || got.LeaseExpiresAt == nil {
		t.Fatalf("claim of a scheduled job: %v %+v", ok, got)
	}
	if !near(*got.LeaseExpiresAt, time.Now().Add(time.Minute)) {
		t.Fatalf("lease expires at %v, want about a minute from now", got.LeaseExpiresAt)
	}
	if j := getJob(t, d, other.ID); j.State != weirtype.JobStateAvailable {
		t.Fatalf("another job of the queue was claimed: %+v", j)
	}

	// Running: unchanged.
	again, ok := claimID(future.ID)
	if ok || rowJSON(t, again) != rowJSON(t, getJob(t, d, future.ID)) || again.LeaseToken != got.LeaseToken {
		t.Fatalf("second claim of a running job: %v %+v", ok, again)
	}
	// Final: unchanged.
	finalize(t, d, &weirdriver.JobFinalizeParams{ID: got.ID, LeaseToken: got.LeaseToken, Outcome: weirdriver.OutcomeCompleted})
	done := getJob(t, d, got.ID)
	if j, ok := claimID(got.ID); ok || j.State != weirtype.JobStateCompleted {
		t.Fatalf("claim of a completed job: %v %+v", ok, j)
	}
	sameRow(t, d, "a claim of a completed job", done)

	// A paused queue does not stop it.
	if err := ex.QueuePause(ctx(t), "q"); err != nil {
		t.Fatal(err)
	}
	if j, ok := claimID(other.ID); !ok || j.State != weirtype.JobStateRunning {
		t.Fatalf("claim of a job of a paused queue: %v %+v", ok, j)
	}

	if _, _, err := ex.JobClaimID(ctx(t), &weirdriver.JobClaimIDParams{ID: 1 << 40, ClientID: testClient, LeaseDuration: time.Minute}); !errors.Is(err, weirdriver.ErrNotFound) {
		t.Fatalf("claim of a missing job: %v, want ErrNotFound", err)
	}
	bad := insertOne(t, d, params("k", "q2", `{}`))
	for _, p := range []weirdriver.JobClaimIDParams{
		{ID: bad.ID, LeaseDuration: time.Minute},
		{ID: bad.ID, ClientID: testClient},
	} {
		if _, _, err := ex.JobClaimID(ctx(t), &p); err == nil {
			t.Fatalf("claim with %+v: no error", p)
		}
	}
	sameRow(t, d, "a bad claim", bad)
}
