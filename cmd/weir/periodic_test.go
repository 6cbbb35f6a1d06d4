package main

import (
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// TestPeriodic lists and operates schedules registered as a leader would, and
// escapes what it prints.
func TestPeriodic(t *testing.T) {
	t.Parallel()
	schema, weir := migrated(t)
	d := driverOn(t, schema)
	r := weir(t, "periodic", "list")
	wantOK(t, r)
	if r.stdout != "no periodic jobs\n" {
		t.Fatalf("list of none printed %q", r.stdout)
	}
	next := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	register := func(names ...string) {
		t.Helper()
		var params []*weirdriver.PeriodicRegisterParams
		for _, n := range names {
			params = append(params, &weirdriver.PeriodicRegisterParams{Name: n, Spec: "@daily", TimeZone: "Europe/Berlin", NextRunAt: next})
		}
		if err := d.Executor().PeriodicRegister(t.Context(), "leader-\x1b[31m\u202e1", params); err != nil {
			t.Fatal(err)
		}
	}
	register("nightly", "report")

	r = weir(t, "periodic", "list")
	wantOK(t, r)
	header, rows := tableRows(t, r.stdout)
	if header != "NAME SCHEDULE TIME ZONE NEXT RUN LAST RUN STATUS LEADER" || len(rows) != 2 ||
		strings.Join(rows[0], " ") != `nightly @daily Europe/Berlin 2030-01-01T00:00:00Z - active leader-\x1b[31m\u202e1` {
		t.Fatalf("list:\n%s", r.stdout)
	}

	r = weir(t, "periodic", "pause", "nightly")
	wantOK(t, r)
	if r.stdout != "periodic job nightly paused\n" {
		t.Fatalf("pause printed %q", r.stdout)
	}
	r = weir(t, "periodic", "trigger", "report", "--json")
	wantOK(t, r)
	var triggered weirtype.PeriodicRow
	decodeJSON(t, r.stdout, &triggered)
	if triggered.Name != "report" || !triggered.NextRunAt.Before(time.Now().Add(time.Minute)) {
		t.Fatalf("trigger --json: %+v", triggered)
	}
	wantFailure(t, weir(t, "periodic", "delete", "report"), exitFailure, `periodic job "report": the leader declares it`)
	wantFailure(t, weir(t, "periodic", "pause", "missing"), exitFailure, `no periodic job "missing"`)
	wantFailure(t, weir(t, "periodic", "pause", "bad name"), exitUsage, `periodic job name "bad name"`)
	wantFailure(t, weir(t, "periodic", "pause"), exitUsage, "want one periodic job name")

	register("nightly") // the report is orphaned now
	r = weir(t, "periodic", "list", "--json")
	wantOK(t, r)
	wantTerminalSafe(t, r.stdout)
	var listed []weirtype.PeriodicRow
	decodeJSON(t, r.stdout, &listed)
	if len(listed) != 2 || listed[0].PausedAt == nil || listed[1].OrphanedAt == nil || listed[0].DeclaredBy != "leader-\x1b[31m\u202e1" {
		t.Fatalf("list --json: %+v", listed)
	}
	r = weir(t, "periodic", "delete", "report")
	wantOK(t, r)
	if r.stdout != "periodic job report deleted\n" {
		t.Fatalf("delete printed %q", r.stdout)
	}
	r = weir(t, "periodic", "resume", "nightly")
	wantOK(t, r)
	_, rows = tableRows(t, weir(t, "periodic", "list").stdout)
	if len(rows) != 1 || rows[0][5] != "active" {
		t.Fatalf("after delete and resume: %q", rows)
	}
}
