package weir

import (
	"errors"
	"fmt"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirmigrate"
	"github.com/weirq/weir/weirtype"
)

var (
	// ErrInvalid is wrapped by every error about bad input: args, options, names,
	// configuration. Nothing was written when it is returned.
	ErrInvalid = errors.New("invalid")
	// ErrNotFound means the job does not exist.
	ErrNotFound = weirdriver.ErrNotFound
	// ErrJobRunning means the operation needs a job that is not running.
	ErrJobRunning = weirdriver.ErrJobRunning
	// ErrJobFinal means the operation needs a job that is not final.
	ErrJobFinal = weirdriver.ErrJobFinal
	// ErrUniqueConflict means the change would give two jobs the same unique key.
	ErrUniqueConflict = weirdriver.ErrUniqueConflict
	// ErrNotMigrated means the schema lacks migrations this weir needs; the error
	// names them.
	ErrNotMigrated = weirmigrate.ErrNotMigrated
	// ErrSchemaIncompatible means the schema has migrations this weir does not
	// know and one of them is not marked compatible; the error names them.
	ErrSchemaIncompatible = weirmigrate.ErrIncompatible
)

// JobFinalError is the error, wrapping ErrJobFinal, of an operation that needs
// a job that is not final: State is the job's final state.
type JobFinalError = weirdriver.JobFinalError

// OpError is the error of a Client's operator call (JobGet, JobList, the job,
// queue and periodic changes, ClientList, Leader, JobThroughput...) or of an
// insert, when something other than its input stood in the way (bad input is
// an *InvalidError): the database, the schema, a job or schedule missing or
// in the wrong state. Err says what, and errors.Is and errors.As see through
// to it. Error prefixes Err with "weir: " and Op; a program that shows errors
// under its own name can show Op and Err instead.
type OpError struct {
	// Op names the step that failed when the call names it ("insert"), and is
	// empty otherwise.
	Op  string
	Err error
}

func (e *OpError) Error() string {
	if e.Op == "" {
		return "weir: " + e.Err.Error()
	}
	return "weir: " + e.Op + ": " + e.Err.Error()
}

func (e *OpError) Unwrap() error { return e.Err }

// opErr wraps err, what failed an operator call, in an *OpError.
func opErr(err error) error { return &OpError{Err: err} }

// ErrAlreadyStarted is returned by Start on a client that is running.
var ErrAlreadyStarted = errors.New("weir: client already started")

// ErrStopped is returned by Start on a client that was stopped: a client runs
// once, since handlers abandoned by its Stop may still be running with its
// leases. Make a new client to start again.
var ErrStopped = errors.New("weir: client was stopped and cannot be restarted; make a new client")

// Causes with which the runtime cancels a handler's context; a handler reads them
// with context.Cause. They are weirtype's, so that errors.Is matches either name.
var (
	// ErrLeaseLost: the job's lease was lost (rescued, re-claimed or deleted), or
	// could not be renewed in time; another worker may run the job.
	ErrLeaseLost = weirtype.ErrLeaseLost
	// ErrJobCancelRequested: an operator cancelled the running job.
	ErrJobCancelRequested = weirtype.ErrJobCancelRequested
	// ErrShutdown: the client is stopping and the shutdown budget ran out, or
	// the job's queue is being removed (QueueSet.Remove) and that call's
	// context ran out; a handler that returns an error now gives the job back
	// without spending an attempt.
	ErrShutdown = weirtype.ErrShutdown
	// ErrJobTimeout: the attempt ran longer than its timeout.
	ErrJobTimeout = weirtype.ErrJobTimeout
)

// InvalidError is the error for bad input: args, options, names, configuration.
// errors.Is(err, ErrInvalid) holds for it, and nothing was written when it is
// returned. A command or a service can show Message to whoever gave the input;
// Field says which input it was, and Job and Jobs which job of a batch.
type InvalidError struct {
	// Job is the 1-based position of the bad job in a batch of Jobs; both are 0
	// when the error is not about one job of a batch of several.
	Job, Jobs int
	// Field is the input that was wrong, spelled as in the API: a field of a
	// struct the caller filled ("InsertOpts.Priority", "Config.LeaseDuration",
	// "JobListParams.Limit"), "Args" for the job's arguments, "Kind" for its
	// kind, or the name of a bad parameter ("id", "name", "tx", "params",
	// "driver", "worker").
	Field string
	// Message says what was wrong, in words that name the field or setting.
	Message string
}

func (e *InvalidError) Error() string {
	if e.Jobs > 1 {
		return fmt.Sprintf("weir: %s: job %d of %d: %s", ErrInvalid, e.Job, e.Jobs, e.Message)
	}
	return fmt.Sprintf("weir: %s: %s", ErrInvalid, e.Message)
}

// Is reports whether target is ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// invalidf returns an *InvalidError about field with the formatted message.
func invalidf(field, format string, args ...any) error {
	return &InvalidError{Field: field, Message: fmt.Sprintf(format, args...)}
}
