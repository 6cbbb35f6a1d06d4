package soak

import (
	"slices"
	"strings"
	"testing"
)

// asyncSoak is the clean soak with the insert times and one unreplicated
// window, from 4.5 s to 5.5 s: job i's insert returned at i seconds.
func asyncSoak() *soakData {
	d := cleanSoak()
	for _, id := range d.Inserted {
		d.InsertedAt = append(d.InsertedAt, at(float64(id)))
	}
	d.AsyncWindows = []timeWindow{{at(4.5), at(5.5)}}
	d.Faults = append(d.Faults, faultEvent{Kind: faultFailover, At: at(4.5), Until: at(7), Detail: "async"})
	return d
}

// TestSoakCheckAsyncWindow: a job whose insert returned inside an
// unreplicated window may be gone, or its id given again to a later insert;
// it is counted apart. Outside a window, either is a loss (G1).
func TestSoakCheckAsyncWindow(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		change    func(d *soakData)
		asyncLost int
		violation string // "" for none
	}{
		{"nothing lost", func(d *soakData) {}, 0, ""},
		{"gone, inserted in the window", func(d *soakData) {
			d.Inserted, d.InsertedAt = append(d.Inserted, 10), append(d.InsertedAt, at(5))
		}, 1, ""},
		{"gone, inserted before the window", func(d *soakData) {
			d.Inserted, d.InsertedAt = append(d.Inserted, 10), append(d.InsertedAt, at(4.4))
		}, 0, "job 10 was inserted and is gone"},
		{"gone, inserted after the window", func(d *soakData) {
			d.Inserted, d.InsertedAt = append(d.Inserted, 10), append(d.InsertedAt, at(5.6))
		}, 0, "job 10 was inserted and is gone"},
		{"id given again, first in the window", func(d *soakData) {
			d.Inserted, d.InsertedAt = append(d.Inserted, 5), append(d.InsertedAt, at(8))
		}, 1, ""},
		{"id given again, first outside the window", func(d *soakData) {
			d.Inserted, d.InsertedAt = append(d.Inserted, 6), append(d.InsertedAt, at(8))
		}, 0, "job id 6 was returned by two inserts"},
		{"no window: a sync failover loses nothing", func(d *soakData) {
			d.AsyncWindows = nil
			d.Inserted, d.InsertedAt = append(d.Inserted, 10), append(d.InsertedAt, at(5))
		}, 0, "job 10 was inserted and is gone"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := asyncSoak()
			tt.change(d)
			r := checkSoak(d)
			if r.AsyncLost != tt.asyncLost || r.Failovers != 1 {
				t.Errorf("async lost %d, failovers %d; want %d, 1", r.AsyncLost, r.Failovers, tt.asyncLost)
			}
			var g1 []string
			for _, v := range r.Violations {
				if v.Guarantee == "G1" {
					g1 = append(g1, v.Msg)
				}
			}
			switch {
			case tt.violation == "" && len(g1) > 0:
				t.Errorf("G1 violations %v, want none", g1)
			case tt.violation != "" && !slices.ContainsFunc(g1, func(m string) bool { return strings.Contains(m, tt.violation) }):
				t.Errorf("G1 violations %v, want one containing %q", g1, tt.violation)
			}
		})
	}
}

// TestSoakCheckFailoverLeaseLost: a lease that lapsed during a failover is a
// database fault's, as during a connection kill; without the failover it is
// unexplained (G9).
func TestSoakCheckFailoverLeaseLost(t *testing.T) {
	t.Parallel()
	d := cleanSoak()
	for i := range d.Faults {
		if d.Faults[i].Kind == faultConnKill {
			d.Faults[i] = faultEvent{Kind: faultFailover, At: at(25.5), Until: at(27), Detail: "sync"}
		}
	}
	r := checkSoak(d)
	for _, v := range r.Violations {
		t.Errorf("%s: %s", v.Guarantee, v.Msg)
	}
	if r.Duplicates[dupLeaseLost] != 1 || r.Failovers != 1 {
		t.Errorf("duplicates %v, failovers %d; want one lease lost, one failover", r.Duplicates, r.Failovers)
	}
}
