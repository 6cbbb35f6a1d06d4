package weirui_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/weirq/weir"
)

type bulkAnswer struct {
	Action     string `json:"action"`
	Acted      int    `json:"acted"`
	Skipped    int    `json:"skipped"`
	More       bool   `json:"more"`
	NextCursor int64  `json:"next_cursor"`
}

func (e *env) bulk(t *testing.T, path string) bulkAnswer {
	t.Helper()
	r := e.do(t, "POST", path, nil, bearer(operatorToken))
	if r.status != 200 {
		t.Fatalf("POST %s: %d %s", path, r.status, r.body)
	}
	var a bulkAnswer
	if err := json.Unmarshal([]byte(r.body), &a); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestBulkAPI acts on every job matching a filter, in bounded batches.
func TestBulkAPI(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	var mail []*weir.JobRow
	for range 5 {
		mail = append(mail, e.insert(t, textArgs{Text: "m"}, &weir.InsertOpts{Queue: "mail"}))
	}
	other := []*weir.JobRow{e.insert(t, textArgs{Text: "o"}, &weir.InsertOpts{Queue: "other"}),
		e.insert(t, textArgs{Text: "o"}, &weir.InsertOpts{Queue: "other"})}

	// Cancel in batches of 3: the first says more remain.
	if a := e.bulk(t, "/api/v1/jobs/bulk/cancel?queue=mail&state=available&limit=3"); a.Acted != 3 || a.Skipped != 0 || !a.More {
		t.Errorf("first batch: %+v", a)
	}
	if a := e.bulk(t, "/api/v1/jobs/bulk/cancel?queue=mail&state=available&limit=3"); a.Acted != 2 || a.More {
		t.Errorf("second batch: %+v", a)
	}
	for _, j := range mail {
		if got := e.job(t, j.ID).State; got != weir.JobStateCancelled {
			t.Errorf("mail job %d is %s", j.ID, got)
		}
	}
	for _, j := range other {
		if got := e.job(t, j.ID).State; got != weir.JobStateAvailable {
			t.Errorf("other job %d is %s after a bulk cancel of mail", j.ID, got)
		}
	}
	// Cancelling final jobs skips them.
	if a := e.bulk(t, "/api/v1/jobs/bulk/cancel?queue=mail"); a.Acted != 0 || a.Skipped != 5 {
		t.Errorf("cancel of cancelled jobs: %+v", a)
	}
	// Retry them all, with a CSRF token and a form this time.
	otto := basic("otto", operatorPassword)
	form := url.Values{"csrf": {e.csrf(t, otto)}, "queue": {"mail"}, "state": {"cancelled"}}
	r := e.do(t, "POST", "/api/v1/jobs/bulk/retry", form, otto)
	if r.status != 200 || !strings.Contains(r.body, `"acted": 5`) {
		t.Fatalf("bulk retry: %d %s", r.status, r.body)
	}
	for _, j := range mail {
		if got := e.job(t, j.ID).State; got != weir.JobStateAvailable {
			t.Errorf("mail job %d is %s after the bulk retry", j.ID, got)
		}
	}
	if a := e.bulk(t, "/api/v1/jobs/bulk/delete?queue=other&kind=text"); a.Acted != 2 || a.More {
		t.Errorf("bulk delete: %+v", a)
	}
	for _, j := range other {
		if _, err := e.client.JobGet(t.Context(), j.ID); !errors.Is(err, weir.ErrNotFound) {
			t.Errorf("job %d after the bulk delete: %v", j.ID, err)
		}
	}

	// Bad requests.
	for path, param := range map[string]string{
		"/api/v1/jobs/bulk/cancel":                       "state", // no filter
		"/api/v1/jobs/bulk/cancel?order=asc&limit=5":     "state", // still no filter
		"/api/v1/jobs/bulk/explode?queue=mail":           "action",
		"/api/v1/jobs/bulk/delete?queue=mail&limit=1001": "limit",
		"/api/v1/jobs/bulk/delete?queue=mail&bogus=1":    "bogus",
		"/api/v1/jobs/bulk/delete?state=nope":            "state",
	} {
		r := e.do(t, "POST", path, nil, bearer(operatorToken))
		code, p, msg := apiErr(t, r)
		if r.status != http.StatusBadRequest || code != "bad_parameter" || p != param || msg == "" {
			t.Errorf("POST %s: %d %s %q %q, want 400 naming %s", path, r.status, code, p, msg, param)
		}
	}
	for _, j := range mail {
		if got := e.job(t, j.ID).State; got != weir.JobStateAvailable {
			t.Errorf("mail job %d is %s after refused bulk requests", j.ID, got)
		}
	}
}

// TestBulkPages walks the bulk form: the list offers it, a GET confirms and
// changes nothing, the POST acts.
func TestBulkPages(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	var mail []*weir.JobRow
	for range 3 {
		mail = append(mail, e.insert(t, textArgs{Text: "m"}, &weir.InsertOpts{Queue: "mail"}))
	}
	keep := e.insert(t, textArgs{Text: "k"}, &weir.InsertOpts{Queue: "other"})
	otto := basic("otto", operatorPassword)
	if r := e.do(t, "GET", "/jobs", nil, otto); strings.Contains(r.body, `action="/jobs/bulk"`) {
		t.Error("the unfiltered list offers a bulk action")
	}
	r := e.do(t, "GET", "/jobs?queue=mail&state=available", nil, otto)
	if !strings.Contains(r.body, `action="/jobs/bulk"`) || !strings.Contains(r.body, `name="queue" value="mail"`) {
		t.Fatalf("the filtered list has no bulk form: %s", r.body)
	}
	r = e.do(t, "GET", "/jobs/bulk?action=cancel&queue=mail&state=available", nil, otto)
	if r.status != 200 || !strings.Contains(r.body, "3 jobs match now") || !strings.Contains(r.body, `action="/jobs/bulk/cancel"`) {
		t.Fatalf("confirmation: %d %s", r.status, r.body)
	}
	for _, j := range mail {
		if got := e.job(t, j.ID).State; got != weir.JobStateAvailable {
			t.Fatalf("the confirmation page changed job %d to %s", j.ID, got)
		}
	}
	if r := e.do(t, "GET", "/jobs/bulk?action=cancel", nil, otto); r.status != http.StatusBadRequest {
		t.Errorf("confirmation without a filter: %d", r.status)
	}
	// Two batches of two: the first page's Again form carries the cursor.
	form := url.Values{"csrf": {e.csrf(t, otto)}, "queue": {"mail"}, "state": {"available"}, "limit": {"2"}}
	r = e.do(t, "POST", "/jobs/bulk/cancel", form, otto)
	if r.status != 200 || !strings.Contains(r.body, "2 jobs cancelled. More jobs match") {
		t.Fatalf("bulk cancel page: %d %s", r.status, r.body)
	}
	cursor := strconv.FormatInt(mail[1].ID, 10) // newest first: 2 and 1 seen
	if !strings.Contains(r.body, `name="after" value="`+cursor+`"`) {
		t.Fatalf("the Again form does not go on after %s: %s", cursor, r.body)
	}
	form.Set("after", cursor)
	r = e.do(t, "POST", "/jobs/bulk/cancel", form, otto)
	if r.status != 200 || !strings.Contains(r.body, "1 jobs cancelled.") || strings.Contains(r.body, "More jobs match") {
		t.Fatalf("second batch: %d %s", r.status, r.body)
	}
	for _, j := range mail {
		if got := e.job(t, j.ID).State; got != weir.JobStateCancelled {
			t.Errorf("job %d is %s after the bulk cancel", j.ID, got)
		}
	}
	if got := e.job(t, keep.ID).State; got != weir.JobStateAvailable {
		t.Errorf("job of another queue is %s", got)
	}
}
