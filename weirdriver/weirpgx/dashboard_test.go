package weirpgx

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/weirtype"
)

// TestQueueListEstimatedSampled checks the sampled path of
// QueueListEstimated, which the conformance suite's small tables never take:
// with every page in the sample, the estimates are the exact counts, and
// only the final states are marked; the exact path marks nothing.
func TestQueueListEstimatedSampled(t *testing.T) {
	t.Parallel()
	d, _ := busyQueueTable(t)
	ex := d.Executor()
	exact, err := ex.QueueList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	same := func(what string, got []*weirtype.QueueStats) {
		t.Helper()
		if len(got) != len(exact) {
			t.Fatalf("%s: %d queues, want %d", what, len(got), len(exact))
		}
		for i, q := range got {
			if q.Name != exact[i].Name || !q.OldestAvailableAt.Equal(exact[i].OldestAvailableAt) {
				t.Errorf("%s: queue %s oldest %v, want %s oldest %v", what, q.Name, q.OldestAvailableAt, exact[i].Name, exact[i].OldestAvailableAt)
			}
			for _, s := range weirtype.JobStates() {
				if q.Counts[s] != exact[i].Counts[s] {
					t.Errorf("%s: queue %s has %d %s jobs, want %d", what, q.Name, q.Counts[s], s, exact[i].Counts[s])
				}
			}
		}
	}

	got, err := ex.QueueListEstimated(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	same("a table under the sampling size", got)
	for _, q := range got {
		if q.Estimated != nil {
			t.Errorf("a table under the sampling size: queue %s marks %v as estimated", q.Name, q.Estimated)
		}
	}

	d.q.estimate = estimateSizes{exactPages: 0, samplePages: 1 << 40}
	got, err = ex.QueueListEstimated(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	same("a sample of every page", got)
	for _, q := range got {
		for _, s := range weirtype.JobStates() {
			if q.Estimated[s] != s.Final() {
				t.Errorf("a sample: queue %s marks %s estimated: %v, want %v", q.Name, s, q.Estimated[s], s.Final())
			}
		}
	}
}

// TestDashboardPlans checks with EXPLAIN that QueueListEstimated counts the
// states that are not final through their partial indexes and samples the
// final jobs, and never reads the whole table.
func TestDashboardPlans(t *testing.T) {
	t.Parallel()
	d, _ := busyQueueTable(t)
	plan := func(sql string, args ...any) string {
		t.Helper()
		rows, err := d.pool.Query(t.Context(), "EXPLAIN "+sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	p := plan(d.q.queueCountsSampled, 5.0)
	for _, want := range []string{
		"weir_job_available_idx", "weir_job_pending_idx", "weir_job_running_idx", "Sample Scan on weir_job",
	} {
		if !strings.Contains(p, want) {
			t.Errorf("QueueListEstimated's plan lacks %q:\n%s", want, p)
		}
	}
	if strings.Contains(p, "Seq Scan on weir_job") {
		t.Errorf("QueueListEstimated reads the whole job table:\n%s", p)
	}
}
