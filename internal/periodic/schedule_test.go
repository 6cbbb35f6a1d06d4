package periodic

import (
	"strings"
	"testing"
	"time"
)

// slots returns the first n slots of spec in zone after from.
func slots(t *testing.T, spec, zone string, from time.Time, n int) []time.Time {
	t.Helper()
	s, err := Parse(spec, zone)
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Time
	for at := from; len(out) < n; {
		at = s.Next(at)
		out = append(out, at)
	}
	return out
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func wantSlots(t *testing.T, what string, got []time.Time, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d slots, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !got[i].Equal(utc(want[i])) {
			t.Fatalf("%s: slot %d is %s (%s), want %s", what, i, got[i].UTC().Format(time.RFC3339), got[i], want[i])
		}
	}
}

// TestScheduleDST: in Europe/Berlin, 02:30 does not exist on the
// spring-forward day and happens twice on the fall-back day. Each wall-clock
// time fires once: the skipped one at the jump (03:00 CEST), the repeated one
// at its first occurrence.
func TestScheduleDST(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	wantSlots(t, "02:30 daily around spring forward",
		slots(t, "30 2 * * *", "Europe/Berlin", time.Date(2026, 3, 27, 12, 0, 0, 0, berlin), 3),
		"2026-03-28T01:30:00Z", // 02:30 CET
		"2026-03-29T01:00:00Z", // the jump from 02:00 CET to 03:00 CEST
		"2026-03-30T00:30:00Z", // 02:30 CEST
	)
	wantSlots(t, "02:30 daily around fall back",
		slots(t, "30 2 * * *", "Europe/Berlin", time.Date(2026, 10, 24, 12, 0, 0, 0, berlin), 2),
		"2026-10-25T00:30:00Z", // 02:30 CEST; not again at 02:30 CET
		"2026-10-26T01:30:00Z",
	)
	wantSlots(t, "hourly around fall back",
		slots(t, "0 * * * *", "Europe/Berlin", time.Date(2026, 10, 25, 0, 30, 0, 0, berlin), 4),
		"2026-10-24T23:00:00Z", // 01:00 CEST
		"2026-10-25T00:00:00Z", // 02:00 CEST
		"2026-10-25T02:00:00Z", // 03:00 CET: 02:00 CET repeats 02:00
		"2026-10-25T03:00:00Z",
	)
	wantSlots(t, "hourly around spring forward",
		slots(t, "0 * * * *", "Europe/Berlin", time.Date(2026, 3, 29, 0, 30, 0, 0, berlin), 3),
		"2026-03-29T00:00:00Z", // 01:00 CET
		"2026-03-29T01:00:00Z", // 02:00 CET is skipped: it fires at the jump, which is 03:00 CEST
		"2026-03-29T02:00:00Z", // 04:00 CEST
	)
	wantSlots(t, "every 90 minutes across spring forward (real time)",
		slots(t, "@every 90m", "Europe/Berlin", utc("2026-03-29T00:00:00Z"), 2),
		"2026-03-29T01:30:00Z", "2026-03-29T03:00:00Z",
	)
	wantSlots(t, "seconds field, UTC",
		slots(t, "*/20 * * * * *", "", utc("2026-01-01T00:00:05Z"), 3),
		"2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z",
	)
}

func TestParseScheduleRefuses(t *testing.T) {
	for _, c := range []struct{ spec, zone, want string }{
		{"", "", "schedule is empty"},
		{"61 * * * *", "", `schedule "61 * * * *"`},
		{"* * *", "", `schedule "* * *"`},
		{"@every 500ms", "", "whole number of seconds"},
		{"@every 1500ms", "", "whole number of seconds"},
		{"@every soon", "", `schedule "@every soon"`},
		{"@every 3", "", `schedule "@every 3": the interval needs a unit, such as "3s" for 3 seconds`},
		{"@every 90", "", `such as "90s"`},
		{"0 * * * *", "Mars/Olympus", `time zone "Mars/Olympus"`},
		{"CRON_TZ=UTC 0 * * * *", "", "set PeriodicJob.TimeZone"},
	} {
		_, err := Parse(c.spec, c.zone)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q, %q): %v, want an error saying %q", c.spec, c.zone, err, c.want)
		}
	}
}
