package weirdriver_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/weirq/weir/weirdriver"
)

func TestLoadMigrations(t *testing.T) {
	good := fstest.MapFS{
		"m/002_two.up.sql":   {Data: []byte("up2")},
		"m/002_two.down.sql": {Data: []byte("down2")},
		"m/001_one.up.sql":   {Data: []byte("up1")},
		"m/001_one.down.sql": {Data: []byte("down1")},
	}
	ms, err := weirdriver.LoadMigrations(good, "m")
	if err != nil || len(ms) != 2 || ms[0].Name != "one" || ms[1].Up != "up2" || ms[1].Down != "down2" {
		t.Fatalf("%v %+v", err, ms)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"gap":       {"m/001_a.up.sql": {}, "m/001_a.down.sql": {}, "m/003_c.up.sql": {}, "m/003_c.down.sql": {}},
		"no down":   {"m/001_a.up.sql": {}},
		"bad name":  {"m/one.up.sql": {}, "m/one.down.sql": {}},
		"no number": {"m/x_a.up.sql": {}, "m/x_a.down.sql": {}},
	} {
		if _, err := weirdriver.LoadMigrations(fsys, "m"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestCheckRenew(t *testing.T) {
	ok := &weirdriver.JobRenewParams{IDs: []int64{1, 2}, LeaseTokens: []int64{1, 1}, LeaseDuration: time.Second}
	if err := weirdriver.CheckRenew(ok); err != nil {
		t.Fatal(err)
	}
	for want, p := range map[string]*weirdriver.JobRenewParams{
		"2 ids but 1 tokens":  {IDs: []int64{1, 2}, LeaseTokens: []int64{1}, LeaseDuration: time.Second},
		"less than 1µs":       {LeaseDuration: time.Nanosecond},
		"job 3 appears twice": {IDs: []int64{3, 3}, LeaseTokens: []int64{1, 1}, LeaseDuration: time.Second},
	} {
		if err := weirdriver.CheckRenew(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", p, err, want)
		}
	}
}

func TestCheckMaintenance(t *testing.T) {
	for _, limit := range []int{0, -1} {
		want := fmt.Sprintf("limit %d is less than 1", limit)
		for name, err := range map[string]error{
			"rescue":   weirdriver.CheckRescue(&weirdriver.JobRescueParams{Limit: limit}),
			"schedule": weirdriver.CheckSchedule(limit),
			"prune":    weirdriver.CheckPrune(&weirdriver.JobPruneParams{Limit: limit, CompletedBefore: time.Now()}),
		} {
			if err == nil || err.Error() != want {
				t.Errorf("%s with limit %d: %v, want %q", name, limit, err, want)
			}
		}
	}
	for name, err := range map[string]error{
		"rescue":   weirdriver.CheckRescue(&weirdriver.JobRescueParams{Limit: 1}),
		"schedule": weirdriver.CheckSchedule(1),
		"prune":    weirdriver.CheckPrune(&weirdriver.JobPruneParams{Limit: 1}),
	} {
		if err != nil {
			t.Errorf("%s with limit 1: %v", name, err)
		}
	}
}

func TestCheckLeaderElect(t *testing.T) {
	ok := weirdriver.LeaderElectParams{Name: "maintenance", LeaderID: "a", TTL: time.Microsecond}
	if err := weirdriver.CheckLeaderElect(&ok); err != nil {
		t.Fatal(err)
	}
	for want, mod := range map[string]func(*weirdriver.LeaderElectParams){
		"name is empty":            func(p *weirdriver.LeaderElectParams) { p.Name = "" },
		"leader id is empty":       func(p *weirdriver.LeaderElectParams) { p.LeaderID = "" },
		"ttl 0s is less than 1µs":  func(p *weirdriver.LeaderElectParams) { p.TTL = 0 },
		"ttl 1ns is less than 1µs": func(p *weirdriver.LeaderElectParams) { p.TTL = time.Nanosecond },
	} {
		p := ok
		mod(&p)
		if err := weirdriver.CheckLeaderElect(&p); err == nil || err.Error() != want {
			t.Errorf("%+v: %v, want %q", p, err, want)
		}
	}
}

func TestCheckClaim(t *testing.T) {
	ok := weirdriver.JobClaimParams{Queue: "q", Max: 1, ClientID: "c", LeaseDuration: time.Microsecond}
	if err := weirdriver.CheckClaim(&ok); err != nil {
		t.Fatal(err)
	}
	for want, mod := range map[string]func(*weirdriver.JobClaimParams){
		"queue is empty":                     func(p *weirdriver.JobClaimParams) { p.Queue = "" },
		"max 0 is less than 1":               func(p *weirdriver.JobClaimParams) { p.Max = 0 },
		"client id is empty":                 func(p *weirdriver.JobClaimParams) { p.ClientID = "" },
		"lease duration 0s is less than 1µs": func(p *weirdriver.JobClaimParams) { p.LeaseDuration = 0 },
	} {
		p := ok
		mod(&p)
		if err := weirdriver.CheckClaim(&p); err == nil || err.Error() != want {
			t.Errorf("%+v: %v, want %q", p, err, want)
		}
	}
}

func TestCheckFinalize(t *testing.T) {
	done := &weirdriver.JobFinalizeParams{ID: 1, LeaseToken: 1, Outcome: weirdriver.OutcomeCompleted}
	if err := weirdriver.CheckFinalize([]*weirdriver.JobFinalizeParams{done, {ID: 2, Outcome: weirdriver.OutcomeRetry}}); err != nil {
		t.Fatal(err)
	}
	for want, batch := range map[string][]*weirdriver.JobFinalizeParams{
		`job 2: unknown outcome "done"`:    {done, {ID: 2, Outcome: "done"}},
		"job 1 appears twice in one batch": {done, done},
	} {
		if err := weirdriver.CheckFinalize(batch); err == nil || err.Error() != want {
			t.Errorf("%v, want %q", err, want)
		}
	}
}
