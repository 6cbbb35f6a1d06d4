package weirui_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirtest"
	"github.com/weirq/weir/weirui"
)

// chromium finds a Chromium to drive, or skips the test; with
// WEIR_REQUIRE_CHROMIUM=1 a missing one fails it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("WEIR_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("no chromium on PATH, and WEIR_REQUIRE_CHROMIUM=1 (Debian: apt-get install chromium)")
	}
	t.Skip("browser test skipped: no chromium on PATH (Debian: apt-get install chromium; WEIR_REQUIRE_CHROMIUM=1 makes this a failure)")
	return ""
}

// TestBrowser drives a real Chromium through the pages: the stylesheet loads
// under the Content-Security-Policy, attacker-controlled args and errors show
// as text and run nothing, a form's POST passes the same-origin check and the
// CSRF token as a browser sends them, and no page is wider than a phone's
// screen.
func TestBrowser(t *testing.T) {
	t.Parallel()
	path := chromium(t)
	e := setup(t, &weirui.Options{AllowAnonymous: true}, nil)
	const evil = `<script>alert(1)</script><img src=x onerror=alert(2)>`
	job := e.insert(t, textArgs{Text: evil}, &weir.InsertOpts{Queue: "mail"})
	w := weirtest.NewWorker(t, e.driver, &weir.Config{}, weir.WorkFunc(func(ctx context.Context, j *weir.Job[textArgs]) error {
		return errors.New(j.Args.Text)
	}))
	failed, err := w.Work(t.Context(), nil, textArgs{Text: evil}, nil)
	if err != nil {
		t.Fatal(err)
	}

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Flag("headless", true))...)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(alloc)
	defer cancelCtx()
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelTimeout()
	var dialogs atomic.Int32
	err = chromedp.Listen(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialogs.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	// text reads by script, not through chromedp's node tree, which can
	// hold the previous document's node ids just after a navigation.
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q).innerText`, sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	eval := func(js string) float64 {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[float64](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatal(err)
		}
	}

	do(chromedp.EmulateViewport(1280, 900), chromedp.Navigate(e.srv.URL+"/jobs/"+strconv.FormatInt(failed.Job.ID, 10)))
	args := text(`pre.json`)
	errText := text(`ol.errors pre`)
	if !strings.Contains(args, evil) || !strings.Contains(errText, evil) {
		t.Errorf("args %q and error %q do not show the text as it is", args, errText)
	}
	// The page's own scripts are the two from /static/; job data added none.
	if n := eval(`document.querySelectorAll('img, script:not([src="/static/htmx.min.js"]):not([src="/static/live.js"])').length`); n != 0 {
		t.Errorf("the page holds %v script or img elements besides its own scripts", n)
	}
	if n := eval(`document.querySelectorAll('script').length`); n != 2 {
		t.Errorf("the page holds %v script elements, want its 2", n)
	}
	border, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('pre')).borderTopStyle`))
	if err != nil || border != "solid" {
		t.Errorf("the stylesheet did not apply (pre border %q): %v", border, err)
	}

	// The Cancel form, as a browser posts it.
	jobURL := e.srv.URL + "/jobs/" + strconv.FormatInt(job.ID, 10)
	do(chromedp.Navigate(jobURL), chromedp.Click(chromedp.CSS(`form[action$="/cancel"] button`)))
	wait, cancelWait := context.WithTimeout(ctx, 20*time.Second)
	err = chromedp.Do(wait, chromedp.WaitVisible(chromedp.CSS(`.flash`)))
	cancelWait()
	if err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("no message after Cancel (%v); the page says %q", err, text)
	}
	if flash := text(`.flash`); !strings.Contains(flash, "Job cancelled") {
		t.Errorf("flash %q", flash)
	}
	if got := e.job(t, job.ID).State; got != weir.JobStateCancelled {
		t.Errorf("job is %s after the browser's Cancel", got)
	}

	// On a phone's width, no page scrolls sideways: wide tables scroll in
	// their own box.
	for _, p := range []string{"/", "/jobs", "/jobs/" + strconv.FormatInt(failed.Job.ID, 10), "/queues", "/periodic", "/clients"} {
		do(chromedp.EmulateViewport(390, 844), chromedp.Navigate(e.srv.URL+p))
		if width := eval(`document.documentElement.scrollWidth`); width > 390 {
			t.Errorf("%s is %v px wide on a 390 px screen", p, width)
		}
	}
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened", n)
	}
	if err := chromedp.Cancel(ctx); err != nil {
		t.Error(err)
	}
}
