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

// InsertHandler inserts a batch of jobs and returns one result per job, in
// order: the client's insert, or the middleware between the caller and it.
type InsertHandler func(ctx context.Context, jobs []*InsertParams) ([]*InsertResult, error)

// InsertMiddleware wraps every insert (Insert, InsertTx, InsertMany and the
// others) as HTTP middleware wraps a handler. It runs in the caller's goroutine
// with the caller's context, after the client encoded the args and laid the
// options over their defaults, and before it checks and writes the jobs.
//
// It may change the jobs (add metadata or tags, say) but not add or remove any:
// the client checks every job after the middleware, as it checks a caller's
// input, and refuses a batch whose length changed. It may refuse the insert by
// returning an error without calling next; nothing is written then, and the
// caller gets its error as it is. Inside a caller's transaction, next writes in
// that transaction. A panic in a middleware is the caller's, as in any function
// it calls.
type InsertMiddleware func(next InsertHandler) InsertHandler

// chainInsert wraps h in mw, the first outermost.
func chainInsert(mw []InsertMiddleware, h InsertHandler) InsertHandler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}
