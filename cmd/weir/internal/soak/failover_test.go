package soak

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
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
			reused := 0
			if strings.HasPrefix(tt.name, "id given again, first in") {
				reused = 1
			}
			if r.AsyncReused != reused || r.AsyncLost != tt.asyncLost || r.Failovers != 1 {
				t.Errorf("async lost %d (%d ids given again), failovers %d; want %d (%d), 1",
					r.AsyncLost, r.AsyncReused, r.Failovers, tt.asyncLost, reused)
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

// TestSoakCheckAsyncUndone: a handler whose end is missing and whose lease
// was alive when an unreplicated window began may have had its end and its
// outcome undone by the failover: its re-run is allowed and counted apart.
// Without the window, the same trail breaks G2.
func TestSoakCheckAsyncUndone(t *testing.T) {
	t.Parallel()
	trail := func(window bool) *soakData {
		d := cleanSoak()
		// Job 4's handler ran during w1.1's stop and recorded no end; its
		// lease was rescued and the job ran again.
		x := findExecOf(d, 4, 1)
		x.Result, x.Ended = "", time.Time{}
		for i := range d.Ends {
			if e := &d.Ends[i]; e.JobID == 4 && e.Token == 1 {
				*e = leaseEnd{JobID: 4, Token: 1, Holder: "w1.1", AttemptBefore: 1, AttemptAfter: 1, State: "retryable",
					Error: weirdriver.DefaultRescueError, ExpiresAt: at(13.5), At: at(13.9)}
			}
		}
		if window {
			d.AsyncWindows = []timeWindow{{at(11), at(12)}}
			d.Faults = append(d.Faults, faultEvent{Kind: faultFailover, At: at(11), Until: at(13), Detail: "async"})
		}
		return d
	}
	r := checkSoak(trail(true))
	for _, v := range r.Violations {
		t.Errorf("%s: %s", v.Guarantee, v.Msg)
	}
	if r.Duplicates[dupAsyncUndone] != 1 {
		t.Errorf("duplicates %v, want one undone by the failover", r.Duplicates)
	}
	r = checkSoak(trail(false))
	if r.byGuarantee("G2") != 1 || r.Duplicates[dupAsyncUndone] != 0 {
		t.Errorf("without the window: violations %v, duplicates %v; want one of G2", r.Violations, r.Duplicates)
	}
}

// findExecOf returns the execution of job under token in d.
func findExecOf(d *soakData, job, token int64) *auditExec {
	for i := range d.Execs {
		if x := &d.Execs[i]; x.JobID == job && x.Token == token {
			return x
		}
	}
	panic("no such execution")
}
