package weirdrivertest

import (
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// share asks for client's share of queue.
func share(t *testing.T, d weirdriver.Driver, queue, client string, want, keep int, lease time.Duration) weirdriver.QueueShare {
	t.Helper()
	s, err := d.Executor().QueueShare(ctx(t), &weirdriver.QueueShareParams{
		Queue: queue, ClientID: client, Want: want, Keep: keep, Lease: lease,
	})
	if err != nil {
		t.Fatalf("share of %s for %s (want %d, keep %d): %v", queue, client, want, keep, err)
	}
	return s
}

// claimAs claims up to max jobs of queue as client.
func claimAs(t *testing.T, d weirdriver.Driver, queue, client string, max int) ([]*weirtype.JobRow, weirdriver.ClaimLimit) {
	t.Helper()
	jobs, lim, err := d.Executor().JobClaim(ctx(t), &weirdriver.JobClaimParams{
		Queue: queue, Max: max, ClientID: client, LeaseDuration: time.Minute,
	})
	if err != nil {
		t.Fatalf("claim %s as %s: %v", queue, client, err)
	}
	return jobs, lim
}

// testQueueShare: shares of a global limit are divided fairly by what each
// client wants, within the room the others' shares and the running jobs of
// clients without one leave, never below what a client keeps; a client
// holding one claims without the limit's count, one without is counted
// against the shares and told it may ask for one; a share whose lease ran
// out is deleted, and its client's running jobs count again; giving a share
// up and removing the limit drop it; bad requests are refused and change
// nothing.
func testQueueShare(t *testing.T, d weirdriver.Driver) {
	const q, lease = "shared", time.Minute
	ps := make([]*weirdriver.JobInsertParams, 40)
	for i := range ps {
		ps[i] = params("k", q, `{}`)
	}
	if _, err := d.Executor().JobInsert(ctx(t), ps); err != nil {
		t.Fatal(err)
	}
	if s := share(t, d, q, "a", 8, 0, lease); s != (weirdriver.QueueShare{}) {
		t.Fatalf("share of a queue without a limit: %+v, want none", s)
	}
	setLimit(t, d, q, 10)

	check := func(step string, got, want weirdriver.QueueShare) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: share %+v, want %+v", step, got, want)
		}
	}
	check("a alone", share(t, d, q, "a", 8, 0, lease), weirdriver.QueueShare{Limit: 10, Slots: 8, Fair: 8})
	// b's fair part is 5, but a holds 8: b gets the 2 left.
	check("b joins", share(t, d, q, "b", 8, 0, lease), weirdriver.QueueShare{Limit: 10, Slots: 2, Fair: 2})
	// a's fair part is now 5; it keeps the 8 it may be using.
	check("a renews", share(t, d, q, "a", 8, 8, lease), weirdriver.QueueShare{Limit: 10, Slots: 8, Fair: 5})
	check("a shrinks", share(t, d, q, "a", 8, 5, lease), weirdriver.QueueShare{Limit: 10, Slots: 5, Fair: 5})
	check("b grows", share(t, d, q, "b", 8, 2, lease), weirdriver.QueueShare{Limit: 10, Slots: 5, Fair: 5})

	// A client without a share is counted against the shares: no room.
	if jobs, lim := claimAs(t, d, q, "c", 10); len(jobs) != 0 || !lim.Limited || !lim.Share {
		t.Fatalf("claim by a client without a share: %d jobs, %+v; want 0, limited, share", len(jobs), lim)
	}
	// A client holding one claims without the count: it keeps its handlers
	// within its share.
	aJobs, lim := claimAs(t, d, q, "a", 12)
	if len(aJobs) != 12 || lim.Limited {
		t.Fatalf("claim by a client with a share: %d jobs, %+v; want 12, not limited", len(aJobs), lim)
	}
	check("b after a's claim", share(t, d, q, "b", 8, 5, lease), weirdriver.QueueShare{Limit: 10, Slots: 5, Fair: 5})

	// a's share runs out: its 12 running jobs count against the limit again,
	// until they stop running.
	share(t, d, q, "a", 8, 5, time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := share(t, d, q, "b", 8, 5, lease)
		if s.Fair == 0 {
			check("b after a's share ran out", s, weirdriver.QueueShare{Limit: 10, Slots: 5, Fair: 0})
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's share of 1 ms still counted after 10 s: b's share %+v", s)
		}
	}
	for _, j := range aJobs[:10] {
		finalize(t, d, &weirdriver.JobFinalizeParams{ID: j.ID, LeaseToken: j.LeaseToken, Outcome: weirdriver.OutcomeCompleted})
	}
	check("b after 10 of a's jobs ended", share(t, d, q, "b", 8, 0, lease), weirdriver.QueueShare{Limit: 10, Slots: 8, Fair: 8})

	// Giving the share up: b's claims are counted again (2 of a's running, 8
	// slots free).
	check("b gives up", share(t, d, q, "b", 0, 0, lease), weirdriver.QueueShare{Limit: 10})
	if jobs, lim := claimAs(t, d, q, "b", 20); len(jobs) != 8 || !lim.Limited || !lim.Share {
		t.Fatalf("claim by b after giving its share up: %d jobs, %+v; want 8, limited, share", len(jobs), lim)
	}

	// Bad requests are refused and change nothing.
	check("c joins", share(t, d, q, "c", 3, 0, lease), weirdriver.QueueShare{Limit: 10, Slots: 0, Fair: 0})
	for _, p := range []weirdriver.QueueShareParams{
		{Queue: "", ClientID: "c", Want: 1, Lease: lease},
		{Queue: q, ClientID: "", Want: 1, Lease: lease},
		{Queue: q, ClientID: "c", Want: -1, Lease: lease},
		{Queue: q, ClientID: "c", Want: weirdriver.MaxGlobalLimit + 1, Lease: lease},
		{Queue: q, ClientID: "c", Want: 1, Keep: -1, Lease: lease},
		{Queue: q, ClientID: "c", Want: 0, Keep: 1, Lease: lease},
		{Queue: q, ClientID: "c", Want: 1, Lease: 0},
		{Queue: q, ClientID: "c", Want: 1, Lease: -time.Second},
	} {
		if _, err := d.Executor().QueueShare(ctx(t), &p); err == nil {
			t.Errorf("share %+v: no error", p)
		}
	}
	// c's share is as it was: 0 slots, 3 wanted.
	check("d beside c", share(t, d, q, "d", 20, 0, lease), weirdriver.QueueShare{Limit: 10, Slots: 0, Fair: 0})

	// Without the limit there are no shares.
	setLimit(t, d, q, 0)
	check("c without the limit", share(t, d, q, "c", 3, 0, lease), weirdriver.QueueShare{})
}
