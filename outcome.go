package weir

import (
	"errors"
	"log/slog"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// finalization turns a handler's return into the outcome to write. policy is
// the client's retry policy, which entry's own overrides.
func finalizationOf(j *heldJob, entry *workerEntry, policy RetryPolicy, err, cause error, ran time.Duration) *finalization {
	f := &finalization{job: j, err: err, ran: ran, params: weirdriver.JobFinalizeParams{ID: j.row.ID, LeaseToken: j.token}}
	kind, snooze := outcomeOf(err)
	if kind == outcomeFailed && errors.Is(cause, ErrShutdown) {
		// The shutdown cancelled it: give the job back, without spending an attempt.
		f.params.Outcome = weirdriver.OutcomeRelease
		return f
	}
	attemptErr := func() *AttemptError {
		ae := &AttemptError{Attempt: j.row.Attempt, At: time.Now().UTC(), Error: storableText(err.Error())}
		var pe *PanicError
		if errors.As(err, &pe) {
			ae.Trace = storableText(pe.Stack)
		}
		return ae
	}
	switch kind {
	case outcomeCompleted:
		f.params.Outcome = weirdriver.OutcomeCompleted
	case outcomeSnooze:
		f.params.Outcome = weirdriver.OutcomeSnooze
		f.params.ScheduledAt = time.Now().Add(snooze)
	case outcomeCancel:
		f.params.Outcome, f.params.Error = weirdriver.OutcomeCancel, attemptErr()
	case outcomeDiscard:
		f.params.Outcome, f.params.Error = weirdriver.OutcomeDiscard, attemptErr()
	default:
		f.params.Error = attemptErr()
		if j.row.Attempt >= j.row.MaxAttempts {
			f.params.Outcome = weirdriver.OutcomeDiscard
			break
		}
		if entry != nil && entry.retry != nil {
			policy = entry.retry
		}
		f.params.Outcome = weirdriver.OutcomeRetry
		f.params.ScheduledAt = policy.NextRetry(j.row)
	}
	return f
}

// eventOf is the event published when an outcome is written.
func eventOf(o weirdriver.Outcome) EventKind {
	switch o {
	case weirdriver.OutcomeCompleted:
		return EventJobCompleted
	case weirdriver.OutcomeRetry:
		return EventJobFailed
	case weirdriver.OutcomeSnooze:
		return EventJobSnoozed
	case weirdriver.OutcomeCancel:
		return EventJobCancelled
	case weirdriver.OutcomeDiscard:
		return EventJobDiscarded
	default: // OutcomeRelease, OutcomeReturn: given back without spending an attempt
		return EventJobReleased
	}
}

// logFailure logs a failed attempt at WARN and a discarded job at ERROR, with
// the stack of a panic, rate-limited per kind. cause is why the handler's context
// ended, if it did.
func logFailure(limited *logLimiter, j *heldJob, f *finalization, cause error) {
	if errors.Is(cause, ErrJobCancelRequested) {
		return // an operator cancelled it: the job ends cancelled, not failed
	}
	var (
		level slog.Level
		msg   string
	)
	switch f.params.Outcome {
	case weirdriver.OutcomeRetry:
		level, msg = slog.LevelWarn, "weir: job attempt failed"
	case weirdriver.OutcomeDiscard:
		level, msg = slog.LevelError, "weir: job discarded"
	default:
		return
	}
	attrs := []any{"kind", j.row.Kind, "job_id", j.row.ID, "attempt", j.row.Attempt,
		"max_attempts", j.row.MaxAttempts, "error", f.err.Error()}
	if f.params.Outcome == weirdriver.OutcomeRetry {
		attrs = append(attrs, "retry_at", f.params.ScheduledAt)
	}
	if pe := (*PanicError)(nil); errors.As(f.err, &pe) {
		attrs = append(attrs, "stack", pe.Stack)
	}
	limited.log(level, msg, j.row.Kind, attrs...)
}
