package weirui_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver"
)

// TestClients: the clients page and GET /api/v1/clients list the registry
// with each client's held leases and the leader, with every field a client
// writes (its id, host and version are any text) rendered inert; an empty
// registry is an empty list.
func TestClients(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	viewer := bearer(viewerToken)
	if r := e.do(t, "GET", "/api/v1/clients", nil, viewer); r.status != 200 || !strings.Contains(r.body, `"clients": []`) {
		t.Fatalf("empty registry: %d %s", r.status, r.body)
	}
	if r := e.do(t, "GET", "/clients", nil, viewer); r.status != 200 || !strings.Contains(r.body, "No client is registered") {
		t.Fatalf("empty clients page: %d %s", r.status, r.body)
	}

	exec := e.driver.Executor()
	const (
		evilID   = `web-1<script>alert(1)</script>`
		evilHost = `<img src=x onerror=alert(2)>`
		evilVer  = `"><svg onload=alert(3)>`
	)
	for _, p := range []*weirdriver.ClientRegisterParams{
		{ID: evilID, Host: evilHost, PID: 4242, Version: evilVer, Queues: []weir.ClientQueue{{Name: "mail", MaxWorkers: 3}}},
		{ID: "web-2", Host: "h2", PID: 7, Version: "v1.0.0", Queues: []weir.ClientQueue{{Name: "default", MaxWorkers: 10}}},
	} {
		if _, err := exec.ClientRegister(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	// web-2 leads and holds a job; the other holds none.
	if ok, err := exec.LeaderElect(t.Context(), &weirdriver.LeaderElectParams{Name: "maintenance", LeaderID: "web-2", TTL: time.Minute}); err != nil || !ok {
		t.Fatalf("elect: %v %v", ok, err)
	}
	e.insert(t, textArgs{Text: "a"}, nil)
	if jobs, _, err := exec.JobClaim(t.Context(), &weirdriver.JobClaimParams{Queue: weir.DefaultQueue, Max: 1, ClientID: "web-2", LeaseDuration: time.Minute}); err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v %v", jobs, err)
	}

	r := e.do(t, "GET", "/api/v1/clients", nil, viewer)
	if ct := r.header.Get("Content-Type"); r.status != 200 || !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("GET /api/v1/clients: %d %q %s", r.status, ct, r.body)
	}
	var got struct {
		Clients []weir.ClientRow `json:"clients"`
	}
	if err := json.Unmarshal([]byte(r.body), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Clients) != 2 {
		t.Fatalf("clients: %s", r.body)
	}
	a, b := got.Clients[0], got.Clients[1]
	if a.ID != evilID || a.Host != evilHost || a.Version != evilVer || a.PID != 4242 || a.HeldLeases != 0 || a.Leader ||
		len(a.Queues) != 1 || a.Queues[0] != (weir.ClientQueue{Name: "mail", MaxWorkers: 3}) {
		t.Errorf("first client: %+v", a)
	}
	if b.ID != "web-2" || b.HeldLeases != 1 || !b.Leader || b.StartedAt.IsZero() || b.HeartbeatAt.IsZero() {
		t.Errorf("second client: %+v", b)
	}
	for _, key := range []string{`"host"`, `"pid"`, `"version"`, `"queues"`, `"max_workers"`, `"started_at"`, `"heartbeat_at"`, `"held_leases"`, `"leader"`} {
		if !strings.Contains(r.body, key) {
			t.Errorf("the API's client lacks %s: %s", key, r.body)
		}
	}

	poll := func(r *http.Request) { r.Header.Set("HX-Request", "true") }
	for name, r := range map[string]resp{
		"page": e.do(t, "GET", "/clients", nil, viewer),
		"poll": e.do(t, "GET", "/clients", nil, viewer, poll),
	} {
		if r.status != 200 {
			t.Fatalf("%s: %d %s", name, r.status, r.body)
		}
		for _, bad := range []string{"<script>alert", "<img src=x", "<svg onload"} {
			if strings.Contains(r.body, bad) {
				t.Errorf("%s holds %q unescaped", name, bad)
			}
		}
		for _, want := range []string{"web-1&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;img src=x onerror=alert(2)&gt;",
			"&#34;&gt;&lt;svg onload=alert(3)&gt;", `<a href="/jobs?queue=mail">mail</a> (3)`, "<strong>leader</strong>",
			"Maintenance leader: <code>web-2</code>.", "4242", "v1.0.0"} {
			if !strings.Contains(r.body, want) {
				t.Errorf("%s lacks %q:\n%s", name, want, r.body)
			}
		}
	}
	if r := e.do(t, "GET", "/clients", nil, viewer, poll); strings.Contains(r.body, "<html") ||
		!strings.HasPrefix(strings.TrimSpace(r.body), `<div id="live"`) {
		t.Errorf("a poll of /clients is not the live part alone: %s", r.body)
	}
	if r := e.do(t, "GET", "/", nil, viewer); !strings.Contains(r.body, `href="/clients"`) {
		t.Errorf("the nav does not link the clients page")
	}

	// A leader that is not in the registry is named as such.
	if err := exec.ClientDelete(t.Context(), "web-2"); err != nil {
		t.Fatal(err)
	}
	if r := e.do(t, "GET", "/clients", nil, viewer); !strings.Contains(r.body, "<code>web-2</code> (not in the registry).") {
		t.Errorf("the page does not say the leader is unregistered:\n%s", r.body)
	}
}
