package weir

import (
	"encoding/json"
	"errors"

	"github.com/weirq/weir/weirtype"
)

// JobArgs is a job's arguments. Kind names the job's type; it must be stable, since
// stored jobs refer to it. Args are stored as the JSON encoding of the value, which
// must be a JSON object.
type JobArgs interface {
	Kind() string
}

// JobArgsWithInsertOpts is JobArgs that carries default insert options for its kind.
// Options given at insert time override them field by field.
type JobArgsWithInsertOpts interface {
	JobArgs
	InsertOpts() InsertOpts
}

// RawArgs is a job's kind and its arguments already encoded as JSON, for callers
// that do not have a Go type for them (the weir command, bridges from other languages).
type RawArgs struct {
	KindName string
	JSON     json.RawMessage
}

// Kind implements JobArgs.
func (a RawArgs) Kind() string { return a.KindName }

// MarshalJSON returns the arguments as they are.
func (a RawArgs) MarshalJSON() ([]byte, error) {
	if len(a.JSON) == 0 {
		return nil, errors.New("no JSON given")
	}
	return a.JSON, nil
}

// Job is a job whose arguments are decoded into T. Its JobRow's Progress is
// what earlier attempts recorded with SetProgress (nil: none), for the attempt
// to resume from; it stays as the attempt started while the handler records
// more.
type Job[T JobArgs] struct {
	*JobRow
	Args T
}

// JobRow is one job as it is stored.
type JobRow = weirtype.JobRow

// JobState is where a job stands in the state machine.
type JobState = weirtype.JobState

// AttemptError records one failed attempt.
type AttemptError = weirtype.AttemptError

// The job states; see weirtype for their meaning.
const (
	JobStateScheduled = weirtype.JobStateScheduled
	JobStateAvailable = weirtype.JobStateAvailable
	JobStateRunning   = weirtype.JobStateRunning
	JobStateRetryable = weirtype.JobStateRetryable
	JobStateCompleted = weirtype.JobStateCompleted
	JobStateCancelled = weirtype.JobStateCancelled
	JobStateDiscarded = weirtype.JobStateDiscarded
)
