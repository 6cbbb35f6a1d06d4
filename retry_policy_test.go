package weir

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/weirq/weir/weirtype"
)

func TestExponentialBackoff(t *testing.T) {
	t.Parallel()
	p := ExponentialBackoff{}
	for attempt, want := range map[int]time.Duration{
		0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second,
		12: 2048 * time.Second, 13: time.Hour, 1000: time.Hour,
	} {
		if got := p.Delay(attempt); got != want {
			t.Errorf("Delay(%d) = %s, want %s", attempt, got, want)
		}
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p = ExponentialBackoff{Base: 10 * time.Second, Max: time.Minute, Jitter: 0.5, now: func() time.Time { return now }}
	seen := map[time.Time]bool{}
	for range 200 {
		at := p.NextRetry(&JobRow{Attempt: 2})
		d := at.Sub(now)
		if d < 10*time.Second || d > 30*time.Second {
			t.Fatalf("attempt 2 retries after %s, want 20s ± 50%%", d)
		}
		seen[at] = true
	}
	if len(seen) < 100 {
		t.Fatalf("only %d distinct retry times in 200: no jitter", len(seen))
	}
}

func TestOutcomeOf(t *testing.T) {
	t.Parallel()
	base := errors.New("boom")
	tests := []struct {
		err    error
		kind   outcomeKind
		snooze time.Duration
	}{
		{nil, outcomeCompleted, 0},
		{base, outcomeFailed, 0},
		{JobSnooze(time.Minute), outcomeSnooze, time.Minute},
		{fmt.Errorf("wrapped: %w", JobSnooze(time.Second)), outcomeSnooze, time.Second},
		{JobSnooze(-time.Second), outcomeSnooze, 0},
		{JobCancel(base), outcomeCancel, 0},
		{JobDiscard(nil), outcomeDiscard, 0},
		// Made without the constructors, by code that knows only weirtype.
		{&weirtype.JobCancelError{}, outcomeCancel, 0},
		{fmt.Errorf("wrapped: %w", &weirtype.JobDiscardError{Err: base}), outcomeDiscard, 0},
		{&weirtype.JobSnoozeError{Duration: time.Hour}, outcomeSnooze, time.Hour},
	}
	for _, tt := range tests {
		kind, snooze := outcomeOf(tt.err)
		if kind != tt.kind || snooze != tt.snooze {
			t.Errorf("outcomeOf(%v) = %d, %s; want %d, %s", tt.err, kind, snooze, tt.kind, tt.snooze)
		}
	}
	if !errors.Is(JobCancel(base), base) || !errors.Is(JobDiscard(base), base) {
		t.Error("JobCancel and JobDiscard do not unwrap to their cause")
	}
	if e, ok := errors.AsType[*weirtype.JobSnoozeError](JobSnooze(time.Minute)); !ok || e.Duration != time.Minute {
		t.Errorf("JobSnooze(1m) as a *weirtype.JobSnoozeError: %v, %v", e, ok)
	}
	for err, want := range map[error]string{
		JobSnooze(90 * time.Second): "job snoozed for 1m30s",
		JobCancel(nil):              "job cancelled",
		JobCancel(base):             "job cancelled: boom",
		JobDiscard(nil):             "job discarded",
		JobDiscard(base):            "job discarded: boom",
	} {
		if err.Error() != want {
			t.Errorf("%#v says %q, want %q", err, err.Error(), want)
		}
	}
}
