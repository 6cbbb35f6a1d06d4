package maintenance

import (
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// TestBusyWatch: the warning about a locked segment comes once compactions
// have found segments locked for compactBusyWarnAfter, the same one at least
// twice in a row, and once per run; segments found locked once each (claims
// in flight) never bring it, however long the list stays busy; a compaction
// that finds nothing locked does not read the clock.
func TestBusyWatch(t *testing.T) {
	type step struct {
		busy, tries int
		at          time.Duration // by the clock, from the start
		warn        bool
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"a lock held long", []step{
			{1, 1, 0, false}, {1, 2, 2 * time.Second, false}, {1, 3, 6 * time.Second, false},
			{1, 4, 14 * time.Second, true}, {1, 5, 30 * time.Second, false}, // once
		}},
		{"claims in flight", []step{
			{1, 1, 0, false}, {0, 0, time.Second, false}, {1, 1, 12 * time.Second, false},
			{2, 1, 25 * time.Second, false}, {1, 1, time.Minute, false},
		}},
		{"a second run warns again", []step{
			{1, 1, 0, false}, {1, 2, 11 * time.Second, true},
			{1, 1, 20 * time.Second, false}, {1, 2, 25 * time.Second, false}, {1, 3, 31 * time.Second, true},
		}},
		{"a run met midway (a new term)", []step{
			{1, 3, 0, false}, {1, 4, 9 * time.Second, false}, {1, 5, 10 * time.Second, true},
		}},
		{"another segment locked meanwhile", []step{
			{1, 1, 0, false}, {2, 2, 4 * time.Second, false}, {1, 2, 10 * time.Second, true},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Unix(1_000_000, 0)
			var w busyWatch
			for i, s := range c.steps {
				read := false
				now := func() time.Time { read = true; return start.Add(s.at) }
				locked, warn := w.observe(weirdriver.ReadyCompactResult{Busy: s.busy, BusyTries: s.tries}, now)
				if warn != s.warn {
					t.Fatalf("step %d (%d busy, try %d, at %v): warn %v, want %v", i, s.busy, s.tries, s.at, warn, s.warn)
				}
				if warn && locked < compactBusyWarnAfter {
					t.Fatalf("step %d: warned after %v", i, locked)
				}
				if s.busy == 0 && read {
					t.Fatalf("step %d: a compaction that found nothing locked read the clock", i)
				}
			}
		})
	}
}
