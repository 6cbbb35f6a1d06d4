package weirotel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirq/weir"
)

// messagingSystem names weir in the messaging.system attribute.
var messagingSystem = semconv.MessagingSystemKey.String("weir")

// InsertMiddleware returns the insert middleware: one producer span per insert
// call, with the whole batch (a span per job would cost as much as the insert
// itself for large batches), whose context it writes into every job's metadata
// when the span is sampled (always with Config.AttemptAsChild), and the count
// of jobs inserted.
func (t *Telemetry) InsertMiddleware() weir.InsertMiddleware {
	return func(next weir.InsertHandler) weir.InsertHandler {
		return func(ctx context.Context, jobs []*weir.InsertParams) ([]*weir.InsertResult, error) {
			name, attrs := insertSpan(jobs)
			ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
			defer span.End()
			// A link to a span that was not sampled leads nowhere, so a job
			// carries the context only of a sampled span, unless its attempts
			// are to be its children, which follow its sampling decision.
			carrier := propagation.MapCarrier{}
			if t.asChild || span.SpanContext().IsSampled() {
				t.propagator.Inject(ctx, carrier)
			}
			if value := carrierJSON(carrier); value != nil {
				for _, job := range jobs {
					if job != nil {
						job.Metadata = withKey(job.Metadata, value)
					}
				}
			}

			results, err := next(ctx, jobs)
			if err != nil {
				fail(span, fmt.Sprintf("%T", err), err)
				return results, err
			}
			if len(results) == 1 && results[0] != nil && results[0].Job != nil {
				span.SetAttributes(semconv.MessagingMessageID(strconv.FormatInt(results[0].Job.ID, 10)),
					DuplicateKey.Bool(results[0].Duplicate), ReplacedKey.Bool(results[0].Replaced))
			}
			for _, r := range results {
				if r != nil && r.Job != nil && !r.Duplicate {
					t.inserted.Add(ctx, 1, t.sets.get(setKey{queue: r.Job.Queue, kind: r.Job.Kind}).add...)
				}
			}
			return results, nil
		}
	}
}

// insertSpan names an insert call's span and gives its attributes: the queue
// and kind when every job shares them, the batch's size when it has several.
func insertSpan(jobs []*weir.InsertParams) (string, []attribute.KeyValue) {
	attrs := []attribute.KeyValue{messagingSystem,
		semconv.MessagingOperationName("insert"), semconv.MessagingOperationTypeSend}
	if len(jobs) != 1 {
		attrs = append(attrs, semconv.MessagingBatchMessageCount(len(jobs)))
	}
	var queue, kind string
	for i, job := range jobs {
		if job == nil {
			return "insert", attrs // the client refuses the batch
		}
		if i == 0 {
			queue, kind = job.Queue, job.Kind
		}
		if job.Queue != queue {
			queue = ""
		}
		if job.Kind != kind {
			kind = ""
		}
	}
	if kind != "" {
		attrs = append(attrs, KindKey.String(kind))
	}
	if queue == "" {
		return "insert", attrs
	}
	return "insert " + queue, append(attrs, semconv.MessagingDestinationName(queue))
}

// withKey returns the metadata object meta with MetadataKey set to value, its
// other keys kept. Metadata that is not a JSON object is returned as it is, for
// the client to refuse with its own error.
func withKey(meta json.RawMessage, value json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(meta)) == 0 { // most jobs: no decoding needed
		return slices.Concat([]byte(`{"`+MetadataKey+`":`), value, []byte("}"))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(meta, &fields); err != nil || fields == nil {
		return meta
	}
	fields[MetadataKey] = value
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep the caller's values as they wrote them
	if err := enc.Encode(fields); err != nil {
		return meta
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// carrierJSON encodes the propagator's fields as a job's metadata carries
// them: the traceparent alone as a string (the W3C default: the fewest bytes
// in every row), anything else as an object; nil if there are none.
func carrierJSON(carrier propagation.MapCarrier) json.RawMessage {
	var value []byte
	switch tp, ok := carrier[traceparentField]; {
	case len(carrier) == 0:
		return nil
	case len(carrier) == 1 && ok:
		value, _ = json.Marshal(tp) // a string always encodes
	default:
		value, _ = json.Marshal(carrier) // a map of strings always encodes
	}
	return value
}

// WorkerMiddleware returns the worker middleware: a consumer span per attempt,
// linked to the span that inserted the job (its child with
// Config.AttemptAsChild), the pickup latency, and the handlers busy. The
// worker's context carries the span, so the worker's own spans are its
// children.
func (t *Telemetry) WorkerMiddleware() weir.WorkerMiddleware {
	return func(next weir.WorkHandler) weir.WorkHandler {
		return func(ctx context.Context, job *weir.JobRow) (err error) {
			s := t.sets.get(setKey{queue: job.Queue, kind: job.Kind})
			// The scheduled time is when the job became due: at insert, or
			// at the end of its retry backoff or snooze.
			t.pickup.Record(ctx, max(time.Since(job.ScheduledAt).Seconds(), 0), s.record...)
			busy := &t.overflowBusy
			if s.cached {
				busy = &s.busy
				if !s.worked.Load() {
					s.worked.Store(true)
				}
			}
			busy.Add(1)
			ctx, span := t.startAttempt(ctx, job, s)
			defer func() {
				busy.Add(-1)
				// The client recovers a worker's panic outside the middleware:
				// record it here and let it go on, its stack intact.
				if p := recover(); p != nil {
					if span.IsRecording() {
						setAttempt(ctx, span, job, s, "panicked")
						fail(span, "panic", fmt.Errorf("panic: %v", p), trace.WithStackTrace(true))
					}
					span.End()
					panic(p)
				}
				endAttempt(ctx, span, job, s, err)
			}()
			return next(ctx, job)
		}
	}
}

// The attempt span's start options and fixed attributes, made once.
var (
	consumerKind     = trace.WithSpanKind(trace.SpanKindConsumer)
	newRoot          = trace.WithNewRoot()
	processOperation = semconv.MessagingOperationName("process")
)

// startAttempt starts an attempt's span, linked to the insert span whose
// context the job's metadata carries, if any. Its attributes are set when it
// ends (setAttempt), so that an attempt whose span is not sampled builds none:
// a sampler sees the span's name, kind and link.
func (t *Telemetry) startAttempt(ctx context.Context, job *weir.JobRow, s *series) (context.Context, trace.Span) {
	ctx, remote := t.extract(ctx, job.Metadata)
	if !remote.IsValid() {
		return t.tracer.Start(ctx, s.spanName, consumerKind, newRoot)
	}
	link := trace.WithLinks(trace.Link{SpanContext: remote})
	if t.asChild {
		return t.tracer.Start(ctx, s.spanName, consumerKind, link)
	}
	// The insert span is the only parent an attempt may have.
	return t.tracer.Start(ctx, s.spanName, consumerKind, link, newRoot)
}

// extract returns the insert span's context that the job's metadata carries
// (invalid if none), and ctx with what the propagator read: the insert span as
// the remote parent and the baggage, if the propagator reads any. A
// traceparent alone, read with W3C Trace Context, is parsed without the
// propagator, and put in ctx only for an attempt to be its child.
func (t *Telemetry) extract(ctx context.Context, meta json.RawMessage) (context.Context, trace.SpanContext) {
	c, ok := carrierOf(meta)
	if !ok {
		return ctx, trace.SpanContext{}
	}
	if t.w3c && c.fields == nil {
		sc := parseTraceparent(c.traceparent)
		if sc.IsValid() && t.asChild {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
		return ctx, sc
	}
	ctx = t.propagator.Extract(ctx, c.carrier())
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && sc.IsRemote() {
		return ctx, sc
	}
	return ctx, trace.SpanContext{}
}

// endAttempt sets what the handler returned on its span and ends it. Whether a
// failed attempt is retried or discarded is the outcome, written after the
// span ends: the weir.attempts metric counts it.
func endAttempt(ctx context.Context, span trace.Span, job *weir.JobRow, s *series, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	switch {
	case err == nil:
		setAttempt(ctx, span, job, s, "completed")
	case errors.As(err, new(*weir.JobSnoozeError)):
		setAttempt(ctx, span, job, s, "snoozed")
	case errors.As(err, new(*weir.JobCancelError)):
		setAttempt(ctx, span, job, s, "cancelled")
		span.RecordError(err)
	case errors.As(err, new(*weir.JobDiscardError)):
		setAttempt(ctx, span, job, s, "discarded")
		fail(span, fmt.Sprintf("%T", err), err)
	default:
		setAttempt(ctx, span, job, s, "failed")
		fail(span, fmt.Sprintf("%T", err), err)
	}
	span.End()
}

// setAttempt sets an attempt span's attributes in one call: the messaging
// conventions', weir's, the handler's result and, if the attempt's context
// ended first, why.
func setAttempt(ctx context.Context, span trace.Span, job *weir.JobRow, s *series, result string) {
	buf := attemptAttrs.Get().(*[]attribute.KeyValue)
	defer attemptAttrs.Put(buf)
	attrs := append((*buf)[:0], messagingSystem, processOperation, semconv.MessagingOperationTypeProcess,
		s.queue, semconv.MessagingMessageID(strconv.FormatInt(job.ID, 10)), s.kind,
		AttemptKey.Int(job.Attempt), PriorityKey.Int(job.Priority), LeaseTokenKey.Int64(job.LeaseToken),
		ResultKey.String(result))
	if ctx.Err() != nil {
		attrs = append(attrs, InterruptedKey.String(context.Cause(ctx).Error()))
	}
	span.SetAttributes(attrs...) // which copies them
	clear(attrs)
	*buf = attrs
}

// attemptAttrs keeps the slices setAttempt passes to SetAttributes, which
// escape: an attempt would allocate one.
var attemptAttrs = sync.Pool{New: func() any { return new(make([]attribute.KeyValue, 0, 11)) }}

// fail records err on span and marks the span failed; errType is its
// error.type attribute.
func fail(span trace.Span, errType string, err error, opts ...trace.EventOption) {
	span.SetAttributes(semconv.ErrorTypeKey.String(errType))
	span.RecordError(err, opts...)
	span.SetStatus(codes.Error, err.Error())
}
