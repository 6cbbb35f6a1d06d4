package weir

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"time"
)

// Worker runs jobs whose arguments are of type T.
type Worker[T JobArgs] interface {
	// Work runs one attempt of job. A nil error completes the job; see the runtime
	// docs for the errors that snooze, cancel or discard it.
	Work(ctx context.Context, job *Job[T]) error
}

// WorkFunc makes a Worker of a function.
func WorkFunc[T JobArgs](f func(ctx context.Context, job *Job[T]) error) Worker[T] {
	return workFunc[T](f)
}

type workFunc[T JobArgs] func(ctx context.Context, job *Job[T]) error

func (f workFunc[T]) Work(ctx context.Context, job *Job[T]) error { return f(ctx, job) }

// Workers maps job kinds to the handlers that run them.
type Workers struct {
	byKind map[string]*workerEntry
}

// workerEntry runs one kind's jobs without knowing T at the call site.
type workerEntry struct {
	kind string
	// prepare decodes row's args into the worker's type and returns the call of
	// the worker with them (or one that returns the decoding error). The
	// producer's claiming goroutine prepares each job, so that decoding does not
	// grow the stack of every handler goroutine anew.
	prepare func(row *JobRow) func(ctx context.Context) error
	// timeout, retry and middleware are the worker's own, when it has them.
	timeout    func(row *JobRow) time.Duration
	retry      RetryPolicy
	middleware []WorkerMiddleware
}

// WorkerWithTimeout is a worker that sets the timeout of each attempt: a positive
// duration, a negative one for none, or 0 for Config.JobTimeout.
type WorkerWithTimeout interface {
	Timeout(job *JobRow) time.Duration
}

// NewWorkers returns an empty set of workers.
func NewWorkers() *Workers {
	return &Workers{byKind: map[string]*workerEntry{}}
}

// AddWorker registers worker for the kind of T. It panics if the kind is invalid or
// already has a worker; AddWorkerSafely returns those as errors.
func AddWorker[T JobArgs](workers *Workers, worker Worker[T]) {
	if err := AddWorkerSafely(workers, worker); err != nil {
		panic(err)
	}
}

// AddWorkerSafely registers worker for the kind of T.
func AddWorkerSafely[T JobArgs](workers *Workers, worker Worker[T]) error {
	if workers == nil || worker == nil {
		return invalidf("worker", "AddWorker needs workers and a worker")
	}
	kind := kindOf[T]()
	if err := validateName("Kind", "kind", kind); err != nil {
		return err
	}
	if _, ok := workers.byKind[kind]; ok {
		return invalidf("Kind", "kind %q already has a worker", kind)
	}
	entry := &workerEntry{
		kind: kind,
		prepare: func(row *JobRow) func(ctx context.Context) error {
			job := &Job[T]{JobRow: row}
			if err := json.Unmarshal(row.Args, &job.Args); err != nil {
				err = fmt.Errorf("decode args of kind %q: %w", kind, err)
				return func(context.Context) error { return err }
			}
			return func(ctx context.Context) error { return worker.Work(ctx, job) }
		},
	}
	if w, ok := worker.(WorkerWithTimeout); ok {
		entry.timeout = w.Timeout
	}
	if w, ok := worker.(RetryPolicy); ok {
		entry.retry = w
	}
	if w, ok := worker.(WorkerWithMiddleware); ok {
		entry.middleware = slices.Clone(w.Middleware())
		for i, mw := range entry.middleware {
			if mw == nil {
				return invalidf("Middleware", "the worker of kind %q has a nil middleware at %d", kind, i)
			}
		}
	}
	workers.byKind[kind] = entry
	return nil
}

// kindOf returns T's kind from its zero value, or from a new value when T is a pointer.
func kindOf[T JobArgs]() string {
	var zero T
	if t := reflect.TypeFor[T](); t.Kind() == reflect.Pointer {
		return reflect.New(t.Elem()).Interface().(JobArgs).Kind()
	}
	return zero.Kind()
}

// Kinds lists the kinds that have workers.
func (w *Workers) Kinds() []string {
	kinds := make([]string, 0, len(w.byKind))
	for k := range w.byKind {
		kinds = append(kinds, k)
	}
	return kinds
}
