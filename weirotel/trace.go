package weirotel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
// itself for large batches), whose context it writes into every job's metadata,
// and the count of jobs inserted.
func (t *Telemetry) InsertMiddleware() weir.InsertMiddleware {
	return func(next weir.InsertHandler) weir.InsertHandler {
		return func(ctx context.Context, jobs []*weir.InsertParams) ([]*weir.InsertResult, error) {
			name, attrs := insertSpan(jobs)
			ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
			defer span.End()
			carrier := propagation.MapCarrier{}
			t.propagator.Inject(ctx, carrier)
			if len(carrier) > 0 {
				value, _ := json.Marshal(carrier) // a map of strings always encodes
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
					DuplicateKey.Bool(results[0].Duplicate))
			}
			for _, r := range results {
				if r != nil && r.Job != nil && !r.Duplicate {
					t.inserted.Add(ctx, 1, t.sets.get(setKey{queue: r.Job.Queue, kind: r.Job.Kind}))
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

// WorkerMiddleware returns the worker middleware: a consumer span per attempt,
// linked to the span that inserted the job (its child with
// Config.AttemptAsChild), the pickup latency, and the handlers busy. The
// worker's context carries the span, so the worker's own spans are its
// children.
func (t *Telemetry) WorkerMiddleware() weir.WorkerMiddleware {
	return func(next weir.WorkHandler) weir.WorkHandler {
		return func(ctx context.Context, job *weir.JobRow) (err error) {
			jobAttrs := t.sets.get(setKey{queue: job.Queue, kind: job.Kind})
			// The scheduled time is when the job became due: at insert, or
			// at the end of its retry backoff or snooze.
			t.pickup.Record(ctx, max(time.Since(job.ScheduledAt).Seconds(), 0), jobAttrs)
			t.busy.Add(ctx, 1, jobAttrs)
			ctx, span := t.startAttempt(ctx, job)
			defer func() {
				t.busy.Add(ctx, -1, jobAttrs)
				// The client recovers a worker's panic outside the middleware:
				// record it here and let it go on, its stack intact.
				if p := recover(); p != nil {
					span.SetAttributes(ResultKey.String("panicked"))
					fail(span, "panic", fmt.Errorf("panic: %v", p), trace.WithStackTrace(true))
					span.End()
					panic(p)
				}
				endAttempt(ctx, span, err)
			}()
			return next(ctx, job)
		}
	}
}

// startAttempt starts an attempt's span, linked to the insert span whose
// context the job's metadata carries, if any.
func (t *Telemetry) startAttempt(ctx context.Context, job *weir.JobRow) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(messagingSystem,
			semconv.MessagingOperationName("process"), semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationName(job.Queue),
			semconv.MessagingMessageID(strconv.FormatInt(job.ID, 10)),
			KindKey.String(job.Kind), AttemptKey.Int(job.Attempt), PriorityKey.Int(job.Priority),
			LeaseTokenKey.Int64(job.LeaseToken)),
	}
	linked := false
	if carrier := carrierOf(job.Metadata); carrier != nil {
		// The extracted context carries the baggage, if the propagator
		// reads any, and the insert span as the remote parent.
		ctx = t.propagator.Extract(ctx, carrier)
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && sc.IsRemote() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
			linked = true
		}
	}
	// The insert span is the only parent an attempt may have.
	if !t.asChild || !linked {
		opts = append(opts, trace.WithNewRoot())
	}
	return t.tracer.Start(ctx, "process "+job.Queue, opts...)
}

// endAttempt sets what the handler returned on its span and ends it. Whether a
// failed attempt is retried or discarded is the outcome, written after the
// span ends: the weir.attempts metric counts it.
func endAttempt(ctx context.Context, span trace.Span, err error) {
	if ctx.Err() != nil {
		span.SetAttributes(InterruptedKey.String(context.Cause(ctx).Error()))
	}
	switch {
	case err == nil:
		span.SetAttributes(ResultKey.String("completed"))
	case errors.As(err, new(*weir.JobSnoozeError)):
		span.SetAttributes(ResultKey.String("snoozed"))
	case errors.As(err, new(*weir.JobCancelError)):
		span.SetAttributes(ResultKey.String("cancelled"))
		span.RecordError(err)
	case errors.As(err, new(*weir.JobDiscardError)):
		span.SetAttributes(ResultKey.String("discarded"))
		fail(span, fmt.Sprintf("%T", err), err)
	default:
		span.SetAttributes(ResultKey.String("failed"))
		fail(span, fmt.Sprintf("%T", err), err)
	}
	span.End()
}

// fail records err on span and marks the span failed; errType is its
// error.type attribute.
func fail(span trace.Span, errType string, err error, opts ...trace.EventOption) {
	span.SetAttributes(semconv.ErrorTypeKey.String(errType))
	span.RecordError(err, opts...)
	span.SetStatus(codes.Error, err.Error())
}
