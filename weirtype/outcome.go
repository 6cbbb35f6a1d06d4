package weirtype

import (
	"fmt"
	"time"
)

// The errors with which a handler chooses its job's outcome, made by weir's
// JobSnooze, JobCancel and JobDiscard. They live here, with the cancel causes,
// so that code that only observes outcomes (middleware, hooks, a driver's tests)
// can tell them apart with errors.As without importing weir. The weir package
// re-exports them.

// JobSnoozeError re-schedules the job after Duration without spending an
// attempt. A negative Duration counts as zero.
type JobSnoozeError struct {
	Duration time.Duration
}

func (e *JobSnoozeError) Error() string { return fmt.Sprintf("job snoozed for %s", e.Duration) }

// JobCancelError ends the job cancelled, whatever attempts it has left. Err,
// which may be nil, is recorded as the attempt's error.
type JobCancelError struct {
	Err error
}

func (e *JobCancelError) Error() string {
	if e.Err == nil {
		return "job cancelled"
	}
	return "job cancelled: " + e.Err.Error()
}

func (e *JobCancelError) Unwrap() error { return e.Err }

// JobDiscardError ends the job discarded, whatever attempts it has left. Err,
// which may be nil, is recorded as the attempt's error.
type JobDiscardError struct {
	Err error
}

func (e *JobDiscardError) Error() string {
	if e.Err == nil {
		return "job discarded"
	}
	return "job discarded: " + e.Err.Error()
}

func (e *JobDiscardError) Unwrap() error { return e.Err }
