package weirdrivertest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// The client registry (weir_client).

func register(t *testing.T, d weirdriver.Driver, p *weirdriver.ClientRegisterParams) time.Time {
	t.Helper()
	started, err := d.Executor().ClientRegister(ctx(t), p)
	if err != nil {
		t.Fatalf("register client %s: %v", p.ID, err)
	}
	return started
}

func listClients(t *testing.T, d weirdriver.Driver) []*weirtype.ClientRow {
	t.Helper()
	rows, err := d.Executor().ClientList(ctx(t))
	if err != nil {
		t.Fatalf("list clients: %v", err)
	}
	return rows
}

func clientIDs(rows []*weirtype.ClientRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func clientJSON(t *testing.T, c *weirtype.ClientRow) string {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func testClientRegistry(t *testing.T, d weirdriver.Driver) {
	exec := d.Executor()
	if rows := listClients(t, d); len(rows) != 0 {
		t.Fatalf("a new schema lists clients: %v", clientIDs(rows))
	}
	before := time.Now()
	p := &weirdriver.ClientRegisterParams{
		ID: testClient, Host: "web-1", PID: 4242, Version: "v1.2.3",
		Queues: []weirtype.ClientQueue{{Name: "default", MaxWorkers: 10}, {Name: "mail", MaxWorkers: 2}},
	}
	started := register(t, d, p)
	if !near(started, before) {
		t.Fatalf("started_at %v, want about now (%v)", started, before)
	}
	register(t, d, &weirdriver.ClientRegisterParams{ID: "client-0", Host: "web-2"})

	// Held leases: the running jobs whose attempted_by is the client's id.
	a := claimOne(t, d, "reg", 3, time.Hour)
	b := claimOne(t, d, "reg", 3, time.Hour)
	insertOne(t, d, params("k", "reg", `{}`)) // available: held by nobody
	finalize(t, d, &weirdriver.JobFinalizeParams{ID: b.ID, LeaseToken: b.LeaseToken, Outcome: weirdriver.OutcomeCompleted})
	other, _, err := exec.JobClaim(ctx(t), &weirdriver.JobClaimParams{Queue: "reg", Max: 1, ClientID: "unregistered", LeaseDuration: time.Hour})
	if err != nil || len(other) != 1 {
		t.Fatalf("claim by another client: %v %v", other, err)
	}

	rows := listClients(t, d)
	if got := clientIDs(rows); !slices.Equal(got, []string{"client-0", testClient}) {
		t.Fatalf("clients %v, want client-0 and %s, by id", got, testClient)
	}
	c := rows[1]
	if c.Host != "web-1" || c.PID != 4242 || c.Version != "v1.2.3" || !slices.Equal(c.Queues, p.Queues) ||
		!c.StartedAt.Equal(started) || !near(c.HeartbeatAt, before) || c.HeldLeases != 1 || c.Leader {
		t.Fatalf("client row %s, want it as registered, started at %v, holding job %d only", clientJSON(t, c), started, a.ID)
	}
	if zero := rows[0]; zero.HeldLeases != 0 || zero.Queues == nil || len(zero.Queues) != 0 || zero.Version != "" {
		t.Fatalf("client-0 row %s, want no queues (an empty list), no version, no leases", clientJSON(t, zero))
	}

	// A refresh replaces the fields and the heartbeat and keeps started_at;
	// it writes the row back when it was deleted meanwhile.
	p.StartedAt, p.Queues, p.PID = started, []weirtype.ClientQueue{{Name: "mail", MaxWorkers: 5}}, 4343
	if again := register(t, d, p); !again.Equal(started) {
		t.Fatalf("a refresh returned started_at %v, want %v", again, started)
	}
	c = listClients(t, d)[1]
	if !c.StartedAt.Equal(started) || c.HeartbeatAt.Before(rows[1].HeartbeatAt) || c.PID != 4343 || !slices.Equal(c.Queues, p.Queues) {
		t.Fatalf("after a refresh: %s, want started_at %v kept, heartbeat not before %v, the new pid and queues",
			clientJSON(t, c), started, rows[1].HeartbeatAt)
	}
	if err := exec.ClientDelete(ctx(t), testClient); err != nil {
		t.Fatal(err)
	}
	if got := clientIDs(listClients(t, d)); !slices.Equal(got, []string{"client-0"}) {
		t.Fatalf("after delete: %v", got)
	}
	if err := exec.ClientDelete(ctx(t), testClient); err != nil {
		t.Fatalf("deleting a row that is not there: %v", err)
	}
	register(t, d, p)
	if c := listClients(t, d)[1]; !c.StartedAt.Equal(started) {
		t.Fatalf("a refresh after a delete: started_at %v, want %v", c.StartedAt, started)
	}
	// A first registration under a known id (a restart) starts anew.
	p.StartedAt = time.Time{}
	if restarted := register(t, d, p); restarted.Before(started) || restarted.Equal(started) {
		t.Fatalf("a new registration under a known id: started_at %v, want after %v", restarted, started)
	}
}

// pruneUntil prunes until n rows are gone; the database clock has to pass a
// 1 µs staleness.
func pruneUntil(t *testing.T, d weirdriver.Driver, p weirdriver.ClientPruneParams, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for gone := 0; gone < n; {
		got, err := d.Executor().ClientPrune(ctx(t), &p)
		if err != nil {
			t.Fatalf("prune clients: %v", err)
		}
		if got > p.Limit {
			t.Fatalf("prune deleted %d rows, limit %d", got, p.Limit)
		}
		if gone += got; gone > n {
			t.Fatalf("prune deleted %d rows, want %d", gone, n)
		}
		if gone < n && time.Now().After(deadline) {
			t.Fatalf("pruned %d of %d rows within 10s", gone, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func testClientPrune(t *testing.T, d weirdriver.Driver) {
	exec := d.Executor()
	for _, id := range []string{"a", "b", "c"} {
		register(t, d, &weirdriver.ClientRegisterParams{ID: id})
	}
	// a refreshes last: b and c are the oldest.
	register(t, d, &weirdriver.ClientRegisterParams{ID: "a"})
	if n, err := exec.ClientPrune(ctx(t), &weirdriver.ClientPruneParams{StaleAfter: time.Hour, Limit: 10}); err != nil || n != 0 {
		t.Fatalf("prune of rows older than an hour: %d %v, want none", n, err)
	}
	pruneUntil(t, d, weirdriver.ClientPruneParams{StaleAfter: time.Microsecond, Limit: 1}, 1)
	if got := clientIDs(listClients(t, d)); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("after pruning the oldest: %v, want a and c", got)
	}
	pruneUntil(t, d, weirdriver.ClientPruneParams{StaleAfter: time.Microsecond, Limit: 10}, 2)
	if got := listClients(t, d); len(got) != 0 {
		t.Fatalf("after pruning all: %v", clientIDs(got))
	}
}

func testClientRejectsBadParams(t *testing.T, d weirdriver.Driver) {
	exec := d.Executor()
	good := weirdriver.ClientRegisterParams{ID: testClient, Host: "h", PID: 1, Version: "v", Queues: []weirtype.ClientQueue{{Name: "q", MaxWorkers: 1}}}
	register(t, d, &good)
	before := listClients(t, d)
	long := func(n int) string { return strings.Repeat("x", n) }
	for want, mod := range map[string]func(*weirdriver.ClientRegisterParams){
		"client id is empty":          func(p *weirdriver.ClientRegisterParams) { p.ID = "" },
		"client id is 129 bytes long": func(p *weirdriver.ClientRegisterParams) { p.ID = long(129) },
		"host is 256 bytes long":      func(p *weirdriver.ClientRegisterParams) { p.Host = long(256) },
		"version is 129 bytes long":   func(p *weirdriver.ClientRegisterParams) { p.Version = long(129) },
		"pid -1 is out of range":      func(p *weirdriver.ClientRegisterParams) { p.PID = -1 },
		"a queue name is empty":       func(p *weirdriver.ClientRegisterParams) { p.Queues = []weirtype.ClientQueue{{MaxWorkers: 1}} },
		"queue name is 129 bytes long": func(p *weirdriver.ClientRegisterParams) {
			p.Queues = []weirtype.ClientQueue{{Name: long(129), MaxWorkers: 1}}
		},
		`queue "q": max workers 0`:       func(p *weirdriver.ClientRegisterParams) { p.Queues = []weirtype.ClientQueue{{Name: "q"}} },
		`queue "q" appears twice`:        func(p *weirdriver.ClientRegisterParams) { p.Queues = append(p.Queues, p.Queues[0]) },
		"1001 queues; the limit is 1000": func(p *weirdriver.ClientRegisterParams) { p.Queues = make([]weirtype.ClientQueue, 1001) },
		"started-at 10000-01-01":         func(p *weirdriver.ClientRegisterParams) { p.StartedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) },
	} {
		p := good
		p.PID, p.Host = 2, "changed"
		mod(&p)
		if _, err := exec.ClientRegister(ctx(t), &p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("register with %q: %v, want an error saying so", want, err)
		}
	}
	for want, id := range map[string]string{"client id is empty": "", "client id is 129 bytes long": long(129)} {
		if err := exec.ClientDelete(ctx(t), id); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("delete with %q: %v", want, err)
		}
	}
	for want, p := range map[string]weirdriver.ClientPruneParams{
		"limit 0 is less than 1":          {StaleAfter: time.Minute},
		"stale-after 0s is less than 1µs": {Limit: 1},
		"stale-after -1m0s":               {StaleAfter: -time.Minute, Limit: 1},
	} {
		if _, err := exec.ClientPrune(ctx(t), &p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("prune with %q: %v", want, err)
		}
	}
	after := listClients(t, d)
	if len(after) != 1 || clientJSON(t, after[0]) != clientJSON(t, before[0]) {
		t.Fatalf("rejected calls changed the registry: %v, then %v", clientJSON(t, before[0]), after)
	}
}
