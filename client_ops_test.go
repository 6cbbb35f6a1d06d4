package weir_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver"
)

// TestLeader checks, on both stores, that Client.Leader says nobody leads
// before an election, and then names the leader of maintenance with its
// term: elected when it won, ending a TTL later.
func TestLeader(t *testing.T) {
	t.Parallel()
	for _, d := range bothStores(t) {
		t.Run(d.Name(), func(t *testing.T) {
			t.Parallel()
			c, err := weir.NewClient(d, nil)
			if err != nil {
				t.Fatal(err)
			}
			if l, err := c.Leader(testCtx(t)); err != nil || l != nil {
				t.Fatalf("before any election: %+v, %v; want nobody", l, err)
			}
			// A leader of another name is not maintenance's.
			for _, name := range []string{"other", "maintenance"} {
				ok, err := d.Executor().LeaderElect(testCtx(t), &weirdriver.LeaderElectParams{Name: name, LeaderID: name + "-leader", TTL: time.Minute})
				if err != nil || !ok {
					t.Fatalf("elect %s: %v, %v", name, ok, err)
				}
			}
			l, err := c.Leader(testCtx(t))
			if err != nil || l == nil {
				t.Fatalf("after the election: %+v, %v", l, err)
			}
			if l.ID != "maintenance-leader" || l.ExpiresAt.Sub(l.ElectedAt) != time.Minute ||
				l.ElectedAt.Before(time.Now().Add(-time.Minute)) || l.ElectedAt.After(time.Now().Add(time.Minute)) {
				t.Errorf("leader %+v, want maintenance-leader elected about now for a minute", l)
			}
		})
	}
}

// TestJobThroughput checks, on both stores, that Client.JobThroughput counts
// the jobs finalized since a time by state, leaves out those not final, and
// refuses a zero start or a bucket narrower than a second.
func TestJobThroughput(t *testing.T) {
	t.Parallel()
	for _, d := range bothStores(t) {
		t.Run(d.Name(), func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			c, err := weir.NewClient(d, nil)
			if err != nil {
				t.Fatal(err)
			}
			since := time.Now().Add(-time.Hour)
			var ids []int64
			for range 3 {
				res, err := c.Insert(ctx, probeArgs{}, nil)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, res.Job.ID)
			}
			jobs, _, err := d.Executor().JobClaim(ctx, &weirdriver.JobClaimParams{
				Queue: weir.DefaultQueue, Max: 1, ClientID: "test", LeaseDuration: time.Minute,
			})
			if err != nil || len(jobs) != 1 {
				t.Fatalf("claim: %v, %d jobs", err, len(jobs))
			}
			applied, err := d.Executor().JobFinalize(ctx, []*weirdriver.JobFinalizeParams{{
				ID: jobs[0].ID, LeaseToken: jobs[0].LeaseToken, Outcome: weirdriver.OutcomeCompleted,
			}})
			if err != nil || !applied[0] {
				t.Fatalf("complete job %d: %v, %v", jobs[0].ID, err, applied)
			}
			if _, err := c.JobCancel(ctx, ids[1]); err != nil {
				t.Fatal(err)
			}

			tp, err := c.JobThroughput(ctx, since, 2*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if len(tp.Buckets) != 1 || !tp.Buckets[0].Start.Equal(since) || tp.Buckets[0].Completed != 1 ||
				tp.Buckets[0].Cancelled != 1 || tp.Buckets[0].Discarded != 0 || tp.Now.Before(since) {
				t.Errorf("throughput %+v (buckets %+v), want one bucket from %v with 1 completed and 1 cancelled", tp, tp.Buckets, since)
			}

			for field, call := range map[string]func() (*weir.Throughput, error){
				"since": func() (*weir.Throughput, error) { return c.JobThroughput(ctx, time.Time{}, time.Minute) },
				"width": func() (*weir.Throughput, error) { return c.JobThroughput(ctx, since, time.Second-1) },
			} {
				_, err := call()
				if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != field {
					t.Errorf("throughput with a bad %s: %v, want an *InvalidError about it", field, err)
				}
			}
		})
	}
}

// TestOpError checks, on both stores, that what stands in an operator call's
// way comes as an *OpError whose cause errors.Is and errors.As see: a final
// job's state, a missing schedule.
func TestOpError(t *testing.T) {
	t.Parallel()
	for _, d := range bothStores(t) {
		t.Run(d.Name(), func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			c, err := weir.NewClient(d, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Insert(ctx, probeArgs{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.JobCancel(ctx, res.Job.ID); err != nil {
				t.Fatal(err)
			}
			_, err = c.JobCancel(ctx, res.Job.ID)
			op, ok := errors.AsType[*weir.OpError](err)
			final, isFinal := errors.AsType[*weir.JobFinalError](err)
			if !ok || op.Op != "" || err.Error() != "weir: "+op.Err.Error() || !errors.Is(err, weir.ErrJobFinal) ||
				!isFinal || final.State != weir.JobStateCancelled {
				t.Errorf("cancel of a cancelled job: %v, want an *OpError of a *JobFinalError naming cancelled", err)
			}
			_, err = c.PeriodicPause(ctx, "missing")
			if op, ok := errors.AsType[*weir.OpError](err); !ok || !errors.Is(err, weir.ErrNotFound) || !strings.Contains(op.Err.Error(), `no periodic job "missing"`) {
				t.Errorf("pause of a missing schedule: %v, want an *OpError of ErrNotFound naming it", err)
			}
		})
	}
}
