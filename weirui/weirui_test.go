package weirui_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
	"github.com/weirq/weir/weirtest"
	"github.com/weirq/weir/weirui"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type textArgs struct {
	Text string `json:"text"`
}

func (textArgs) Kind() string { return "text" }

const (
	viewerToken   = "viewer-token-0123456789"
	operatorToken = "operator-token-0123456789"
	// The password hashes are made once: PBKDF2 is slow on purpose.
	viewerPassword   = "viewer-pw"
	operatorPassword = "operator-pw"
)

var (
	viewerHash   = mustHash(viewerPassword)
	operatorHash = mustHash(operatorPassword)
)

func mustHash(pw string) string {
	h, err := weirui.HashPassword(pw)
	if err != nil {
		panic(err)
	}
	return h
}

// testAuth has a viewer and an operator, each with a token and a user.
func testAuth() *weirui.Auth {
	return &weirui.Auth{
		Tokens: []weirui.Token{
			{Role: weirui.RoleViewer, SHA256: sha256.Sum256([]byte(viewerToken))},
			{Role: weirui.RoleOperator, SHA256: sha256.Sum256([]byte(operatorToken))},
		},
		Users: []weirui.User{
			{Role: weirui.RoleViewer, Name: "vera", PasswordHash: viewerHash},
			{Role: weirui.RoleOperator, Name: "otto", PasswordHash: operatorHash},
		},
	}
}

type env struct {
	client *weir.Client
	driver *weirpgx.Driver
	srv    *httptest.Server
	// handler is NewHandler's, unmounted.
	handler http.Handler
}

// setup makes a client on a fresh, migrated schema and serves its dashboard.
// mount, if set, wraps the handler.
func setup(t *testing.T, opts *weirui.Options, mount func(http.Handler) http.Handler) *env {
	t.Helper()
	schema := dbtest.Schema(t)
	pool := dbtest.Pool(t, nil)
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(driver).Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	client, err := weir.NewClient(driver, nil)
	if err != nil {
		t.Fatal(err)
	}
	if opts == nil {
		opts = &weirui.Options{Auth: testAuth()}
	}
	h, err := weirui.NewHandler(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	ui := h
	if mount != nil {
		h = mount(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{client: client, driver: driver, srv: srv, handler: ui}
}

func (e *env) insert(t *testing.T, args textArgs, opts *weir.InsertOpts) *weir.JobRow {
	t.Helper()
	res, err := e.client.Insert(t.Context(), args, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res.Job
}

func (e *env) job(t *testing.T, id int64) *weir.JobRow {
	t.Helper()
	j, err := e.client.JobGet(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// cred sets a request's credentials.
type cred func(*http.Request)

func bearer(tok string) cred {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
}

func basic(user, pw string) cred { return func(r *http.Request) { r.SetBasicAuth(user, pw) } }

func noCred(*http.Request) {}

type resp struct {
	status int
	header http.Header
	body   string
}

func (e *env) do(t *testing.T, method, path string, form url.Values, c cred, extra ...func(*http.Request)) resp {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, e.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	c(req)
	for _, f := range extra {
		f(req)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp{res.StatusCode, res.Header, string(b)}
}

// csrf reads the CSRF token of c's credentials from the API.
func (e *env) csrf(t *testing.T, c cred) string {
	t.Helper()
	r := e.do(t, "GET", "/api/v1/session", nil, c)
	if r.status != 200 {
		t.Fatalf("session: %d %s", r.status, r.body)
	}
	var s struct {
		CSRF string `json:"csrf_token"`
	}
	if err := json.Unmarshal([]byte(r.body), &s); err != nil || s.CSRF == "" {
		t.Fatalf("session: %v %s", err, r.body)
	}
	return s.CSRF
}

// apiErr decodes an API error.
func apiErr(t *testing.T, r resp) (code, param, msg string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Parameter, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.body), &e); err != nil {
		t.Fatalf("error body is not JSON: %v: %q", err, r.body)
	}
	return e.Error.Code, e.Error.Parameter, e.Error.Message
}

func TestNewHandlerRefusesOpenByDefault(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	for _, tc := range []struct {
		name  string
		opts  *weirui.Options
		field string
		want  string
	}{
		{"nil options", nil, "Options.Auth", "no authentication configured"},
		{"empty auth", &weirui.Options{Auth: &weirui.Auth{}}, "Options.Auth", "no authentication configured"},
		{"proxy without trusted", &weirui.Options{Auth: &weirui.Auth{ProxyHeader: "X-Forwarded-User"}}, "Auth.TrustedProxies", "TrustedProxies is empty"},
		{"bad header", &weirui.Options{Auth: &weirui.Auth{ProxyHeader: "X User",
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}}}, "Auth.ProxyHeader", "not a header name"},
		{"bad base path", &weirui.Options{AllowAnonymous: true, BasePath: "weir/"}, "Options.BasePath", `Options.BasePath "weir/" is not a path such as /weir`},
		{"root base path", &weirui.Options{AllowAnonymous: true, BasePath: "/"}, "Options.BasePath", `"/" is not a path`},
		{"host as base path", &weirui.Options{AllowAnonymous: true, BasePath: "//evil.example"}, "Options.BasePath", `"//evil.example" is not a path`},
		{"dot-dot base path", &weirui.Options{AllowAnonymous: true, BasePath: "/weir/.."}, "Options.BasePath", `"/weir/.." is not a path`},
		{"dot base path", &weirui.Options{AllowAnonymous: true, BasePath: "/./weir"}, "Options.BasePath", `"/./weir" is not a path`},
		{"short key", &weirui.Options{AllowAnonymous: true, CSRFKey: []byte("short")}, "Options.CSRFKey", "CSRFKey"},
		{"bad hash", &weirui.Options{Auth: &weirui.Auth{Users: []weirui.User{{Role: weirui.RoleViewer, Name: "a", PasswordHash: "plain"}}}}, "Auth.Users[0]", "pbkdf2-sha256"},
		{"anonymous and auth", &weirui.Options{Auth: testAuth(), AllowAnonymous: true}, "Options.AllowAnonymous", "set one of them"},
		{"no role", &weirui.Options{Auth: &weirui.Auth{Tokens: []weirui.Token{{}}}}, "Auth.Tokens[0]", "role none"},
		{"bad failed logins", &weirui.Options{AllowAnonymous: true, FailedLogins: weir.RateLimit{Limit: 5}}, "Options.FailedLogins", "5/0s"},
		{"negative failed logins", &weirui.Options{AllowAnonymous: true, FailedLogins: weir.RateLimit{Limit: -1, Period: time.Minute}}, "Options.FailedLogins", "positive"},
		{"errors without hidden payloads", &weirui.Options{AllowAnonymous: true, ShowErrorsToViewers: true}, "Options.ShowErrorsToViewers", "needs Options.HidePayloadsFromViewers"},
	} {
		_, err := weirui.NewHandler(e.client, tc.opts)
		inv, ok := errors.AsType[*weirui.InvalidError](err)
		if !ok || inv.Field != tc.field || !strings.Contains(inv.Message, tc.want) || err.Error() != "weirui: "+inv.Message {
			t.Errorf("%s: err %v, want an *InvalidError about %s containing %q", tc.name, err, tc.field, tc.want)
		}
	}
	if _, err := weirui.NewHandler(nil, &weirui.Options{AllowAnonymous: true}); !errors.As(err, new(*weirui.InvalidError)) {
		t.Errorf("nil client: %v, want an *InvalidError", err)
	}
	if _, err := weirui.NewHandler(e.client, &weirui.Options{AllowAnonymous: true}); err != nil {
		t.Errorf("AllowAnonymous: %v", err)
	}
}

func TestSecurityHeadersOnEveryResponse(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	for _, r := range []resp{
		e.do(t, "GET", "/", nil, noCred),
		e.do(t, "GET", "/jobs", nil, bearer(viewerToken)),
		e.do(t, "GET", "/api/v1/jobs", nil, bearer(viewerToken)),
		e.do(t, "GET", "/static/style.css", nil, bearer(viewerToken)),
	} {
		// The whole policy, directive by directive: one dropped, added or
		// loosened fails the test.
		want := map[string]string{
			"default-src": "'self'", "script-src": "'self'", "style-src": "'self'", "img-src": "'self'",
			"object-src": "'none'", "base-uri": "'none'", "form-action": "'self'", "frame-ancestors": "'none'",
		}
		if got := r.header.Values("Content-Security-Policy"); len(got) != 1 || !maps.Equal(cspDirectives(got[0]), want) {
			t.Errorf("Content-Security-Policy %q, want the directives %v", got, want)
		}
		for name, want := range map[string]string{
			"X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin", "X-Frame-Options": "DENY",
			"Cross-Origin-Opener-Policy": "same-origin", "Cache-Control": "no-store",
		} {
			if got := r.header.Values(name); len(got) != 1 || got[0] != want {
				t.Errorf("%s: %q, want %q", name, got, want)
			}
		}
	}
}

// cspDirectives reads a Content-Security-Policy into its directives and
// their values; a directive named twice is kept as "twice".
func cspDirectives(policy string) map[string]string {
	out := map[string]string{}
	for d := range strings.SplitSeq(policy, ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
		if name == "" {
			continue
		}
		if _, dup := out[name]; dup {
			value = "twice"
		}
		out[name] = strings.Join(strings.Fields(value), " ")
	}
	return out
}

func TestUnauthenticatedRefused(t *testing.T) {
	t.Parallel()
	// Its many failed logins come from one address: the limit is raised
	// (TestLoginThrottle tests it).
	e := setup(t, &weirui.Options{Auth: testAuth(), FailedLogins: weir.RateLimit{Limit: 1000, Period: time.Minute}}, nil)
	job := e.insert(t, textArgs{Text: "a"}, nil)
	for _, path := range []string{"/", "/jobs", "/jobs/" + strconv.FormatInt(job.ID, 10), "/queues", "/periodic", "/clients",
		"/api/v1/jobs", "/api/v1/queues", "/api/v1/session", "/api/v1/clients", "/static/style.css"} {
		for name, c := range map[string]cred{
			"none": noCred, "bad token": bearer("nope"), "bad password": basic("otto", "wrong"),
			"unknown user": basic("nobody", operatorPassword), "other scheme": func(r *http.Request) { r.Header.Set("Authorization", "Digest x") },
		} {
			r := e.do(t, "GET", path, nil, c)
			if r.status != http.StatusUnauthorized {
				t.Errorf("GET %s (%s): %d, want 401", path, name, r.status)
			}
			if r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("GET %s (%s): no WWW-Authenticate", path, name)
			}
			if strings.Contains(r.body, operatorPassword) || strings.Contains(r.body, "nope") {
				t.Errorf("GET %s (%s): body echoes a credential: %q", path, name, r.body)
			}
		}
	}
	r := e.do(t, "POST", "/api/v1/jobs/"+strconv.FormatInt(job.ID, 10)+"/cancel", nil, noCred)
	if r.status != http.StatusUnauthorized {
		t.Errorf("POST without credentials: %d", r.status)
	}
	if got := e.job(t, job.ID).State; got != weir.JobStateAvailable {
		t.Errorf("job is %s after refused requests", got)
	}
	for name, c := range map[string]cred{"viewer token": bearer(viewerToken), "viewer user": basic("vera", viewerPassword),
		"operator token": bearer(operatorToken), "operator user": basic("otto", operatorPassword)} {
		if r := e.do(t, "GET", "/api/v1/jobs", nil, c); r.status != 200 {
			t.Errorf("%s: %d %s", name, r.status, r.body)
		}
	}
}

func TestViewerCannotMutate(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	job := e.insert(t, textArgs{Text: "a"}, &weir.InsertOpts{Queue: "mail"})
	id := strconv.FormatInt(job.ID, 10)
	for name, c := range map[string]cred{"token": bearer(viewerToken), "user": basic("vera", viewerPassword)} {
		form := url.Values{"csrf": {e.csrf(t, c)}}
		for _, path := range []string{"/api/v1/jobs/" + id + "/cancel", "/api/v1/jobs/" + id + "/delete", "/jobs/" + id + "/cancel",
			"/jobs/" + id + "/delete", "/api/v1/queues/mail/pause", "/queues/mail/pause", "/api/v1/queues/mail/limit", "/api/v1/queues/mail/rate", "/periodic/p/trigger",
			"/api/v1/jobs/bulk/cancel?queue=mail", "/jobs/bulk/delete?queue=mail"} {
			r := e.do(t, "POST", path, form, c)
			if r.status != http.StatusForbidden {
				t.Errorf("viewer %s POST %s: %d, want 403", name, path, r.status)
			}
		}
		// The pages offer a viewer no action.
		if r := e.do(t, "GET", "/jobs/"+id, nil, c); strings.Contains(r.body, "<form method=\"post\"") {
			t.Errorf("viewer %s sees action forms", name)
		}
		if r := e.do(t, "GET", "/jobs?queue=mail", nil, c); strings.Contains(r.body, "/jobs/bulk") {
			t.Errorf("viewer %s is offered a bulk action", name)
		}
		if r := e.do(t, "GET", "/jobs/bulk?action=cancel&queue=mail", nil, c); r.status != http.StatusForbidden {
			t.Errorf("viewer %s: bulk confirmation page: %d, want 403", name, r.status)
		}
	}
	if got := e.job(t, job.ID).State; got != weir.JobStateAvailable {
		t.Errorf("job is %s after a viewer's requests", got)
	}
	queues, err := e.client.QueueList(t.Context())
	if err != nil || len(queues) != 1 || queues[0].Paused {
		t.Errorf("queues after a viewer's requests: %v %v", queues, err)
	}
}

func TestOperatorMutates(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	a := e.insert(t, textArgs{Text: "a"}, &weir.InsertOpts{Queue: "mail"})
	b := e.insert(t, textArgs{Text: "b"}, nil)
	c := e.insert(t, textArgs{Text: "c"}, nil)

	// A bearer token needs no CSRF token: a browser never sends one by itself.
	r := e.do(t, "POST", "/api/v1/jobs/"+strconv.FormatInt(a.ID, 10)+"/cancel", nil, bearer(operatorToken))
	if r.status != 200 || e.job(t, a.ID).State != weir.JobStateCancelled {
		t.Fatalf("API cancel: %d %s", r.status, r.body)
	}
	r = e.do(t, "POST", "/api/v1/jobs/"+strconv.FormatInt(a.ID, 10)+"/cancel", nil, bearer(operatorToken))
	if code, _, _ := apiErr(t, r); r.status != http.StatusConflict || code != "conflict" {
		t.Errorf("cancel of a cancelled job: %d %s", r.status, r.body)
	}
	r = e.do(t, "POST", "/api/v1/jobs/"+strconv.FormatInt(a.ID, 10)+"/retry", nil, bearer(operatorToken))
	if r.status != 200 || e.job(t, a.ID).State != weir.JobStateAvailable {
		t.Fatalf("API retry: %d %s", r.status, r.body)
	}

	// A form, with the user's CSRF token.
	otto := basic("otto", operatorPassword)
	form := url.Values{"csrf": {e.csrf(t, otto)}}
	r = e.do(t, "POST", "/jobs/"+strconv.FormatInt(b.ID, 10)+"/cancel", form, otto)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/jobs/"+strconv.FormatInt(b.ID, 10)+"?done=cancel" {
		t.Fatalf("form cancel: %d %v", r.status, r.header)
	}
	if got := e.job(t, b.ID).State; got != weir.JobStateCancelled {
		t.Errorf("job %d is %s after cancel", b.ID, got)
	}
	r = e.do(t, "POST", "/jobs/"+strconv.FormatInt(c.ID, 10)+"/delete", form, otto)
	if r.status != 200 || !strings.Contains(r.body, "deleted") {
		t.Fatalf("form delete: %d %s", r.status, r.body)
	}
	if _, err := e.client.JobGet(t.Context(), c.ID); !errors.Is(err, weir.ErrNotFound) {
		t.Errorf("deleted job: %v", err)
	}
	if r := e.do(t, "GET", "/jobs/"+strconv.FormatInt(c.ID, 10), nil, otto); r.status != 404 {
		t.Errorf("page of a deleted job: %d", r.status)
	}

	// Queues.
	if r := e.do(t, "POST", "/queues/mail/pause", form, otto); r.status != http.StatusSeeOther {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	r = e.do(t, "GET", "/api/v1/queues", nil, otto)
	var qs struct {
		Queues []struct {
			Name   string
			Paused bool
			Counts map[string]int64
		}
	}
	if err := json.Unmarshal([]byte(r.body), &qs); err != nil {
		t.Fatal(err)
	}
	paused := false
	for _, q := range qs.Queues {
		if q.Name == "mail" {
			paused = q.Paused
			if q.Counts["available"] != 1 {
				t.Errorf("mail counts %v", q.Counts)
			}
		}
	}
	if !paused {
		t.Errorf("queue mail not paused: %s", r.body)
	}
	if r := e.do(t, "POST", "/api/v1/queues/mail/resume", nil, bearer(operatorToken)); r.status != 200 {
		t.Errorf("resume: %d %s", r.status, r.body)
	}
	if r := e.do(t, "POST", "/api/v1/queues/bad%20name/pause", nil, bearer(operatorToken)); r.status != 400 {
		t.Errorf("pause of a bad name: %d %s", r.status, r.body)
	}
	// A queue's global limit: set by the page's form and by the API, shown by
	// both, removed by none; bad values refused, naming the parameter, and
	// changing nothing.
	limitOf := func() string {
		t.Helper()
		r := e.do(t, "GET", "/api/v1/queues", nil, otto)
		var qs struct {
			Queues []struct {
				Name        string
				GlobalLimit *int `json:"global_limit"`
			}
		}
		if err := json.Unmarshal([]byte(r.body), &qs); err != nil {
			t.Fatal(err)
		}
		for _, q := range qs.Queues {
			if q.Name == "mail" {
				if q.GlobalLimit == nil {
					return "none"
				}
				return strconv.Itoa(*q.GlobalLimit)
			}
		}
		return "missing"
	}
	limitForm := url.Values{"csrf": form["csrf"], "global_limit": {"7"}}
	if r := e.do(t, "POST", "/queues/mail/limit", limitForm, otto); r.status != http.StatusSeeOther {
		t.Fatalf("limit by the form: %d %s", r.status, r.body)
	}
	if got := limitOf(); got != "7" {
		t.Errorf("limit after the form: %s, want 7", got)
	}
	if r := e.do(t, "GET", "/queues", nil, otto); !strings.Contains(r.body, `name="global_limit" min="1" max="1000000" required placeholder="none" value="7"`) || !strings.Contains(r.body, `action="/queues/mail/limit"`) {
		t.Errorf("queues page does not show the limit and its form:\n%s", r.body)
	}
	for _, bad := range []string{"0", "-1", "1000001", "ten", ""} {
		r := e.do(t, "POST", "/api/v1/queues/mail/limit?global_limit="+url.QueryEscape(bad), nil, bearer(operatorToken))
		if r.status != 400 || !strings.Contains(r.body, `"parameter": "global_limit"`) {
			t.Errorf("limit %q: %d %s", bad, r.status, r.body)
		}
	}
	if got := limitOf(); got != "7" {
		t.Errorf("limit after refused changes: %s, want 7", got)
	}
	if r := e.do(t, "POST", "/api/v1/queues/mail/limit?global_limit=3", nil, bearer(operatorToken)); r.status != 200 || !strings.Contains(r.body, `"global_limit": 3`) {
		t.Errorf("limit by the API: %d %s", r.status, r.body)
	}
	if r := e.do(t, "POST", "/api/v1/queues/mail/limit?global_limit=none", nil, bearer(operatorToken)); r.status != 200 || !strings.Contains(r.body, `"global_limit": null`) {
		t.Errorf("limit removed by the API: %d %s", r.status, r.body)
	}
	if got := limitOf(); got != "none" {
		t.Errorf("limit after none: %s", got)
	}
	// A rate limit, by the API.
	if r := e.do(t, "POST", "/api/v1/queues/mail/rate?rate_limit=50/1s", nil, bearer(operatorToken)); r.status != 200 ||
		!strings.Contains(r.body, `"limit": 50`) || !strings.Contains(r.body, `"period": "1s"`) {
		t.Errorf("rate by the API: %d %s", r.status, r.body)
	}
	for _, bad := range []string{"50", "0/1s", "50/0s", "50/25h", "x/1s", ""} {
		r := e.do(t, "POST", "/api/v1/queues/mail/rate?rate_limit="+url.QueryEscape(bad), nil, bearer(operatorToken))
		if r.status != 400 || !strings.Contains(r.body, `"parameter": "rate_limit"`) {
			t.Errorf("rate %q: %d %s", bad, r.status, r.body)
		}
	}
	if r := e.do(t, "GET", "/api/v1/queues", nil, otto); !strings.Contains(r.body, `"rate_limit": {`) {
		t.Errorf("queues after a refused rate change: %s", r.body)
	}
	if r := e.do(t, "POST", "/api/v1/queues/mail/rate?rate_limit=none", nil, bearer(operatorToken)); r.status != 200 || !strings.Contains(r.body, `"rate_limit": null`) {
		t.Errorf("rate removed by the API: %d %s", r.status, r.body)
	}
	// A key limit, set in code, shown by the API and the page.
	if err := e.client.QueueSetKeyLimit(t.Context(), "mail", weir.KeyLimit{Key: "args.customer_id", Limit: 2}); err != nil {
		t.Fatal(err)
	}
	if r := e.do(t, "GET", "/api/v1/queues", nil, otto); !strings.Contains(r.body, `"key_limit": {`) || !strings.Contains(r.body, `"key": "args.customer_id"`) {
		t.Errorf("queues with a key limit: %s", r.body)
	}
	if r := e.do(t, "GET", "/queues", nil, otto); !strings.Contains(r.body, "<code>args.customer_id:<wbr>2</code>") {
		t.Errorf("queues page with a key limit: %s", r.body)
	}
	// Schedules: none is registered.
	if r := e.do(t, "POST", "/api/v1/periodic/nightly/trigger", nil, bearer(operatorToken)); r.status != 404 {
		t.Errorf("trigger of an unknown schedule: %d %s", r.status, r.body)
	}
	if r := e.do(t, "GET", "/api/v1/periodic", nil, otto); r.status != 200 || !strings.Contains(r.body, `"periodic": []`) {
		t.Errorf("periodic: %d %s", r.status, r.body)
	}
	if r := e.do(t, "GET", "/api/v1/leader", nil, otto); r.status != 200 || !strings.Contains(r.body, `"id": ""`) ||
		!strings.Contains(r.body, `"elected_at": null`) {
		t.Errorf("leader: %d %s", r.status, r.body)
	}
	for _, p := range []string{"/", "/queues", "/periodic"} {
		if r := e.do(t, "GET", p, nil, otto); r.status != 200 {
			t.Errorf("GET %s: %d %s", p, r.status, r.body)
		}
	}
}

func TestCSRF(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	job := e.insert(t, textArgs{Text: "a"}, nil)
	id := strconv.FormatInt(job.ID, 10)
	otto := basic("otto", operatorPassword)
	token := e.csrf(t, otto)
	viewerCSRF := e.csrf(t, basic("vera", viewerPassword))
	if token == viewerCSRF {
		t.Fatal("two users have the same CSRF token")
	}
	crossSite := func(r *http.Request) {
		r.Header.Set("Origin", "https://evil.example")
		r.Header.Set("Sec-Fetch-Site", "cross-site")
	}
	originOnly := func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") }
	for _, tc := range []struct {
		name  string
		form  url.Values
		c     cred
		extra []func(*http.Request)
		code  string
	}{
		{"missing token", url.Values{}, otto, nil, "csrf"},
		{"wrong token", url.Values{"csrf": {"AAAA"}}, otto, nil, "csrf"},
		{"another user's token", url.Values{"csrf": {viewerCSRF}}, otto, nil, "csrf"},
		{"cross-site with a good token", url.Values{"csrf": {token}}, otto, []func(*http.Request){crossSite}, "cross_origin"},
		{"foreign origin with a good token", url.Values{"csrf": {token}}, otto, []func(*http.Request){originOnly}, "cross_origin"},
		{"cross-site bearer", nil, bearer(operatorToken), []func(*http.Request){crossSite}, "cross_origin"},
	} {
		for _, path := range []string{"/api/v1/jobs/" + id + "/cancel", "/jobs/" + id + "/cancel",
			"/api/v1/jobs/bulk/cancel?state=available", "/jobs/bulk/cancel?state=available"} {
			r := e.do(t, "POST", path, tc.form, tc.c, tc.extra...)
			if r.status != http.StatusForbidden {
				t.Errorf("%s: POST %s: %d, want 403", tc.name, path, r.status)
				continue
			}
			if strings.HasPrefix(path, "/api/") {
				if code, _, _ := apiErr(t, r); code != tc.code {
					t.Errorf("%s: code %q, want %q", tc.name, code, tc.code)
				}
			}
		}
	}
	if got := e.job(t, job.ID).State; got != weir.JobStateAvailable {
		t.Fatalf("job is %s after refused requests", got)
	}
	// The token in a header works as in the form; same-origin requests pass.
	sameOrigin := func(r *http.Request) {
		r.Header.Set("X-CSRF-Token", token)
		r.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	if r := e.do(t, "POST", "/api/v1/jobs/"+id+"/cancel", nil, otto, sameOrigin); r.status != 200 {
		t.Errorf("same-origin with the token: %d %s", r.status, r.body)
	}
	// A body over the limit is refused.
	big := url.Values{"csrf": {token}, "pad": {strings.Repeat("x", 64<<10)}}
	if r := e.do(t, "POST", "/jobs/"+id+"/retry", big, otto); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("large body: %d", r.status)
	}
}

func TestGETNeverMutates(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	job := e.insert(t, textArgs{Text: "a"}, &weir.InsertOpts{Queue: "mail"})
	id := strconv.FormatInt(job.ID, 10)
	otto := basic("otto", operatorPassword)
	token := e.csrf(t, otto)
	for _, path := range []string{"/jobs/" + id + "/cancel", "/jobs/" + id + "/delete", "/jobs/" + id + "/retry",
		"/api/v1/jobs/" + id + "/cancel", "/api/v1/jobs/" + id + "/delete", "/queues/mail/pause",
		"/api/v1/queues/mail/pause", "/periodic/p/pause", "/api/v1/periodic/p/trigger",
		"/jobs/bulk/cancel", "/api/v1/jobs/bulk/delete"} {
		for _, m := range []string{"GET", "HEAD"} {
			r := e.do(t, m, path+"?csrf="+url.QueryEscape(token), nil, otto)
			if r.status != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: %d, want 405", m, path, r.status)
			}
			if m == "GET" && strings.HasPrefix(path, "/api/") {
				if code, _, _ := apiErr(t, r); code != "method_not_allowed" {
					t.Errorf("%s %s: code %q", m, path, code)
				}
			}
		}
	}
	if got := e.job(t, job.ID); got.State != weir.JobStateAvailable {
		t.Errorf("job is %s after GETs", got.State)
	}
	queues, err := e.client.QueueList(t.Context())
	if err != nil || len(queues) != 1 || queues[0].Paused {
		t.Errorf("queues after GETs: %v %v", queues, err)
	}
}

func TestJobDataRendersInert(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	const evil = `<script>alert(1)</script>`
	job := e.insert(t, textArgs{Text: evil}, &weir.InsertOpts{Metadata: json.RawMessage(`{"note":"<img src=x onerror=alert(2)>"}`)})
	// An attempt fails with an attacker's error message.
	w := weirtest.NewWorker(t, e.driver, &weir.Config{}, weir.WorkFunc(func(ctx context.Context, j *weir.Job[textArgs]) error {
		return errors.New(j.Args.Text + `"><svg onload=alert(3)>`)
	}))
	res, err := w.Work(t.Context(), nil, textArgs{Text: evil}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Job.Errors) == 0 {
		t.Fatalf("the attempt recorded no error: %+v", res)
	}
	otto := basic("otto", operatorPassword)
	for _, path := range []string{"/jobs", "/jobs/" + strconv.FormatInt(job.ID, 10), "/jobs/" + strconv.FormatInt(res.Job.ID, 10)} {
		r := e.do(t, "GET", path, nil, otto)
		if r.status != 200 {
			t.Fatalf("GET %s: %d", path, r.status)
		}
		for _, bad := range []string{"<script>alert", "<img src=x", "<svg onload"} {
			if strings.Contains(r.body, bad) {
				t.Errorf("GET %s: the page holds %q unescaped", path, bad)
			}
		}
		if !strings.Contains(r.body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("GET %s: the escaped args are not shown", path)
		}
		if !strings.Contains(r.body, `<script src=`) && strings.Contains(r.body, "<script") {
			t.Errorf("GET %s: an inline script", path)
		}
	}
	r := e.do(t, "GET", "/jobs/"+strconv.FormatInt(res.Job.ID, 10), nil, otto)
	if !strings.Contains(r.body, "&lt;svg onload=alert(3)&gt;") {
		t.Errorf("the escaped error is not shown: %s", r.body)
	}
	// The API serves JSON, never HTML.
	r = e.do(t, "GET", "/api/v1/jobs/"+strconv.FormatInt(job.ID, 10), nil, otto)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("API content type %q", ct)
	}
}

func TestMountedUnderPrefix(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, func(h http.Handler) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("/ops/weir/", http.StripPrefix("/ops/weir", h))
		return mux
	})
	job := e.insert(t, textArgs{Text: "a"}, &weir.InsertOpts{Queue: "mail"})
	id := strconv.FormatInt(job.ID, 10)
	otto := basic("otto", operatorPassword)
	r := e.do(t, "GET", "/ops/weir/jobs", nil, otto)
	if r.status != 200 {
		t.Fatalf("GET /ops/weir/jobs: %d %s", r.status, r.body)
	}
	for _, want := range []string{`href="/ops/weir/jobs/` + id + `"`, `href="/ops/weir/static/style.css"`, `href="/ops/weir/queues"`, `action="/ops/weir/jobs"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("the list lacks %s", want)
		}
	}
	r = e.do(t, "GET", "/ops/weir/jobs/"+id, nil, otto)
	if !strings.Contains(r.body, `action="/ops/weir/jobs/`+id+`/retry"`) {
		t.Errorf("the job page's forms do not carry the prefix")
	}
	if r := e.do(t, "GET", "/ops/weir/static/style.css", nil, otto); r.status != 200 || !strings.Contains(r.header.Get("Content-Type"), "text/css") {
		t.Errorf("style: %d %v", r.status, r.header)
	}
	r = e.do(t, "GET", "/ops/weir/api/v1/session", nil, otto)
	var s struct {
		CSRF string `json:"csrf_token"`
	}
	if err := json.Unmarshal([]byte(r.body), &s); err != nil {
		t.Fatal(err)
	}
	form := url.Values{"csrf": {s.CSRF}}
	r = e.do(t, "POST", "/ops/weir/jobs/"+id+"/cancel", form, otto)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ops/weir/jobs/"+id+"?done=cancel" {
		t.Errorf("cancel under the prefix: %d %v", r.status, r.header.Get("Location"))
	}
	r = e.do(t, "GET", "/ops/weir/?refresh=10", nil, otto)
	if !strings.Contains(r.body, `<meta http-equiv="refresh" content="10">`) || !strings.Contains(r.body, `href="/ops/weir/jobs?queue=mail"`) {
		t.Errorf("overview under the prefix: %s", r.body)
	}
}

func TestAPIBadInputs(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	v := bearer(viewerToken)
	for _, tc := range []struct{ path, param, msg string }{
		{"/api/v1/jobs/abc", "id", `"abc"`},
		{"/api/v1/jobs/0", "id", `"0"`},
		{"/api/v1/jobs/-3", "id", `"-3"`},
		{"/api/v1/jobs/99999999999999999999", "id", "99999999999999999999"},
		{"/api/v1/jobs?state=bogus", "state", `"bogus"`},
		{"/api/v1/jobs?state=available,nope", "state", `"nope"`},
		{"/api/v1/jobs?limit=0", "limit", `"0"`},
		{"/api/v1/jobs?limit=abc", "limit", `"abc"`},
		{"/api/v1/jobs?limit=1001", "limit", "1001"},
		{"/api/v1/jobs?after=-1", "after", `"-1"`},
		{"/api/v1/jobs?id=x", "id", `"x"`},
		{"/api/v1/jobs?order=sideways", "order", "sideways"},
		{"/api/v1/jobs?queue=bad%20queue", "queue", "queue"},
		{"/api/v1/jobs?colour=red", "colour", "unknown parameter"},
		{"/api/v1/jobs?created_after=yesterday", "created_after", `"yesterday"`},
		{"/api/v1/jobs?created_before=2026-13-01T00:00:00Z", "created_before", "RFC 3339"},
		{"/api/v1/jobs?created_after=2026-12-04T10:00:00Z&created_before=2026-12-04T09:00:00Z", "created_after", "not before"},
		{"/api/v1/queues?exact=maybe", "exact", `"maybe"`},
		{"/api/v1/jobs?q=" + strings.Repeat("x", 101), "q", "longer than 100"},
		{"/api/v1/jobs?q=a%00b", "q", "control character"},
		{"/api/v1/jobs?q=%ff", "q", "UTF-8"},
		{"/api/v1/queues?colour=red", "colour", "unknown parameter"},
	} {
		r := e.do(t, "GET", tc.path, nil, v)
		if r.status != 400 {
			t.Errorf("GET %s: %d, want 400: %s", tc.path, r.status, r.body)
			continue
		}
		code, param, msg := apiErr(t, r)
		if code != "bad_parameter" || param != tc.param || !strings.Contains(msg, tc.msg) {
			t.Errorf("GET %s: code %q param %q message %q, want bad_parameter, %q, containing %q", tc.path, code, param, msg, tc.param, tc.msg)
		}
	}
	r := e.do(t, "POST", "/api/v1/jobs/1/explode", nil, bearer(operatorToken))
	if code, param, _ := apiErr(t, r); r.status != 400 || code != "bad_parameter" || param != "action" {
		t.Errorf("bad action: %d %s", r.status, r.body)
	}
	if r := e.do(t, "GET", "/api/v1/jobs/12345", nil, v); r.status != 404 {
		t.Errorf("missing job: %d", r.status)
	}
	if r := e.do(t, "GET", "/api/v1/nothing", nil, v); r.status != 404 {
		t.Errorf("unknown endpoint: %d", r.status)
	}
	// The pages say the same, as a page.
	r = e.do(t, "GET", "/jobs?state=bogus", nil, v)
	if r.status != 400 || !strings.Contains(r.body, "bad state") {
		t.Errorf("page with a bad state: %d", r.status)
	}
}

func TestAPIListAndPaging(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	var ids []int64
	for i := range 5 {
		q := "a"
		if i%2 == 1 {
			q = "b"
		}
		ids = append(ids, e.insert(t, textArgs{Text: strconv.Itoa(i)}, &weir.InsertOpts{Queue: q, Tags: []string{"t" + q}}).ID)
	}
	v := bearer(viewerToken)
	type page struct {
		Jobs []struct {
			ID    int64
			Queue string
			Args  json.RawMessage
		}
		NextCursor int64 `json:"next_cursor"`
	}
	get := func(path string) page {
		t.Helper()
		r := e.do(t, "GET", path, nil, v)
		if r.status != 200 {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		var p page
		if err := json.Unmarshal([]byte(r.body), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var seen []int64
	path := "/api/v1/jobs?limit=2&order=asc"
	for range 10 {
		p := get(path)
		for _, j := range p.Jobs {
			seen = append(seen, j.ID)
		}
		if p.NextCursor == 0 {
			break
		}
		path = "/api/v1/jobs?limit=2&order=asc&after=" + strconv.FormatInt(p.NextCursor, 10)
	}
	if len(seen) != 5 || seen[0] != ids[0] || seen[4] != ids[4] {
		t.Errorf("paged ids %v, want %v", seen, ids)
	}
	if p := get("/api/v1/jobs?limit=2"); len(p.Jobs) != 2 || p.Jobs[0].ID != ids[4] {
		t.Errorf("default order is not newest first: %+v", p)
	}
	if p := get("/api/v1/jobs?queue=b&state=available&kind=text"); len(p.Jobs) != 2 {
		t.Errorf("queue b: %+v", p)
	}
	if p := get("/api/v1/jobs?tag=ta"); len(p.Jobs) != 3 {
		t.Errorf("tag ta: %+v", p)
	}
	if p := get("/api/v1/jobs?id=" + strconv.FormatInt(ids[1], 10)); len(p.Jobs) != 1 || p.Jobs[0].ID != ids[1] {
		t.Errorf("by id: %+v", p)
	}
	if p := get("/api/v1/jobs?id=" + strconv.FormatInt(ids[1], 10) + "&queue=a"); len(p.Jobs) != 0 {
		t.Errorf("by id in another queue: %+v", p)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if p := get("/api/v1/jobs?created_before=" + future); len(p.Jobs) != 5 {
		t.Errorf("created before an hour from now: %d jobs", len(p.Jobs))
	}
	if p := get("/api/v1/jobs?created_after=" + future); len(p.Jobs) != 0 {
		t.Errorf("created after an hour from now: %d jobs", len(p.Jobs))
	}
	if p := get("/api/v1/jobs?state=completed"); len(p.Jobs) != 0 || p.NextCursor != 0 {
		t.Errorf("completed: %+v", p)
	}
	// The list page pages the same way.
	r := e.do(t, "GET", "/jobs?limit=2&queue=a", nil, v)
	if !strings.Contains(r.body, "Next page") || !strings.Contains(r.body, "after=") {
		t.Errorf("list page has no next link")
	}
	if !strings.Contains(r.body, `href="/jobs?limit=2&amp;queue=a&amp;refresh=10"`) {
		t.Errorf("list page has no refresh link")
	}
	r = e.do(t, "GET", "/jobs?limit=2&queue=a&refresh=10", nil, v)
	if !strings.Contains(r.body, `<meta http-equiv="refresh" content="10">`) || !strings.Contains(r.body, `href="/jobs?limit=2&amp;queue=a">Stop refreshing`) {
		t.Errorf("refreshing list page: %s", r.body)
	}
}

func TestJobDetail(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	w := weirtest.NewWorker(t, e.driver, &weir.Config{}, weir.WorkFunc(func(ctx context.Context, j *weir.Job[textArgs]) error {
		return errors.New("boom")
	}))
	res, err := w.Work(t.Context(), nil, textArgs{Text: "x"}, &weir.InsertOpts{Metadata: json.RawMessage(`{"m":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	r := e.do(t, "GET", "/api/v1/jobs/"+strconv.FormatInt(res.Job.ID, 10), nil, bearer(viewerToken))
	var j struct {
		ID       int64
		State    string
		Attempt  int
		Args     json.RawMessage
		Metadata json.RawMessage
		Errors   []struct {
			Attempt int
			Error   string
		}
		AttemptedBy string `json:"attempted_by"`
	}
	if err := json.Unmarshal([]byte(r.body), &j); err != nil {
		t.Fatal(err)
	}
	if j.ID != res.Job.ID || j.State != "retryable" || j.Attempt != 1 || compact(j.Args) != `{"text":"x"}` ||
		compact(j.Metadata) != `{"m":1}` || len(j.Errors) != 1 || j.Errors[0].Error != "boom" || j.AttemptedBy == "" {
		t.Errorf("job detail: %s", r.body)
	}
	page := e.do(t, "GET", "/jobs/"+strconv.FormatInt(res.Job.ID, 10), nil, basic("vera", viewerPassword))
	for _, want := range []string{"retryable", "boom", "Attempt 1", "&#34;text&#34;: &#34;x&#34;"} {
		if !strings.Contains(page.body, want) {
			t.Errorf("job page lacks %q", want)
		}
	}
}

// TestHidePayloadsFromViewers: under HidePayloadsFromViewers a viewer sees
// no args, metadata, errors or traces (an error quotes its job's data: an
// address an SMTP server refused), on the pages or in the API, and may not
// search (q matches the args: one guess at a time would recover them);
// an operator sees and searches everything. ShowErrorsToViewers gives the
// viewer the errors and traces back, and still no args or search.
func TestHidePayloadsFromViewers(t *testing.T) {
	t.Parallel()
	e := setup(t, &weirui.Options{Auth: testAuth(), HidePayloadsFromViewers: true}, nil)
	job := e.insert(t, textArgs{Text: "secret-arg"}, &weir.InsertOpts{Metadata: json.RawMessage(`{"k":"secret-meta"}`)})
	w := weirtest.NewWorker(t, e.driver, &weir.Config{}, weir.WorkFunc(func(ctx context.Context, j *weir.Job[textArgs]) error {
		if j.Args.Text == "panic" {
			panic("secret-panic")
		}
		return errors.New("550 secret-err: no mailbox ada@example.com")
	}))
	failed, err := w.Work(t.Context(), nil, textArgs{Text: "secret-failed"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	panicked, err := w.Work(t.Context(), nil, textArgs{Text: "panic"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(panicked.Job.Errors) != 1 || panicked.Job.Errors[0].Trace == "" {
		t.Fatalf("the panic recorded no trace: %+v", panicked.Job.Errors)
	}
	// A line of the trace that names no secret: the trace is hidden whole.
	traceLine := "weirui_test.TestHidePayloadsFromViewers"
	var paths []string
	for _, id := range []int64{job.ID, failed.Job.ID, panicked.Job.ID} {
		paths = append(paths, "/jobs/"+strconv.FormatInt(id, 10), "/api/v1/jobs/"+strconv.FormatInt(id, 10))
	}
	paths = append(paths, "/jobs", "/api/v1/jobs", "/jobs?state=retryable", "/api/v1/jobs?state=retryable")
	for _, path := range paths {
		r := e.do(t, "GET", path, nil, bearer(viewerToken))
		if r.status != 200 || strings.Contains(r.body, "secret-") || strings.Contains(r.body, "ada@example.com") || strings.Contains(r.body, traceLine) {
			t.Errorf("viewer GET %s: %d, payload shown: %s", path, r.status, r.body)
		}
	}
	for _, path := range paths[:6] {
		r := e.do(t, "GET", path, nil, bearer(operatorToken))
		if r.status != 200 || !strings.Contains(r.body, "secret-") {
			t.Errorf("operator GET %s: %d, payload hidden", path, r.status)
		}
	}
	if r := e.do(t, "GET", "/jobs/"+strconv.FormatInt(panicked.Job.ID, 10), nil, bearer(operatorToken)); !strings.Contains(r.body, traceLine) {
		t.Errorf("the operator's job page shows no trace: %s", r.body)
	}
	// The viewer's API job says what is hidden, and keeps the attempts' times.
	var vj struct {
		PayloadsHidden bool `json:"payloads_hidden"`
		ErrorsHidden   bool `json:"errors_hidden"`
		Errors         []map[string]any
	}
	if err := json.Unmarshal([]byte(e.do(t, "GET", "/api/v1/jobs/"+strconv.FormatInt(failed.Job.ID, 10), nil, bearer(viewerToken)).body), &vj); err != nil {
		t.Fatal(err)
	}
	if !vj.PayloadsHidden || !vj.ErrorsHidden || len(vj.Errors) != 1 || vj.Errors[0]["attempt"] != 1.0 || vj.Errors[0]["at"] == nil || vj.Errors[0]["error"] != nil {
		t.Errorf("the viewer's job: %+v", vj)
	}

	// Search: refused to the viewer, whatever it would match; the operator's works.
	for _, path := range []string{"/api/v1/jobs?q=s", "/api/v1/jobs?q=text", "/api/v1/jobs?q=secret-arg&id=" + strconv.FormatInt(job.ID, 10)} {
		r := e.do(t, "GET", path, nil, bearer(viewerToken))
		if code, param, msg := apiErr(t, r); r.status != http.StatusForbidden || code != "forbidden" || param != "q" || !strings.Contains(msg, "hidden") {
			t.Errorf("viewer GET %s: %d %s", path, r.status, r.body)
		}
	}
	if r := e.do(t, "GET", "/jobs?q=s", nil, basic("vera", viewerPassword)); r.status != http.StatusForbidden || strings.Contains(r.body, "secret-") {
		t.Errorf("viewer's page search: %d %s", r.status, r.body)
	}
	if r := e.do(t, "GET", "/jobs", nil, basic("vera", viewerPassword)); strings.Contains(r.body, `name="q"`) {
		t.Error("the viewer's job list offers the search")
	}
	if r := e.do(t, "GET", "/api/v1/jobs?q=secret-arg", nil, bearer(operatorToken)); r.status != 200 || !strings.Contains(r.body, "secret-arg") {
		t.Errorf("operator's search: %d %s", r.status, r.body)
	}
	if r := e.do(t, "GET", "/jobs", nil, basic("otto", operatorPassword)); !strings.Contains(r.body, `name="q"`) {
		t.Error("the operator's job list does not offer the search")
	}

	// ShowErrorsToViewers: errors and traces, still no args and no search.
	shown := setup(t, &weirui.Options{Auth: testAuth(), HidePayloadsFromViewers: true, ShowErrorsToViewers: true}, nil)
	w = weirtest.NewWorker(t, shown.driver, &weir.Config{}, weir.WorkFunc(func(ctx context.Context, j *weir.Job[textArgs]) error {
		panic("visible-panic")
	}))
	res, err := w.Work(t.Context(), nil, textArgs{Text: "secret-arg"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/jobs/" + strconv.FormatInt(res.Job.ID, 10), "/api/v1/jobs/" + strconv.FormatInt(res.Job.ID, 10)} {
		r := shown.do(t, "GET", path, nil, bearer(viewerToken))
		if r.status != 200 || strings.Contains(r.body, "secret-") || !strings.Contains(r.body, "visible-panic") || !strings.Contains(r.body, traceLine) {
			t.Errorf("viewer GET %s with ShowErrorsToViewers: %d %s", path, r.status, r.body)
		}
	}
	if r := shown.do(t, "GET", "/api/v1/jobs?q=s", nil, bearer(viewerToken)); r.status != http.StatusForbidden {
		t.Errorf("viewer's search with ShowErrorsToViewers: %d", r.status)
	}
}

func TestTrustedProxyHeader(t *testing.T) {
	t.Parallel()
	trusted := &weirui.Auth{
		ProxyHeader: "X-Forwarded-User", TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		ProxyUsers: map[string]weirui.Role{"olga": weirui.RoleOperator}, ProxyDefaultRole: weirui.RoleViewer,
	}
	e := setup(t, &weirui.Options{Auth: trusted}, nil)
	job := e.insert(t, textArgs{Text: "a"}, nil)
	as := func(user string) cred {
		return func(r *http.Request) { r.Header.Set("X-Forwarded-User", user) }
	}
	if r := e.do(t, "GET", "/api/v1/session", nil, as("olga")); r.status != 200 || !strings.Contains(r.body, `"role": "operator"`) {
		t.Errorf("olga: %d %s", r.status, r.body)
	}
	if r := e.do(t, "GET", "/api/v1/session", nil, as("val")); r.status != 200 || !strings.Contains(r.body, `"role": "viewer"`) {
		t.Errorf("val: %d %s", r.status, r.body)
	}
	if r := e.do(t, "GET", "/api/v1/jobs", nil, noCred); r.status != 401 {
		t.Errorf("no header: %d", r.status)
	}
	if r := e.do(t, "POST", "/api/v1/jobs/"+strconv.FormatInt(job.ID, 10)+"/cancel", nil, as("olga")); r.status != 403 {
		t.Errorf("proxy user without CSRF token: %d", r.status)
	}
	// A proxy that appends its header to the client's, rather than replacing
	// it, would let the client name itself: a request with the header more
	// than once is refused, whichever value comes first, even with a token.
	twice := func(first, second string) cred {
		return func(r *http.Request) {
			r.Header.Add("X-Forwarded-User", first)
			r.Header.Add("X-Forwarded-User", second)
		}
	}
	for _, c := range []cred{twice("olga", "val"), twice("val", "olga"), twice("olga", "olga"), twice("", "olga"),
		func(r *http.Request) { twice("olga", "val")(r); bearer("x")(r) }} {
		r := e.do(t, "GET", "/api/v1/session", nil, c)
		if code, _, msg := apiErr(t, r); r.status != http.StatusBadRequest || code != "bad_request" || !strings.Contains(msg, "X-Forwarded-User") {
			t.Errorf("the header twice: %d %s", r.status, r.body)
		}
	}
	if r := e.do(t, "GET", "/jobs", nil, twice("val", "olga")); r.status != http.StatusBadRequest || strings.Contains(r.body, "olga (operator)") {
		t.Errorf("the header twice, a page: %d", r.status)
	}

	// From an address that is not a trusted proxy, the header is ignored.
	untrusted := *trusted
	untrusted.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}
	e2 := setup(t, &weirui.Options{Auth: &untrusted}, nil)
	if r := e2.do(t, "GET", "/api/v1/jobs", nil, as("olga")); r.status != 401 {
		t.Errorf("header from an untrusted address: %d, want 401", r.status)
	}
	// A user the proxy names with no role gets none.
	none := *trusted
	none.ProxyDefaultRole = weirui.RoleNone
	e3 := setup(t, &weirui.Options{Auth: &none}, nil)
	if r := e3.do(t, "GET", "/api/v1/jobs", nil, as("mallory")); r.status != 403 {
		t.Errorf("unlisted proxy user with no default role: %d, want 403", r.status)
	}
}

func TestAnonymous(t *testing.T) {
	t.Parallel()
	e := setup(t, &weirui.Options{AllowAnonymous: true}, nil)
	job := e.insert(t, textArgs{Text: "a"}, nil)
	id := strconv.FormatInt(job.ID, 10)
	// Anonymous operators still need the CSRF token: another site's page can
	// post to a loopback address.
	if r := e.do(t, "POST", "/jobs/"+id+"/cancel", url.Values{}, noCred); r.status != 403 {
		t.Errorf("anonymous POST without token: %d", r.status)
	}
	form := url.Values{"csrf": {e.csrf(t, noCred)}}
	if r := e.do(t, "POST", "/jobs/"+id+"/cancel", form, noCred); r.status != http.StatusSeeOther {
		t.Errorf("anonymous POST with token: %d %s", r.status, r.body)
	}
	if r := e.do(t, "GET", "/api/v1/jobs", nil, bearer("whatever")); r.status != 401 {
		t.Errorf("a wrong token is refused even when anonymous is allowed: %d", r.status)
	}
}

func TestParseAuthFile(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("tok"))
	hexSum := strings.ToLower(strings.TrimSpace(hexOf(sum[:])))
	good := "# comment\n\noperator:token:sha256:" + hexSum + "\nviewer:user:vera:" + viewerHash + "\noperator:proxy-user:olga\n"
	a, err := weirui.ParseAuthFile(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Tokens) != 1 || a.Tokens[0].SHA256 != sum || a.Tokens[0].Role != weirui.RoleOperator ||
		len(a.Users) != 1 || a.Users[0].Name != "vera" || a.ProxyUsers["olga"] != weirui.RoleOperator {
		t.Errorf("parsed %+v", a)
	}
	for _, tc := range []struct{ in, want string }{
		{"admin:token:sha256:" + hexSum, "line 1: role \"admin\""},
		{"viewer:token:plain-token-here", "line 1: a token line"},
		{"\nviewer:token:sha256:abcd", "line 2: the token's SHA-256"},
		{"viewer:user:vera:hunter2", "line 1 (user vera): password hash is not"},
		{"viewer:user::" + viewerHash, "line 1: a user line"},
		{"viewer:proxy-user:", "line 1: a proxy user line"},
		{"viewer:ldap:x", "kind \"ldap\""},
		{"viewer", "line 1: want"},
	} {
		_, err := weirui.ParseAuthFile(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.in, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "plain-token-here")) {
			t.Errorf("%q: the error shows the secret: %v", tc.in, err)
		}
	}
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

func TestHashPassword(t *testing.T) {
	t.Parallel()
	h1, h2 := mustHash("pw"), mustHash("pw")
	if h1 == h2 || !strings.HasPrefix(h1, "pbkdf2-sha256$") || strings.Contains(h1, "pw$") {
		t.Errorf("hashes %q %q", h1, h2)
	}
	if _, err := weirui.HashPassword(""); err == nil {
		t.Error("an empty password was hashed")
	}
}

func compact(raw json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return "not JSON: " + string(raw)
	}
	return buf.String()
}

func TestPeriodicAndLeader(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	exec := e.driver.Executor()
	if ok, err := exec.LeaderElect(t.Context(), &weirdriver.LeaderElectParams{Name: "maintenance", LeaderID: "web-1-<b>", TTL: time.Minute}); err != nil || !ok {
		t.Fatalf("elect: %v %v", ok, err)
	}
	err := exec.PeriodicRegister(t.Context(), "web-1-<b>", []*weirdriver.PeriodicRegisterParams{
		{Name: "nightly", Spec: "30 2 * * *", TimeZone: "Europe/Berlin", NextRunAt: time.Now().Add(time.Hour).Round(time.Microsecond)},
	})
	if err != nil {
		t.Fatal(err)
	}
	otto := basic("otto", operatorPassword)
	r := e.do(t, "GET", "/", nil, otto)
	if r.status != 200 || !strings.Contains(r.body, "Maintenance leader: <code>web-1-&lt;b&gt;</code>, elected ") {
		t.Errorf("overview does not name the leader and its election: %d", r.status)
	}
	r = e.do(t, "GET", "/api/v1/leader", nil, otto)
	if !strings.Contains(r.body, `"id": "web-1-\u003cb\u003e"`) {
		t.Errorf("leader: %s", r.body)
	}
	var term struct {
		ElectedAt *time.Time `json:"elected_at"`
		ExpiresAt *time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal([]byte(r.body), &term); err != nil || term.ElectedAt == nil || term.ExpiresAt == nil ||
		term.ExpiresAt.Sub(*term.ElectedAt) != time.Minute {
		t.Errorf("leader's term: %s (%v), want elected_at and expires_at a minute apart", r.body, err)
	}
	r = e.do(t, "GET", "/periodic", nil, otto)
	for _, want := range []string{"nightly", "30 2 * * *", "Europe/Berlin", "active", `action="/periodic/nightly/pause"`, `action="/periodic/nightly/trigger"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("schedules page lacks %q", want)
		}
	}
	form := url.Values{"csrf": {e.csrf(t, otto)}}
	if r := e.do(t, "POST", "/periodic/nightly/pause", form, otto); r.status != http.StatusSeeOther {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	r = e.do(t, "GET", "/periodic", nil, otto)
	if !strings.Contains(r.body, "<strong>paused</strong>") || !strings.Contains(r.body, `action="/periodic/nightly/resume"`) {
		t.Errorf("schedule not shown paused")
	}
	for _, action := range []string{"resume", "trigger"} {
		r := e.do(t, "POST", "/api/v1/periodic/nightly/"+action, nil, bearer(operatorToken))
		if r.status != 200 || !strings.Contains(r.body, `"name": "nightly"`) {
			t.Errorf("%s: %d %s", action, r.status, r.body)
		}
	}
	rows, err := e.client.PeriodicList(t.Context())
	if err != nil || len(rows) != 1 || rows[0].PausedAt != nil || rows[0].NextRunAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("after resume and trigger: %+v %v", rows, err)
	}
	if r := e.do(t, "GET", "/periodic", nil, bearer(viewerToken)); strings.Contains(r.body, "<form method=\"post\"") {
		t.Errorf("a viewer sees the schedule actions")
	}
}

// TestListWindow: the job list's pages read at most a window of ids. A filter
// that matches nothing in the window says how far it searched and links on;
// the API takes the window as a parameter and answers searched_to; a bad
// window is a bad parameter.
func TestListWindow(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	var ids []int64
	for i := range 12 {
		q := "common"
		if i == 0 {
			q = "rare"
		}
		ids = append(ids, e.insert(t, textArgs{Text: strconv.Itoa(i)}, &weir.InsertOpts{Queue: q}).ID)
	}
	v := bearer(viewerToken)
	r := e.do(t, "GET", "/api/v1/jobs?queue=rare&window=5", nil, v)
	var p struct {
		Jobs       []struct{ ID int64 }
		NextCursor int64 `json:"next_cursor"`
		SearchedTo int64 `json:"searched_to"`
	}
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("%d %s: %v", r.status, r.body, err)
	}
	if len(p.Jobs) != 0 || p.SearchedTo != ids[7] || p.NextCursor != ids[7] {
		t.Fatalf("first window of 5, newest first: %s; want none, searched to %d", r.body, ids[7])
	}
	r = e.do(t, "GET", "/jobs?queue=rare&window=5", nil, v)
	for _, want := range []string{"No job matches so far.", "Searched down to job " + strconv.FormatInt(ids[7], 10),
		`>Search older jobs</a>`, "after=" + strconv.FormatInt(ids[7], 10)} {
		if !strings.Contains(r.body, want) {
			t.Errorf("the page does not say %q:\n%s", want, r.body)
		}
	}
	// Without a window parameter a page reads 100,000 ids: here, all of them.
	r = e.do(t, "GET", "/jobs?queue=rare", nil, v)
	if !strings.Contains(r.body, `href="/jobs/`+strconv.FormatInt(ids[0], 10)+`"`) || strings.Contains(r.body, "Searched") {
		t.Errorf("the page with the default window:\n%s", r.body)
	}
	for _, bad := range []string{"0", "-1", "x"} {
		if r := e.do(t, "GET", "/api/v1/jobs?window="+bad, nil, v); r.status != 400 || !strings.Contains(r.body, `"parameter": "window"`) {
			t.Errorf("window %q: %d %s", bad, r.status, r.body)
		}
	}
}

// TestJobActionConflictPage: an action that no longer applies (a Cancel
// posted from a page opened before the job ended) answers 409 with what is
// wrong and a link back to the job's page, which shows its state now.
func TestJobActionConflictPage(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	job := e.insert(t, textArgs{Text: "a"}, nil)
	if _, err := e.client.JobCancel(t.Context(), job.ID); err != nil {
		t.Fatal(err)
	}
	otto := basic("otto", operatorPassword)
	id := strconv.FormatInt(job.ID, 10)
	r := e.do(t, "POST", "/jobs/"+id+"/cancel", url.Values{"csrf": {e.csrf(t, otto)}}, otto)
	if r.status != http.StatusConflict || !strings.Contains(r.body, "the job is final") ||
		!strings.Contains(r.body, `<a href="/jobs/`+id+`">Back to job `+id+`</a>`) {
		t.Errorf("cancel of a final job: %d %s", r.status, r.body)
	}
	r = e.do(t, "POST", "/jobs/999999/cancel", url.Values{"csrf": {e.csrf(t, otto)}}, otto)
	if r.status != http.StatusNotFound || !strings.Contains(r.body, `<a href="/">Back to the overview</a>`) {
		t.Errorf("cancel of no job: %d %s", r.status, r.body)
	}
}
