package main

import (
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// TestClients lists the client registry as clients write it, with the leader
// and held leases, and escapes what it prints: a client's id, host and
// version are any text.
func TestClients(t *testing.T) {
	t.Parallel()
	schema, weir := migrated(t)
	d := driverOn(t, schema)
	r := weir(t, "clients", "list")
	wantOK(t, r)
	if r.stdout != "no clients\n" {
		t.Fatalf("list of none printed %q", r.stdout)
	}
	r = weir(t, "clients", "list", "--json")
	wantOK(t, r)
	wantTerminalSafe(t, r.stdout)
	if r.stdout != "[]\n" {
		t.Fatalf("JSON list of none printed %q", r.stdout)
	}

	exec := d.Executor()
	for _, p := range []*weirdriver.ClientRegisterParams{
		{ID: "web-\x1b[31m1", Host: "h\u202e1", PID: 42, Queues: []weirtype.ClientQueue{{Name: "default", MaxWorkers: 10}, {Name: "mail", MaxWorkers: 2}}},
		{ID: "web-2", Host: "h2", PID: 7, Version: "v1.2.3"},
	} {
		if _, err := exec.ClientRegister(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := exec.LeaderElect(t.Context(), &weirdriver.LeaderElectParams{Name: "maintenance", LeaderID: "web-2", TTL: time.Minute}); err != nil || !ok {
		t.Fatalf("elect: %v %v", ok, err)
	}
	wantOK(t, weir(t, "enqueue", "--kind", "k"))
	if jobs, _, err := exec.JobClaim(t.Context(), &weirdriver.JobClaimParams{Queue: "default", Max: 1, ClientID: "web-\x1b[31m1", LeaseDuration: time.Minute}); err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v %v", jobs, err)
	}

	r = weir(t, "clients", "list")
	wantOK(t, r)
	header, rows := tableRows(t, r.stdout)
	if header != "ID HOST PID VERSION QUEUES LEASES STARTED HEARTBEAT LEADER" || len(rows) != 2 {
		t.Fatalf("list:\n%s", r.stdout)
	}
	if got := strings.Join(append(rows[0][:6:6], rows[0][8]), " "); got != `web-\x1b[31m1 h\u202e1 42 - default:10,mail:2 1 no` {
		t.Errorf("first row %q", got)
	}
	if got := strings.Join(append(rows[1][:6:6], rows[1][8]), " "); got != `web-2 h2 7 v1.2.3 - 0 yes` {
		t.Errorf("second row %q", got)
	}
	if _, err := time.Parse(time.RFC3339, rows[0][6]); err != nil {
		t.Errorf("started %q: %v", rows[0][6], err)
	}
	if strings.ContainsAny(r.stdout, "\x1b\u202e") {
		t.Errorf("the table holds a raw escape or bidi override: %q", r.stdout)
	}

	r = weir(t, "clients", "list", "--json")
	wantOK(t, r)
	wantTerminalSafe(t, r.stdout)
	var listed []weirtype.ClientRow
	decodeJSON(t, r.stdout, &listed)
	if len(listed) != 2 || listed[0].ID != "web-\x1b[31m1" || listed[0].HeldLeases != 1 || len(listed[0].Queues) != 2 ||
		!listed[1].Leader || listed[1].Version != "v1.2.3" {
		t.Fatalf("list --json: %+v", listed)
	}

	wantFailure(t, runWeir(t, nil, "clients"), exitUsage, "clients: missing action: list")
	wantFailure(t, weir(t, "clients", "show"), exitUsage, `clients: unknown action "show"`)
	wantFailure(t, weir(t, "clients", "list", "web-2"), exitUsage, `clients list: unexpected argument "web-2"`)
}
