package weir

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirq/weir/internal/maintenance"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirmigrate"
)

// ErrAlreadyStarted is returned by Start on a client that is running.
var ErrAlreadyStarted = errors.New("weir: client already started")

// ErrStopped is returned by Start on a client that was stopped: a client runs
// once, since handlers abandoned by its Stop may still be running with its
// leases. Make a new client to start again.
var ErrStopped = errors.New("weir: client was stopped and cannot be restarted; make a new client")

// runtime is a started client's moving parts. Start builds it; Stop tears it down
// in the order docs/contract.md gives.
type runtime struct {
	cfg      *Config
	clientID string
	exec     weirdriver.Executor
	driver   weirdriver.Driver
	logger   *slog.Logger
	// limited logs what others can repeat at will (failing jobs, notifications),
	// at most logLinesPerSecond lines a second of each kind.
	limited *logLimiter
	events  *eventBus
	stats   *stats

	leases *leaseTable
	// renewRequest (capacity 1) asks the heartbeat for an early renewal.
	renewRequest chan struct{}
	producers    map[string]*producer
	completer    *completer
	maint        *maintenance.Service

	// baseCtx carries Start's values, never its cancellation, to handlers.
	baseCtx context.Context
	// claimCtx ends at Stop's first step: producers stop claiming.
	claimCtx  context.Context
	stopClaim context.CancelFunc
	// hardCtx ends when Stop's budget runs out: statements in flight are cut.
	hardCtx    context.Context
	hardCancel context.CancelFunc
	// serviceCtx ends at Stop's last step: heartbeat, listener and completer stop.
	serviceCtx    context.Context
	serviceCancel context.CancelFunc

	producerLoops sync.WaitGroup
	services      sync.WaitGroup // heartbeat, listener
	completerDone chan struct{}

	stopMu   sync.Mutex
	stopping bool          // a Stop runs the shutdown; later calls wait for it
	stopErr  error         // the shutdown's result, once stopped is closed
	stopped  chan struct{} // closed when the shutdown returned
}

// stats are the client's counters.
type stats struct {
	claims      atomic.Int64
	renewals    atomic.Int64
	staleWrites atomic.Int64
	leasesLost  atomic.Int64
	finalized   atomic.Int64
	released    atomic.Int64
	abandoned   atomic.Int64
}

// Stats are counters of what the client's runtime did since Start.
type Stats struct {
	// Claims counts claim statements run, by all queues.
	Claims int64
	// Renewals counts renewal statements sent: one per heartbeat interval while
	// the client holds leases, and early ones that operators' cancels ask for.
	Renewals int64
	// StaleWrites counts fenced writes that matched no row: the lease had been lost.
	StaleWrites int64
	// LeasesLost counts leases the client found lost, by renewal or local deadline.
	LeasesLost int64
	// Finalized counts outcomes written.
	Finalized int64
	// Released counts prefetched jobs given back at Stop without spending an attempt.
	Released int64
	// Abandoned counts outcomes not written because the lease could no longer be
	// trusted, Stop's budget ran out, or the handler returned after Stop had
	// returned; rescue takes those jobs.
	Abandoned int64
	// EventsDropped counts events not delivered to a full subscription or hook
	// queue, or left in the hook queue when Stop's budget ran out.
	EventsDropped int64
	// HookPanics counts hook calls that panicked (the first is logged).
	HookPanics int64
}

// Stats returns the runtime's counters.
func (c *Client) Stats() Stats {
	s := Stats{EventsDropped: c.events.dropped.Load(), HookPanics: c.events.hookPanics.Load()}
	c.mu.Lock()
	rt := c.rt
	c.mu.Unlock()
	if rt != nil {
		s.Claims = rt.stats.claims.Load()
		s.Renewals = rt.stats.renewals.Load()
		s.StaleWrites = rt.stats.staleWrites.Load()
		s.LeasesLost = rt.stats.leasesLost.Load()
		s.Finalized = rt.stats.finalized.Load()
		s.Released = rt.stats.released.Load()
		s.Abandoned = rt.stats.abandoned.Load()
	}
	return s
}

// IsLeader reports whether this client runs maintenance now.
func (c *Client) IsLeader() bool {
	c.mu.Lock()
	rt := c.rt
	c.mu.Unlock()
	return rt != nil && rt.maint.IsLeader()
}

// Start checks the schema and starts working the configured queues: claiming,
// running handlers, renewing leases, writing outcomes, listening for new jobs and,
// when elected, maintenance. ctx bounds the start only; Stop stops the client.
func (c *Client) Start(ctx context.Context) error {
	if len(c.config.Queues) == 0 {
		return invalidf("Start: Config.Queues is empty: a client without queues only inserts")
	}
	if len(c.config.Workers.byKind) == 0 {
		return invalidf("Start: Config.Workers has no workers")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		if c.rt != nil && c.rt.isStopping() {
			return ErrStopped
		}
		return ErrAlreadyStarted
	}
	if err := weirmigrate.New(c.driver).Check(ctx); err != nil {
		return fmt.Errorf("weir: start: %w", err)
	}
	c.started = true

	cfg := &c.config
	rt := &runtime{
		cfg: cfg, clientID: cfg.ID, exec: c.driver.Executor(), driver: c.driver,
		logger: cfg.Logger, limited: newLogLimiter(cfg.Logger, time.Now, logLinesPerSecond), events: c.events, stats: &stats{}, leases: newLeaseTable(),
		renewRequest: make(chan struct{}, 1),
		producers:    map[string]*producer{}, completerDone: make(chan struct{}), stopped: make(chan struct{}),
		baseCtx: context.WithoutCancel(ctx),
	}
	rt.claimCtx, rt.stopClaim = context.WithCancel(context.Background())
	rt.hardCtx, rt.hardCancel = context.WithCancel(context.Background())
	rt.serviceCtx, rt.serviceCancel = context.WithCancel(rt.hardCtx)
	rt.completer = newCompleter(rt)
	// A new leader must be able to rescue within a lease duration plus a rescue
	// interval of a crash (G9), even when the crashed client led: its term (3
	// election intervals) plus one interval to win stays inside that bound.
	elect := min(5*time.Second, cfg.RescueInterval)
	rt.maint = maintenance.New(rt.exec, &maintenance.Config{
		ClientID: cfg.ID, Logger: cfg.Logger, RescueInterval: cfg.RescueInterval,
		ElectInterval: elect, LeaderTTL: 3 * elect,
		CompletedRetention: cfg.CompletedRetention, CancelledRetention: cfg.CancelledRetention,
		DiscardedRetention: cfg.DiscardedRetention,
	})
	for name, qc := range cfg.Queues {
		rt.producers[name] = newProducer(rt, name, qc)
	}

	rt.events.startHooks(cfg.Logger)
	go func() { // the completer: stopped by serviceCtx, awaited through completerDone
		defer close(rt.completerDone)
		rt.completer.loop(rt.serviceCtx)
	}()
	rt.services.Go(func() { rt.heartbeat(rt.serviceCtx) })
	rt.services.Go(func() { rt.listen(rt.serviceCtx) })
	if err := rt.maint.Start(rt.serviceCtx); err != nil {
		rt.serviceCancel()
		rt.services.Wait()
		<-rt.completerDone
		rt.events.stopHooks(ctx) // subscriptions stay: Start may be tried again
		c.started = false        // nothing runs: Start may be tried again
		return fmt.Errorf("weir: start maintenance: %w", err)
	}
	for _, p := range rt.producers {
		rt.producerLoops.Go(func() { p.loop(rt.claimCtx) })
	}
	c.rt = rt
	return nil
}

// Stop stops the client gracefully; ctx's deadline is the whole budget. It stops
// claiming, gives back prefetched jobs, lets running handlers finish, cancels them
// (cause ErrShutdown) when only ShutdownReserve of the budget is left, writes every
// outcome, and then stops the heartbeat, the listener and maintenance. It returns
// no later than the deadline plus a few milliseconds. Handlers that have not
// returned by then are abandoned (their leases lapse and rescue takes their jobs)
// and named in the error.
func (c *Client) Stop(ctx context.Context) error {
	return c.stop(ctx, false)
}

// StopAndCancel stops the client at once: it cancels running handlers (cause
// ErrShutdown) without waiting for them to finish by themselves, then stops as Stop
// does. A second Stop, or Stop after StopAndCancel, waits for the first.
func (c *Client) StopAndCancel(ctx context.Context) error {
	return c.stop(ctx, true)
}

// isStopping reports whether a Stop began.
func (rt *runtime) isStopping() bool {
	rt.stopMu.Lock()
	defer rt.stopMu.Unlock()
	return rt.stopping
}

func (c *Client) stop(ctx context.Context, hard bool) error {
	c.mu.Lock()
	rt := c.rt
	c.mu.Unlock()
	if rt == nil {
		return nil
	}
	if hard {
		rt.cancelHandlers() // a second, harder stop while a graceful one runs goes to step 4
	}
	rt.stopMu.Lock()
	first := !rt.stopping
	rt.stopping = true
	rt.stopMu.Unlock()
	if first {
		rt.stopErr = rt.shutdown(ctx, hard)
		close(rt.stopped)
		return rt.stopErr
	}
	select {
	case <-rt.stopped:
		return rt.stopErr
	case <-ctx.Done():
		return fmt.Errorf("weir: stop: %w", ctx.Err())
	}
}

// shutdown runs the steps of docs/contract.md's Shutdown.
func (rt *runtime) shutdown(ctx context.Context, hard bool) error {
	deadline, hasDeadline := ctx.Deadline()
	// Every wait below ends by the budget; what is still in flight then is cut.
	stopHard := context.AfterFunc(ctx, rt.hardCancel)
	defer stopHard()

	rt.completer.beginStop()

	// 1. Stop claiming and wake every goroutine that waits for work.
	for _, p := range rt.producers {
		p.stopClaiming()
	}
	rt.stopClaim()
	waitCtx(ctx, rt.producerLoops.Wait)

	// 2. Give back prefetched jobs, fenced, without spending an attempt.
	for _, p := range rt.producers {
		p.releaseBuffered()
	}

	// 3. Let running handlers finish while heartbeats go on; 4. at the soft
	// deadline, cancel those left.
	soft := ctx
	if hasDeadline && !hard {
		reserve := min(rt.cfg.ShutdownReserve, time.Until(deadline)/5)
		var cancel context.CancelFunc
		soft, cancel = context.WithDeadline(ctx, deadline.Add(-reserve))
		defer cancel()
	}
	if hard {
		rt.cancelHandlers()
	}
	if !rt.waitIdle(soft) {
		rt.cancelHandlers()
	}
	allReturned := rt.waitIdle(ctx)
	for _, p := range rt.producers {
		p.stopWorkers(allReturned)
	}

	// 5. Drain every finalization before stopping what keeps leases alive.
	drainErr := rt.completer.waitDrained(ctx)
	rt.completer.close()

	// 6. Stop the remaining services and give up leadership.
	rt.maint.Stop(ctx)
	rt.serviceCancel()
	rt.services.Wait()
	<-rt.completerDone
	rt.events.stop(ctx) // hooks drain within the budget; subscriptions close

	var problems []string
	switch abandoned := rt.runningJobs(); {
	case len(abandoned) > 0:
		problems = append(problems, "handlers did not return and were abandoned (rescue will take their jobs): "+abandoned)
	case !allReturned:
		// They returned between the deadline and now: their outcomes may have
		// missed the drain.
		problems = append(problems, "handlers returned only after the deadline; their outcomes may be unwritten (rescue will take those jobs)")
	}
	if drainErr != nil {
		problems = append(problems, "some outcomes were not written before the deadline (rescue will take their jobs)")
	}
	if ids := rt.completer.unwrittenJobs(); len(ids) > 0 {
		// The lease was lost (stale), or could not be trusted long enough to
		// write the outcome: these jobs ran here and may run again.
		problems = append(problems, fmt.Sprintf("the outcomes of jobs %v were not written: their leases were lost "+
			"or could not be renewed in time, so they may run again", ids))
	}
	rt.limited.flush()
	if len(problems) > 0 {
		return fmt.Errorf("weir: stop: %s", strings.Join(problems, "; "))
	}
	return nil
}

// waitCtx runs wait in a goroutine and reports whether it returned before ctx
// ended. The goroutine outlives a false return only as long as wait blocks: here,
// only while a claim cut by the budget unwinds.
func waitCtx(ctx context.Context, wait func()) bool {
	done := make(chan struct{})
	go func() {
		wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// waitIdle reports whether every handler returned before ctx ended.
func (rt *runtime) waitIdle(ctx context.Context) bool {
	for _, p := range rt.producers {
		if !p.waitIdle(ctx) {
			return false
		}
	}
	return true
}

// cancelHandlers cancels every running handler with cause ErrShutdown.
func (rt *runtime) cancelHandlers() {
	rt.leases.mu.Lock()
	defer rt.leases.mu.Unlock()
	for _, j := range rt.leases.jobs {
		if j.state == heldRunning {
			j.cancel(ErrShutdown)
		}
	}
}

// runningJobs names the jobs whose handlers have not returned.
func (rt *runtime) runningJobs() string {
	rt.leases.mu.Lock()
	defer rt.leases.mu.Unlock()
	var names []string
	for _, j := range rt.leases.jobs {
		if j.state == heldRunning {
			names = append(names, "job "+strconv.FormatInt(j.row.ID, 10)+" ("+j.row.Kind+")")
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// handlerContext returns the context j's handler runs with (set by markRunning).
func (rt *runtime) handlerContext(j *heldJob) context.Context {
	rt.leases.mu.Lock()
	defer rt.leases.mu.Unlock()
	return j.ctx
}

// markRunning moves a buffered job to running and gives it a cancellable context,
// unless its lease was lost while it waited.
func (rt *runtime) markRunning(j *heldJob) bool {
	rt.leases.mu.Lock()
	defer rt.leases.mu.Unlock()
	if j.lost {
		return false
	}
	j.state = heldRunning
	j.ctx, j.cancel = context.WithCancelCause(rt.baseCtx)
	return true
}

// handlerReturned moves j to finalizing.
func (rt *runtime) handlerReturned(j *heldJob) {
	rt.leases.mu.Lock()
	defer rt.leases.mu.Unlock()
	j.state = heldFinalizing
	if j.cancel != nil {
		j.cancel(context.Canceled) // release the context's resources
	}
}

// staleWrite counts and logs a fenced write that matched nothing.
func (rt *runtime) staleWrite(j *heldJob, what string) {
	rt.stats.staleWrites.Add(1)
	rt.logger.Warn("weir: stale write ignored: the lease was lost", "job_id", j.row.ID,
		"lease_token", j.token, "write", what)
	rt.events.emit(EventStaleWrite, j.row, nil, 0)
}

// finalization turns a handler's return into the outcome to write.
func (rt *runtime) finalization(j *heldJob, entry *workerEntry, err, cause error, ran time.Duration) *finalization {
	f := &finalization{job: j, err: err, ran: ran, params: weirdriver.JobFinalizeParams{ID: j.row.ID, LeaseToken: j.token}}
	kind, snooze := outcomeOf(err)
	if kind == outcomeFailed && errors.Is(cause, ErrShutdown) {
		// The shutdown cancelled it: give the job back, without spending an attempt.
		f.params.Outcome, f.event = weirdriver.OutcomeRelease, EventJobReleased
		return f
	}
	attemptErr := func() *AttemptError {
		ae := &AttemptError{Attempt: j.row.Attempt, At: time.Now().UTC(), Error: storableText(err.Error())}
		var pe *PanicError
		if errors.As(err, &pe) {
			ae.Trace = storableText(pe.Stack)
		}
		return ae
	}
	switch kind {
	case outcomeCompleted:
		f.params.Outcome, f.event = weirdriver.OutcomeCompleted, EventJobCompleted
	case outcomeSnooze:
		f.params.Outcome, f.event = weirdriver.OutcomeSnooze, EventJobSnoozed
		f.params.ScheduledAt = time.Now().Add(snooze)
	case outcomeCancel:
		f.params.Outcome, f.event, f.params.Error = weirdriver.OutcomeCancel, EventJobCancelled, attemptErr()
	case outcomeDiscard:
		f.params.Outcome, f.event, f.params.Error = weirdriver.OutcomeDiscard, EventJobDiscarded, attemptErr()
	default:
		f.params.Error = attemptErr()
		if j.row.Attempt >= j.row.MaxAttempts {
			f.params.Outcome, f.event = weirdriver.OutcomeDiscard, EventJobDiscarded
			break
		}
		policy := rt.cfg.RetryPolicy
		if entry != nil && entry.retry != nil {
			policy = entry.retry
		}
		f.params.Outcome, f.event = weirdriver.OutcomeRetry, EventJobFailed
		f.params.ScheduledAt = policy.NextRetry(j.row)
	}
	return f
}

// logFailure logs a failed attempt at WARN and a discarded job at ERROR, with
// the stack of a panic, rate-limited per kind. cause is why the handler's context
// ended, if it did.
func (rt *runtime) logFailure(j *heldJob, f *finalization, cause error) {
	if errors.Is(cause, ErrJobCancelRequested) {
		return // an operator cancelled it: the job ends cancelled, not failed
	}
	var (
		level slog.Level
		msg   string
	)
	switch f.params.Outcome {
	case weirdriver.OutcomeRetry:
		level, msg = slog.LevelWarn, "weir: job attempt failed"
	case weirdriver.OutcomeDiscard:
		level, msg = slog.LevelError, "weir: job discarded"
	default:
		return
	}
	attrs := []any{"kind", j.row.Kind, "job_id", j.row.ID, "attempt", j.row.Attempt,
		"max_attempts", j.row.MaxAttempts, "error", f.err.Error()}
	if f.params.Outcome == weirdriver.OutcomeRetry {
		attrs = append(attrs, "retry_at", f.params.ScheduledAt)
	}
	if pe := (*PanicError)(nil); errors.As(f.err, &pe) {
		attrs = append(attrs, "stack", pe.Stack)
	}
	rt.limited.log(level, msg, j.row.Kind, attrs...)
}

// listen wakes producers on insert notifications and cancels handlers on cancel
// requests. It reconnects by itself, and wakes every producer after a reconnect,
// since notifications may have been missed meanwhile.
func (rt *runtime) listen(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		l, err := rt.driver.Listen(ctx, rt.driver.InsertChannel(), rt.driver.ControlChannel())
		if err != nil {
			if ctx.Err() == nil {
				rt.logger.Warn("weir: listen; producers poll meanwhile", "error", err, "retry_in", backoff)
			}
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		for _, p := range rt.producers {
			p.poke()
		}
		for {
			n, err := l.WaitForNotification(ctx)
			if err != nil {
				break
			}
			rt.notify(n)
		}
		// On a reconnect, close politely; at shutdown, at once (a closed context
		// makes Close drop the connection without waiting on the network), so that
		// an unreachable database cannot hold Stop past its deadline.
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		if ctx.Err() != nil {
			cancel()
		}
		_ = l.Close(closeCtx)
		cancel()
	}
}

// notify acts on a notification. Any role that can connect may send one, on any
// channel, so a notification is only a hint to ask the database: an insert
// notification wakes its queue's producer, whose claim reads the queue (and which
// throttles wake-ups that find nothing); a cancel names a running job whose
// cancel_requested_at the heartbeat then reads, with an early renewal, before it
// cancels anything. Each costs O(1) here and coalesces with the ones before it.
func (rt *runtime) notify(n *weirdriver.Notification) {
	switch n.Channel {
	case rt.driver.InsertChannel():
		if p := rt.producers[n.Payload]; p != nil {
			p.hint()
		}
	case rt.driver.ControlChannel():
		if strings.HasPrefix(n.Payload, "pause ") {
			return // every claim checks whether its queue is paused
		}
		idText, ok := strings.CutPrefix(n.Payload, "cancel ")
		id, err := strconv.ParseInt(idText, 10, 64)
		if !ok || err != nil {
			rt.limited.log(slog.LevelWarn, "weir: unknown control message", "", "payload", truncate(n.Payload))
			return
		}
		rt.leases.mu.Lock()
		j := rt.leases.jobs[id]
		running := j != nil && j.state == heldRunning
		rt.leases.mu.Unlock()
		if running {
			rt.renewSoon()
		}
	}
}

// renewSoon asks the heartbeat for an early renewal, which reports the running
// jobs whose cancel was requested. It never blocks; requests coalesce.
func (rt *runtime) renewSoon() {
	select {
	case rt.renewRequest <- struct{}{}:
	default:
	}
}
