package weirui_test

import (
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir"
)

// TestScale times every page and API endpoint on a large job table. It runs
// only with WEIR_DASHBOARD_SCALE set: 1 for 1,000,000 jobs, or the number of
// jobs. It prints the figures and asserts nothing about time; run it on a
// quiet machine:
//
//	WEIR_DASHBOARD_SCALE=1 go test -run TestScale -v -timeout 30m ./weirui/
func TestScale(t *testing.T) {
	v := os.Getenv("WEIR_DASHBOARD_SCALE")
	if v == "" {
		t.Skip("WEIR_DASHBOARD_SCALE not set (1 for 1,000,000 jobs, or a number of jobs)")
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("WEIR_DASHBOARD_SCALE=%q is not 1 or a number of jobs", v)
	}
	if n == 1 {
		n = 1_000_000
	}
	e := setup(t, nil, nil)
	ctx := t.Context()

	// Insert through InsertMany's COPY path, in batches, over 10 queues and
	// 5 kinds.
	start := time.Now()
	const batch = 10_000
	for done := 0; done < n; {
		size := min(batch, n-done)
		params := make([]weir.InsertManyParams, size)
		for i := range params {
			k := done + i
			params[i] = weir.InsertManyParams{Args: textArgs{Text: "job " + strconv.Itoa(k)},
				InsertOpts: &weir.InsertOpts{Queue: "q" + strconv.Itoa(k%10), Tags: []string{"t" + strconv.Itoa(k%5)}}}
		}
		if _, err := e.client.InsertMany(ctx, params); err != nil {
			t.Fatal(err)
		}
		done += size
	}
	t.Logf("inserted %d jobs in %v", n, time.Since(start).Round(time.Millisecond))

	// A queue's life: 90% completed over the last two hours, 2% discarded,
	// 1% retryable, 1% scheduled, the rest available. This schema is the
	// test's own.
	table := pgx.Identifier{e.driver.Schema(), "weir_job"}.Sanitize()
	start = time.Now()
	for _, sql := range []string{
		`UPDATE ` + table + ` SET state = 'completed', attempt = 1, attempted_at = now() - (id % 7200) * interval '1 second' - interval '2 seconds',
		    finalized_at = now() - (id % 7200) * interval '1 second' WHERE id % 100 < 90`,
		`UPDATE ` + table + ` SET state = 'discarded', attempt = 1, attempted_at = now() - interval '1 minute', finalized_at = now() - (id % 3600) * interval '1 second' WHERE id % 100 IN (90, 91)`,
		`UPDATE ` + table + ` SET state = 'retryable', attempt = 1, scheduled_at = now() + interval '1 hour' WHERE id % 100 = 92`,
		`UPDATE ` + table + ` SET state = 'scheduled', scheduled_at = now() + interval '1 day' WHERE id % 100 = 93`,
		`VACUUM ANALYZE ` + table,
	} {
		if _, err := e.driver.Pool().Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("states set and analyzed in %v", time.Since(start).Round(time.Millisecond))

	var size string
	if err := e.driver.Pool().QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size($1))`, table).Scan(&size); err == nil {
		t.Logf("job table with indexes: %s", size)
	}

	mid := strconv.Itoa(n / 2)
	paths := []string{
		"/", "/queues", "/periodic", "/jobs", "/jobs?state=available", "/jobs?state=discarded&queue=q3", "/jobs?state=discarded&queue=q0",
		"/jobs?kind=text&tag=t2", "/jobs?q=99", "/jobs?q=no-such-text", "/jobs?queue=q7&order=asc", "/jobs?after=" + mid, "/jobs/" + mid,
		"/api/v1/jobs?limit=1000", "/api/v1/jobs?state=completed&queue=q1&limit=1000", "/api/v1/queues",
		"/api/v1/throughput", "/api/v1/leader", "/jobs/bulk?action=retry&state=discarded&queue=q3",
	}
	poll := func(r *http.Request) { r.Header.Set("HX-Request", "true") }
	const runs = 5
	t.Logf("%-55s %10s %10s %10s", "GET", "min", "median", "max")
	for _, p := range append(paths, "poll /", "poll /jobs") {
		var extra []func(*http.Request)
		path := p
		if len(p) > 5 && p[:5] == "poll " {
			path, extra = p[5:], append(extra, poll)
		}
		var took []time.Duration
		for range runs {
			s := time.Now()
			r := e.do(t, "GET", path, nil, bearer(operatorToken), extra...)
			took = append(took, time.Since(s))
			if r.status != 200 {
				t.Fatalf("GET %s: %d %.300s", path, r.status, r.body)
			}
		}
		slices.Sort(took)
		t.Logf("%-55s %10v %10v %10v", p, took[0].Round(10*time.Microsecond), took[runs/2].Round(10*time.Microsecond),
			took[runs-1].Round(10*time.Microsecond))
	}

	// The plans of the filtered lists: discarded jobs are those whose id % 100
	// is 90 or 91, so all in q0 and q9 (queue q(id-1 % 10)); q3 has none, and
	// its page walks the whole primary key backward looking for them.
	explain := func(what, sql string) {
		t.Helper()
		rows, err := e.driver.Pool().Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) `+sql)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s:", what)
		for _, line := range lines {
			t.Log("  ", line)
		}
	}
	for _, queue := range []string{"q3", "q0"} {
		explain("/jobs?state=discarded&queue="+queue+" without a window", `SELECT id, state, queue, kind, args FROM `+table+
			` WHERE state = ANY('{discarded}') AND queue = ANY('{`+queue+`}') ORDER BY id DESC LIMIT 51`)
	}
	// The page's query: its window of 100,000 ids from the newest job.
	explain("/jobs?state=discarded&queue=q3, the page's window", `SELECT id, state, queue, kind, args FROM `+table+
		` WHERE state = ANY('{discarded}') AND queue = ANY('{q3}') AND id >= (SELECT max(id) FROM `+table+`) - 99999 ORDER BY id DESC LIMIT 51`)

	// One bulk retry batch: a JobList page, then JobRetry per job.
	s := time.Now()
	r := e.do(t, "POST", "/api/v1/jobs/bulk/retry?state=discarded", nil, bearer(operatorToken))
	if r.status != 200 {
		t.Fatalf("bulk retry: %d %s", r.status, r.body)
	}
	t.Logf("POST /api/v1/jobs/bulk/retry?state=discarded: %v: %s", time.Since(s).Round(time.Millisecond), r.body)
}
