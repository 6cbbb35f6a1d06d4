package weir

import (
	"errors"
	"fmt"
	"time"
)

// A handler's error decides what becomes of its job: nil completes it; the errors
// made by JobSnooze, JobCancel and JobDiscard snooze, cancel or discard it; any other
// error fails the attempt, and the job is retried with backoff until it runs out of
// attempts, then discarded.

// JobSnooze returns an error that re-schedules the job after d without spending an
// attempt. d must not be negative.
func JobSnooze(d time.Duration) error {
	return &snoozeError{after: d}
}

// JobCancel returns an error that ends the job cancelled, whatever attempts it has
// left; err (which may be nil) is recorded as the attempt's error.
func JobCancel(err error) error {
	return &cancelError{err: err}
}

// JobDiscard returns an error that ends the job discarded, whatever attempts it has
// left; err (which may be nil) is recorded as the attempt's error.
func JobDiscard(err error) error {
	return &discardError{err: err}
}

type snoozeError struct{ after time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("job snoozed for %s", e.after) }

type cancelError struct{ err error }

func (e *cancelError) Error() string {
	if e.err == nil {
		return "job cancelled"
	}
	return "job cancelled: " + e.err.Error()
}

func (e *cancelError) Unwrap() error { return e.err }

type discardError struct{ err error }

func (e *discardError) Error() string {
	if e.err == nil {
		return "job discarded"
	}
	return "job discarded: " + e.err.Error()
}

func (e *discardError) Unwrap() error { return e.err }

// outcomeOf classifies a handler's error. snooze is set for a snooze.
func outcomeOf(err error) (kind outcomeKind, snooze time.Duration) {
	var (
		s *snoozeError
		c *cancelError
		d *discardError
	)
	switch {
	case err == nil:
		return outcomeCompleted, 0
	case errors.As(err, &s):
		return outcomeSnooze, max(s.after, 0)
	case errors.As(err, &c):
		return outcomeCancel, 0
	case errors.As(err, &d):
		return outcomeDiscard, 0
	default:
		return outcomeFailed, 0
	}
}

type outcomeKind int

const (
	outcomeCompleted outcomeKind = iota
	outcomeFailed
	outcomeSnooze
	outcomeCancel
	outcomeDiscard
)
