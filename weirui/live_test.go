package weirui_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirtest"
	"github.com/weirq/weir/weirui"
)

// TestLiveFragments: a poll (HX-Request: true) of the overview or the job
// list gets the live part alone, which carries its own polling attributes;
// a plain GET gets the whole page, which loads the vendored script from
// /static and holds no inline script.
func TestLiveFragments(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	e.insert(t, textArgs{Text: "a"}, &weir.InsertOpts{Queue: "mail"})
	c := bearer(viewerToken)
	poll := func(r *http.Request) { r.Header.Set("HX-Request", "true") }
	for _, path := range []string{"/", "/jobs?queue=mail", "/jobs?queue=mail&refresh=10"} {
		full := e.do(t, "GET", path, nil, c)
		if full.status != 200 || !strings.Contains(full.body, "<html") || !strings.Contains(full.body, `<script src="/static/htmx.min.js" defer></script>`) {
			t.Fatalf("GET %s: %d, no page or no script: %s", path, full.status, full.body)
		}
		if strings.Contains(full.body, "<script>") || strings.Contains(full.body, " onclick=") {
			t.Errorf("GET %s holds an inline script", path)
		}
		part := e.do(t, "GET", path, nil, c, poll)
		if part.status != 200 || strings.Contains(part.body, "<html") || !strings.HasPrefix(strings.TrimSpace(part.body), `<div id="live"`) ||
			!strings.Contains(part.body, `hx-trigger="every 5s"`) || !strings.Contains(part.body, "mail") {
			t.Errorf("poll of %s: %d %s", path, part.status, part.body)
		}
		if strings.Contains(path, "refresh=") && !strings.Contains(full.body, `<noscript><meta http-equiv="refresh" content="10"></noscript>`) {
			t.Errorf("GET %s: the meta refresh is not in a noscript", path)
		}
		if strings.Contains(part.body, "refresh=") {
			t.Errorf("poll of %s polls with refresh: %s", path, part.body)
		}
		if part.header.Get("Vary") != "HX-Request" {
			t.Errorf("poll of %s: Vary %q", path, part.header.Get("Vary"))
		}
	}
	// An error is a whole page, which the script does not swap in.
	if r := e.do(t, "GET", "/jobs?state=nope", nil, c, poll); r.status != 400 {
		t.Errorf("bad poll: %d", r.status)
	}
	js := e.do(t, "GET", "/static/htmx.min.js", nil, c)
	if js.status != 200 || !strings.Contains(js.header.Get("Content-Type"), "javascript") || !strings.HasPrefix(js.body, "/*! htmx.org 2.0.11") {
		t.Errorf("script: %d %q %.80s", js.status, js.header.Get("Content-Type"), js.body)
	}
}

// TestThroughput counts the jobs finalized in the last hour by state.
func TestThroughput(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	w := weirtest.NewWorker(t, e.driver, &weir.Config{}, weir.WorkFunc(func(ctx context.Context, j *weir.Job[textArgs]) error {
		if j.Args.Text == "fail" {
			return errors.New("no")
		}
		return nil
	}))
	for _, text := range []string{"ok", "ok", "fail"} {
		if _, err := w.Work(t.Context(), nil, textArgs{Text: text}, &weir.InsertOpts{MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
	}
	old := e.insert(t, textArgs{Text: "old"}, nil)
	if _, err := e.client.JobCancel(t.Context(), old.ID); err != nil {
		t.Fatal(err)
	}
	r := e.do(t, "GET", "/api/v1/throughput", nil, bearer(viewerToken))
	var tp struct {
		BucketSeconds int `json:"bucket_seconds"`
		Buckets       []struct {
			Completed, Cancelled, Discarded int64
			PerMinute                       float64 `json:"completed_per_minute"`
			Pickup                          *string `json:"pickup_mean"`
		} `json:"buckets"`
	}
	if err := json.Unmarshal([]byte(r.body), &tp); err != nil || r.status != 200 {
		t.Fatalf("%d %s %v", r.status, r.body, err)
	}
	if tp.BucketSeconds != 300 || len(tp.Buckets) != 12 {
		t.Fatalf("buckets: %s", r.body)
	}
	// The jobs may straddle a five-minute mark: sum the two newest buckets.
	var done, cancelled, discarded int64
	for _, b := range tp.Buckets[:2] {
		done, cancelled, discarded = done+b.Completed, cancelled+b.Cancelled, discarded+b.Discarded
	}
	if done != 2 || cancelled != 1 || discarded != 1 || tp.Buckets[0].Completed > 0 && (tp.Buckets[0].Pickup == nil || tp.Buckets[0].PerMinute <= 0) {
		t.Errorf("throughput: %s", r.body)
	}
	page := e.do(t, "GET", "/", nil, bearer(viewerToken))
	if !strings.Contains(page.body, "Jobs finalized in the last hour") {
		t.Errorf("the overview has no throughput table")
	}
}

// TestThroughputKeepsFinishedBuckets: a bucket that ended (a minute ago and
// more, by the database's clock) is counted once and kept, so that later
// polls count only the buckets still filling; buckets older than the hour
// are let go; a request waiting for another's count gives up with its
// context.
func TestThroughputKeepsFinishedBuckets(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	pool := e.driver.Pool()
	table := pgx.Identifier{e.driver.Schema(), "weir_job"}.Sanitize()
	finished := func(ago time.Duration, kind string) {
		t.Helper()
		if _, err := pool.Exec(t.Context(), `INSERT INTO `+table+` (state, queue, kind, args, max_attempts, attempt,
			scheduled_at, attempted_at, finalized_at) VALUES ('completed', 'q', $2, '{}', 1, 1,
			now() - $1::interval - interval '2 seconds', now() - $1::interval - interval '1 second', now() - $1::interval)`,
			ago.String(), kind); err != nil {
			t.Fatal(err)
		}
	}
	count := func(now time.Time) map[int64]int64 {
		t.Helper()
		tp, err := weirui.ThroughputAt(t.Context(), e.handler, now)
		if err != nil {
			t.Fatal(err)
		}
		if len(tp.Buckets) != weirui.BucketCount {
			t.Fatalf("%d buckets, want %d", len(tp.Buckets), weirui.BucketCount)
		}
		out := map[int64]int64{}
		for _, b := range tp.Buckets {
			out[b.Start.Unix()] = b.Completed
			if b.Completed > 0 && (b.Pickup == nil || b.Pickup.Duration != time.Second) {
				t.Errorf("bucket %v: pickup %v, want 1s", b.Start, b.Pickup)
			}
		}
		return out
	}

	now := time.Now()
	old := now.Add(-30 * time.Minute)
	oldStart := old.Truncate(weirui.BucketWidth)
	newStart := now.Truncate(weirui.BucketWidth)
	finished(30*time.Minute, "old")
	finished(0, "new")
	if got := count(now); got[oldStart.Unix()] != 1 || got[newStart.Unix()] != 1 {
		t.Fatalf("first count: %v", got)
	}
	if !weirui.KeptBucket(e.handler, oldStart) || weirui.KeptBucket(e.handler, newStart) {
		t.Fatalf("want the bucket of half an hour ago kept, not the current one")
	}
	// The kept bucket is not counted again: deleting its job does not show.
	if _, err := pool.Exec(t.Context(), `DELETE FROM `+table+` WHERE kind = 'old'`); err != nil {
		t.Fatal(err)
	}
	finished(0, "new")
	if got := count(now); got[oldStart.Unix()] != 1 || got[newStart.Unix()] != 2 {
		t.Fatalf("second count: %v, want the kept bucket's 1 and the current bucket's 2", got)
	}
	// Two hours on, the kept buckets are out of the hour and let go.
	count(now.Add(2 * time.Hour))
	if weirui.KeptBucket(e.handler, oldStart) {
		t.Errorf("a bucket out of the hour is still kept")
	}

	// While another request counts, a request whose context ends gives up.
	release := weirui.HoldThroughputTurn(e.handler)
	defer release()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := weirui.ThroughputAt(ctx, e.handler, now); !errors.Is(err, context.Canceled) {
		t.Errorf("waiting with a cancelled context: %v", err)
	}
}
