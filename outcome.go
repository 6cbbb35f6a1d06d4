package weir

import (
	"errors"
	"log/slog"
	"time"

	"github.com/weirq/weir/internal/completer"
	"github.com/weirq/weir/internal/lease"
	"github.com/weirq/weir/weirdriver"
)

// finalization turns a handler's return into the outcome to write. policy is
// the client's retry policy, which entry's own overrides.
func finalizationOf(j *lease.Job, entry *workerEntry, policy RetryPolicy, err, cause error, ran time.Duration) *completer.Finalization {
	f := &completer.Finalization{Job: j, Err: err, Ran: ran, Params: weirdriver.JobFinalizeParams{ID: j.Row.ID, LeaseToken: j.Token}}
	kind, snooze := outcomeOf(err)
	if kind == outcomeFailed && errors.Is(cause, ErrShutdown) {
		// The shutdown cancelled it: give the job back, without spending an attempt.
		f.Params.Outcome = weirdriver.OutcomeRelease
		return f
	}
	attemptErr := func() *AttemptError {
		ae := &AttemptError{Attempt: j.Row.Attempt, At: time.Now().UTC(), Error: storableText(err.Error())}
		var pe *PanicError
		if errors.As(err, &pe) {
			ae.Trace = storableText(pe.Stack)
		}
		return ae
	}
	switch kind {
	case outcomeCompleted:
		f.Params.Outcome = weirdriver.OutcomeCompleted
	case outcomeSnooze:
		f.Params.Outcome = weirdriver.OutcomeSnooze
		f.Params.ScheduledAt = time.Now().Add(snooze)
	case outcomeCancel:
		f.Params.Outcome, f.Params.Error = weirdriver.OutcomeCancel, attemptErr()
	case outcomeDiscard:
		f.Params.Outcome, f.Params.Error = weirdriver.OutcomeDiscard, attemptErr()
	default:
		f.Params.Error = attemptErr()
		if j.Row.Attempt >= j.Row.MaxAttempts {
			f.Params.Outcome = weirdriver.OutcomeDiscard
			break
		}
		if entry != nil && entry.retry != nil {
			policy = entry.retry
		}
		f.Params.Outcome = weirdriver.OutcomeRetry
		f.Params.ScheduledAt = policy.NextRetry(j.Row)
	}
	return f
}

// withReturned puts into fin what the handler left when it returned: whether
// it completed the job in its own transaction, the progress no renewal wrote
// yet, and its output, stored only with a completion.
func withReturned(fin *completer.Finalization, left lease.Returned) {
	fin.CompletedInTx, fin.Params.Progress = left.CompletedInTx, left.Progress
	if fin.Params.Outcome == weirdriver.OutcomeCompleted {
		fin.Params.Output = left.Output
	}
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
func logFailure(limited *logLimiter, j *lease.Job, f *completer.Finalization, cause error) {
	if errors.Is(cause, ErrJobCancelRequested) {
		return // an operator cancelled it: the job ends cancelled, not failed
	}
	var (
		level slog.Level
		msg   string
	)
	switch f.Params.Outcome {
	case weirdriver.OutcomeRetry:
		level, msg = slog.LevelWarn, "weir: job attempt failed"
	case weirdriver.OutcomeDiscard:
		level, msg = slog.LevelError, "weir: job discarded"
	default:
		return
	}
	attrs := []any{slog.String("error", f.Err.Error())}
	if f.Params.Outcome == weirdriver.OutcomeRetry {
		attrs = append(attrs, slog.Time("retry_at", f.Params.ScheduledAt))
	}
	if pe := (*PanicError)(nil); errors.As(f.Err, &pe) {
		attrs = append(attrs, slog.String("stack", pe.Stack))
	}
	limited.job(level, msg, j.Row, j.Token, attrs...)
}
