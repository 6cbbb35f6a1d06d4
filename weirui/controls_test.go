package weirui_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtest"
)

// bidiControls are the characters that reorder the text after them: the
// marks, embeddings, overrides and isolates of bidirectional text.
var bidiControls = []rune{0x061c, 0x200e, 0x200f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069}

// TestDisplayControlsShownEscaped: bidirectional controls (and ESC and DEL)
// in args, errors and a client's host reach no page raw, where
// "invoice\u202egnp.exe" would read as "invoiceexe.png": each page shows
// their escape (\u202e) instead. The API keeps them as JSON escapes, which
// decode to the text as stored.
func TestDisplayControlsShownEscaped(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	var all strings.Builder
	for _, r := range bidiControls {
		all.WriteString("x" + string(r))
	}
	spoof := "invoice\u202egnp.exe " + all.String() + " esc\x1b[31m del\x7f"
	w := weirtest.NewWorker(t, e.driver, &weir.Config{}, weir.WorkFunc(func(ctx context.Context, j *weir.Job[textArgs]) error {
		return errors.New(j.Args.Text)
	}))
	res, err := w.Work(t.Context(), nil, textArgs{Text: spoof}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.driver.Executor().ClientRegister(t.Context(), &weirdriver.ClientRegisterParams{
		ID: "web-1", Host: "host\u202eevil", PID: 1, Queues: []weir.ClientQueue{{Name: "mail", MaxWorkers: 1}},
	}); err != nil {
		t.Fatal(err)
	}
	id := strconv.FormatInt(res.Job.ID, 10)
	raw := func(body string) []string {
		var found []string
		for _, r := range append(bidiControls, 0x1b, 0x7f) {
			if strings.ContainsRune(body, r) {
				found = append(found, strconv.QuoteRuneToASCII(r))
			}
		}
		return found
	}
	otto := basic("otto", operatorPassword)
	for path, want := range map[string]string{
		"/jobs":       `invoice\u202egnp.exe`,
		"/jobs/" + id: `invoice\u202egnp.exe`,
		"/clients":    `host\u202eevil`,
	} {
		r := e.do(t, "GET", path, nil, otto)
		if r.status != 200 {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		if found := raw(r.body); len(found) > 0 {
			t.Errorf("GET %s: the page holds %v raw", path, found)
		}
		if !strings.Contains(r.body, want) {
			t.Errorf("GET %s: the page does not show %s", path, want)
		}
	}
	page := e.do(t, "GET", "/jobs/"+id, nil, otto).body
	for _, r := range bidiControls {
		if !strings.Contains(page, fmt.Sprintf(`x\u%04x`, r)) {
			t.Errorf("the job page does not show U+%04X as its escape", r)
		}
	}
	if !strings.Contains(page, `esc\u001b[31m del\u007f`) {
		t.Error("the job page does not show ESC and DEL as their escapes")
	}

	for _, path := range []string{"/api/v1/jobs", "/api/v1/jobs/" + id, "/api/v1/clients"} {
		r := e.do(t, "GET", path, nil, otto)
		if found := raw(r.body); len(found) > 0 {
			t.Errorf("GET %s: the answer holds %v raw", path, found)
		}
	}
	var job struct {
		Args   textArgs
		Errors []struct{ Error string }
	}
	if err := json.Unmarshal([]byte(e.do(t, "GET", "/api/v1/jobs/"+id, nil, otto).body), &job); err != nil {
		t.Fatal(err)
	}
	if job.Args.Text != spoof || len(job.Errors) != 1 || job.Errors[0].Error != spoof {
		t.Errorf("the API's job decodes to args %q, errors %q; want the text as stored", job.Args.Text, job.Errors)
	}
}
