package weir_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver"
)

// inlineRun records what an inline client's handler did.
type inlineRun struct {
	mu  sync.Mutex
	ran []string // the names of the jobs run, in order
}

func (r *inlineRun) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ran)
}

// inlineClient returns an inline client on d whose probe handler records each
// job, fails the job named "fail", and for "chain" inserts a job named
// "chained" with the same client.
func inlineClient(t *testing.T, d weirdriver.Driver, run *inlineRun) *weir.Client {
	t.Helper()
	var c *weir.Client
	workers := probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		run.mu.Lock()
		run.ran = append(run.ran, job.Args.Name)
		run.mu.Unlock()
		switch job.Args.Name {
		case "fail":
			return errors.New("it failed")
		case "chain":
			_, err := c.Insert(ctx, probeArgs{Name: "chained"}, nil)
			return err
		}
		return nil
	})
	c, err := weir.NewClient(d, &weir.Config{Workers: workers, Inline: true})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// otherArgs is a kind the inline clients have no worker for.
type otherArgs struct{}

func (otherArgs) Kind() string { return "other" }

// TestInlineClient runs jobs through an inline client on each store: each
// insert returns with its job worked, and what a client cannot run is refused
// before anything is written.
func TestInlineClient(t *testing.T) {
	t.Parallel()
	for _, d := range bothStores(t) {
		t.Run(d.Name(), func(t *testing.T) {
			ctx := testCtx(t)
			run := &inlineRun{}
			c := inlineClient(t, d, run)
			if err := c.Start(ctx); err != nil {
				t.Fatalf("Start of an inline client: %v", err)
			}

			// Due in an hour: it runs now all the same.
			res, err := c.Insert(ctx, probeArgs{Name: "ok"}, &weir.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			if res.Job.State != weir.JobStateCompleted || !slices.Equal(run.names(), []string{"ok"}) {
				t.Fatalf("after Insert: job %s, handlers run %v", res.Job.State, run.names())
			}

			res, err = c.Insert(ctx, probeArgs{Name: "fail"}, nil)
			if err != nil {
				t.Fatalf("a failing handler failed the insert: %v", err)
			}
			if res.Job.State != weir.JobStateRetryable || len(res.Job.Errors) != 1 || res.Job.Errors[0].Error != "it failed" {
				t.Fatalf("failed job: %s %+v", res.Job.State, res.Job.Errors)
			}

			many, err := c.InsertMany(ctx, []weir.InsertManyParams{
				{Args: probeArgs{Name: "a"}}, {Args: probeArgs{Name: "chain"}}, {Args: probeArgs{Name: "b"}},
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range many {
				if r.Job.State != weir.JobStateCompleted {
					t.Fatalf("InsertMany: job %d %s", r.Job.ID, r.Job.State)
				}
			}
			if got, want := run.names(), []string{"ok", "fail", "a", "chain", "chained", "b"}; !slices.Equal(got, want) {
				t.Fatalf("handlers ran %v, want %v", got, want)
			}

			// A duplicate of a unique job does not run again.
			unique := &weir.InsertOpts{Unique: weir.UniqueOpts{ByArgs: true}}
			first, err := c.Insert(ctx, probeArgs{Name: "once"}, unique)
			if err != nil {
				t.Fatal(err)
			}
			again, err := c.Insert(ctx, probeArgs{Name: "once"}, unique)
			if err != nil {
				t.Fatal(err)
			}
			if !again.Duplicate || again.Job.ID != first.Job.ID || strings.Count(strings.Join(run.names(), ","), "once") != 1 {
				t.Fatalf("duplicate: %+v, handlers ran %v", again, run.names())
			}

			// A kind without a worker is refused, with nothing written.
			before := countJobs(t, d)
			_, err = c.InsertMany(ctx, []weir.InsertManyParams{{Args: probeArgs{Name: "c"}}, {Args: otherArgs{}}})
			if !errors.Is(err, weir.ErrInvalid) || !strings.Contains(err.Error(), `no worker for kind "other"`) {
				t.Fatalf("insert of a kind without a worker: %v", err)
			}
			if after := countJobs(t, d); after != before {
				t.Fatalf("the refused insert wrote %d jobs", after-before)
			}
			if err := c.Stop(ctx); err != nil {
				t.Fatalf("Stop of an inline client: %v", err)
			}
		})
	}
}

// countJobs counts the jobs d's store holds.
func countJobs(t *testing.T, d weirdriver.Driver) int {
	t.Helper()
	jobs, err := d.Executor().JobList(testCtx(t), &weirdriver.JobListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(jobs)
}

// TestInlineClientTx: an inline client runs a job inserted in a transaction in
// that transaction, which takes the job and its outcome with it when it rolls
// back; a transaction the driver can only insert in is refused before the
// insert.
func TestInlineClientTx(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	run := &inlineRun{}
	c := inlineClient(t, b.driver, run)

	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Rollback
	res, err := c.InsertTx(ctx, tx, probeArgs{Name: "in tx"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Job.State != weir.JobStateCompleted {
		t.Fatalf("job inserted in a transaction: %s", res.Job.State)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countJobs(t, b.driver); n != 0 {
		t.Fatalf("%d jobs after the rollback", n)
	}

	db := stdlib.OpenDBFromPool(b.pool)
	t.Cleanup(func() { db.Close() })
	sqlTx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlTx.Rollback() //nolint:errcheck // the test only reads in it
	_, err = c.InsertSQLTx(ctx, sqlTx, probeArgs{Name: "in sql tx"}, nil)
	if !errors.Is(err, weir.ErrInvalid) || !strings.Contains(err.Error(), "use a pgx.Tx") {
		t.Fatalf("inline insert in a database/sql transaction on PostgreSQL: %v", err)
	}
	var n int
	if err := sqlTx.QueryRowContext(ctx, "SELECT count(*) FROM "+b.schema+".weir_job").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the refused insert: %d jobs in its transaction (%v)", n, err)
	}
	if got := run.names(); !slices.Equal(got, []string{"in tx"}) {
		t.Fatalf("handlers ran %v", got)
	}
}
