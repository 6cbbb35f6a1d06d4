package weirui_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtest"
)

// tab is a browser tab that sends one user's basic credentials.
type tab struct {
	t   *testing.T
	ctx context.Context
	// problems are the tab's script exceptions and Content-Security-Policy
	// refusals.
	mu       sync.Mutex
	problems []string
}

// newBrowser starts a headless Chromium; its first tab sends the credentials.
func newBrowser(t *testing.T, path, user, password string) *tab {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Flag("headless", true))...)
	t.Cleanup(cancelAlloc)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx)
		cancelCtx()
	})
	tb := &tab{t: t, ctx: ctx}
	tb.login(user, password)
	return tb
}

// newTab opens another tab of the same browser with other credentials.
func (tb *tab) newTab(user, password string) *tab {
	ctx, cancel := chromedp.NewContext(tb.ctx)
	tb.t.Cleanup(cancel)
	n := &tab{t: tb.t, ctx: ctx}
	n.login(user, password)
	return n
}

func (tb *tab) login(user, password string) {
	tb.t.Helper()
	// The first action starts the browser or opens the tab: no timeout on it,
	// which would close them when it ends.
	if err := chromedp.Do(tb.ctx); err != nil {
		tb.t.Fatal(err)
	}
	err := chromedp.Listen(tb.ctx, func(ev any) {
		var problem string
		switch ev := ev.(type) {
		case *cdplog.EventEntryAdded:
			if ev.Entry.Source == cdplog.EntrySourceSecurity || strings.Contains(ev.Entry.Text, "Content Security Policy") {
				problem = ev.Entry.Text
			}
		case *runtime.EventExceptionThrown:
			problem = "exception: " + ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				problem += " " + ev.ExceptionDetails.Exception.Description
			}
		}
		if problem != "" {
			tb.mu.Lock()
			tb.problems = append(tb.problems, problem)
			tb.mu.Unlock()
		}
	})
	if err != nil {
		tb.t.Fatal(err)
	}
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	tb.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		if _, err := cdp.Call(ctx, t, cdplog.Enable, cdp.Empty{}); err != nil {
			return err
		}
		if _, err := cdp.Call(ctx, t, runtime.Enable, cdp.Empty{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, t, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
			Headers: network.Headers{"Authorization": auth}})
		return err
	}), chromedp.EmulateViewport(1280, 800))
}

func (tb *tab) do(steps ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		body, _ := chromedp.Run(tb.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		tb.t.Fatalf("%v; the page says %q", err, body)
	}
}

// text reads the text of the first element that matches sel, once there is
// one. It reads by script rather than through chromedp's node tree: just
// after a navigation that tree can still hold the previous document's node
// ids, and a query then fails with "No node with given id found".
func (tb *tab) text(sel string) string {
	tb.t.Helper()
	q, err := json.Marshal(sel)
	if err != nil {
		tb.t.Fatal(err)
	}
	tb.waitFor("element "+sel, fmt.Sprintf(`document.querySelector(%s) !== null`, q), 20*time.Second)
	return eval[string](tb, fmt.Sprintf(`document.querySelector(%s).innerText`, q))
}

func eval[T any](tb *tab, js string, opts ...chromedp.EvaluateOption) T {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, opts...))
	if err != nil {
		tb.t.Fatalf("%s: %v", js, err)
	}
	return v
}

// waitFor polls a JavaScript condition until it holds, or fails at the
// deadline.
func (tb *tab) waitFor(what, js string, within time.Duration) {
	tb.t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		// A navigation under way fails the evaluation: try again.
		ctx, cancel := context.WithTimeout(tb.ctx, 10*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		cancel()
		if err == nil && ok {
			return
		}
		last = err
		select {
		case <-tick.C:
		case <-deadline.C:
			body, _ := chromedp.Run(tb.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
			tb.t.Fatalf("%s: not true after %v (last error %v); the page says %q", what, within, last, body)
		}
	}
}

// TestBrowserFlows drives Chromium through an operator's day: the overview,
// a filtered job list, a job's page and its Retry, a queue's pause and
// resume, the clients page from the navigation, a bulk cancel by filter with its confirmation, a job that appears
// on the list without a reload; and a viewer refused a change.
func TestBrowserFlows(t *testing.T) {
	t.Parallel()
	path := chromium(t)
	e := setup(t, nil, nil)
	for range 3 {
		e.insert(t, textArgs{Text: "mail"}, &weir.InsertOpts{Queue: "mail"})
	}
	bulk := []*weir.JobRow{e.insert(t, textArgs{Text: "b"}, &weir.InsertOpts{Queue: "bulk"}),
		e.insert(t, textArgs{Text: "b"}, &weir.InsertOpts{Queue: "bulk"})}
	w := weirtest.NewWorker(t, e.driver, &weir.Config{}, weir.WorkFunc(func(ctx context.Context, j *weir.Job[textArgs]) error {
		return errors.New("smtp refused")
	}))
	failed, err := w.Work(t.Context(), nil, textArgs{Text: "will fail"}, &weir.InsertOpts{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if failed.Job.State != weir.JobStateDiscarded {
		t.Fatalf("the failing job is %s", failed.Job.State)
	}
	if _, err := e.driver.Executor().ClientRegister(t.Context(), &weirdriver.ClientRegisterParams{
		ID: "web-7", Host: "h7", PID: 7, Queues: []weir.ClientQueue{{Name: "mail", MaxWorkers: 4}},
	}); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, path, "otto", operatorPassword)
	u := e.srv.URL

	// The overview lists the queues.
	b.do(chromedp.Navigate(u + "/"))
	if got := b.text("#live table"); !strings.Contains(got, "mail") || !strings.Contains(got, "bulk") {
		t.Errorf("overview's queue table: %q", got)
	}
	// The throughput chart is drawn from the table (the failed job is one
	// point), and again after a live update.
	b.waitFor("throughput chart", `document.querySelector("#throughput-chart canvas") !== null`, 20*time.Second)
	eval[bool](b, `document.querySelector("#throughput-chart").dataset.mark = "old", true`)
	b.waitFor("chart redrawn after a poll", `(() => { const c = document.querySelector("#throughput-chart");
		return c !== null && c.dataset.mark === undefined && c.querySelector("canvas") !== null })()`, 30*time.Second)

	// Filter the job list by queue with the form.
	b.do(chromedp.Navigate(u+"/jobs"), chromedp.SetValue(chromedp.CSS("#f-queue"), "mail"),
		chromedp.Click(chromedp.CSS(`form.filters button[type=submit]`)))
	b.waitFor("filtered list", `location.search.includes("queue=mail") && document.querySelectorAll("#live tbody tr").length === 3`, 20*time.Second)

	// Open the failed job from the list, and retry it.
	b.do(chromedp.Navigate(u+"/jobs?state=discarded"), chromedp.Click(chromedp.CSS(`#live tbody a`)))
	b.waitFor("job page", `document.querySelector("dl.fields") !== null`, 20*time.Second)
	if got := b.text("ol.errors pre"); !strings.Contains(got, "smtp refused") {
		t.Errorf("job page error %q", got)
	}
	b.do(chromedp.Click(chromedp.CSS(`form[action$="/retry"] button`)))
	b.waitFor("retry's message", `(document.querySelector(".flash") || {}).innerText === "Job retried."`, 20*time.Second)
	if got := e.job(t, failed.Job.ID).State; got != weir.JobStateAvailable {
		t.Errorf("retried job is %s", got)
	}

	// Pause and resume a queue.
	b.do(chromedp.Navigate(u+"/queues"), chromedp.Click(chromedp.CSS(`form[action$="/queues/mail/pause"] button`)))
	b.waitFor("resume button", `document.querySelector('form[action$="/queues/mail/resume"]') !== null`, 20*time.Second)
	if !e.paused(t, "mail") {
		t.Error("mail is not paused after Pause")
	}
	b.do(chromedp.Click(chromedp.CSS(`form[action$="/queues/mail/resume"] button`)))
	b.waitFor("pause button", `document.querySelector('form[action$="/queues/mail/pause"]') !== null`, 20*time.Second)
	if e.paused(t, "mail") {
		t.Error("mail is paused after Resume")
	}

	// The clients page, reached from the navigation, lists the registry.
	b.do(chromedp.Navigate(u+"/"), chromedp.Click(chromedp.CSS(`nav a[href="/clients"]`)))
	b.waitFor("clients page", `location.pathname === "/clients" && document.querySelector("#live tbody tr") !== null`, 20*time.Second)
	if got := b.text("#live tbody"); !strings.Contains(got, "web-7") || !strings.Contains(got, "mail (4)") {
		t.Errorf("clients page's table: %q", got)
	}

	// Bulk cancel by filter, through the confirmation.
	b.do(chromedp.Navigate(u+"/jobs?queue=bulk&state=available"), chromedp.SetValue(chromedp.CSS("#b-action"), "cancel"),
		chromedp.Click(chromedp.CSS(`form.bulk button`)))
	b.waitFor("confirmation", `document.body.innerText.includes("2 jobs match now")`, 20*time.Second)
	b.do(chromedp.Click(chromedp.CSS(`form[action$="/jobs/bulk/cancel"] button`)))
	b.waitFor("bulk result", `(document.querySelector(".flash") || {}).innerText === "2 jobs cancelled."`, 20*time.Second)
	for _, j := range bulk {
		if got := e.job(t, j.ID).State; got != weir.JobStateCancelled {
			t.Errorf("bulk job %d is %s", j.ID, got)
		}
	}

	// A job inserted now appears on the open list without a reload: the
	// marker set on the page survives, which a reload would clear.
	// The pointer goes to the header, out of the live part, where it would
	// hold the polls.
	b.do(chromedp.Navigate(u+"/jobs?queue=live"), chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, input.DispatchMouseEvent, input.DispatchMouseEventParams{
			Type: input.DispatchMouseEventTypeMouseMoved, X: 1, Y: 1})
		return err
	}))
	b.waitFor("empty list", `document.body.innerText.includes("No job matches.")`, 20*time.Second)
	eval[bool](b, `window.weirMarker = true`)
	live := e.insert(t, textArgs{Text: "live"}, &weir.InsertOpts{Queue: "live"})
	b.waitFor("the live job", fmt.Sprintf(`document.querySelector('#live a[href$="/jobs/%d"]') !== null`, live.ID), 30*time.Second)
	if !eval[bool](b, `window.weirMarker === true`) {
		t.Error("the page reloaded instead of updating its live part")
	}

	// While the keyboard focus is in the live part, polls are held (the
	// part counts them): a job inserted then does not appear, and the focus
	// stays. Two held polls mean one began after the insert.
	link := fmt.Sprintf(`#live a[href$="/jobs/%d"]`, live.ID)
	eval[bool](b, fmt.Sprintf(`document.querySelector(%q).focus(), true`, link))
	held := eval[float64](b, `Number(document.getElementById("live").dataset.held || 0)`)
	second := e.insert(t, textArgs{Text: "second"}, &weir.InsertOpts{Queue: "live"})
	b.waitFor("held polls", fmt.Sprintf(`Number(document.getElementById("live").dataset.held || 0) >= %v`, held+2), 30*time.Second)
	shown := fmt.Sprintf(`document.querySelector('#live a[href$="/jobs/%d"]') !== null`, second.ID)
	if eval[bool](b, shown) {
		t.Error("the live part was replaced while the focus was in it")
	}
	if !eval[bool](b, fmt.Sprintf(`document.activeElement === document.querySelector(%q)`, link)) {
		t.Error("the focus left the link")
	}
	eval[bool](b, `document.activeElement.blur(), true`)
	b.waitFor("the second live job", shown, 30*time.Second)

	// With script, ?refresh= does not reload the page: its meta refresh is in
	// a <noscript>, which a browser running script does not parse as markup.
	b.do(chromedp.Navigate(u + "/jobs?queue=live&refresh=2"))
	b.waitFor("list", `document.querySelector("#live tbody tr") !== null`, 20*time.Second)
	if eval[bool](b, `document.querySelector('meta[http-equiv="refresh"]') !== null`) {
		t.Error("with script on, the page has a meta refresh")
	}

	// A viewer sees no action, and a change sent anyway is refused.
	v := b.newTab("vera", viewerPassword)
	v.do(chromedp.Navigate(u + "/jobs/" + strconv.FormatInt(live.ID, 10)))
	if n := eval[float64](v, `document.querySelectorAll('form[method="post"]').length`); n != 0 {
		t.Errorf("the viewer sees %v action forms", n)
	}
	status := eval[float64](v, fmt.Sprintf(`fetch("/api/v1/session").then(r => r.json()).then(s =>
		fetch("/api/v1/jobs/%d/cancel", {method: "POST", headers: {"X-CSRF-Token": s.csrf_token}})).then(r => r.status)`, live.ID),
		chromedp.EvalAwaitPromise)
	if status != 403 {
		t.Errorf("the viewer's cancel: %v, want 403", status)
	}
	if got := e.job(t, live.ID).State; got != weir.JobStateAvailable {
		t.Errorf("job is %s after the viewer's cancel", got)
	}
	for _, tb := range []*tab{b, v} {
		tb.mu.Lock()
		for _, p := range tb.problems {
			t.Errorf("the browser reported: %s", p)
		}
		tb.mu.Unlock()
	}
}

func (e *env) paused(t *testing.T, queue string) bool {
	t.Helper()
	queues, err := e.client.QueueList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queues {
		if q.Name == queue {
			return q.Paused
		}
	}
	t.Fatalf("no queue %s", queue)
	return false
}

// TestScreenshots writes the screenshots of docs/images: the overview, the
// job list, a job's page, the queues and the clients, light and dark, at
// 1280x800. It runs only with
// WEIR_SCREENSHOTS set to the directory to write to:
//
//	WEIR_SCREENSHOTS=$PWD/docs/images go test -run TestScreenshots ./weirui/
func TestScreenshots(t *testing.T) {
	dir := os.Getenv("WEIR_SCREENSHOTS")
	if dir == "" {
		t.Skip("WEIR_SCREENSHOTS not set (the directory to write the screenshots to)")
	}
	path := chromium(t)
	e := setup(t, nil, nil)
	ok := weirtest.NewWorker(t, e.driver, &weir.Config{}, weir.WorkFunc(func(ctx context.Context, j *weir.Job[textArgs]) error {
		if strings.HasPrefix(j.Args.Text, "bounce") {
			return errors.New("smtp: 550 mailbox unavailable")
		}
		return nil
	}))
	var shown int64
	for i := range 40 {
		text := "welcome " + strconv.Itoa(i)
		if i%9 == 0 {
			text = "bounce " + strconv.Itoa(i)
		}
		res, err := ok.Work(t.Context(), nil, textArgs{Text: text}, &weir.InsertOpts{Queue: "mail", MaxAttempts: 1, Tags: []string{"signup"}})
		if err != nil {
			t.Fatal(err)
		}
		if i == 9 {
			shown = res.Job.ID
		}
	}
	for i := range 12 {
		e.insert(t, textArgs{Text: "invoice " + strconv.Itoa(i)}, &weir.InsertOpts{Queue: "billing", Priority: 2})
	}
	for i := range 5 {
		e.insert(t, textArgs{Text: "thumbnail " + strconv.Itoa(i)}, &weir.InsertOpts{Queue: "media", ScheduledAt: time.Now().Add(time.Hour)})
	}
	if err := e.client.QueuePause(t.Context(), "media"); err != nil {
		t.Fatal(err)
	}
	if err := e.client.QueueSetGlobalLimit(t.Context(), "billing", 4); err != nil {
		t.Fatal(err)
	}
	for _, c := range []weirdriver.ClientRegisterParams{
		{ID: "api-7f3c", Host: "api-1", PID: 4121, Queues: []weir.ClientQueue{{Name: "mail", MaxWorkers: 20}, {Name: "billing", MaxWorkers: 4}}},
		{ID: "worker-b2e9", Host: "worker-1", PID: 977, Queues: []weir.ClientQueue{{Name: "media", MaxWorkers: 8}}},
	} {
		c.Version = "(devel)"
		if _, err := e.driver.Executor().ClientRegister(t.Context(), &c); err != nil {
			t.Fatal(err)
		}
	}
	b := newBrowser(t, path, "otto", operatorPassword)
	for _, scheme := range []string{"light", "dark"} {
		b.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
			return err
		}))
		for name, p := range map[string]string{"overview": "/", "jobs": "/jobs", "job": "/jobs/" + strconv.FormatInt(shown, 10),
			"queues": "/queues", "clients": "/clients"} {
			b.do(chromedp.Navigate(e.srv.URL + p))
			b.waitFor("page", `document.readyState === "complete"`, 20*time.Second)
			ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
			raw, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&out, img); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, "dashboard-"+name+"-"+scheme+".png")
			if err := os.WriteFile(file, out.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d bytes", file, out.Len())
		}
	}
}
