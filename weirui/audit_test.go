package weirui_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirui"
)

// logBuffer collects a handler's JSON log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines returns the lines whose message is msg, decoded.
func (b *logBuffer) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(b.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// logged sets up a dashboard with the test's users that logs into a buffer.
func logged(t *testing.T) (*env, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	e := setup(t, &weirui.Options{Auth: testAuth(), Logger: slog.New(slog.NewJSONHandler(logs, nil))}, nil)
	return e, logs
}

// secretsIn names the credentials that a log holds.
func secretsIn(log string, more ...string) []string {
	var found []string
	for _, s := range append([]string{viewerToken, operatorToken, viewerPassword, operatorPassword}, more...) {
		if strings.Contains(log, s) {
			found = append(found, s)
		}
	}
	return found
}

// TestAuditLog: every request that would change something gets one line
// saying who (user, role, client address), what (the action, and the job,
// queue or schedule, the value set, what a bulk action acted on) and the
// result, refused ones too; reads get none; no line holds a token, password
// or CSRF token.
func TestAuditLog(t *testing.T) {
	t.Parallel()
	e, logs := logged(t)
	job := e.insert(t, textArgs{Text: "a"}, &weir.InsertOpts{Queue: "mail"})
	other := e.insert(t, textArgs{Text: "b"}, &weir.InsertOpts{Queue: "mail"})
	id := strconv.FormatInt(job.ID, 10)
	op, otto := bearer(operatorToken), basic("otto", operatorPassword)
	csrf := e.csrf(t, otto)
	withCSRF := url.Values{"csrf": {csrf}}
	type want struct {
		status int
		attrs  map[string]any
	}
	tokenUser := func(c cred) string {
		var s struct{ User string }
		if err := json.Unmarshal([]byte(e.do(t, "GET", "/api/v1/session", nil, c).body), &s); err != nil {
			t.Fatal(err)
		}
		return s.User
	}
	opName := tokenUser(op)
	steps := []struct {
		method, path string
		form         url.Values
		c            cred
		want         want
	}{
		{"POST", "/api/v1/jobs/" + id + "/cancel", nil, op, want{200, map[string]any{"user": opName, "role": "operator", "action": "job.cancel", "job": float64(job.ID), "result": "ok"}}},
		{"POST", "/api/v1/jobs/" + id + "/cancel", nil, op, want{409, map[string]any{"action": "job.cancel", "job": float64(job.ID), "result": "conflict"}}},
		{"POST", "/queues/mail/pause", withCSRF, otto, want{303, map[string]any{"user": "otto", "action": "queue.pause", "queue": "mail", "result": "ok"}}},
		{"POST", "/api/v1/queues/mail/limit?global_limit=5", nil, op, want{200, map[string]any{"action": "queue.limit", "queue": "mail", "global_limit": 5.0, "result": "ok"}}},
		{"POST", "/api/v1/queues/mail/rate?rate_limit=50/1s", nil, op, want{200, map[string]any{"action": "queue.rate", "rate_limit": "50/1s", "result": "ok"}}},
		{"POST", "/api/v1/jobs/bulk/retry?queue=mail&state=cancelled", nil, op, want{200, map[string]any{"action": "jobs.bulk.retry",
			"filters": "queue=mail&state=cancelled", "jobs": []any{float64(job.ID)}, "acted": 1.0, "skipped": 0.0, "more": false, "result": "ok"}}},
		{"POST", "/api/v1/periodic/nightly/trigger", nil, op, want{404, map[string]any{"action": "periodic.trigger", "schedule": "nightly", "result": "not_found"}}},
		{"POST", "/api/v1/jobs/" + strconv.FormatInt(other.ID, 10) + "/delete", nil, bearer(viewerToken), want{403, map[string]any{"role": "viewer", "result": "forbidden"}}},
		{"POST", "/jobs/" + strconv.FormatInt(other.ID, 10) + "/delete", url.Values{}, otto, want{403, map[string]any{"user": "otto", "result": "csrf"}}},
		{"POST", "/jobs/" + strconv.FormatInt(other.ID, 10) + "/delete", withCSRF, otto, want{200, map[string]any{"action": "job.delete", "job": float64(other.ID), "result": "ok"}}},
	}
	for _, s := range steps {
		if r := e.do(t, s.method, s.path, s.form, s.c); r.status != s.want.status {
			t.Fatalf("%s %s: %d %s", s.method, s.path, r.status, r.body)
		}
	}
	e.do(t, "GET", "/jobs", nil, otto)
	e.do(t, "GET", "/api/v1/jobs/"+id, nil, op)

	var lines []map[string]any
	for line := range strings.Lines(logs.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(m["msg"].(string), "weirui: change") {
			lines = append(lines, m)
		}
	}
	if len(lines) != len(steps) {
		t.Fatalf("%d change lines for %d changes (reads log none):\n%s", len(lines), len(steps), logs)
	}
	for i, s := range steps {
		got := lines[i]
		if got["client"] != "127.0.0.1" || got["method"] != s.method || got["path"] != strings.Split(s.path, "?")[0] || got["status"] != float64(s.want.status) {
			t.Errorf("%s %s: line %v", s.method, s.path, got)
		}
		for k, v := range s.want.attrs {
			if fmt.Sprint(got[k]) != fmt.Sprint(v) {
				t.Errorf("%s %s: %s = %v, want %v (line %v)", s.method, s.path, k, got[k], v, got)
			}
		}
		if ok := s.want.attrs["result"] == "ok"; ok != (got["level"] == "INFO") || !ok && got["error"] == "" {
			t.Errorf("%s %s: level %v, error %q", s.method, s.path, got["level"], got["error"])
		}
	}
	if found := secretsIn(logs.String(), csrf); len(found) > 0 {
		t.Errorf("the log holds %q", found)
	}
}

// TestLoginThrottle: failed logins from one address (an IPv4 address, an
// IPv6 /64) are limited to 10 in a row, then one each 6 s: beyond that a
// request with credentials, good ones too, gets 429 with Retry-After and is
// not checked; other addresses are not held up. Each failed login is logged
// with the client and the reason, a configured user's name but never an
// unknown one, and never the password or token; the throttle's start once.
func TestLoginThrottle(t *testing.T) {
	t.Parallel()
	e, logs := logged(t)
	var mu sync.Mutex
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	weirui.SetNow(e.handler, func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	})
	advance := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(d)
	}
	from := func(addr string, c cred) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequestWithContext(t.Context(), "GET", "/api/v1/session", nil)
		req.RemoteAddr = addr
		c(req)
		rec := httptest.NewRecorder()
		e.handler.ServeHTTP(rec, req)
		return rec
	}
	expect := func(what, addr string, c cred, status int, retry string) {
		t.Helper()
		rec := from(addr, c)
		if rec.Code != status || rec.Header().Get("Retry-After") != retry {
			t.Fatalf("%s from %s: %d, Retry-After %q; want %d, %q: %s", what, addr, rec.Code, rec.Header().Get("Retry-After"), status, retry, rec.Body)
		}
	}
	const a, b = "192.0.2.1:4000", "192.0.2.2:4000"
	good, bad := bearer(operatorToken), bearer("guess-0123")
	for i := range 8 {
		expect(fmt.Sprintf("bad token %d", i), a, bad, 401, "")
	}
	expect("wrong password", a, basic("otto", "guess-pw"), 401, "")
	expect("unknown user", a, basic("nobody-known", "guess-pw"), 401, "")
	expect("a good token after 10 failures", a, good, http.StatusTooManyRequests, "6")
	expect("a good password after 10 failures", a, basic("otto", operatorPassword), http.StatusTooManyRequests, "6")
	expect("no credentials", a, noCred, 401, "")
	expect("another address", b, good, 200, "")
	advance(5 * time.Second)
	expect("5 s later", a, bad, http.StatusTooManyRequests, "1")
	advance(time.Second)
	expect("6 s later, good", a, good, 200, "")
	expect("6 s later, bad", a, bad, 401, "")
	expect("then", a, good, http.StatusTooManyRequests, "6")
	advance(time.Minute)
	for i := range 10 {
		expect(fmt.Sprintf("a minute later, bad token %d", i), a, bad, 401, "")
	}
	expect("then again", a, good, http.StatusTooManyRequests, "6")

	// IPv6 addresses count by /64.
	for range 10 {
		expect("IPv6", "[2001:db8::1]:1", bad, 401, "")
	}
	expect("the same /64", "[2001:db8::2]:1", good, http.StatusTooManyRequests, "6")
	expect("another /64", "[2001:db8:0:1::1]:1", good, 200, "")

	failed := logs.lines(t, "weirui: login failed")
	if len(failed) != 8+2+1+10+10 {
		t.Errorf("%d failed logins logged, want 31", len(failed))
	}
	var wrongPassword, unknownUser int
	for _, l := range failed {
		if l["client"] == nil || l["reason"] == nil || l["scheme"] == nil {
			t.Errorf("line %v", l)
		}
		switch l["reason"] {
		case "wrong password":
			wrongPassword++
			if l["user"] != "otto" || l["scheme"] != "basic" {
				t.Errorf("wrong password: %v", l)
			}
		case "unknown user":
			unknownUser++
			if l["user"] != nil {
				t.Errorf("an unknown user's name is logged: %v", l)
			}
		}
	}
	if wrongPassword != 1 || unknownUser != 1 {
		t.Errorf("%d wrong passwords and %d unknown users logged, want 1 each", wrongPassword, unknownUser)
	}
	if n := len(logs.lines(t, "weirui: failed logins throttled")); n != 4 {
		t.Errorf("%d throttle lines, want 4 (twice at 192.0.2.1 and after the refill, once at the /64)", n)
	}
	if found := secretsIn(logs.String(), "guess-0123", "guess-pw", "nobody-known"); len(found) > 0 {
		t.Errorf("the log holds %q", found)
	}
}
