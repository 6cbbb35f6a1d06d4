package weir

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirq/weir/internal/completer"
	"github.com/weirq/weir/internal/flow"
	"github.com/weirq/weir/internal/lease"
	"github.com/weirq/weir/weirdriver"
)

// PanicError is the error recorded for a handler that panicked.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// producerDeps is what every producer works with; the engine gives each the same.
type producerDeps struct {
	exec     weirdriver.Executor
	clientID string
	// handlers are the client's workers, by job kind; middleware is
	// Config.WorkerMiddleware.
	handlers   *Workers
	middleware []WorkerMiddleware
	// pollInterval is Config.FetchPollInterval; leaseDuration how long a claim
	// holds a job; leaseBudget how long after a claim is sent its leases are
	// trusted; jobTimeout Config.JobTimeout.
	pollInterval, leaseDuration, leaseBudget, jobTimeout time.Duration
	// shareInterval is how often a share of a global limit is renewed.
	shareInterval time.Duration
	retryPolicy   RetryPolicy
	leases        *lease.Table
	// limited logs failed attempts and failed claims, rate-limited.
	limited *logLimiter
	events  *eventBus
	// claims counts claim statements.
	claims *atomic.Int64
	// base carries Start's values, never its cancellation, to handlers; hard
	// ends when Stop's budget runs out, and cuts a claim in flight.
	base, hard context.Context
	// submit hands an outcome to the completer; backlogFull reports whether it
	// holds as many as it may (completer.MaxBacklog), and then nothing is claimed.
	submit      func(*completer.Finalization)
	backlogFull func() bool
}

// producer claims and runs the jobs of one queue. It owns the goroutines of the
// handlers it starts.
type producer struct {
	producerDeps
	queue string
	wake  chan struct{} // capacity 1: a pending wake-up
	hints chan struct{} // capacity 1: a pending insert notification
	// atLimit is set while the last claim was cut short by the queue's global
	// or rate limit: then only a notification or the wait (the rate limit's,
	// or the backoff) claims again, not a handler's return (its job still
	// holds its slot until its outcome is written), and, while the global
	// limit cut it (atSlots), a written outcome of the queue's jobs, which
	// signals freed (capacity 1).
	freed            chan struct{}
	atLimit, atSlots atomic.Bool
	// shareWake asks the share loop to renew at once, keyWake the key loop
	// (capacity 1).
	shareWake, keyWake chan struct{}

	// workers counts the worker goroutines, at most MaxWorkers: one is started
	// when a job starts and no worker is idle, and it lives until the producer
	// stops (or Update lowers MaxWorkers below the workers there are), so that
	// a worker keeps its grown stack from job to job.
	workers sync.WaitGroup

	// stopLoop ends the loop (Remove; Stop ends it through the parent context
	// start was given); loopDone is closed when the loop returned.
	stopLoop context.CancelFunc
	loopDone chan struct{}

	mu sync.Mutex
	// cfg is the queue's settings: Update changes MaxWorkers and Prefetch
	// while the loop and the workers read them.
	cfg      QueueConfig
	buffer   []buffered    // claimed, not started: the local prefetch
	running  int           // handed to a worker, handler not returned
	claiming bool          // false once Stop began: buffered jobs no longer start
	idle     chan struct{} // closed when running falls to 0, if someone waits
	// idleWorkers are the inboxes of the workers waiting for a job, the most
	// recently idle last. A job goes to the most recently idle worker: with short
	// handlers a few workers do all the work and their stacks stay grown, where
	// handing jobs round-robin to all MaxWorkers would regrow a stack that the
	// garbage collector shrank at nearly every job.
	idleWorkers []chan buffered
	// spawning counts the workers started whose goroutine has not run yet,
	// and waking the idle workers handed a job that have not taken it yet:
	// together at most spawnAhead (startBufferedFor).
	spawning, waking int
	// avgRun is a moving average of how long handlers ran, and lastReturn
	// when one last returned: they say how many workers the buffer needs
	// (needsWorkers). recheck, while set, will look again (startBufferedFor).
	avgRun        time.Duration
	lastReturn    time.Time
	recheck       *time.Timer
	workersClosed bool // stopWorkers ran: a worker ends when its handler returns
	// flow is the producer's share of its queue's global limit and its
	// buckets of the queue's keys (internal/flow; share.go and keyshare.go
	// send their renewals).
	flow flow.Limits
	// giveBack are buffered jobs of buckets let go: they never start, and
	// go back to the queue through the completer (unlockGivingBack).
	giveBack []*lease.Job
}

// buffered is a job claimed and not started, with what flow control knows
// of it.
type buffered struct {
	job *lease.Job
	flow.Job
}

func newProducer(deps producerDeps, queue string, cfg QueueConfig) *producer {
	return &producer{
		producerDeps: deps, queue: queue, cfg: cfg, wake: make(chan struct{}, 1), hints: make(chan struct{}, 1),
		freed: make(chan struct{}, 1), claiming: true, loopDone: make(chan struct{}),
		shareWake: make(chan struct{}, 1), keyWake: make(chan struct{}, 1),
		// A queue declared with a global limit starts nothing before its
		// first share is written (at once).
		flow: flow.New(flow.Timing{Now: time.Now, Budget: deps.leaseBudget, Interval: deps.shareInterval},
			cfg.GlobalLimit > 0, keyedOf(cfg)),
	}
}

// start runs the loop on a goroutine counted by loops, until parent ends or
// stopLoop is called.
func (p *producer) start(parent context.Context, loops *sync.WaitGroup) {
	ctx, cancel := context.WithCancel(parent)
	p.stopLoop = cancel
	loops.Go(func() {
		defer close(p.loopDone)
		defer cancel()
		var share sync.WaitGroup
		// The share of a global limit while the queue has one; the buckets
		// of its keys while it asks for them.
		share.Go(func() { p.renewLoop(ctx, p.shareWake, p.flow.Share.On, p.renewShare) })
		share.Go(func() { p.renewLoop(ctx, p.keyWake, p.flow.Keys.On, p.renewKeys) })
		p.loop(ctx)
		cancel()
		share.Wait()
	})
}

// config returns the queue's settings.
func (p *producer) config() QueueConfig {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg
}

// setConfig makes cfg the queue's settings (Client.Queues().Update). The next
// claim asks for room by them; buffered jobs start at once on the slots a
// higher MaxWorkers frees; a lower one stops no handler, and the workers
// beyond it end, idle ones now and busy ones as their handlers return.
func (p *producer) setConfig(cfg QueueConfig) {
	p.mu.Lock()
	p.cfg = cfg
	for excess := p.running + len(p.idleWorkers) - cfg.MaxWorkers; excess > 0 && len(p.idleWorkers) > 0; excess-- {
		close(p.idleWorkers[0]) // the least recently idle, whose stack is the likeliest to have shrunk
		p.idleWorkers = p.idleWorkers[1:]
	}
	p.startBufferedLocked()
	p.unlockGivingBack()
	if cfg.GlobalLimit > 0 {
		p.wantShare() // the limit is stored: keep within a share of it
	}
	if keyedOf(cfg) {
		p.wantKeys()
	}
	p.poke()
}

// finished reports whether the loop returned, no handler runs and the workers
// were told to stop: a removed queue's producer then holds nothing, and its
// workers are ending, so that waiting for them takes no time.
func (p *producer) finished() bool {
	select {
	case <-p.loopDone:
	default:
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running == 0 && p.workersClosed
}

// stopWorkers ends the idle workers, and each busy one when its handler returns;
// when no handler is abandoned (await), it waits for them all.
func (p *producer) stopWorkers(await bool) {
	p.mu.Lock()
	p.workersClosed = true
	if p.recheck != nil {
		p.recheck.Stop()
		p.recheck = nil
	}
	for _, inbox := range p.idleWorkers {
		close(inbox)
	}
	p.idleWorkers = nil
	p.mu.Unlock()
	if await {
		p.workers.Wait()
	}
}

// waitIdle returns true when no handler of the producer runs, or false when ctx
// ends first.
func (p *producer) waitIdle(ctx context.Context) bool {
	p.mu.Lock()
	if p.running == 0 {
		p.mu.Unlock()
		return true
	}
	if p.idle == nil {
		p.idle = make(chan struct{})
	}
	idle := p.idle
	p.mu.Unlock()
	select {
	case <-idle:
		return true
	case <-ctx.Done():
		return false
	}
}

// hintGap is how long after a claim that found nothing an insert notification
// waits before it claims again. Any role may send those notifications; with the
// gap a flood of them costs each queue at most one claim per gap, as the shortest
// FetchPollInterval does, while a notification after a claim that found work, or
// after a quiet spell, claims at once.
const hintGap = 10 * time.Millisecond

// poke asks the producer to look for work soon. It never blocks. The client's own
// signals poke (a local insert, a freed slot, a reconnected listener).
func (p *producer) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// released tells the producer that an outcome of one of its queue's jobs was
// written: a slot of the queue's global limit, if it has one, is free. It
// never blocks, and costs nothing unless the queue is at its global limit.
func (p *producer) released() {
	if !p.atSlots.Load() {
		return
	}
	select {
	case p.freed <- struct{}{}:
	default:
	}
}

// hint is poke for an insert notification, which is throttled (hintGap).
func (p *producer) hint() {
	select {
	case p.hints <- struct{}{}:
	default:
	}
}

// loop claims jobs until ctx ends (Stop's first step): when woken, when a handler
// frees a slot, on an insert notification, and every FetchPollInterval otherwise;
// pace says how long to wait while the queue's limits cut the claims short.
func (p *producer) loop(ctx context.Context) {
	poll := time.NewTimer(0)
	defer poll.Stop()
	var (
		nextPoll  time.Time // when poll fires
		lastClaim time.Time // when the last claim began
		lastEmpty bool      // it found nothing (or failed, or had no room)
		pace      flow.Pace
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
			if p.atLimit.Load() {
				continue // a returned handler's job holds its slot until written
			}
		case <-p.freed:
		case <-p.hints:
			if at := lastClaim.Add(hintGap); lastEmpty && time.Now().Before(at) {
				// Claim when the gap ends, unless the poll comes first.
				if at.Before(nextPoll) {
					poll.Reset(time.Until(at))
					nextPoll = at
				}
				continue
			}
		case <-poll.C:
		}
		lastClaim = time.Now()
		got, more, lim, err := p.fill()
		lastEmpty = got == 0
		if lim.Share {
			p.wantShare()
		}
		if lim.KeyShare {
			p.wantKeys()
		}
		next := pace.After(p.pollInterval, lim, more, err != nil)
		p.atLimit.Store(next.AtLimit)
		p.atSlots.Store(next.AtSlots)
		nextPoll = time.Now().Add(next.Wait)
		poll.Reset(next.Wait)
	}
}

// fill starts buffered jobs on free workers and claims as many jobs as there is
// room for. It returns how many it claimed, whether that was all it asked for,
// and what the queue's limits said of the claim.
func (p *producer) fill() (got int, more bool, lim weirdriver.ClaimLimit, err error) {
	p.mu.Lock()
	p.startBufferedLocked()
	plan := p.flow.Plan(flow.Load{
		MaxWorkers: p.cfg.MaxWorkers, Prefetch: p.cfg.Prefetch, KeyLimit: p.cfg.KeyLimit.Limit > 0,
		Running: p.running, Buffered: len(p.buffer),
	})
	var skip []string
	if len(plan.Buckets) > 0 {
		skip = p.skipKeysLocked()
	}
	p.unlockGivingBack()
	if plan.Room <= 0 || p.backlogFull() {
		return 0, false, lim, nil // a freed slot, or room in the backlog, pokes
	}
	rows, deadline, lim, err := p.claim(&weirdriver.JobClaimParams{
		Queue: p.queue, Max: plan.Room, ClientID: p.clientID, LeaseDuration: p.leaseDuration,
		KeyBuckets: plan.Buckets, SkipKeys: skip,
	})
	if len(rows) == 0 {
		return 0, false, lim, err
	}
	if !p.bufferClaimed(rows, deadline, lim) {
		return len(rows), false, lim, nil
	}
	return len(rows), len(rows) == plan.Room, lim, nil
}

// claim sends params and returns the rows claimed, when their leases stop
// being trusted, and what the queue's limits said of the claim.
func (p *producer) claim(params *weirdriver.JobClaimParams) ([]*JobRow, time.Time, weirdriver.ClaimLimit, error) {
	// A claim in flight is let finish when Stop begins (its jobs are then released),
	// and interrupted only when Stop's budget runs out, or when it takes so long that
	// its leases could no longer be trusted anyway: an interrupted claim may have
	// committed, leaving its jobs to rescue.
	ctx, cancel := context.WithTimeout(p.hard, p.leaseBudget)
	defer cancel()
	sent := time.Now()
	rows, lim, err := p.exec.JobClaim(ctx, params)
	p.claims.Add(1)
	if err != nil {
		if p.hard.Err() == nil {
			p.limited.log(slog.LevelError, "weir: claim jobs", p.queue, slog.String("queue", p.queue), slog.Any("error", err))
		}
		return nil, time.Time{}, lim, err
	}
	return rows, sent.Add(p.leaseBudget), lim, nil
}

// bufferClaimed leases the rows of a claim that said lim, trusted until
// deadline, buffers them and starts those that may start. When Stop began
// while the claim was in flight, it gives them back, every buffered job with
// them, and reports false.
func (p *producer) bufferClaimed(rows []*JobRow, deadline time.Time, lim weirdriver.ClaimLimit) bool {
	jobs := make([]*lease.Job, len(rows))
	for i, row := range rows {
		jobs[i] = lease.NewJob(row, prepare(p.handlers.byKind[row.Kind], row), deadline)
	}
	p.leases.Add(jobs)
	p.mu.Lock()
	for i, j := range jobs {
		b := buffered{job: j, Job: flow.Counted}
		if lim.Owned {
			b.Job = flow.Holder(lim.Keys[i])
		}
		p.buffer = append(p.buffer, b)
	}
	if !p.claiming {
		p.mu.Unlock()
		p.releaseBuffered()
		return false
	}
	p.startBufferedLocked()
	p.unlockGivingBack()
	return true
}

// startBufferedLocked starts buffered jobs while workers are free, in claim
// order, passing over jobs claimed as key holder whose key runs its limit
// here, and moving those of buckets let go to giveBack. p.mu is held.
func (p *producer) startBufferedLocked() { p.startBufferedFor(nil) }

// startBufferedFor is startBufferedLocked called by the worker whose inbox is
// self, idle again: it may always take the next job itself. Other workers
// are woken or started only while fewer than spawnAhead are about to run.
// p.mu is held.
func (p *producer) startBufferedFor(self chan buffered) {
	if !p.claiming {
		return
	}
	most := p.flow.Share.MaxRunning(p.cfg.MaxWorkers)
	now := p.flow.Now()
	// The jobs before i were looked at: kept (passed over) ones are moved to
	// the front of the buffer, the rest leave it. The kept ones then move up
	// against the jobs not looked at, and the buffer is resliced past what
	// left, so that starting the head of a long buffer copies nothing.
	kept, i := 0, 0
	for i < len(p.buffer) && p.running < most {
		n := len(p.idleWorkers)
		if n == 0 || p.idleWorkers[n-1] != self {
			if p.spawning+p.waking >= spawnAhead {
				break // the workers about to run start the rest (work)
			}
			if !p.needsWorkersLocked(len(p.buffer) - i) {
				p.recheckLocked()
				break // the workers running take the rest as they return
			}
		}
		b := p.buffer[i]
		i++
		start, giveBack := p.flow.Keys.MayStart(b.Job, now)
		if !start {
			if giveBack {
				p.giveBack = append(p.giveBack, b.job)
			} else {
				p.buffer[kept] = b
				kept++
			}
			continue
		}
		if !p.leases.MarkRunning(b.job, p.base) {
			continue // the lease was lost while the job waited
		}
		p.flow.Keys.Started(b.Job)
		p.running++
		if n > 0 {
			inbox := p.idleWorkers[n-1]
			p.idleWorkers = p.idleWorkers[:n-1]
			if inbox != self {
				p.waking++
			}
			inbox <- b // an idle worker's inbox is empty: this never blocks
			continue
		}
		// No worker is idle, so fewer than running ≤ MaxWorkers exist.
		p.spawning++
		p.workers.Go(func() { p.work(b) })
	}
	gone := i - kept
	copy(p.buffer[gone:i], p.buffer[:kept])
	clear(p.buffer[:gone]) // no pointer to a job that left is kept
	p.buffer = p.buffer[gone:]
}

// needsWorkersLocked reports whether left buffered jobs need another worker:
// if the handlers running, at the handlers' average time, would not start
// them all within spawnHorizon, or none returned for spawnHorizon (they run
// longer than the average says), or nothing is known of them yet. Short
// handlers are then run by a few workers in turn, and long ones by as many
// as there are jobs, up to MaxWorkers. p.mu is held.
func (p *producer) needsWorkersLocked(left int) bool {
	if p.running == 0 || p.avgRun == 0 {
		return true
	}
	if p.avgRun*time.Duration(left) > spawnHorizon*time.Duration(p.running) {
		return true
	}
	return time.Since(p.lastReturn) >= spawnHorizon
}

// spawnHorizon is how soon the workers running should start the jobs
// buffered (needsWorkersLocked).
const spawnHorizon = time.Millisecond

// recheckLocked makes startBufferedLocked run again after spawnHorizon, when
// the handlers running may turn out longer than the average said. p.mu is
// held.
func (p *producer) recheckLocked() {
	if p.recheck != nil || p.workersClosed {
		return
	}
	p.recheck = time.AfterFunc(spawnHorizon, func() {
		p.mu.Lock()
		p.recheck = nil
		if p.workersClosed {
			p.mu.Unlock() // fired as stopWorkers began: nothing to start
			return
		}
		p.startBufferedLocked()
		p.unlockGivingBack()
	})
}

// spawnAhead bounds the workers started or woken and not yet running. A
// claim hands a batch of jobs at once; started all at once, each on a worker
// of its own (a new one, or one of the idle ones), a batch of short handlers
// would wake or make as many goroutines as jobs (2,000 in W5, each keeping
// its stack: workerStackReserve), most of which would find their job done by
// the time they ran, and the next batch, finding them not yet idle, would
// make more. Started a few at a time, each worker starting the next few as
// it begins, the buffer empties as fast into the workers that are free again
// (a worker idle again takes the next job itself), and only handlers that
// keep running make more: long handlers still reach MaxWorkers, a few
// goroutine starts apart.
const spawnAhead = 4

// work is a worker goroutine: it runs b, then each job handed to it while it
// was idle, until stopWorkers.
func (p *producer) work(b buffered) {
	inbox := make(chan buffered, 1)
	p.mu.Lock()
	p.spawning--
	p.startBufferedLocked() // the jobs left waiting for a worker to start
	p.unlockGivingBack()
	for {
		ran := p.run(b.job)
		p.mu.Lock()
		p.avgRun += (ran - p.avgRun) / 8
		p.lastReturn = time.Now()
		p.running--
		p.flow.Keys.Ended(b.Job)
		if p.running == 0 && p.idle != nil {
			close(p.idle)
			p.idle = nil
		}
		if p.workersClosed {
			p.mu.Unlock()
			return
		}
		// Update lowered MaxWorkers below the workers there are: this one ends.
		excess := p.running+len(p.idleWorkers) >= p.cfg.MaxWorkers
		if !excess {
			// Idle first, so that the next buffered job comes to this worker.
			p.idleWorkers = append(p.idleWorkers, inbox)
		}
		p.startBufferedFor(inbox)
		var mine bool // startBufferedFor gave this worker the next job
		select {
		case b = <-inbox:
			mine = true
		default:
		}
		p.unlockGivingBack()
		p.poke()
		if mine {
			continue
		}
		if excess {
			return
		}
		var ok bool
		if b, ok = awaitJob(inbox); !ok {
			return
		}
		// Woken by another: start the jobs left, as a new worker does.
		p.mu.Lock()
		p.waking--
		p.startBufferedLocked()
		p.unlockGivingBack()
	}
}

// unlockGivingBack unlocks p.mu and gives back the jobs of buckets let go.
func (p *producer) unlockGivingBack() {
	jobs := p.takeGiveBackLocked()
	p.mu.Unlock()
	p.giveBackJobs(jobs)
}

// workerStackReserve is the stack a worker keeps in use while it waits for its
// next job. The garbage collector halves the stack of a goroutine that uses
// less than a quarter of it, so an idle worker's stack would shrink at every
// collection and grow again, copied frame by frame, in its next handler: under
// load, about once per job. Waiting with this much in use keeps any stack up
// to four times its size (16 KiB: most handlers') from shrinking, for 8 to
// 16 KiB of memory per worker.
const workerStackReserve = 4 << 10

// awaitJob waits for the next job handed to an idle worker, with
// workerStackReserve of its stack in use.
//
//go:noinline
func awaitJob(inbox <-chan buffered) (buffered, bool) {
	var reserve [workerStackReserve]byte
	keep(&reserve)
	b, ok := <-inbox
	return b, ok
}

// keep takes the reserve's address, so that the compiler keeps it on the
// stack.
//
//go:noinline
func keep(*[workerStackReserve]byte) {}

// run runs one attempt of j, hands its outcome to the completer and returns
// how long the handler ran; work then frees the slot.
func (p *producer) run(j *lease.Job) time.Duration {
	entry := p.handlers.byKind[j.Row.Kind]
	ctx := p.leases.Start(j, timeoutOf(entry, j.Row, p.jobTimeout))

	p.events.emit(EventJobStarted, j.Row, nil, 0)
	start := time.Now()
	err := invoke(ctx, handlerOf(p.middleware, j, entry))
	elapsed := time.Since(start)
	cause := context.Cause(ctx)
	fin := finalizationOf(j, entry, p.retryPolicy, err, cause, elapsed)
	// The outcome is tracked by the completer before the slot frees: Stop waits
	// for idle handlers and then for the completer to drain, so a finalization
	// submitted after the slot freed could miss the drain and be lost (the Awa
	// 0.6 bug).
	withReturned(fin, p.leases.MarkReturned(j))
	if fin.CompletedInTx && err != nil {
		// Whether the job failed is known when its outcome is written: its
		// transaction may have committed the completion.
		p.limited.job(slog.LevelWarn, "weir: handler returned an error after completing its job in its transaction",
			j.Row, j.Token, slog.String("error", err.Error()))
	} else {
		logFailure(p.limited, j, fin, cause)
	}
	p.submit(fin)
	return elapsed
}

// timeoutOf is the timeout of an attempt of row: its worker's, or the
// client's; not positive means none.
func timeoutOf(entry *workerEntry, row *JobRow, client time.Duration) time.Duration {
	if entry != nil && entry.timeout != nil {
		if t := entry.timeout(row); t != 0 {
			return t
		}
	}
	return client
}

// handlerOf returns the call of j's worker, inside the client's middleware and
// the worker's own. The chain is built in the call, so that invoke recovers a
// middleware's panic there too.
func handlerOf(middleware []WorkerMiddleware, j *lease.Job, entry *workerEntry) func(context.Context) error {
	var own []WorkerMiddleware
	if entry != nil {
		own = entry.middleware
	}
	if len(middleware) == 0 && len(own) == 0 {
		return j.Work
	}
	return func(ctx context.Context) error {
		inner := func(ctx context.Context, _ *JobRow) error { return j.Work(ctx) }
		return chainWork(middleware, chainWork(own, inner))(ctx, j.Row)
	}
}

// prepare returns the call of row's handler with its decoded args. A panic
// while decoding (in an UnmarshalJSON method) is the attempt's error, as a
// panic in the handler is.
func prepare(entry *workerEntry, row *JobRow) (work func(context.Context) error) {
	defer func() {
		if r := recover(); r != nil {
			err := &PanicError{Value: r, Stack: string(debug.Stack())}
			work = func(context.Context) error { return err }
		}
	}()
	if entry == nil {
		err := fmt.Errorf("no worker for kind %q in this client", row.Kind)
		return func(context.Context) error { return err }
	}
	return entry.prepare(row)
}

// invoke runs the handler, turning a panic into a PanicError.
func invoke(ctx context.Context, work func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: string(debug.Stack())}
		}
	}()
	return work(ctx)
}

// stopClaiming stops starting buffered jobs; the producer loop is stopped by its
// context.
func (p *producer) stopClaiming() {
	p.mu.Lock()
	p.claiming = false
	p.mu.Unlock()
}

// releaseBuffered gives every buffered job back to the queue, fenced and without
// spending an attempt, through the completer.
func (p *producer) releaseBuffered() {
	p.mu.Lock()
	jobs := p.takeGiveBackLocked()
	for _, b := range p.buffer {
		jobs = append(jobs, b.job)
	}
	p.buffer = nil
	p.mu.Unlock()
	p.giveBackJobs(jobs)
}
