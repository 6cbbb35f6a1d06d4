package weir

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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

// engine is a started client's moving parts. Start builds it; Stop tears it down
// in the order docs/contract.md gives.
type engine struct {
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
		if c.eng != nil && c.eng.isStopping() {
			return ErrStopped
		}
		return ErrAlreadyStarted
	}
	if err := weirmigrate.New(c.driver).Check(ctx); err != nil {
		return fmt.Errorf("weir: start: %w", err)
	}
	c.started = true

	cfg := &c.config
	e := &engine{
		cfg: cfg, clientID: cfg.ID, exec: c.driver.Executor(), driver: c.driver,
		logger: cfg.Logger, limited: newLogLimiter(cfg.Logger, time.Now, logLinesPerSecond), events: c.events, stats: &stats{},
		renewRequest: make(chan struct{}, 1),
		producers:    map[string]*producer{}, completerDone: make(chan struct{}), stopped: make(chan struct{}),
		baseCtx: context.WithoutCancel(ctx),
	}
	e.claimCtx, e.stopClaim = context.WithCancel(context.Background())
	e.hardCtx, e.hardCancel = context.WithCancel(context.Background())
	e.serviceCtx, e.serviceCancel = context.WithCancel(e.hardCtx)
	e.leases = newLeaseTable(e.leaseLost)
	e.completer = newCompleter(e)
	// A new leader must be able to rescue within a lease duration plus a rescue
	// interval of a crash (G9), even when the crashed client led: its term (3
	// election intervals) plus one interval to win stays inside that bound.
	elect := min(5*time.Second, cfg.RescueInterval)
	e.maint = maintenance.New(e.exec, &maintenance.Config{
		ClientID: cfg.ID, Logger: cfg.Logger, RescueInterval: cfg.RescueInterval,
		ElectInterval: elect, LeaderTTL: 3 * elect,
		CompletedRetention: cfg.CompletedRetention, CancelledRetention: cfg.CancelledRetention,
		DiscardedRetention: cfg.DiscardedRetention,
	})
	for name, qc := range cfg.Queues {
		e.producers[name] = newProducer(e, name, qc)
	}

	e.events.startHooks(cfg.Logger)
	go func() { // the completer: stopped by serviceCtx, awaited through completerDone
		defer close(e.completerDone)
		e.completer.loop(e.serviceCtx)
	}()
	e.services.Go(func() { e.heartbeat(e.serviceCtx) })
	e.services.Go(func() { e.listen(e.serviceCtx) })
	if err := e.maint.Start(e.serviceCtx); err != nil {
		e.serviceCancel()
		e.services.Wait()
		<-e.completerDone
		e.events.stopHooks(ctx) // subscriptions stay: Start may be tried again
		c.started = false       // nothing runs: Start may be tried again
		return fmt.Errorf("weir: start maintenance: %w", err)
	}
	for _, p := range e.producers {
		e.producerLoops.Go(func() { p.loop(e.claimCtx) })
	}
	c.eng = e
	return nil
}
