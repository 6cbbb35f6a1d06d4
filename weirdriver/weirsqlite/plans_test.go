package weirsqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirq/weir/weirmigrate"
)

// TestQueryPlans checks with EXPLAIN QUERY PLAN that each statement that looks for
// jobs by state goes through the partial index made for it, on a table with
// rows in every state and statistics gathered.
func TestQueryPlans(t *testing.T) {
	t.Parallel()
	d, err := Open(filepath.Join(t.TempDir(), "plans.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	if _, err := weirmigrate.New(d).Up(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// 10,000 jobs: 90% completed, 5% available over 10 queues, 3% running,
	// 1% scheduled and 1% retryable.
	if _, err := d.writer.ExecContext(ctx, `
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 10000),
s AS (SELECT n, CASE
	WHEN n % 100 < 90 THEN 'completed'
	WHEN n % 100 < 95 THEN 'available'
	WHEN n % 100 < 98 THEN 'running'
	WHEN n % 100 = 98 THEN 'scheduled'
	ELSE 'retryable' END AS state FROM g)
INSERT INTO weir_job (state, queue, kind, args, max_attempts, scheduled_at, created_at, finalized_at, lease_expires_at)
SELECT state, 'q' || (n % 10), 'k', '{}', 3, n, n,
	CASE WHEN state = 'completed' THEN n END,
	CASE WHEN state = 'running' THEN n END
FROM s`); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, sql, want string
		args            []any
	}{
		// In claim order from the queue's first entry: no sort.
		{"claim", jobClaim, "weir_job_available_idx (queue=?)", []any{"q3", 10, 1, 1, "c"}},
		{"claim one", jobClaimID, "INTEGER PRIMARY KEY", []any{1, 1, 1, "c"}},
		{"finalize", jobFinalize, "INTEGER PRIMARY KEY", []any{1, 1, "completed", 1, 1, nil, nil, nil, nil, nil, nil}},
		{"renew", jobRenew, "INTEGER PRIMARY KEY", []any{1, 1, 1, nil}},
		{"rescue", jobRescue, "weir_job_running_idx", []any{100, 1, "t", "lost"}},
		{"schedule", jobSchedule, "weir_job_pending_idx", []any{100, 1}},
		{"prune", jobPrune, "weir_job_finalized_idx", []any{1, nil, nil, 1, 1000}},
		{"unique holder", jobUniqueHolder, "weir_job_unique_idx (unique_key=?)", []any{[]byte("k")}},
	}
	// Without statistics (a fresh file) and with them (after ANALYZE or PRAGMA
	// optimize), which can change SQLite's choice.
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := d.writer.ExecContext(ctx, "ANALYZE"); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range cases {
			rows, err := d.writer.QueryContext(ctx, "EXPLAIN QUERY PLAN "+c.sql, c.args...)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			var plan []string
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			rows.Close()
			text := strings.Join(plan, "; ")
			t.Logf("%s (analyzed %v): %s", c.name, analyzed, text)
			if !strings.Contains(text, c.want) || strings.Contains(text, "TEMP B-TREE") ||
				strings.Contains(text, "SCAN weir_job;") || strings.HasSuffix(text, "SCAN weir_job") {
				t.Errorf("%s (analyzed %v): plan %q, want %s without a sort or a table scan", c.name, analyzed, text, c.want)
			}
		}
	}
}
