package weirpgx_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// TestRenewSkipsLockedRows: a renewal never waits for a row lock. A job whose
// row another transaction holds (here an outcome write not yet committed) is
// reported busy and left as it was; the other leases are renewed at once; the
// busy one is renewed once the lock is gone. Waiting instead deadlocked with
// the client's own outcome writes under load.
func TestRenewSkipsLockedRows(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ctx := t.Context()
	exec := d.Executor()
	for range 2 {
		if _, err := exec.JobInsert(ctx, []*weirdriver.JobInsertParams{{
			Kind: "k", Queue: "renew-busy", Args: json.RawMessage(`{}`), Priority: 2, MaxAttempts: 3,
		}}); err != nil {
			t.Fatal(err)
		}
	}
	jobs, _, err := exec.JobClaim(ctx, &weirdriver.JobClaimParams{Queue: "renew-busy", Max: 2, ClientID: "c", LeaseDuration: time.Minute})
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claim: %d jobs, %v", len(jobs), err)
	}
	held, free := jobs[0], jobs[1]

	tx, err := exec.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // rolled back below
	if applied, err := tx.JobFinalize(ctx, []*weirdriver.JobFinalizeParams{{
		ID: held.ID, LeaseToken: held.LeaseToken, Outcome: weirdriver.OutcomeCompleted,
	}}); err != nil || !applied[0] {
		t.Fatalf("finalize in a transaction: %v, %v", applied, err)
	}

	renew := func() *weirdriver.JobRenewResult {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		res, err := exec.JobRenew(rctx, &weirdriver.JobRenewParams{
			IDs: []int64{held.ID, free.ID}, LeaseTokens: []int64{held.LeaseToken, free.LeaseToken}, LeaseDuration: time.Hour,
		})
		if err != nil {
			t.Fatalf("renew (did it wait for the row lock?): %v", err)
		}
		return res
	}
	res := renew()
	if !slices.Equal(res.Busy, []int64{held.ID}) || !slices.Equal(res.Renewed, []int64{free.ID}) || len(res.Lost) != 0 {
		t.Fatalf("renew with a row locked: %+v, want %d busy and %d renewed", res, held.ID, free.ID)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := exec.JobGet(ctx, held.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.LeaseExpiresAt.Equal(*held.LeaseExpiresAt) {
		t.Fatalf("a busy lease was changed: expires %v, was %v", got.LeaseExpiresAt, held.LeaseExpiresAt)
	}
	if res := renew(); len(res.Renewed) != 2 || len(res.Busy)+len(res.Lost) != 0 {
		t.Fatalf("renew after the lock: %+v, want both renewed", res)
	}
}
