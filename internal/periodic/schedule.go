package periodic

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// cronParser reads the schedules of periodic jobs: five fields (minute, hour,
// day of month, month, day of week), an optional leading seconds field, and
// the descriptors @yearly, @monthly, @weekly, @daily, @hourly and @every D.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Schedule is a periodic job's parsed schedule in its time zone.
type Schedule struct {
	spec cron.Schedule
	loc  *time.Location
	// every is set for @every schedules: slots a fixed duration apart in real
	// time, which daylight saving does not move.
	every bool
}

// Parse parses spec in the IANA time zone zone ("" is UTC).
func Parse(spec, zone string) (*Schedule, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("schedule is empty")
	}
	if strings.Contains(spec, "TZ=") {
		return nil, fmt.Errorf("schedule %q names a time zone; set PeriodicJob.TimeZone instead", spec)
	}
	loc := time.UTC
	if zone != "" {
		var err error
		if loc, err = time.LoadLocation(zone); err != nil {
			return nil, fmt.Errorf("time zone %q is not an IANA time zone name", zone)
		}
	}
	if d, ok := strings.CutPrefix(spec, "@every "); ok {
		// The parser would round the interval to whole seconds, up to one.
		d = strings.TrimSpace(d)
		every, err := time.ParseDuration(d)
		switch {
		case isDigits(d):
			// A bare number could mean seconds or minutes: the unit says.
			return nil, fmt.Errorf("schedule %q: the interval needs a unit, such as %q for %s seconds (or m, h)", spec, d+"s", d)
		case err != nil:
			return nil, fmt.Errorf("schedule %q: %v", spec, err)
		case every < time.Second || every%time.Second != 0:
			return nil, fmt.Errorf("schedule %q: the interval must be a whole number of seconds, at least one", spec)
		}
	}
	parsed, err := cronParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %v", spec, err)
	}
	_, every := parsed.(cron.ConstantDelaySchedule)
	return &Schedule{spec: parsed, loc: loc, every: every}, nil
}

// isDigits reports whether s is a number without sign, point or unit.
func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// Next returns the first slot after t, or the zero time when there is none.
//
// A slot is a wall-clock time in the schedule's zone, and each fires once:
// wall times that a spring-forward transition skips fire once, at the moment
// of the jump; wall times that a fall-back transition repeats fire at their
// first occurrence only. @every schedules run in real time.
func (s *Schedule) Next(t time.Time) time.Time {
	t = t.In(s.loc)
	if s.every {
		return s.spec.Next(t)
	}
	for {
		n := s.spec.Next(t)
		if n.IsZero() {
			return n
		}
		if jump, ok := s.skipped(t, n); ok {
			return jump
		}
		if !repeated(n) {
			return n
		}
		t = n
	}
}

// skipped reports the earliest spring-forward jump in (t, n] that skipped a
// wall time matching the schedule: that slot fires at the jump.
func (s *Schedule) skipped(t, n time.Time) (time.Time, bool) {
	var (
		earliest time.Time
		found    bool
	)
	for u := n; ; {
		start, _ := u.ZoneBounds()
		if start.IsZero() || !start.After(t) {
			return earliest, found
		}
		_, newOffset := start.Zone()
		_, oldOffset := start.Add(-time.Nanosecond).Zone()
		if newOffset > oldOffset {
			// The skipped wall times, read in the old offset, are the
			// instants [start, start+jump).
			old := time.FixedZone("", oldOffset)
			m := s.spec.Next(start.Add(-time.Nanosecond).In(old))
			if !m.IsZero() && m.Before(start.Add(time.Duration(newOffset-oldOffset)*time.Second)) {
				earliest, found = start, true
			}
		}
		u = start.Add(-time.Nanosecond)
	}
}

// repeated reports whether n's wall time already occurred before a fall-back
// transition.
func repeated(n time.Time) bool {
	start, _ := n.ZoneBounds()
	if start.IsZero() {
		return false
	}
	_, cur := n.Zone()
	_, prev := start.Add(-time.Nanosecond).Zone()
	return prev > cur && n.Sub(start) < time.Duration(prev-cur)*time.Second
}
