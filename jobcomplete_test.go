package weir_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver/weirsqlite"
	"github.com/weirq/weir/weirmigrate"
)

// ledger is a business table in b's schema: the writes a handler commits with
// its job's completion.
func (b *bundle) ledger(t testing.TB) string {
	t.Helper()
	table := b.schema + ".ledger"
	if _, err := b.pool.Exec(testCtx(t), "CREATE TABLE "+table+" (job_id bigint NOT NULL, lease_token bigint NOT NULL, PRIMARY KEY (job_id, lease_token))"); err != nil {
		t.Fatal(err)
	}
	return table
}

// ledgerTokens returns the lease tokens under which job id's handlers wrote
// their ledger row.
func (b *bundle) ledgerTokens(t testing.TB, table string, id int64) []int64 {
	t.Helper()
	rows, err := b.pool.Query(testCtx(t), "SELECT lease_token FROM "+table+" WHERE job_id = $1", id)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return tokens
}

// txKinds are the two kinds of transaction JobCompleteTx takes on PostgreSQL.
var txKinds = []string{"pgx", "database/sql"}

// completeInTx writes job's ledger row and completes it in one transaction of
// the given kind, then commits it or rolls it back.
func (b *bundle) completeInTx(ctx context.Context, kind, table string, job *weir.JobRow, commit bool) error {
	insert := "INSERT INTO " + table + " (job_id, lease_token) VALUES ($1, $2)"
	if kind == "pgx" {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		if _, err := tx.Exec(ctx, insert, job.ID, job.LeaseToken); err != nil {
			return err
		}
		if err := weir.JobCompleteTx(ctx, tx, job); err != nil {
			return err
		}
		if commit {
			return tx.Commit(ctx)
		}
		return tx.Rollback(ctx)
	}
	db := stdlib.OpenDBFromPool(b.pool)
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, insert, job.ID, job.LeaseToken); err != nil {
		return err
	}
	if err := weir.JobCompleteSQLTx(ctx, tx, job); err != nil {
		return err
	}
	if commit {
		return tx.Commit()
	}
	return tx.Rollback()
}

// TestJobCompleteTx: a handler that completes its job in its own transaction
// commits its write and the completion together; the client's own outcome
// write then changes nothing and counts as neither stale nor lost. A handler
// whose transaction rolls back leaves the outcome to what it returns, and one
// that returns an error after committing leaves the job completed.
func TestJobCompleteTx(t *testing.T) {
	t.Parallel()
	for _, kind := range txKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			table := b.ledger(t)
			var client atomic.Pointer[weir.Client]
			w := probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
				switch job.Args.Name {
				case "commit":
					return b.completeInTx(ctx, kind, table, job.JobRow, true)
				case "commit-wait":
					// Renewals that run between the commit and the outcome's
					// write find the job gone: ended, not lost.
					if err := b.completeInTx(ctx, kind, table, job.JobRow, true); err != nil {
						return err
					}
					renewals := client.Load().Stats().Renewals
					tick := time.NewTicker(10 * time.Millisecond)
					defer tick.Stop()
					for client.Load().Stats().Renewals < renewals+2 {
						select {
						case <-ctx.Done():
							return context.Cause(ctx) // cancelled as if its lease were lost
						case <-tick.C:
						}
					}
					return nil
				case "rollback":
					if err := b.completeInTx(ctx, kind, table, job.JobRow, false); err != nil {
						return err
					}
					return nil // the handler's return decides
				case "rollback-fail":
					if err := b.completeInTx(ctx, kind, table, job.JobRow, false); err != nil {
						return err
					}
					return errors.New("failed after rolling back")
				case "commit-fail":
					if err := b.completeInTx(ctx, kind, table, job.JobRow, true); err != nil {
						return err
					}
					return errors.New("failed after committing")
				}
				return errors.New("unknown probe")
			})
			c, err := weir.NewClient(b.driver, fastConfig(w, nil))
			if err != nil {
				t.Fatal(err)
			}
			client.Store(c)
			events, unsubscribe := c.Subscribe()
			defer unsubscribe()
			ids := map[string]int64{}
			for _, name := range []string{"commit", "commit-wait", "rollback", "rollback-fail", "commit-fail"} {
				ids[name] = b.insertProbe(t, name, &weir.InsertOpts{MaxAttempts: 1})
			}
			if err := c.Start(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Stop(context.Background()) })
			got := map[int64]weir.EventKind{}
			for len(got) < len(ids) {
				select {
				case ev := <-events:
					if ev.Kind != weir.EventJobStarted {
						got[ev.Job.ID] = ev.Kind
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("events so far %v", got)
				}
			}

			want := map[string]struct {
				state  weir.JobState
				event  weir.EventKind
				ledger int
			}{
				"commit":        {weir.JobStateCompleted, weir.EventJobCompleted, 1},
				"commit-wait":   {weir.JobStateCompleted, weir.EventJobCompleted, 1},
				"rollback":      {weir.JobStateCompleted, weir.EventJobCompleted, 0},
				"rollback-fail": {weir.JobStateDiscarded, weir.EventJobDiscarded, 0},
				"commit-fail":   {weir.JobStateCompleted, weir.EventJobCompleted, 1},
			}
			for name, w := range want {
				job := b.job(t, ids[name])
				if job.State != w.state || got[job.ID] != w.event || len(b.ledgerTokens(t, table, job.ID)) != w.ledger {
					t.Errorf("%s: state %s, event %s, ledger rows %d; want %s, %s, %d",
						name, job.State, got[job.ID], len(b.ledgerTokens(t, table, job.ID)), w.state, w.event, w.ledger)
				}
				if name == "commit-fail" && len(job.Errors) != 0 {
					t.Errorf("commit-fail: errors %+v recorded on a completed job", job.Errors)
				}
			}
			if s := c.Stats(); s.StaleWrites != 0 || s.LeasesLost != 0 || s.Abandoned != 0 || s.Finalized != 5 {
				t.Fatalf("stats %+v, want 5 outcomes and nothing stale, lost or abandoned", s)
			}
		})
	}
}

// TestJobCompleteTxLeaseLost is G3 for the handler's own data: a handler whose
// lease was lost, and whose job was rescued, claimed and completed by another
// client while it worked, cannot commit its write: JobCompleteTx fails with
// ErrLeaseLost inside its transaction, which rolls back. The other client's
// write stands.
func TestJobCompleteTxLeaseLost(t *testing.T) {
	t.Parallel()
	for _, kind := range txKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			table := b.ledger(t)
			g := newGate()
			defer g.open()
			firstErr := make(chan error, 1)
			slowCfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
				g.started <- job.ID
				<-g.ch // works on, unaware that its lease is gone
				err := b.completeInTx(context.WithoutCancel(ctx), kind, table, job.JobRow, true)
				firstErr <- err
				return err
			}), map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 1}})
			// The first client renews rarely, so that the forced expiry stands
			// until the second client has rescued and re-claimed the job.
			slowCfg.HeartbeatInterval, slowCfg.LeaseDuration = 10*time.Second, 60*time.Second
			b.start(t, slowCfg)
			id := b.insertProbe(t, "contested", &weir.InsertOpts{MaxAttempts: 5})
			g.expectStarted(t)
			first := b.job(t, id)

			// The second client's handler waits until the first has tried, so
			// that the job is running, under the second lease, when the first
			// tries: a completion checked only for a running job would pass.
			var secondRuns atomic.Int32
			secondStarted, firstTried := make(chan struct{}), make(chan struct{})
			secondCfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
				secondRuns.Add(1)
				close(secondStarted)
				<-firstTried
				return b.completeInTx(ctx, kind, table, job.JobRow, true)
			}), nil)
			secondCfg.ID = "second"
			b.expireLease(t, id)
			b.start(t, secondCfg)
			select {
			case <-secondStarted:
			case <-time.After(20 * time.Second):
				t.Fatal("the second client did not rescue and claim the job")
			}
			g.open()
			select {
			case err := <-firstErr:
				if !errors.Is(err, weir.ErrLeaseLost) {
					t.Fatalf("the first handler's JobCompleteTx: %v, want ErrLeaseLost", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the first handler did not return")
			}
			close(firstTried)
			waitFor(t, 20*time.Second, "the second client to complete the job", func() bool {
				return b.job(t, id).State == weir.JobStateCompleted
			})
			second := b.job(t, id)
			tokens := b.ledgerTokens(t, table, id)
			if len(tokens) != 1 || tokens[0] != second.LeaseToken || second.LeaseToken <= first.LeaseToken || secondRuns.Load() != 1 {
				t.Fatalf("ledger tokens %v; the first lease %d, the second %d, second runs %d: want only the second's write",
					tokens, first.LeaseToken, second.LeaseToken, secondRuns.Load())
			}
			if after := b.job(t, id); after.State != weir.JobStateCompleted || after.LeaseToken != second.LeaseToken {
				t.Fatalf("job after the first handler returned: %+v", after)
			}
		})
	}
}

// TestJobCompleteTxBadCalls: outside a handler, without a job, for a job this
// client does not run, or with a transaction the driver does not take,
// JobCompleteTx says what is wrong and changes nothing.
func TestJobCompleteTxBadCalls(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	table := b.ledger(t)
	other := b.insertProbe(t, "other", nil)
	errs := make(chan []error, 1)
	w := probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // rolled back whatever happens
		notMine := *job.JobRow
		notMine.LeaseToken++
		otherJob := b.job(t, other)
		errs <- []error{
			weir.JobCompleteTx(context.Background(), tx, job.JobRow),
			weir.JobCompleteTx(ctx, tx, nil),
			weir.JobCompleteTx(ctx, tx, &notMine),
			weir.JobCompleteTx(ctx, tx, otherJob),
			weir.JobCompleteSQLTx(ctx, (*sql.Tx)(nil), job.JobRow),
		}
		return nil
	})
	cfg := fastConfig(w, map[string]weir.QueueConfig{"bad-calls": {MaxWorkers: 1}})
	b.start(t, cfg)
	id := b.insertProbe(t, "bad", &weir.InsertOpts{Queue: "bad-calls"})
	var got []error
	select {
	case got = <-errs:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler did not run")
	}
	wants := []string{"context of the handler", "it is nil", "not running in this client", "not running in this client", "transaction is nil"}
	for i, err := range got {
		if err == nil || !strings.Contains(err.Error(), wants[i]) {
			t.Errorf("bad call %d: %v, want an error saying %q", i, err, wants[i])
		}
		if i < 4 && !errors.Is(err, weir.ErrInvalid) {
			t.Errorf("bad call %d: %v is not ErrInvalid", i, err)
		}
	}
	waitFor(t, 10*time.Second, "the job's own completion", func() bool { return b.job(t, id).State == weir.JobStateCompleted })
	if j := b.job(t, other); j.State != weir.JobStateAvailable {
		t.Fatalf("the other job: %s, want available", j.State)
	}
	if n := len(b.ledgerTokens(t, table, id)); n != 0 {
		t.Fatalf("%d ledger rows", n)
	}
}

// TestJobCompleteSQLTxSQLite: on SQLite, a handler completes its job in a
// transaction on the driver's database with its own write, or, when its
// lease token no longer matches (another worker re-claimed the job), gets
// ErrLeaseLost and rolls both back.
func TestJobCompleteSQLTxSQLite(t *testing.T) {
	t.Parallel()
	driver, err := weirsqlite.Open(filepath.Join(t.TempDir(), "jobs.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { driver.Close() })
	if _, err := weirmigrate.New(driver).Up(testCtx(t), nil); err != nil {
		t.Fatal(err)
	}
	db := driver.DB()
	if _, err := db.ExecContext(testCtx(t), "CREATE TABLE ledger (job_id INTEGER PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	lost := make(chan error, 1)
	w := probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		if _, err := tx.ExecContext(ctx, "INSERT INTO ledger (job_id) VALUES (?)", job.ID); err != nil {
			return err
		}
		if job.Args.Name == "reclaimed" && job.Attempt == 1 {
			// As if the job had been rescued and claimed again meanwhile.
			if _, err := tx.ExecContext(ctx, "UPDATE weir_job SET lease_token = lease_token + 1 WHERE id = ?", job.ID); err != nil {
				return err
			}
			err := weir.JobCompleteSQLTx(ctx, tx, job.JobRow)
			lost <- err
			return err
		}
		// The output recorded before the completion commits with it.
		if err := weir.RecordOutput(ctx, map[string]int64{"ledger": job.ID}); err != nil {
			return err
		}
		if err := weir.JobCompleteSQLTx(ctx, tx, job.JobRow); err != nil {
			return err
		}
		return tx.Commit()
	})
	cfg := fastConfig(w, nil)
	cfg.RetryPolicy = weir.ExponentialBackoff{Base: time.Millisecond, Max: time.Millisecond}
	c, err := weir.NewClient(driver, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.Insert(testCtx(t), probeArgs{Name: "done"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reclaimed, err := c.Insert(testCtx(t), probeArgs{Name: "reclaimed"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	select {
	case err := <-lost:
		if !errors.Is(err, weir.ErrLeaseLost) {
			t.Fatalf("JobCompleteSQLTx under another lease token: %v, want ErrLeaseLost", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the reclaimed job's handler did not run")
	}
	for _, id := range []int64{done.Job.ID, reclaimed.Job.ID} {
		waitFor(t, 20*time.Second, "the jobs to complete", func() bool {
			j, err := c.JobGet(testCtx(t), id)
			return err == nil && j.State == weir.JobStateCompleted
		})
	}
	var rows int
	if err := db.QueryRowContext(testCtx(t), "SELECT count(*) FROM ledger").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	j, err := c.JobGet(testCtx(t), reclaimed.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The first attempt's write rolled back; the second's committed.
	if rows != 2 || j.Attempt != 2 || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "lease") {
		t.Fatalf("ledger rows %d, reclaimed job attempt %d errors %+v", rows, j.Attempt, j.Errors)
	}
	for _, id := range []int64{done.Job.ID, reclaimed.Job.ID} {
		j, err := c.JobGet(testCtx(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`{"ledger":%d}`, id); string(j.Output) != want {
			t.Errorf("job %d: output %s, want %s", id, j.Output, want)
		}
	}
}
