package weir

import (
	"context"
	"encoding/json"

	"github.com/weirq/weir/internal/lease"
)

// RecordOutput records v, encoded as JSON, as the output of the job whose
// handler runs with ctx (the handler's context, or one derived from it). The
// output is written with the job's completion, in the same statement, fenced
// like it: it is stored only if this attempt completes the job, and then
// atomically with the completion. If the attempt does not complete — the
// handler returns an error, snoozes, cancels or discards the job, a requested
// cancel wins, the lease is lost, or a shutdown releases the job — the output
// is not stored, and a later attempt records its own. Called more than once,
// the last value wins. It reads as JobRow.Output (Client.JobGet, weir jobs
// show).
//
// With JobCompleteTx, record the output before that call: the completion in
// the handler's transaction writes it, and a RecordOutput after it returns an
// error.
//
// It returns an *InvalidError, recording nothing, when ctx is not a handler's,
// when v does not encode to JSON that both stores keep alike, or when its
// encoding is longer than Config.MaxArgsBytes (the limit on args), and an
// error when the handler has already returned.
func RecordOutput(ctx context.Context, v any) error {
	scope, j, err := attemptOf(ctx, "RecordOutput")
	if err != nil {
		return err
	}
	b, err := encodeRecorded(scope, "output", v)
	if err != nil {
		return err
	}
	switch runs, inTx := scope.leases.RecordOutput(j, b); {
	case inTx:
		return invalidf("ctx", "RecordOutput after JobCompleteTx: the job's completion in the handler's transaction already wrote its output; record it before JobCompleteTx")
	case !runs:
		return invalidf("ctx", "RecordOutput after the handler of job %d returned", j.Row.ID)
	}
	return nil
}

// SetProgress records v, encoded as JSON, as the progress of the job whose
// handler runs with ctx: a checkpoint saying how far the attempt got, so that
// the next attempt (after an error, a snooze, a release at shutdown, or a
// crash and rescue) can resume there. It reads it as Job[T].Progress (the
// JobRow's Progress).
//
// SetProgress only keeps v in memory, and costs no statement of its own: the
// next lease renewal (every Config.HeartbeatInterval) writes the latest value
// in the statement that renews the lease, fenced by the lease token, and the
// attempt's outcome writes it if it changed since. So a crash loses at most the
// progress recorded since the last renewal, and a renewal or outcome under a
// lease the client no longer holds writes nothing. The progress is kept when
// the job completes, for operators to inspect (JobRow.Progress, weir jobs
// show).
//
// It returns an *InvalidError, recording nothing, on the terms RecordOutput
// does (ctx, encoding, Config.MaxArgsBytes).
func SetProgress(ctx context.Context, v any) error {
	scope, j, err := attemptOf(ctx, "SetProgress")
	if err != nil {
		return err
	}
	b, err := encodeRecorded(scope, "progress", v)
	if err != nil {
		return err
	}
	if !scope.leases.SetProgress(j, b) {
		return invalidf("ctx", "SetProgress after the handler of job %d returned", j.Row.ID)
	}
	return nil
}

// attemptOf returns the client and the job of the handler whose context is
// ctx, or an *InvalidError naming the call.
func attemptOf(ctx context.Context, call string) (*handlerScope, *lease.Job, error) {
	if ctx == nil {
		return nil, nil, invalidf("ctx", "%s needs the context of the handler that runs the job; it is nil", call)
	}
	scope, _ := ctx.Value(handlerScopeKey{}).(*handlerScope)
	j := lease.FromContext(ctx)
	if scope == nil || j == nil {
		return nil, nil, invalidf("ctx", "%s needs the context of the handler that runs the job; it was called outside a handler", call)
	}
	return scope, j, nil
}

// encodeRecorded encodes v, the output or progress (what), checks it as args
// are checked (JSON both stores keep alike, within Config.MaxArgsBytes), and
// returns it compacted.
func encodeRecorded(scope *handlerScope, what string, v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, invalidf("v", "%s does not encode to JSON: %v", what, err)
	}
	if len(b) > scope.maxBytes {
		return nil, invalidf("v", "%s is %d bytes; the limit is %d (Config.MaxArgsBytes)", what, len(b), scope.maxBytes)
	}
	// encoding/json writes invalid UTF-8 in a Go string as \ufffd: refused, as
	// in args, unless the caller gave the JSON as written.
	_, raw := v.(json.RawMessage)
	var check jsonChecker
	if err := check.check(b, !raw); err != nil {
		return nil, invalidf("v", "%s has %v", what, err)
	}
	return b, nil
}
