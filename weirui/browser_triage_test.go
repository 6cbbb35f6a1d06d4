package weirui_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtest"
)

// TestBrowserTriage drives Chromium at 1280x800 through what an operator
// reads when jobs fail: the job list shows each job's last error, in view
// without scrolling sideways; a failed job's page shows its errors before
// its args, on the first screen; a job page offers only the actions that can
// apply (no Cancel on a final job, no Retry or Delete on a running one); the
// queues page shows every column, the failure counts and the oldest job's
// age included, with a queue that has every limit set.
func TestBrowserTriage(t *testing.T) {
	t.Parallel()
	path := chromium(t)
	e := setup(t, nil, nil)
	const smtp = "smtp: 550 5.1.1 mailbox unavailable"
	w := weirtest.NewWorker(t, e.driver, &weir.Config{}, weir.WorkFunc(func(ctx context.Context, j *weir.Job[textArgs]) error {
		return errors.New(smtp + "\nat attempt of " + j.Args.Text)
	}))
	opts := &weir.InsertOpts{Queue: "notifications", MaxAttempts: 1, Tags: []string{"signup"}}
	failed, err := w.Work(t.Context(), nil, textArgs{Text: strings.Repeat("a long args value ", 10)}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if failed.Job.State != weir.JobStateDiscarded {
		t.Fatalf("the failing job is %s", failed.Job.State)
	}
	available := e.insert(t, textArgs{Text: "waiting"}, &weir.InsertOpts{Queue: "notifications"})
	running := e.insert(t, textArgs{Text: "running"}, &weir.InsertOpts{Queue: "busy"})
	if jobs, _, err := e.driver.Executor().JobClaim(t.Context(), &weirdriver.JobClaimParams{
		Queue: "busy", Max: 1, ClientID: "web-1", LeaseDuration: time.Hour}); err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v %v", jobs, err)
	}
	ctx := t.Context()
	if err := e.client.QueueSetGlobalLimit(ctx, "notifications", 250000); err != nil {
		t.Fatal(err)
	}
	if err := e.client.QueueSetRateLimit(ctx, "notifications", weir.RateLimit{Limit: 1000, Period: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := e.client.QueueSetKeyLimit(ctx, "notifications", weir.KeyLimit{Key: "args.customer_id", Limit: 2,
		Rate: weir.RateLimit{Limit: 600, Period: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, path, "otto", operatorPassword)
	u := e.srv.URL
	// inView reports whether the element that the script find returns ends
	// within the window's width and its table does not scroll sideways.
	inView := func(find string) bool {
		return eval[bool](b, fmt.Sprintf(`(() => { const el = %s;
			const box = el.closest(".scroll");
			return el.getBoundingClientRect().right <= document.documentElement.clientWidth &&
				(box === null || box.scrollWidth <= box.clientWidth) })()`, find))
	}
	query := func(sel string) string { return fmt.Sprintf(`document.querySelector(%q)`, sel) }

	// The job list: the last error, its first line, in view.
	b.do(chromedp.Navigate(u + "/jobs"))
	row := fmt.Sprintf(`#live tr:has(a[href$="/jobs/%d"])`, failed.Job.ID)
	if got := b.text(row + " .last-error"); got != smtp+" …" {
		t.Errorf("the job list's last error: %q, want %q", got, smtp+" …")
	}
	if !inView(query(row + " .last-error")) {
		t.Error("the job list's last error is not in view at 1280 px")
	}
	if got := b.text(fmt.Sprintf(`#live tr:has(a[href$="/jobs/%d"])`, available.ID)); strings.Contains(got, "smtp") {
		t.Errorf("a job that never failed shows an error: %q", got)
	}

	// The failed job's page: errors before args, on the first screen; no
	// Cancel, which would only answer a conflict.
	b.do(chromedp.Navigate(u + "/jobs/" + strconv.FormatInt(failed.Job.ID, 10)))
	if !strings.Contains(b.text("ol.errors pre"), smtp) {
		t.Error("the job page does not show the error")
	}
	if !eval[bool](b, `(document.querySelector("ol.errors").compareDocumentPosition(document.querySelector("pre.json")) & Node.DOCUMENT_POSITION_FOLLOWING) !== 0`) {
		t.Error("the job page shows the args before the errors")
	}
	if !eval[bool](b, `document.querySelector("ol.errors pre").getBoundingClientRect().top < window.innerHeight`) {
		t.Error("the error is not on the first screen at 1280x800")
	}
	actions := func(id int64) string {
		b.do(chromedp.Navigate(u + "/jobs/" + strconv.FormatInt(id, 10)))
		b.waitFor("job page", `document.querySelector("dl.fields") !== null`, 20*time.Second)
		return eval[string](b, `Array.from(document.querySelectorAll(".actions button")).map(b => b.innerText).join(",")`)
	}
	for id, want := range map[int64]string{failed.Job.ID: "Retry now,Delete", available.ID: "Retry now,Cancel,Delete", running.ID: "Cancel"} {
		if got := actions(id); got != want {
			t.Errorf("job %d's actions: %q, want %q", id, got, want)
		}
	}

	// The queues page: every column in view.
	b.do(chromedp.Navigate(u + "/queues"))
	for _, col := range []string{"retryable", "completed", "cancelled", "discarded", "Oldest available"} {
		th := fmt.Sprintf(`Array.from(document.querySelectorAll("thead th")).find(th => th.innerText.replace(/\s+/g, " ").trim() === %q)`, col)
		if eval[bool](b, th+` === undefined`) {
			t.Errorf("the queues page has no column %s", col)
			continue
		}
		if !inView(th) {
			t.Errorf("the queues page's column %s is not in view at 1280 px", col)
		}
	}
	b.mu.Lock()
	for _, p := range b.problems {
		t.Errorf("the browser reported: %s", p)
	}
	b.mu.Unlock()
}
