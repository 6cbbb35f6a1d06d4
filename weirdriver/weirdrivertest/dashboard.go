package weirdrivertest

import (
	"slices"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// testQueueListEstimated checks that QueueListEstimated lists what QueueList
// does: the same queues, paused marks and oldest available jobs, the counts
// of the states that are not final exact, and every count it does not mark
// as an estimate exact too.
func testQueueListEstimated(t *testing.T, d weirdriver.Driver) {
	ex := d.Executor()
	// Queue "a": available (one scheduled an hour ago), scheduled, running,
	// retryable and completed jobs; "b": cancelled and discarded ones; "c":
	// paused without jobs.
	old := params("k", "a", `{}`)
	old.ScheduledAt = time.Now().Add(-time.Hour)
	insertOne(t, d, old)
	insertOne(t, d, params("k", "a", `{}`))
	later := params("k", "a", `{}`)
	later.ScheduledAt = time.Now().Add(time.Hour)
	insertOne(t, d, later)
	for _, outcome := range []weirdriver.Outcome{"", weirdriver.OutcomeRetry, weirdriver.OutcomeCompleted} {
		job := claimOne(t, d, "a-run", 3, time.Minute)
		if outcome == "" {
			continue
		}
		finalize(t, d, &weirdriver.JobFinalizeParams{ID: job.ID, LeaseToken: job.LeaseToken, Outcome: outcome,
			ScheduledAt: time.Now().Add(time.Hour)})
	}
	for _, outcome := range []weirdriver.Outcome{weirdriver.OutcomeDiscard, weirdriver.OutcomeCancel} {
		job := claimOne(t, d, "b", 3, time.Minute)
		finalize(t, d, &weirdriver.JobFinalizeParams{ID: job.ID, LeaseToken: job.LeaseToken, Outcome: outcome})
	}
	if err := ex.QueuePause(ctx(t), "c"); err != nil {
		t.Fatal(err)
	}

	exact, err := ex.QueueList(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ex.QueueListEstimated(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(exact) {
		t.Fatalf("QueueListEstimated lists %d queues, QueueList %d", len(got), len(exact))
	}
	for i, q := range got {
		want := exact[i]
		if q.Name != want.Name || q.Paused != want.Paused || !q.OldestAvailableAt.Equal(want.OldestAvailableAt) {
			t.Errorf("queue %d: %s paused %v oldest %v, want %s paused %v oldest %v", i,
				q.Name, q.Paused, q.OldestAvailableAt, want.Name, want.Paused, want.OldestAvailableAt)
		}
		for _, s := range weirtype.JobStates() {
			if q.Estimated[s] {
				if !s.Final() {
					t.Errorf("queue %s: the count of %s, not a final state, is marked as an estimate", q.Name, s)
				}
				continue
			}
			if q.Counts[s] != want.Counts[s] {
				t.Errorf("queue %s: %d %s jobs, not marked as an estimate, want %d", q.Name, q.Counts[s], s, want.Counts[s])
			}
		}
	}
	// The fixture has the states it means to.
	byName := map[string]*weirtype.QueueStats{}
	for _, q := range exact {
		byName[q.Name] = q
	}
	for name, counts := range map[string]map[weirtype.JobState]int64{
		"a":     {weirtype.JobStateAvailable: 2, weirtype.JobStateScheduled: 1},
		"a-run": {weirtype.JobStateRunning: 1, weirtype.JobStateRetryable: 1, weirtype.JobStateCompleted: 1},
		"b":     {weirtype.JobStateDiscarded: 1, weirtype.JobStateCancelled: 1},
		"c":     {},
	} {
		q := byName[name]
		if q == nil {
			t.Fatalf("QueueList lists no queue %s", name)
		}
		for s, n := range counts {
			if q.Counts[s] != n {
				t.Errorf("QueueList: queue %s has %d %s jobs, want %d", name, q.Counts[s], s, n)
			}
		}
	}
}

// testJobThroughput checks that JobThroughput counts the jobs finalized from
// Since on, by state and bucket, with the completed jobs' mean pickup, and
// refuses bad params.
func testJobThroughput(t *testing.T, d weirdriver.Driver) {
	ex := d.Executor()
	before := time.Now().Add(-time.Minute)
	for _, outcome := range []weirdriver.Outcome{
		weirdriver.OutcomeCompleted, weirdriver.OutcomeCompleted, weirdriver.OutcomeDiscard, weirdriver.OutcomeCancel,
	} {
		job := claimOne(t, d, "q", 1, time.Minute)
		finalize(t, d, &weirdriver.JobFinalizeParams{ID: job.ID, LeaseToken: job.LeaseToken, Outcome: outcome})
	}
	// Neither final nor counted.
	insertOne(t, d, params("k", "q", `{}`))
	claimOne(t, d, "other", 1, time.Minute)

	// One bucket of a day holds them all.
	res, err := ex.JobThroughput(ctx(t), &weirdriver.JobThroughputParams{Since: before.Add(-time.Hour), Width: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Buckets) != 1 {
		t.Fatalf("%d buckets, want 1: %+v", len(res.Buckets), res.Buckets)
	}
	b := res.Buckets[0]
	if !b.Start.Equal(before.Add(-time.Hour).UTC()) || b.Completed != 2 || b.Cancelled != 1 || b.Discarded != 1 ||
		b.PickupMean < 0 || b.PickupMean > time.Minute {
		t.Errorf("bucket %+v, want from %v: 2 completed, 1 cancelled, 1 discarded, a pickup under a minute", b, before.Add(-time.Hour))
	}
	if res.Now.Before(before) || res.Now.After(time.Now().Add(time.Minute)) {
		t.Errorf("the database's clock reads %v, want about now", res.Now)
	}

	// Buckets of a second from a minute ago: the jobs fall in one or a few,
	// oldest first, each starting a whole number of seconds after Since.
	res, err = ex.JobThroughput(ctx(t), &weirdriver.JobThroughputParams{Since: before, Width: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for i, b := range res.Buckets {
		if off := b.Start.Sub(before); off < 0 || off%time.Second != 0 || i > 0 && !b.Start.After(res.Buckets[i-1].Start) {
			t.Errorf("bucket %d starts at %v, %v after since", i, b.Start, off)
		}
		total += b.Completed + b.Cancelled + b.Discarded
	}
	if total != 4 {
		t.Errorf("%d jobs in buckets of a second, want 4: %+v", total, res.Buckets)
	}

	// From now on: nothing yet.
	res, err = ex.JobThroughput(ctx(t), &weirdriver.JobThroughputParams{Since: time.Now().Add(time.Hour), Width: time.Minute})
	if err != nil || len(res.Buckets) != 0 || res.Now.IsZero() {
		t.Errorf("throughput from an hour ahead: %+v, %v; want no bucket and the clock", res, err)
	}

	for _, p := range []*weirdriver.JobThroughputParams{
		{Width: time.Minute}, {Since: before, Width: 0}, {Since: before, Width: time.Millisecond},
	} {
		if _, err := ex.JobThroughput(ctx(t), p); err == nil {
			t.Errorf("throughput with %+v: no error", p)
		}
	}
}

// testListSearch checks JobListParams.Search: a literal substring of the kind
// or the args' JSON text, without regard to case, whose LIKE wildcards and
// escape character match only themselves, within the other filters.
func testListSearch(t *testing.T, d weirdriver.Driver) {
	byName := map[string]int64{}
	for name, p := range map[string]*weirdriver.JobInsertParams{
		"mail":      params("Mail.Send", "q", `{"to":"Ada@Example.com"}`),
		"percent":   params("k", "q", `{"note":"50% off"}`),
		"hundreds":  params("k", "q", `{"note":"500 off"}`),
		"under":     params("k", "q", `{"path":"a_b"}`),
		"letter":    params("k", "q", `{"path":"axb"}`),
		"backslash": params("k", "q", `{"path":"c:\\temp"}`),
		"other":     params("k", "other", `{"to":"ada@example.com"}`),
	} {
		byName[name] = insertOne(t, d, p).ID
	}
	for _, tc := range []struct {
		search string
		queues []string
		want   []string
	}{
		{"mail.send", nil, []string{"mail"}},
		{"ADA@EXAMPLE", nil, []string{"mail", "other"}},
		{"ADA@EXAMPLE", []string{"q"}, []string{"mail"}},
		{"50%", nil, []string{"percent"}},
		{"%", nil, []string{"percent"}},
		{"a_b", nil, []string{"under"}},
		{"_", nil, []string{"under"}},
		{`\`, nil, []string{"backslash"}},
		{"off", nil, []string{"percent", "hundreds"}},
		{"nowhere", nil, nil},
	} {
		jobs, err := d.Executor().JobList(ctx(t), &weirdriver.JobListParams{Search: tc.search, Queues: tc.queues, Limit: 100})
		if err != nil {
			t.Fatalf("search %q: %v", tc.search, err)
		}
		var want []int64
		for _, name := range tc.want {
			want = append(want, byName[name])
		}
		slices.Sort(want)
		got := ids(jobs)
		if !slices.Equal(got, want) {
			t.Errorf("search %q in %v: jobs %v, want %v (%v)", tc.search, tc.queues, got, want, tc.want)
		}
	}
}
