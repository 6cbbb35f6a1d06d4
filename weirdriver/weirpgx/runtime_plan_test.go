package weirpgx

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirmigrate"
)

// busyQueueTable returns a driver on a migrated schema, and its job table
// (qualified), shaped like a busy queue's and analyzed: 20,000 jobs, 90%
// completed, 5% available over 10 queues, 3% running, 1% scheduled and 1%
// retryable in the future.
func busyQueueTable(t *testing.T) (*Driver, string) {
	t.Helper()
	d, job := migratedJobTable(t)
	pool := d.pool
	// 20,000 jobs: 90% completed, 5% available over 10 queues, 3% running,
	// 1% scheduled and 1% retryable in the future.
	if _, err := pool.Exec(t.Context(), `
INSERT INTO `+job+` (state, queue, kind, args, max_attempts, attempt, lease_token,
	scheduled_at, finalized_at, lease_expires_at)
SELECT s.state, 'q' || (g % 10), 'k', '{}', 3,
	CASE WHEN s.state IN ('completed', 'running') THEN 1 ELSE 0 END,
	CASE WHEN s.state IN ('completed', 'running') THEN 1 ELSE 0 END,
	CASE WHEN s.state IN ('scheduled', 'retryable') THEN now() + interval '1 hour'
		ELSE now() - g * interval '1 second' END,
	CASE WHEN s.state = 'completed' THEN now() - g * interval '1 second' END,
	CASE WHEN s.state = 'running' THEN now() + interval '1 minute' END
FROM generate_series(1, 20000) AS g,
LATERAL (SELECT CASE
	WHEN g % 100 < 90 THEN 'completed'
	WHEN g % 100 < 95 THEN 'available'
	WHEN g % 100 < 98 THEN 'running'
	WHEN g % 100 = 98 THEN 'scheduled'
	ELSE 'retryable' END AS state) AS s`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), "ANALYZE "+job); err != nil {
		t.Fatal(err)
	}
	return d, job
}

// migratedJobTable returns a driver on a fresh migrated schema, and its job
// table (qualified).
func migratedJobTable(t *testing.T) (*Driver, string) {
	t.Helper()
	schema := dbtest.Schema(t)
	d, err := New(dbtest.Pool(t, nil), &Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(d).Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	return d, pgx.Identifier{schema, "weir_job"}.Sanitize()
}

// explainNodes returns the EXPLAIN (FORMAT JSON) plan of sql with args, and
// calls fn on each of its nodes.
func explainNodes(t *testing.T, pool *pgxpool.Pool, name, sql string, args []any, fn func(map[string]any)) []byte {
	t.Helper()
	var plan []byte
	if err := pool.QueryRow(t.Context(), "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&plan); err != nil {
		t.Fatalf("%s: explain: %v", name, err)
	}
	var root []map[string]any
	if err := json.Unmarshal(plan, &root); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	walkPlan(root[0]["Plan"], fn)
	return plan
}

// TestRuntimePlans checks with EXPLAIN that each runtime statement reaches weir_job
// through the index it was designed for (docs/design/store-runtime.md), on a table
// shaped like a busy queue's: mostly finished jobs, a few of each live state.
// The claim runs inside weir_ready_claim, whose plan EXPLAIN does not show;
// TestReadyPickKeepsIndexOrder checks its settings and its walk.
func TestRuntimePlans(t *testing.T) {
	t.Parallel()
	d, job := busyQueueTable(t)
	pool := d.pool

	var running []int64
	if err := pool.QueryRow(t.Context(), "SELECT array(SELECT id FROM "+job+" WHERE state = 'running' LIMIT 100)").Scan(&running); err != nil {
		t.Fatal(err)
	}
	tokens := make([]int64, len(running))
	outcomes := make([]string, len(running))
	for i := range running {
		tokens[i], outcomes[i] = 1, "completed"
	}
	nulls := func(n int) []*string { return make([]*string, n) }
	// A renewal that carries progress for some of its jobs.
	progress := nulls(len(running))
	for i := 0; i < len(progress); i += 3 {
		v := `{"step":1}`
		progress[i] = &v
	}
	cutoff := time.Now().Add(-5 * time.Hour)
	q := d.q
	cases := []struct {
		name, sql string
		indexes   []string // any of them
		args      []any
	}{
		{"claim one", q.jobClaimID, []string{"weir_job_pkey"}, []any{running[0], int64(60e6), "c"}},
		{"finalize", q.jobFinalize, []string{"weir_job_pkey", "weir_job_running_idx"}, []any{running, tokens, outcomes,
			nulls(len(running)), nulls(len(running)), nulls(len(running)), nulls(len(running)), nulls(len(running)), q.insertChannel,
			nulls(len(running)), nulls(len(running))}},
		{"complete", q.jobComplete, []string{"weir_job_pkey", "weir_job_running_idx"}, []any{running, tokens, nulls(len(running)), nulls(len(running))}},
		{"renew", q.jobRenew, []string{"weir_job_pkey", "weir_job_running_idx"}, []any{running, tokens, int64(60e6), progress}},
		{"rescue", q.jobRescue, []string{"weir_job_running_idx"}, []any{100, "lost"}},
		{"next expiry", q.jobNextExpiry, []string{"weir_job_running_idx"}, nil},
		{"schedule", q.jobSchedule, []string{"weir_job_pending_idx"}, []any{100, q.insertChannel}},
		{"prune", q.jobPrune, []string{"weir_job_finalized_idx"}, []any{cutoff, nil, nil, cutoff, 1000}},
		// The client registry's count of each client's running jobs.
		{"client list", q.clientList, []string{"weir_job_running_idx"}, nil},
	}
	for _, c := range cases {
		var indexes, seqScans []string
		plan := explainNodes(t, pool, c.name, c.sql, c.args, func(node map[string]any) {
			if name, ok := node["Index Name"].(string); ok {
				indexes = append(indexes, name)
			}
			if node["Node Type"] == "Seq Scan" && node["Relation Name"] == "weir_job" {
				seqScans = append(seqScans, "weir_job")
			}
		})
		t.Logf("%s: %v", c.name, indexes)
		found := slices.ContainsFunc(c.indexes, func(want string) bool { return slices.Contains(indexes, want) })
		// Under an old snapshot the entries of claimed jobs in the index of
		// available jobs cannot be cleaned: no runtime statement may walk it
		// (docs/design/storage.md).
		if slices.Contains(indexes, "weir_job_available_idx") {
			t.Errorf("%s: reads weir_job_available_idx\n%s", c.name, plan)
		}
		if !found || len(seqScans) > 0 {
			t.Errorf("%s: indexes %v, sequential scans of weir_job %d; want one of %v and no sequential scan\n%s",
				c.name, indexes, len(seqScans), c.indexes, plan)
		}
	}
}

// walkPlan calls fn on every node of an EXPLAIN (FORMAT JSON) plan.
func walkPlan(node any, fn func(map[string]any)) {
	m, ok := node.(map[string]any)
	if !ok {
		return
	}
	fn(m)
	if kids, ok := m["Plans"].([]any); ok {
		for _, k := range kids {
			walkPlan(k, fn)
		}
	}
}

// TestRunningPlansAfterIdleStatistics checks with EXPLAIN that the statements
// that find a client's running jobs by id read them through the primary key,
// not by hashing every running job, when the statistics were taken while no
// job ran (an idle queue, or before a burst) and 3,000 jobs run now. With the
// fence's state test written plainly, the planner hashed weir_job_running_idx
// for outcomes and renewals (docs/design/store-runtime.md).
func TestRunningPlansAfterIdleStatistics(t *testing.T) {
	t.Parallel()
	d, job := migratedJobTable(t)
	pool := d.pool
	if _, err := pool.Exec(t.Context(), `
INSERT INTO `+job+` (state, queue, kind, args, max_attempts, attempt, lease_token, finalized_at)
SELECT CASE WHEN g % 10 = 0 THEN 'available' ELSE 'completed' END, 'q', 'k', '{}', 3,
	CASE WHEN g % 10 = 0 THEN 0 ELSE 1 END, CASE WHEN g % 10 = 0 THEN 0 ELSE 1 END,
	CASE WHEN g % 10 = 0 THEN NULL ELSE now() END
FROM generate_series(1, 30000) AS g`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), "ANALYZE "+job); err != nil {
		t.Fatal(err)
	}
	var running []int64
	if err := pool.QueryRow(t.Context(), `
WITH r AS (
	UPDATE `+job+` SET state = 'running', finalized_at = NULL, lease_expires_at = now() + interval '1 minute'
	WHERE id IN (SELECT id FROM `+job+` WHERE state = 'completed' ORDER BY id LIMIT 3000)
	RETURNING id)
SELECT array(SELECT id FROM r ORDER BY id LIMIT 200)`).Scan(&running); err != nil {
		t.Fatal(err)
	}
	n := len(running)
	tokens, outcomes := make([]int64, n), make([]string, n)
	for i := range running {
		tokens[i], outcomes[i] = 1, "completed"
	}
	nulls := func(n int) []*string { return make([]*string, n) }
	q := d.q
	cases := []struct {
		name, sql string
		// runningReads is how many scans of weir_job_running_idx the plan
		// may have: rescue finds the expired leases through it, once.
		runningReads int
		args         []any
	}{
		{"complete", q.jobComplete, 0, []any{running, tokens, nulls(n), nulls(n)}},
		{"complete one", q.jobCompleteOne, 0, []any{running[0], int64(1), nil, nil}},
		{"finalize", q.jobFinalize, 0, []any{running, tokens, outcomes, nulls(n), nulls(n), nulls(n), nulls(n), nulls(n),
			q.insertChannel, nulls(n), nulls(n)}},
		{"renew", q.jobRenew, 0, []any{running, tokens, int64(60e6), nulls(n)}},
		{"rescue", q.jobRescue, 1, []any{100, "lost"}},
	}
	for _, c := range cases {
		var runningReads, pkeyReads int
		plan := explainNodes(t, pool, c.name, c.sql, c.args, func(node map[string]any) {
			switch node["Index Name"] {
			case "weir_job_running_idx":
				runningReads++
			case "weir_job_pkey":
				pkeyReads++
			}
		})
		if runningReads != c.runningReads || pkeyReads == 0 {
			t.Errorf("%s: %d scans of weir_job_running_idx (want %d), %d of weir_job_pkey (want some)\n%s",
				c.name, runningReads, c.runningReads, pkeyReads, plan)
		}
	}
}
