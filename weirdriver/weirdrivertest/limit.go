package weirdrivertest

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// claimLimited claims up to max jobs of queue and returns them with the
// claim's limited flag.
func claimLimited(t *testing.T, d weirdriver.Driver, queue string, max int, lease time.Duration) ([]*weirtype.JobRow, bool) {
	t.Helper()
	jobs, lim := claimRated(t, d, queue, max, lease)
	return jobs, lim.Limited
}

// claimRated claims up to max jobs of queue and returns them with what the
// queue's limits said.
func claimRated(t *testing.T, d weirdriver.Driver, queue string, max int, lease time.Duration) ([]*weirtype.JobRow, weirdriver.ClaimLimit) {
	t.Helper()
	jobs, lim, err := d.Executor().JobClaim(ctx(t), &weirdriver.JobClaimParams{
		Queue: queue, Max: max, ClientID: testClient, LeaseDuration: lease,
	})
	if err != nil {
		t.Fatalf("claim %s: %v", queue, err)
	}
	return jobs, lim
}

func setLimit(t *testing.T, d weirdriver.Driver, queue string, limit int) {
	t.Helper()
	if err := d.Executor().QueueSetGlobalLimit(ctx(t), queue, limit); err != nil {
		t.Fatalf("set the global limit of %s to %d: %v", queue, limit, err)
	}
}

func queueStats(t *testing.T, d weirdriver.Driver, name string) *weirtype.QueueStats {
	t.Helper()
	queues, err := d.Executor().QueueList(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queues {
		if q.Name == name {
			return q
		}
	}
	return nil
}

// testGlobalLimit: a claim of a limited queue leases at most the limit less the
// queue's running jobs and says so; a slot comes back when a job stops running
// by an outcome or a rescue; raising and removing the limit take effect at the
// next claim; other queues are unaffected; QueueList shows the limit, also of a
// queue without jobs.
func testGlobalLimit(t *testing.T, d weirdriver.Driver) {
	for range 8 {
		insertOne(t, d, params("k", "lim", `{}`))
	}
	insertOne(t, d, params("k", "free", `{}`))
	setLimit(t, d, "lim", 3)
	setLimit(t, d, "lim-empty", 9)

	got, limited := claimLimited(t, d, "lim", 10, time.Minute)
	if len(got) != 3 || !limited {
		t.Fatalf("first claim of 10 under a limit of 3: %d jobs, limited %v; want 3, true", len(got), limited)
	}
	if more, limited := claimLimited(t, d, "lim", 10, time.Minute); len(more) != 0 || !limited {
		t.Fatalf("claim at the limit: %d jobs, limited %v; want 0, true", len(more), limited)
	}
	if free, limited := claimLimited(t, d, "free", 10, time.Minute); len(free) != 1 || limited {
		t.Fatalf("claim of a queue without a limit: %d jobs, limited %v; want 1, false", len(free), limited)
	}
	if q := queueStats(t, d, "lim"); q == nil || q.GlobalLimit != 3 || q.Counts[weirtype.JobStateRunning] != 3 {
		t.Fatalf("limited queue listed as %+v", q)
	}
	if q := queueStats(t, d, "lim-empty"); q == nil || q.GlobalLimit != 9 || q.Paused || len(q.Counts) != 0 {
		t.Fatalf("limited queue without jobs listed as %+v", q)
	}
	if q := queueStats(t, d, "free"); q == nil || q.GlobalLimit != 0 {
		t.Fatalf("queue without a limit listed as %+v", q)
	}

	// An outcome frees one slot: the next claim takes one job, not more.
	if applied := finalize(t, d, &weirdriver.JobFinalizeParams{ID: got[0].ID, LeaseToken: got[0].LeaseToken, Outcome: weirdriver.OutcomeCompleted}); !applied[0] {
		t.Fatal("completion did not apply")
	}
	if one, limited := claimLimited(t, d, "lim", 10, time.Minute); len(one) != 1 || !limited {
		t.Fatalf("claim after one completion: %d jobs, limited %v; want 1, true", len(one), limited)
	}
	// A claim that asks for no more than the free slots is not cut short.
	setLimit(t, d, "lim", 5)
	if two, limited := claimLimited(t, d, "lim", 2, time.Minute); len(two) != 2 || limited {
		t.Fatalf("claim of 2 with 2 slots free: %d jobs, limited %v; want 2, false", len(two), limited)
	}

	// A rescue frees the slots of expired leases.
	setLimit(t, d, "lim-rescue", 2)
	for range 3 {
		insertOne(t, d, params("k", "lim-rescue", `{}`))
	}
	short, _ := claimLimited(t, d, "lim-rescue", 10, time.Microsecond)
	if len(short) != 2 {
		t.Fatalf("claim under a limit of 2: %d jobs", len(short))
	}
	rescueUntil(t, d, weirdriver.JobRescueParams{Limit: 10}, short[0].ID, short[1].ID)
	if _, err := d.Executor().JobSchedule(ctx(t), 100); err != nil { // a driver may rescue to retryable
		t.Fatal(err)
	}
	if after, _ := claimLimited(t, d, "lim-rescue", 10, time.Minute); len(after) != 2 {
		t.Fatalf("claim after the rescue of both: %d jobs, want 2", len(after))
	}

	// Removing the limit lets the rest go.
	setLimit(t, d, "lim", 0)
	if rest, limited := claimLimited(t, d, "lim", 10, time.Minute); len(rest) != 2 || limited {
		t.Fatalf("claim without the limit: %d jobs, limited %v; want the 2 left, false", len(rest), limited)
	}
	if q := queueStats(t, d, "lim"); q == nil || q.GlobalLimit != 0 {
		t.Fatalf("queue whose limit was removed listed as %+v", q)
	}
}

// testGlobalLimitConcurrent: claimers racing on one limited queue, each on its
// own executor, lease no more than the limit between them, and the limit's
// slots all end up leased.
func testGlobalLimitConcurrent(t *testing.T, d weirdriver.Driver) {
	const limit, claimers = 5, 12
	setLimit(t, d, "race", limit)
	ps := make([]*weirdriver.JobInsertParams, 100)
	for i := range ps {
		ps[i] = params("k", "race", `{}`)
	}
	if _, err := d.Executor().JobInsert(ctx(t), ps); err != nil {
		t.Fatal(err)
	}
	claimed := len(raceClaims(t, d, "race", claimers))
	if claimed != limit {
		t.Fatalf("%d claimers leased %d jobs of a queue limited to %d", claimers, claimed, limit)
	}
	if q := queueStats(t, d, "race"); q == nil || q.Counts[weirtype.JobStateRunning] != limit {
		t.Fatalf("queue after the race: %+v", q)
	}
}

// testGlobalLimitRejectsBadInput: a limit out of range, or a queue name empty
// or too long, is refused with an error that names it, and the stored limit
// stays as it was.
func testGlobalLimitRejectsBadInput(t *testing.T, d weirdriver.Driver) {
	setLimit(t, d, "bad-limit", 4)
	long := string(make([]byte, 129))
	for _, c := range []struct {
		queue string
		limit int
	}{
		{"bad-limit", -1},
		{"bad-limit", weirdriver.MaxGlobalLimit + 1},
		{"", 3},
		{long, 3},
	} {
		if err := d.Executor().QueueSetGlobalLimit(ctx(t), c.queue, c.limit); err == nil {
			t.Errorf("limit %d of queue %q: no error", c.limit, c.queue)
		}
	}
	if q := queueStats(t, d, "bad-limit"); q == nil || q.GlobalLimit != 4 {
		t.Fatalf("queue after refused changes: %+v", q)
	}
}

// testRateLimit: a rate-limited queue's claims lease at most its burst at
// once and then what the rate has admitted since, say when the next job is
// due, and, racing from several executors, never lease more in an interval
// of W (by the claims' own times, attempted_at) than W/T + burst, where T is
// period/limit; removing the limit lets the rest go; QueueList shows it; bad
// input is refused and changes nothing.
func testRateLimit(t *testing.T, d weirdriver.Driver) {
	const limit, period = 200, time.Second // T = 5 ms; burst 2 + 2 = 4
	burst := weirdriver.RateBurst(limit, period)
	if burst != 4 {
		t.Fatalf("burst of %d per %s: %d, want 4", limit, period, burst)
	}
	ps := make([]*weirdriver.JobInsertParams, 400)
	for i := range ps {
		ps[i] = params("k", "rated", `{}`)
	}
	if _, err := d.Executor().JobInsert(ctx(t), ps); err != nil {
		t.Fatal(err)
	}
	if err := d.Executor().QueueSetRateLimit(ctx(t), "rated", limit, period); err != nil {
		t.Fatal(err)
	}
	if q := queueStats(t, d, "rated"); q == nil || q.RateLimit != limit || q.RatePeriod != period {
		t.Fatalf("rate-limited queue listed as %+v", q)
	}
	first, lim := claimRated(t, d, "rated", 100, time.Minute)
	if len(first) != burst || !lim.Limited || lim.Wait <= 0 || lim.Wait > 5*time.Millisecond {
		t.Fatalf("first claim of 100: %d jobs, %+v; want the burst of %d, limited, the next due within 5ms", len(first), lim, burst)
	}

	// Several executors claim for a while; then every window of the claims'
	// times holds at most W/T + burst jobs.
	all := append(first, claimFor(t, d, "rated", 300*time.Millisecond)...)
	tick := period / limit
	for _, w := range []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond} {
		if most, bound := mostWithin(all, w), int(w/tick)+burst; most > bound {
			t.Errorf("%d jobs claimed within %s under %d per %s: the bound is %d", most, w, limit, period, bound)
		}
	}
	if len(all) <= burst {
		t.Fatalf("%d jobs claimed in 300 ms at %d per %s: the rate admitted nothing after the burst", len(all), limit, period)
	}

	// Bad input changes nothing.
	for _, c := range []struct {
		queue  string
		limit  int
		period time.Duration
	}{
		{"rated", -1, period}, {"rated", weirdriver.MaxRateLimit + 1, period},
		{"rated", 10, 0}, {"rated", 10, -time.Second}, {"rated", 10, 25 * time.Hour}, {"rated", 10, time.Nanosecond},
		{"", 10, period},
	} {
		if err := d.Executor().QueueSetRateLimit(ctx(t), c.queue, c.limit, c.period); err == nil {
			t.Errorf("rate %d per %s of queue %q: no error", c.limit, c.period, c.queue)
		}
	}
	if q := queueStats(t, d, "rated"); q == nil || q.RateLimit != limit || q.RatePeriod != period {
		t.Fatalf("after refused changes: %+v", q)
	}

	// Removing the limit lets the rest go.
	if err := d.Executor().QueueSetRateLimit(ctx(t), "rated", 0, 0); err != nil {
		t.Fatal(err)
	}
	rest, lim := claimRated(t, d, "rated", 1000, time.Minute)
	if len(rest) != 400-len(all) || lim.Limited {
		t.Fatalf("claim without the limit: %d jobs, %+v; want the %d left", len(rest), lim, 400-len(all))
	}
}

// claimFor has four executors claim up to 10 jobs of queue at a time for
// about d, each waiting as long as a claim says before the next, as a
// producer does, and returns what they claimed.
func claimFor(t *testing.T, dr weirdriver.Driver, queue string, d time.Duration) []*weirtype.JobRow {
	t.Helper()
	var (
		mu  sync.Mutex
		all []*weirtype.JobRow
		wg  sync.WaitGroup
	)
	stop := time.Now().Add(d)
	for i := range 4 {
		exec := dr.Executor()
		wg.Go(func() {
			for time.Now().Before(stop) {
				jobs, lim, err := exec.JobClaim(ctx(t), &weirdriver.JobClaimParams{
					Queue: queue, Max: 10, ClientID: "claimer-" + strconv.Itoa(i), LeaseDuration: time.Minute,
				})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				all = append(all, jobs...)
				mu.Unlock()
				if lim.Wait > 0 {
					time.Sleep(lim.Wait) // as a producer waits: not a check of time
				}
			}
		})
	}
	wg.Wait()
	return all
}

// mostWithin is the most of jobs claimed within any interval of length w, by
// their attempted_at.
func mostWithin(jobs []*weirtype.JobRow, w time.Duration) int {
	most := 0
	for _, a := range jobs {
		n := 0
		for _, b := range jobs {
			if at := b.AttemptedAt.Sub(*a.AttemptedAt); at >= 0 && at < w {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// raceClaims has claimers executors, started together, each claim up to 3
// jobs of queue 5 times, and returns what they leased.
func raceClaims(t *testing.T, d weirdriver.Driver, queue string, claimers int) []*weirtype.JobRow {
	t.Helper()
	var (
		mu      sync.Mutex
		claimed []*weirtype.JobRow
		wg      sync.WaitGroup
		errs    = make(chan error, claimers)
	)
	start := make(chan struct{})
	for i := range claimers {
		exec := d.Executor()
		wg.Go(func() {
			<-start
			for range 5 {
				jobs, _, err := exec.JobClaim(ctx(t), &weirdriver.JobClaimParams{
					Queue: queue, Max: 3, ClientID: "claimer-" + strconv.Itoa(i), LeaseDuration: time.Minute,
				})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				claimed = append(claimed, jobs...)
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return claimed
}
