// Package weirtype holds the types shared by weir's public API, its drivers and its
// runtime. It is a leaf package so that drivers can use the job row without importing
// the client.
package weirtype

import (
	"encoding/json"
	"time"
)

// JobState is where a job stands in weir's state machine (see docs/design/schema.md).
type JobState string

const (
	// JobStateScheduled jobs wait for their scheduled time.
	JobStateScheduled JobState = "scheduled"
	// JobStateAvailable jobs are due and wait for a worker.
	JobStateAvailable JobState = "available"
	// JobStateRunning jobs are leased to a worker that runs an attempt.
	JobStateRunning JobState = "running"
	// JobStateRetryable jobs failed an attempt and wait for their backoff to end.
	JobStateRetryable JobState = "retryable"
	// JobStateCompleted jobs succeeded. Final.
	JobStateCompleted JobState = "completed"
	// JobStateCancelled jobs were cancelled. Final.
	JobStateCancelled JobState = "cancelled"
	// JobStateDiscarded jobs ran out of attempts or were discarded by their handler. Final.
	JobStateDiscarded JobState = "discarded"
)

// JobStates lists every state in the order of the state machine.
func JobStates() []JobState {
	return []JobState{
		JobStateScheduled, JobStateAvailable, JobStateRunning, JobStateRetryable,
		JobStateCompleted, JobStateCancelled, JobStateDiscarded,
	}
}

// Valid reports whether s is one of the known states.
func (s JobState) Valid() bool {
	for _, known := range JobStates() {
		if s == known {
			return true
		}
	}
	return false
}

// Final reports whether a job in state s never runs again unless an operator retries it.
func (s JobState) Final() bool {
	return s == JobStateCompleted || s == JobStateCancelled || s == JobStateDiscarded
}

// JobRow is one job as it is stored.
type JobRow struct {
	ID    int64
	State JobState
	Queue string
	Kind  string
	// Args is the job's arguments, a JSON object.
	Args json.RawMessage
	// Priority runs from 1 (first) to 4 (last).
	Priority int
	// Attempt counts the attempts started so far; a claim increments it.
	Attempt     int
	MaxAttempts int
	ScheduledAt time.Time
	CreatedAt   time.Time
	// AttemptedAt is when the latest attempt started, if any did.
	AttemptedAt *time.Time
	// FinalizedAt is when the job reached a final state.
	FinalizedAt *time.Time
	// LeaseToken identifies the latest lease on the job. It grows by one at every
	// claim and is never reused, so a write fenced by an older token changes nothing.
	LeaseToken int64
	// LeaseExpiresAt is when the current lease lapses (database clock); nil when the
	// job is not leased.
	LeaseExpiresAt *time.Time
	// AttemptedBy is the instance id of the client that ran the latest attempt.
	AttemptedBy string
	// Errors has one entry per failed attempt, oldest first.
	Errors   []AttemptError
	Tags     []string
	Metadata json.RawMessage
	// UniqueKey is set for jobs inserted with unique options.
	UniqueKey []byte
	// UniqueStates is the set of states in which UniqueKey must be unique.
	UniqueStates []JobState
	// ReleaseCount counts the times a graceful shutdown gave the job back without
	// spending an attempt.
	ReleaseCount int
	// CancelRequestedAt is set when an operator asked a running job to stop.
	CancelRequestedAt *time.Time
	// Output is the JSON value the handler recorded with weir.RecordOutput in
	// the attempt that completed the job, written with the completion; nil
	// when none was recorded.
	Output json.RawMessage
	// Progress is the latest JSON value a handler recorded with
	// weir.SetProgress that reached the database: written with a lease
	// renewal or with an attempt's outcome, under the lease it was recorded
	// under, and kept when the job completes. In a handler's job it is what
	// earlier attempts left, so that the attempt can resume; nil when none
	// was recorded.
	Progress json.RawMessage
}

// AttemptError records one failed attempt.
type AttemptError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
	Trace   string    `json:"trace,omitempty"`
}
