package weirbench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/internal/dbtest"
)

// bulkOnly is weir under another name that runs W4's bulk insert only.
type bulkOnly struct{ *weirSystem }

func (bulkOnly) Runs(workload string) bool { return workload == "bulk" }

// TestWorkloadFilter runs W1 and W4's bulk insert on weir and on a system
// that runs only the bulk insert: that one's W1 cells stay blank, the rest of
// the run goes on. It asserts nothing about speed.
func TestWorkloadFilter(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark; skipped with -short")
	}
	o := DefaultOptions()
	o.DatabaseURL = dbtest.URL()
	o.Title = "test"
	o.Rounds = 1
	o.MaxConns = 5
	o.Workloads = []string{"drain", "bulk"}
	o.DrainJobs, o.InsertJobs, o.Batch = 200, 200, 100
	o.Timeout = time.Minute
	var progress bytes.Buffer
	o.Progress = &progress
	filtered := bulkOnly{Weir(WeirConfig{Schema: dbtest.Schema(t), Name: "weir-bulk", MaxWorkers: 50, Prefetch: 50}).(*weirSystem)}
	rep, err := Run(t.Context(), o, Weir(WeirConfig{Schema: dbtest.Schema(t), MaxWorkers: 50, Prefetch: 50}), filtered)
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	for _, f := range rep.Figures {
		wantFiltered := 0
		if f.Name == "W4 bulk insert, jobs/s" {
			wantFiltered = 1
		}
		if got := len(f.Values["weir-bulk"]); got != wantFiltered {
			t.Errorf("%s: weir-bulk has %d values, want %d", f.Name, got, wantFiltered)
		}
		if got := len(f.Values["weir"]); got != 1 {
			t.Errorf("%s: weir has %d values, want 1", f.Name, got)
		}
	}
	if !strings.Contains(progress.String(), "weir-bulk does not run drain") {
		t.Errorf("progress does not say that W1 was left out:\n%s", progress.String())
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(table.String(), "\n") {
		if strings.HasPrefix(line, "W1 drain, jobs/s") && strings.Count(line, "–") != 2 {
			t.Errorf("W1's row has not a blank cell and a blank ratio: %q", line)
		}
	}
}

// rowsOnly is a System that has a job table and nothing else, for the checks
// of completed and inserted rows.
type rowsOnly struct {
	table   string
	deletes bool
}

func (s rowsOnly) Name() string                                 { return "rows" }
func (s rowsOnly) Schema() string                               { return "" }
func (s rowsOnly) JobTable() string                             { return s.table }
func (s rowsOnly) Describe(Settings) string                     { return "" }
func (s rowsOnly) Migrate(context.Context, *pgxpool.Pool) error { return nil }
func (s rowsOnly) Open(*pgxpool.Pool, ClientConfig) (Client, error) {
	return nil, errors.New("rowsOnly opens no client")
}
func (s rowsOnly) DeletesCompleted() bool { return s.deletes }

// TestCompletedRows checks how the jobs completed and inserted are counted
// from the job table: rows in state 'completed', or for a system that deletes
// completed jobs, the jobs no longer there.
func TestCompletedRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin := dbtest.Pool(t, nil)
	table := pgx.Identifier{dbtest.Schema(t), "job"}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE TABLE "+table+" (state text); INSERT INTO "+table+" VALUES ('completed'), ('completed'), ('available')"); err != nil {
		t.Fatal(err)
	}
	keeps, deletes := rowsOnly{table: table}, rowsOnly{table: table, deletes: true}

	if n, err := completedRows(ctx, admin, keeps, 10); err != nil || n != 2 {
		t.Errorf("completed rows kept: %d, %v; want 2", n, err)
	}
	if n, err := completedRows(ctx, admin, deletes, 10); err != nil || n != 7 {
		t.Errorf("completed rows deleted: %d, %v; want 7 of 10 (3 left)", n, err)
	}
	if err := checkOfferedRows(ctx, admin, keeps, 3, 2); err != nil {
		t.Errorf("3 inserted, 3 kept: %v", err)
	}
	if err := checkOfferedRows(ctx, admin, keeps, 4, 2); err == nil || !strings.Contains(err.Error(), "3 jobs in the table, 4 inserted") {
		t.Errorf("4 inserted, 3 kept: %v", err)
	}
	if err := checkOfferedRows(ctx, admin, deletes, 10, 7); err != nil {
		t.Errorf("10 inserted, 7 completed and deleted, 3 left: %v", err)
	}
	if err := checkOfferedRows(ctx, admin, deletes, 10, 6); err == nil || !strings.Contains(err.Error(), "3 jobs in the table and 6 completed") {
		t.Errorf("10 inserted, 6 completed, 3 left: %v", err)
	}
}
