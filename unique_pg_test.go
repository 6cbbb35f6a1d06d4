package weir_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/weirq/weir"
)

// TestUniqueReplaceMeetsClaimInFlight checks a replace of a job whose row a
// claim holds locked: the insert waits for the claim's transaction and then
// acts on the job as that left it. A committed claim makes the job running, so
// the insert reports it as a duplicate and changes nothing; a rolled-back claim
// leaves it pending, so the insert replaces it.
func TestUniqueReplaceMeetsClaimInFlight(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		name := map[bool]string{true: "commit", false: "rollback"}[commit]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			ctx := testCtx(t)
			opts := &weir.InsertOpts{Unique: weir.UniqueOpts{ByArgs: true, OnConflict: weir.UniqueDebounce}}
			first, err := b.client.Insert(ctx, syncArgs{Account: "a", Note: "old"}, opts)
			if err != nil {
				t.Fatal(err)
			}
			// A claim in flight: the row locked and made running, not committed.
			claim := b.lockRow(t, first.Job.ID)
			if _, err := claim.Exec(ctx, "UPDATE "+b.schema+`.weir_job SET state = 'running', attempt = attempt + 1,
				lease_token = lease_token + 1, lease_expires_at = now() + interval '1 hour', attempted_at = now(),
				attempted_by = 'test' WHERE id = $1`, first.Job.ID); err != nil {
				t.Fatal(err)
			}
			var pid int
			if err := claim.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				t.Fatal(err)
			}
			type result struct {
				res *weir.InsertResult
				err error
			}
			done := make(chan result, 1)
			later := time.Now().Add(time.Hour)
			go func() {
				res, err := b.client.Insert(ctx, syncArgs{Account: "a", Note: "new"},
					&weir.InsertOpts{ScheduledAt: later, Unique: opts.Unique})
				done <- result{res, err}
			}()
			waitFor(t, 10*time.Second, "the insert to wait for the claim's lock", func() bool {
				var waiting bool
				err := b.pool.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity
					WHERE $1 = ANY(pg_blocking_pids(pid)) AND query LIKE '%ON CONFLICT%'`, pid).Scan(&waiting)
				return err == nil && waiting
			})
			if commit {
				err = claim.Commit(ctx)
			} else {
				err = claim.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			j := b.job(t, first.Job.ID)
			if commit {
				if !r.res.Duplicate || r.res.Replaced || j.State != weir.JobStateRunning || !strings.Contains(string(j.Args), "old") ||
					j.ScheduledAt.After(time.Now()) {
					t.Fatalf("after a committed claim: %+v, job %s %s at %s", r.res, j.State, j.Args, j.ScheduledAt)
				}
				return
			}
			if !r.res.Duplicate || !r.res.Replaced || j.State != weir.JobStateScheduled || !strings.Contains(string(j.Args), "new") {
				t.Fatalf("after a rolled-back claim: %+v, job %s %s", r.res, j.State, j.Args)
			}
		})
	}
}

// TestUniqueReplaceNotifies checks that a replace which leaves the job
// available wakes workers, as an insert does, and at commit when it runs in a
// caller's transaction; one that leaves it scheduled does not.
func TestUniqueReplaceNotifies(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	notes := listen(t, b)
	debounce := func(at time.Time) *weir.InsertOpts {
		return &weir.InsertOpts{Queue: "dq", ScheduledAt: at, Unique: weir.UniqueOpts{ByArgs: true, OnConflict: weir.UniqueDebounce}}
	}
	if _, err := b.client.Insert(ctx, syncArgs{Account: "n"}, debounce(time.Now().Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	// Pushed back further: still scheduled, nobody to wake.
	if r, err := b.client.Insert(ctx, syncArgs{Account: "n"}, debounce(time.Now().Add(2*time.Hour))); err != nil || !r.Replaced {
		t.Fatalf("debounce later: %+v %v", r, err)
	}
	b.marker(t, "scheduled")
	if got := notes.next(t); got != "scheduled" {
		t.Fatalf("notification %q for a job still scheduled", got)
	}
	// Moved to now, in a transaction: the wake-up comes with the commit.
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // a no-op after Commit
	r, err := b.client.InsertTx(ctx, tx, syncArgs{Account: "n"}, debounce(time.Time{}))
	if err != nil || !r.Replaced || r.Job.State != weir.JobStateAvailable {
		t.Fatalf("debounce to now: %+v %v", r, err)
	}
	b.marker(t, "before commit")
	if got := notes.next(t); got != "before commit" {
		t.Fatalf("notification %q before commit", got)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := notes.next(t); got != "dq" {
		t.Fatalf("after commit: notification %q, want dq", got)
	}
	// Outside a transaction, through the pool.
	if _, err := b.client.Insert(ctx, syncArgs{Account: "p"}, debounce(time.Now().Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if r, err := b.client.Insert(ctx, syncArgs{Account: "p"}, debounce(time.Time{})); err != nil || !r.Replaced {
		t.Fatalf("debounce to now on the pool: %+v %v", r, err)
	}
	if got := notes.next(t); got != "dq" {
		t.Fatalf("pool debounce: notification %q, want dq", got)
	}
}

// TestUniqueReplaceSQLTx checks replace and debounce through a database/sql
// transaction, whose statement reads the replaced flag as pgx's does.
func TestUniqueReplaceSQLTx(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testCtx(t)
	db := stdlib.OpenDBFromPool(b.pool)
	t.Cleanup(func() { db.Close() })
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	later := time.Now().Add(time.Hour)
	var results []*weir.InsertResult
	for _, mode := range []weir.UniqueConflict{weir.UniqueSkip, weir.UniqueSkip, weir.UniqueReplace, weir.UniqueDebounce} {
		r, err := b.client.InsertSQLTx(ctx, tx, syncArgs{Account: "s", Note: string(mode)},
			&weir.InsertOpts{ScheduledAt: later, Unique: weir.UniqueOpts{ByArgs: true, OnConflict: mode}})
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if r := results; r[0].Duplicate || !r[1].Duplicate || r[1].Replaced || !r[2].Replaced || !r[3].Replaced || r[3].Job.State != weir.JobStateScheduled {
		t.Fatalf("results: %+v %+v %+v %+v", r[0], r[1], r[2], r[3])
	}
	if j := b.job(t, results[0].Job.ID); !strings.Contains(string(j.Args), "debounce") {
		t.Fatalf("job args %s", j.Args)
	}
}
