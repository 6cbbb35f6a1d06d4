package weirtest_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver/weirsqlite"
	"github.com/weirq/weir/weirtest"
)

// signup is the code under test: it inserts a welcome email in the caller's
// transaction.
func signup(ctx context.Context, client *weir.Client, tx *sql.Tx, address string) error {
	_, err := client.InsertSQLTx(ctx, tx, sendWelcome{To: address}, &weir.InsertOpts{Queue: "mail"})
	return err
}

// A test of code that inserts a job in the caller's transaction, which the
// test rolls back at the end, so that it leaves nothing behind
// (TestRequireInsertedTx runs the same on every store).
func ExampleRequireInserted() {
	testSignup := func(t *testing.T, driver *weirsqlite.Driver, client *weir.Client) {
		ctx := context.Background()
		tx, err := driver.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback() //nolint:errcheck // the test leaves nothing behind
		if err := signup(ctx, client, tx, "ada@example.com"); err != nil {
			t.Fatal(err)
		}
		job := weirtest.RequireInserted(ctx, t, weirtest.Tx(t, driver, tx), sendWelcome{},
			&weirtest.RequireInsertedOpts{Queue: "mail"})
		if job.Args.To != "ada@example.com" {
			t.Errorf("welcome sent to %s", job.Args.To)
		}
	}
	_ = testSignup
}

// welcomeWorker is the worker under test.
type welcomeWorker struct{ sent []string }

func (w *welcomeWorker) Work(ctx context.Context, job *weir.Job[sendWelcome]) error {
	w.sent = append(w.sent, job.Args.To)
	return nil
}

// A test of a worker: one attempt through the real worker path, in the
// test's transaction, without a running client (TestWorker runs every outcome
// on every store).
func ExampleNewWorker() {
	testWelcomeWorker := func(t *testing.T, driver *weirsqlite.Driver) {
		ctx := context.Background()
		tx, err := driver.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback() //nolint:errcheck // the test leaves nothing behind
		worker := &welcomeWorker{}
		w := weirtest.NewWorker(t, driver, &weir.Config{}, weir.Worker[sendWelcome](worker))
		res, err := w.Work(ctx, tx, sendWelcome{To: "ada@example.com"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Event != weir.EventJobCompleted || len(worker.sent) != 1 {
			t.Errorf("%s (%v), sent %v", res.Event, res.Err, worker.sent)
		}
	}
	_ = testWelcomeWorker
}
