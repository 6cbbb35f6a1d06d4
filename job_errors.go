package weir

import (
	"errors"
	"time"

	"github.com/weirq/weir/weirtype"
)

// A handler's error decides what becomes of its job: nil completes it; the errors
// made by JobSnooze, JobCancel and JobDiscard snooze, cancel or discard it; any other
// error fails the attempt, and the job is retried with backoff until it runs out of
// attempts, then discarded.

// JobSnooze returns an error that re-schedules the job after d without spending an
// attempt. A negative d counts as zero.
func JobSnooze(d time.Duration) error {
	return &JobSnoozeError{Duration: d}
}

// JobCancel returns an error that ends the job cancelled, whatever attempts it has
// left; err (which may be nil) is recorded as the attempt's error.
func JobCancel(err error) error {
	return &JobCancelError{Err: err}
}

// JobDiscard returns an error that ends the job discarded, whatever attempts it has
// left; err (which may be nil) is recorded as the attempt's error.
func JobDiscard(err error) error {
	return &JobDiscardError{Err: err}
}

// The outcome errors are weirtype's, so that errors.As matches either name.
type (
	// JobSnoozeError is the error JobSnooze returns.
	JobSnoozeError = weirtype.JobSnoozeError
	// JobCancelError is the error JobCancel returns.
	JobCancelError = weirtype.JobCancelError
	// JobDiscardError is the error JobDiscard returns.
	JobDiscardError = weirtype.JobDiscardError
)

// outcomeOf classifies a handler's error. snooze is set for a snooze.
func outcomeOf(err error) (kind outcomeKind, snooze time.Duration) {
	if err == nil {
		return outcomeCompleted, 0
	}
	if s, ok := errors.AsType[*JobSnoozeError](err); ok {
		return outcomeSnooze, max(s.Duration, 0)
	}
	if _, ok := errors.AsType[*JobCancelError](err); ok {
		return outcomeCancel, 0
	}
	if _, ok := errors.AsType[*JobDiscardError](err); ok {
		return outcomeDiscard, 0
	}
	return outcomeFailed, 0
}

type outcomeKind int

const (
	outcomeCompleted outcomeKind = iota
	outcomeFailed
	outcomeSnooze
	outcomeCancel
	outcomeDiscard
)
