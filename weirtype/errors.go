package weirtype

import "errors"

// Causes with which the runtime cancels a handler's context; a handler reads them
// with context.Cause. The weir package re-exports them.
var (
	// ErrLeaseLost: the job's lease was lost (rescued, re-claimed or deleted), or
	// could not be renewed in time; another worker may run the job.
	ErrLeaseLost = errors.New("weir: lease lost")
	// ErrJobCancelRequested: an operator cancelled the running job.
	ErrJobCancelRequested = errors.New("weir: job cancel requested")
	// ErrShutdown: the client is stopping and the shutdown budget ran out, or
	// the job's queue is being removed from the client and the removal's
	// context ran out; a handler that returns an error now gives the job back
	// without spending an attempt.
	ErrShutdown = errors.New("weir: client stopping")
	// ErrJobTimeout: the attempt ran longer than its timeout.
	ErrJobTimeout = errors.New("weir: job timed out")
)
