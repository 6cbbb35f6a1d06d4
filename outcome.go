package weir

import (
	"errors"
	"log/slog"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// staleWrite counts and logs a fenced write that matched nothing.
func (e *engine) staleWrite(j *heldJob, what string) {
	e.stats.staleWrites.Add(1)
	e.logger.Warn("weir: stale write ignored: the lease was lost", "job_id", j.row.ID,
		"lease_token", j.token, "write", what)
	e.events.emit(EventStaleWrite, j.row, nil, 0)
}

// finalization turns a handler's return into the outcome to write.
func (e *engine) finalization(j *heldJob, entry *workerEntry, err, cause error, ran time.Duration) *finalization {
	f := &finalization{job: j, err: err, ran: ran, params: weirdriver.JobFinalizeParams{ID: j.row.ID, LeaseToken: j.token}}
	kind, snooze := outcomeOf(err)
	if kind == outcomeFailed && errors.Is(cause, ErrShutdown) {
		// The shutdown cancelled it: give the job back, without spending an attempt.
		f.params.Outcome, f.event = weirdriver.OutcomeRelease, EventJobReleased
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
		f.params.Outcome, f.event = weirdriver.OutcomeCompleted, EventJobCompleted
	case outcomeSnooze:
		f.params.Outcome, f.event = weirdriver.OutcomeSnooze, EventJobSnoozed
		f.params.ScheduledAt = time.Now().Add(snooze)
	case outcomeCancel:
		f.params.Outcome, f.event, f.params.Error = weirdriver.OutcomeCancel, EventJobCancelled, attemptErr()
	case outcomeDiscard:
		f.params.Outcome, f.event, f.params.Error = weirdriver.OutcomeDiscard, EventJobDiscarded, attemptErr()
	default:
		f.params.Error = attemptErr()
		if j.row.Attempt >= j.row.MaxAttempts {
			f.params.Outcome, f.event = weirdriver.OutcomeDiscard, EventJobDiscarded
			break
		}
		policy := e.cfg.RetryPolicy
		if entry != nil && entry.retry != nil {
			policy = entry.retry
		}
		f.params.Outcome, f.event = weirdriver.OutcomeRetry, EventJobFailed
		f.params.ScheduledAt = policy.NextRetry(j.row)
	}
	return f
}

// logFailure logs a failed attempt at WARN and a discarded job at ERROR, with
// the stack of a panic, rate-limited per kind. cause is why the handler's context
// ended, if it did.
func (e *engine) logFailure(j *heldJob, f *finalization, cause error) {
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
	e.limited.log(level, msg, j.row.Kind, attrs...)
}
