package weirbench

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/internal/dbtest"
)

// TestSQLDrain: W1's raw SQL ceiling completes every job it inserted, each
// claimed once, run after run on the same table; and its claim reads the
// partial index in claim order, with no sort. It asserts nothing about speed.
func TestSQLDrain(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	schema := dbtest.Schema(t)
	admin := dbtest.Pool(t, nil)
	o := DefaultOptions()
	o.DatabaseURL, o.CeilingSchema, o.Timeout = dbtest.URL(), schema, time.Minute
	b := &bench{o: o, admin: admin, p: newProgress(nil)}
	if err := setupSQLDrain(ctx, b, schema); err != nil {
		t.Fatal(err)
	}
	table := sqlDrainTable(schema).Sanitize()
	for _, n := range []int{1000, 250} {
		rate, err := b.sqlDrainWith(ctx, n, 3, 100)
		if err != nil {
			t.Fatal(err)
		}
		if rate <= 0 {
			t.Errorf("%d jobs: %v jobs/s", n, rate)
		}
		var rows, done int
		err = admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'completed' AND attempt = 1
			AND attempted_at <= finalized_at AND kind = 'noop' AND args ? 'seq') FROM `+table).Scan(&rows, &done)
		if err != nil {
			t.Fatal(err)
		}
		if rows != n || done != n {
			t.Errorf("%d jobs drained: %d rows, %d completed once", n, rows, done)
		}
	}

	// Set up afresh, the table is empty again; the claim walks the index.
	if err := setupSQLDrain(ctx, b, schema); err != nil {
		t.Fatal(err)
	}
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // only read
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	claim, _ := sqlDrainStatements(table)
	rows, _ := tx.Query(ctx, "EXPLAIN "+claim, 1000)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "jobs_available") || strings.Contains(text, "Sort") {
		t.Errorf("the claim does not read the partial index in order:\n%s", text)
	}
}
