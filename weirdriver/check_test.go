package weirdriver_test

import (
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
