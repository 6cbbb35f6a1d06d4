package weirui_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirui"
)

type queuesJSON struct {
	Queues []struct {
		Name      string           `json:"name"`
		Counts    map[string]int64 `json:"counts"`
		Estimated []string         `json:"estimated"`
	} `json:"queues"`
}

func (e *env) queues(t *testing.T, path string) queuesJSON {
	t.Helper()
	r := e.do(t, "GET", path, nil, bearer(viewerToken))
	var out queuesJSON
	if err := json.Unmarshal([]byte(r.body), &out); err != nil || r.status != 200 {
		t.Fatalf("GET %s: %d %s %v", path, r.status, r.body, err)
	}
	return out
}

// TestQueueCountsExactOnSmallTable: on a small table the overview, the
// queues page and the API count every state exactly and mark nothing as an
// estimate.
func TestQueueCountsExactOnSmallTable(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	e.insert(t, textArgs{Text: "a"}, &weir.InsertOpts{Queue: "mail"})
	j := e.insert(t, textArgs{Text: "b"}, &weir.InsertOpts{Queue: "mail"})
	if _, err := e.client.JobCancel(t.Context(), j.ID); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/api/v1/queues", "/api/v1/queues?exact=true", "/api/v1/queues?exact=false"} {
		q := e.queues(t, path)
		if len(q.Queues) != 1 || q.Queues[0].Counts["available"] != 1 || q.Queues[0].Counts["cancelled"] != 1 ||
			q.Queues[0].Estimated == nil || len(q.Queues[0].Estimated) != 0 {
			t.Errorf("GET %s: %+v", path, q)
		}
	}
	for _, path := range []string{"/", "/queues"} {
		if r := e.do(t, "GET", path, nil, bearer(viewerToken)); r.status != 200 || strings.Contains(r.body, "marks an estimate") {
			t.Errorf("GET %s: %d, or it marks an estimate on a small table", path, r.status)
		}
	}
}

// TestQueueCountsEstimated: on a job table larger than the sample (some
// 30,000 jobs of half a kilobyte, 2,000 pages and more), the final states'
// counts are estimates, marked with "~" on the pages and listed in the API's
// "estimated"; ?exact=true counts them exactly. The other states are exact
// either way.
func TestQueueCountsEstimated(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	table := pgx.Identifier{e.driver.Schema(), "weir_job"}.Sanitize()
	for _, sql := range []string{
		`INSERT INTO ` + table + ` (state, queue, kind, args, max_attempts, attempt, scheduled_at, attempted_at, finalized_at)
		SELECT CASE WHEN g % 10 = 0 THEN 'available' ELSE 'completed' END, 'q' || (g % 2), 'text',
			jsonb_build_object('text', repeat('x', 500)), 1,
			CASE WHEN g % 10 = 0 THEN 0 ELSE 1 END, now(),
			CASE WHEN g % 10 = 0 THEN NULL ELSE now() END, CASE WHEN g % 10 = 0 THEN NULL ELSE now() END
		FROM generate_series(1, 30000) AS g`,
		`VACUUM ANALYZE ` + table,
	} {
		if _, err := e.driver.Pool().Exec(t.Context(), sql); err != nil {
			t.Fatal(err)
		}
	}
	est := e.queues(t, "/api/v1/queues")
	exact := e.queues(t, "/api/v1/queues?exact=true")
	if len(est.Queues) != 2 || len(exact.Queues) != 2 {
		t.Fatalf("queues: %+v, exactly %+v", est, exact)
	}
	for i, q := range est.Queues {
		if strings.Join(q.Estimated, ",") != "completed,cancelled,discarded" || len(exact.Queues[i].Estimated) != 0 {
			t.Errorf("queue %s: estimated %v, exactly %v", q.Name, q.Estimated, exact.Queues[i].Estimated)
		}
		// q0 holds every available job (g % 10 == 0 is even).
		want := map[string][2]int64{"q0": {3000, 12000}, "q1": {0, 15000}}[q.Name]
		if q.Counts["available"] != want[0] || exact.Queues[i].Counts["available"] != want[0] || exact.Queues[i].Counts["completed"] != want[1] {
			t.Errorf("queue %s: %v, exactly %v", q.Name, q.Counts, exact.Queues[i].Counts)
		}
		// An estimate, but of the right size.
		if n := q.Counts["completed"]; n < want[1]/2 || n > want[1]*2 {
			t.Errorf("queue %s: about %d completed jobs, exactly %d", q.Name, n, want[1])
		}
	}
	for _, path := range []string{"/", "/queues"} {
		r := e.do(t, "GET", path, nil, bearer(viewerToken))
		if r.status != 200 || !strings.Contains(r.body, "marks an estimate") || !strings.Contains(r.body, `<abbr title="about: an estimate">~</abbr>`) {
			t.Errorf("GET %s: %d, or no estimate marked: %s", path, r.status, r.body)
		}
	}
}

// TestSearch: q keeps the jobs whose kind or args hold the text, in any
// case, its LIKE wildcards literal; the form echoes it escaped; with an id
// it still applies; a bulk action takes it as a filter.
func TestSearch(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	want := e.insert(t, textArgs{Text: "Invoice 50% <b>paid</b>"}, &weir.InsertOpts{Queue: "mail"})
	other := e.insert(t, textArgs{Text: "invoice 500 due"}, &weir.InsertOpts{Queue: "mail"})
	ids := func(path string) []int64 {
		t.Helper()
		r := e.do(t, "GET", path, nil, bearer(viewerToken))
		var out struct{ Jobs []struct{ ID int64 } }
		if err := json.Unmarshal([]byte(r.body), &out); err != nil || r.status != 200 {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		var got []int64
		for _, j := range out.Jobs {
			got = append(got, j.ID)
		}
		return got
	}
	for path, wantIDs := range map[string][]int64{
		"/api/v1/jobs?q=INVOICE":                                    {other.ID, want.ID},
		"/api/v1/jobs?q=50%25":                                      {want.ID},
		"/api/v1/jobs?q=50%25&queue=other":                          nil,
		"/api/v1/jobs?q=TEXT":                                       {other.ID, want.ID}, // the args' keys too
		"/api/v1/jobs?q=paid&id=" + strconv.FormatInt(want.ID, 10):  {want.ID},
		"/api/v1/jobs?q=paid&id=" + strconv.FormatInt(other.ID, 10): nil,
	} {
		if got := ids(path); !slices.Equal(got, wantIDs) {
			t.Errorf("GET %s: %v, want %v", path, got, wantIDs)
		}
	}
	r := e.do(t, "GET", "/jobs?q=%3Cscript%3E", nil, bearer(operatorToken))
	if r.status != 200 || strings.Contains(r.body, "<script>") || !strings.Contains(r.body, `value="&lt;script&gt;"`) {
		t.Errorf("the form does not echo the search escaped: %d %s", r.status, r.body)
	}
	// A search alone is a filter for a bulk action, and only its match is acted on.
	r = e.do(t, "POST", "/api/v1/jobs/bulk/cancel?q=paid", nil, bearer(operatorToken))
	if r.status != 200 || !strings.Contains(r.body, `"acted": 1`) {
		t.Fatalf("bulk cancel by search: %d %s", r.status, r.body)
	}
	if j, err := e.client.JobGet(t.Context(), other.ID); err != nil || j.State != weir.JobStateAvailable {
		t.Errorf("the job the search does not match: %v, %v", j, err)
	}
}

// TestMetricsOption: Options.Metrics is served at /metrics to any
// authenticated user, behind the pages' authentication; without it there is
// no /metrics.
func TestMetricsOption(t *testing.T) {
	t.Parallel()
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "weir_test 1") })
	e := setup(t, &weirui.Options{Auth: testAuth(), Metrics: metrics}, nil)
	if r := e.do(t, "GET", "/metrics", nil, func(*http.Request) {}); r.status != 401 {
		t.Errorf("/metrics without credentials: %d, want 401", r.status)
	}
	if r := e.do(t, "GET", "/metrics", nil, bearer(viewerToken)); r.status != 200 || r.body != "weir_test 1\n" {
		t.Errorf("/metrics as a viewer: %d %q", r.status, r.body)
	}
	if r := setup(t, nil, nil).do(t, "GET", "/metrics", nil, bearer(viewerToken)); r.status != 404 {
		t.Errorf("/metrics without Options.Metrics: %d, want 404", r.status)
	}
}
