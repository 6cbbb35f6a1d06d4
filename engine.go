package weir

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirq/weir/internal/completer"
	"github.com/weirq/weir/internal/lease"
	"github.com/weirq/weir/internal/listener"
	"github.com/weirq/weir/internal/maintenance"
	"github.com/weirq/weir/internal/registry"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirmigrate"
)

// engine is a started client's moving parts. Start builds it and wires its
// services together; Stop tears it down in the order docs/design/contract.md gives.
// Each service gets what it works with (its deps) rather than the engine.
type engine struct {
	cfg    *Config
	logger *slog.Logger
	// limited logs what can repeat at will (every line about one job, failed
	// claims, renewals and writes, notifications), at most logLinesPerSecond
	// lines a second of each message and kind.
	limited *logLimiter
	events  *eventBus
	stats   *stats

	leases    *lease.Table
	heartbeat *lease.Heartbeat
	listener  *listener.Listener // nil when Config.PollOnly
	completer *completer.Completer
	maint     *maintenance.Service
	registry  *registry.Registry
	// registryWrites counts the registry's writes (tests read it).
	registryWrites atomic.Int64

	// The queues (queues.go). producers holds the producer of each queue the
	// client works, by name: a map never changed once stored, replaced whole
	// under queuesMu, so that the callbacks that look a producer up (an
	// outcome written, a notification, an insert) never wait for a change.
	producers atomic.Pointer[map[string]*producer]
	// deps are what each producer works with, kept for queues added later.
	deps producerDeps
	// queuesMu guards the changes of producers, removing and queuesClosed. It
	// is never held across I/O or a wait for handlers, so that Stop never waits
	// for a change of the queues.
	queuesMu sync.Mutex
	// removing holds the producers of removed queues until their loop and
	// handlers ended: Stop waits for them as for the others.
	removing map[*producer]struct{}
	// queuesClosed is set at Stop's first step: no queue changes afterwards.
	queuesClosed bool
	// changeMu makes each Add, Remove and Update one step: each checks the set
	// of queues and changes it, with Add's and Update's database writes in
	// between. Stop never takes it.
	changeMu sync.Mutex

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

// IsLeader reports whether this client runs maintenance now.
func (c *Client) IsLeader() bool {
	c.mu.Lock()
	e := c.eng
	c.mu.Unlock()
	return e != nil && e.maint.IsLeader()
}

// Start checks the schema and starts working the configured queues: claiming,
// running handlers, renewing leases, writing outcomes, listening for new jobs and,
// when elected, maintenance. ctx bounds the start only; Stop stops the client.
// An inline client (Config.Inline) runs jobs as it inserts them: its Start
// starts nothing and returns nil.
func (c *Client) Start(ctx context.Context) error {
	if c.config.Inline {
		return nil
	}
	if len(c.config.Workers.byKind) == 0 {
		return invalidf("Config.Workers", "Start: Config.Workers has no workers")
	}
	if err := c.beginStart(ctx); err != nil {
		return err
	}
	if err := weirmigrate.New(c.driver).Check(ctx); err != nil {
		c.endStart(nil)
		return fmt.Errorf("weir: start: %w", err)
	}
	e := newEngine(ctx, c)
	if err := e.start(ctx); err != nil {
		c.endStart(nil) // nothing runs: Start may be tried again
		return err
	}
	c.endStart(e)
	return nil
}

// beginStart moves the client to clientStarting, or says why it cannot start.
// A Start or Stop that comes while another Start runs waits for it, as long as
// its ctx lasts.
func (c *Client) beginStart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.waitStartLocked(ctx); err != nil {
		return fmt.Errorf("weir: start: %w", err)
	}
	if c.state == clientStarted {
		if c.eng.isStopping() {
			return ErrStopped
		}
		return ErrAlreadyStarted
	}
	// Read under c.mu: Queues().Add and Remove change the queues of a client
	// not started.
	if len(c.config.Queues) == 0 {
		return invalidf("Config.Queues", "Start: Config.Queues is empty: a client without queues only inserts")
	}
	c.state, c.startDone = clientStarting, make(chan struct{})
	return nil
}

// endStart ends the Start in flight: with e, the client runs; without, it is
// idle again.
func (c *Client) endStart(e *engine) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e != nil {
		c.state, c.eng = clientStarted, e
	} else {
		c.state = clientIdle
	}
	close(c.startDone)
}

// settledEngine waits until no Start is in flight, or ctx ends, and returns the
// engine (nil when the client has not started).
func (c *Client) settledEngine(ctx context.Context) (*engine, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.waitStartLocked(ctx); err != nil {
		return nil, err
	}
	return c.eng, nil
}

// waitStartLocked waits, with c.mu released meanwhile, until no Start is in
// flight, or ctx ends. c.mu is held when it is called and when it returns.
func (c *Client) waitStartLocked(ctx context.Context) error {
	for c.state == clientStarting {
		done := c.startDone
		c.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			c.mu.Lock()
			return ctx.Err()
		}
		c.mu.Lock()
	}
	return nil
}

// newEngine builds c's engine and wires its services; start starts them. ctx's
// values, not its cancellation, reach handlers.
func newEngine(ctx context.Context, c *Client) *engine {
	cfg := &c.config
	exec := c.driver.Executor()
	e := &engine{
		cfg: cfg, logger: cfg.Logger, limited: newLogLimiter(cfg.Logger, time.Now, logLinesPerSecond),
		events: c.events, stats: &stats{},
		removing: map[*producer]struct{}{}, completerDone: make(chan struct{}), stopped: make(chan struct{}),
	}
	e.claimCtx, e.stopClaim = context.WithCancel(context.Background())
	e.hardCtx, e.hardCancel = context.WithCancel(context.Background())
	e.serviceCtx, e.serviceCancel = context.WithCancel(e.hardCtx)

	e.leases = lease.NewTable(e.leaseLost)
	e.heartbeat = lease.NewHeartbeat(lease.HeartbeatConfig{
		Exec: exec, Leases: e.leases,
		Warn: e.warnLimited, Interval: cfg.HeartbeatInterval, LeaseDuration: cfg.LeaseDuration,
		Renewals: &e.stats.renewals, Hard: e.hardCtx,
	})
	budget := e.heartbeat.Budget()
	e.completer = completer.New(completer.Config{
		Exec: exec, Leases: e.leases, Warn: e.warnLimited, LeaseBudget: budget,
		Finalized: &e.stats.finalized, Released: &e.stats.released,
		Written: e.outcomeWritten, Stale: e.staleWrite, Abandoned: e.outcomeAbandoned,
		Room: e.pokeProducers,
	})
	e.deps = producerDeps{
		exec: exec, clientID: cfg.ID, handlers: cfg.Workers, middleware: cfg.WorkerMiddleware,
		pollInterval: cfg.FetchPollInterval, leaseDuration: cfg.LeaseDuration, leaseBudget: budget,
		shareInterval: cmp.Or(c.shareInterval, min(cfg.HeartbeatInterval, maxShareInterval)),
		jobTimeout:    cfg.JobTimeout, retryPolicy: cfg.RetryPolicy,
		leases: e.leases, limited: e.limited, events: e.events, claims: &e.stats.claims,
		base: c.withHandlerScope(context.WithoutCancel(ctx), e.leases),
		hard: e.hardCtx, submit: e.completer.Submit, backlogFull: e.completer.Full,
	}
	producers := make(map[string]*producer, len(cfg.Queues))
	for name, qc := range cfg.Queues {
		producers[name] = newProducer(e.deps, name, qc)
	}
	e.producers.Store(&producers)
	if !cfg.PollOnly { // a poll-only client has no LISTEN connection (docs/poolers.md)
		e.listener = listener.New(listener.Config{
			Driver: c.driver, Logger: cfg.Logger,
			Connected: e.pokeProducers, Insert: e.insertNotified, Cancel: e.cancelNotified, Unknown: e.unknownNotified,
		})
	}
	// G9 names the leader term (3 election intervals) as the bound after a
	// leader's death; an interval of at most 5 s keeps it short.
	elect := min(5*time.Second, cfg.RescueInterval)
	// The leader registers its periodic jobs, none included, so that the
	// schedules it does not declare are orphaned (docs/periodic.md).
	e.maint = maintenance.New(exec, &maintenance.Config{
		OnTerm:   c.periodicFirer(exec, e.logger, elect).Run,
		ClientID: cfg.ID, Logger: cfg.Logger, Rescued: e.jobRescued, RescueInterval: cfg.RescueInterval,
		ElectInterval: elect, LeaderTTL: 3 * elect,
		CompletedRetention: cfg.CompletedRetention, CancelledRetention: cfg.CancelledRetention,
		DiscardedRetention: cfg.DiscardedRetention,
		ClientStaleAfter:   registry.StaleAfter,
	})
	e.registry = registry.New(registry.Config{
		Exec: exec, ID: cfg.ID, Queues: registryQueues(producers), Interval: c.registryInterval, Logger: cfg.Logger, Writes: &e.registryWrites,
	})
	return e
}

// start starts the engine's goroutines. When it fails, nothing runs.
func (e *engine) start(ctx context.Context) error {
	// The limits this client declares are stored before anything runs:
	// the database's value is the one every claim obeys.
	for name, p := range *e.producers.Load() {
		if err := storeLimits(ctx, e.deps.exec, name, p.config(), QueueConfig{}); err != nil {
			return fmt.Errorf("weir: start: %w", err)
		}
	}
	e.events.startHooks(e.logger)
	go func() { // the completer: stopped by serviceCtx, awaited through completerDone
		defer close(e.completerDone)
		e.completer.Run(e.serviceCtx)
	}()
	e.services.Go(func() { e.heartbeat.Run(e.serviceCtx) })
	if e.listener != nil {
		e.services.Go(func() { e.listener.Run(e.serviceCtx) })
	}
	if err := e.maint.Start(e.serviceCtx); err != nil {
		e.serviceCancel()
		e.services.Wait()
		<-e.completerDone
		e.events.stopHooks(ctx) // subscriptions stay: Start may be tried again
		return fmt.Errorf("weir: start maintenance: %w", err)
	}
	// The client registers before its first claim, so that the registry knows
	// it before any job names it in attempted_by; a registration that fails
	// is logged, and the next refresh tries again.
	e.registry.Register(ctx)
	e.services.Go(func() { e.registry.Run(e.serviceCtx) })
	for _, p := range *e.producers.Load() {
		p.start(e.claimCtx, &e.producerLoops)
	}
	return nil
}

// storeLimits stores the global, rate and key limits that cfg declares for queue,
// those that differ from declared (what the client declared before; the zero
// QueueConfig at Start). A limit left zero leaves the stored one: none, or one
// an operator set. The database's value is the one every claim obeys.
func storeLimits(ctx context.Context, exec weirdriver.Executor, queue string, cfg, declared QueueConfig) error {
	if cfg.GlobalLimit != 0 && cfg.GlobalLimit != declared.GlobalLimit {
		if err := exec.QueueSetGlobalLimit(ctx, queue, cfg.GlobalLimit); err != nil {
			return err
		}
	}
	if r := cfg.RateLimit; r != (RateLimit{}) && r != declared.RateLimit {
		if err := exec.QueueSetRateLimit(ctx, queue, r.Limit, r.Period); err != nil {
			return err
		}
	}
	if k := cfg.KeyLimit; k != (KeyLimit{}) && k != declared.KeyLimit {
		if err := exec.QueueSetKeyLimit(ctx, queue, k.params()); err != nil {
			return err
		}
	}
	return nil
}

// The engine's callbacks, which its services call.

// leaseLost counts, logs and publishes a lease found lost while its handler runs
// or waits. The lease table calls it with its mutex held.
func (e *engine) leaseLost(j *lease.Job, why string) {
	e.stats.leasesLost.Add(1)
	e.limited.job(slog.LevelWarn, "weir: lease lost", j.Row, j.Token, slog.String("reason", why))
	e.events.emit(EventLeaseLost, j.Row, nil, 0)
}

// outcomeWritten publishes the event of an outcome the completer wrote.
func (e *engine) outcomeWritten(f *completer.Finalization) {
	err := f.Err
	if f.EndedInTx {
		err = nil // the handler's transaction ended the job; run logged its error
	}
	e.events.emit(eventOf(f.Params.Outcome), f.Job.Row, err, f.Ran)
	if p := e.producer(f.Job.Row.Queue); p != nil {
		p.released()
	}
}

// staleWrite counts, logs and publishes a fenced write that matched nothing.
func (e *engine) staleWrite(f *completer.Finalization) {
	j := f.Job
	e.stats.staleWrites.Add(1)
	e.limited.job(slog.LevelWarn, "weir: stale write ignored: the lease was lost", j.Row, j.Token,
		slog.String("outcome", string(f.Params.Outcome)))
	e.events.emit(EventStaleWrite, j.Row, nil, 0)
}

// outcomeAbandoned counts and logs an outcome the completer gave up on: rescue
// will take the job.
func (e *engine) outcomeAbandoned(f *completer.Finalization, why string) {
	e.stats.abandoned.Add(1)
	e.limited.job(slog.LevelWarn, "weir: outcome abandoned; rescue will take the job", f.Job.Row, f.Job.Token,
		slog.String("outcome", string(f.Params.Outcome)), slog.String("reason", why))
}

// jobRescued logs a job the maintenance leader took back from an expired lease:
// at ERROR when the rescue discarded it (no attempts left), else at WARN.
func (e *engine) jobRescued(row *JobRow) {
	level := slog.LevelWarn
	if row.State == JobStateDiscarded {
		level = slog.LevelError
	}
	e.limited.job(level, "weir: job rescued: its lease expired", row, row.LeaseToken,
		slog.String("state", string(row.State)))
}

// pokeProducers wakes every producer: the listener (re)connected, and
// notifications may have been missed meanwhile.
func (e *engine) pokeProducers() {
	for _, p := range *e.producers.Load() {
		p.poke()
	}
}

// insertNotified wakes the producer of the queue an insert notification names;
// the producer throttles such hints.
func (e *engine) insertNotified(queue string) {
	if p := e.producer(queue); p != nil {
		p.hint()
	}
}

// cancelNotified asks the heartbeat for an early renewal, which reads whether an
// operator cancelled the job, when a cancel notification names a job whose
// handler runs here. A notification naming any other job costs nothing.
func (e *engine) cancelNotified(id int64) {
	if e.leases.IsRunning(id) {
		e.heartbeat.RenewSoon()
	}
}

// warnLimited logs a service's warning that may repeat at every interval while
// the database is unreachable, rate-limited.
func (e *engine) warnLimited(msg string, attrs ...any) {
	e.limited.log(slog.LevelWarn, msg, "", attrs...)
}

// unknownNotified logs a control message weir does not know, rate-limited.
func (e *engine) unknownNotified(payload string) {
	e.limited.log(slog.LevelWarn, "weir: unknown control message", "", "payload", truncate(payload))
}
