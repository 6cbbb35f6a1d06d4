package weirdrivertest

import (
	"slices"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

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
