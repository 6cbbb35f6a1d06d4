package weir

import "context"

// WorkHandler runs one attempt of a job: the worker itself, or the middleware
// between the client and the worker.
type WorkHandler func(ctx context.Context, job *JobRow) error

// WorkerMiddleware wraps every attempt of a job as HTTP middleware wraps a
// handler: it is given the next handler and returns one that calls it, with
// whatever it does before and after.
//
// The handler it returns runs in the attempt's goroutine with the attempt's
// context, which its timeout, a lost lease, an operator's cancel and the
// shutdown cancel; values it adds to the context reach the worker. What it
// returns is the attempt's outcome, classified as the worker's own error is:
// returning without calling next (a veto) fails the attempt, or snoozes,
// cancels or discards the job with JobSnooze, JobCancel or JobDiscard. A panic
// in a middleware is recovered and is the attempt's error, as one in the worker
// is. job is shared with the runtime and must not be changed.
type WorkerMiddleware func(next WorkHandler) WorkHandler

// WorkerWithMiddleware is a worker with middleware of its own, which runs inside
// the client's (Config.WorkerMiddleware), next to the worker.
type WorkerWithMiddleware interface {
	Middleware() []WorkerMiddleware
}

// chainWork wraps h in mw, the first outermost.
func chainWork(mw []WorkerMiddleware, h WorkHandler) WorkHandler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}
