// Package maintenance runs weir's housekeeping (rescuing expired leases, making
// due jobs available, deleting old final jobs, forgetting crashed clients) in
// one elected client at a time among all clients that share a schema.
package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// LeaderName is the name maintenance leadership is elected under.
const LeaderName = "maintenance"

// Defaults of Config's zero fields. The rescue interval and the retentions have
// none here: they are the client's settings, whose defaults the client owns.
const (
	DefaultElectInterval    = 5 * time.Second
	DefaultScheduleInterval = time.Second
	DefaultPruneInterval    = time.Minute
	DefaultBatchSize        = 1000
)

// ErrStopped is returned by Start on a service that was stopped or started before:
// a service runs once.
var ErrStopped = errors.New("maintenance: service already started or stopped")

// Config configures a Service. Zero fields take their defaults, except the rescue
// interval and the retentions, which are required.
type Config struct {
	// ClientID is the candidate's unique id. Required.
	ClientID string
	// Logger receives the service's logs. Default: slog.Default().
	Logger *slog.Logger
	// Rescued, when set, is told of each job rescued from an expired lease (its
	// row after the rescue), for the client to log, rate-limited, as it logs
	// every line about one job.
	Rescued func(row *weirtype.JobRow)
	// RescueInterval is how often expired leases are rescued. Required.
	RescueInterval time.Duration
	// CompletedRetention, CancelledRetention and DiscardedRetention say how long
	// final jobs are kept before they are deleted. Negative means keep forever.
	// Required.
	CompletedRetention time.Duration
	CancelledRetention time.Duration
	DiscardedRetention time.Duration
	// ElectInterval is how often the service tries for, or renews, leadership,
	// and the safety margin by which a leader stops before its term may be taken
	// over: a term is trusted locally for LeaderTTL − ElectInterval from the
	// moment its election was sent, and every maintenance statement ends by then
	// (a batch's commit may end later: its transaction holds the leader row).
	// An election may take as long as the term it would win, and a renewal no
	// longer than the current term: on a slow database a longer wait still wins
	// a shorter term, where a timeout would win none. Default: 5 s.
	ElectInterval time.Duration
	// LeaderTTL is how long a term lasts without renewal (database clock). It
	// must exceed 2×ElectInterval. Default: 3×ElectInterval.
	LeaderTTL time.Duration
	// ScheduleInterval is how often due scheduled and retryable jobs are made
	// available. Default: 1 s.
	ScheduleInterval time.Duration
	// PruneInterval is how often old final jobs are deleted. Default: 1 min.
	PruneInterval time.Duration
	// ClientStaleAfter, when set, makes the leader delete the client registry
	// rows whose heartbeat is older than it (crashed clients), at the start of
	// each term and every PruneInterval. Zero leaves the registry alone.
	ClientStaleAfter time.Duration
	// OnTerm, when set, runs in each term as one of its tasks, with a context
	// that ends when the term does (the client fires periodic jobs in it).
	OnTerm func(ctx context.Context)
	// BatchSize is the most rows one rescue, schedule or prune statement
	// changes; each task repeats its statement until a batch comes back short.
	// A task whose statement runs out of time halves its own limit, down to one
	// row, and doubles it back after each full batch. Default: 1000.
	BatchSize int
	// Now is the clock by which a segment of the ready list has stayed locked
	// long enough to warn about (busyWatch). Default: time.Now.
	Now func() time.Time
}

// withDefaults returns a copy of c with its zero fields set to their defaults.
func (c *Config) withDefaults() Config {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.ElectInterval, DefaultElectInterval)
	def(&cfg.LeaderTTL, 3*cfg.ElectInterval)
	def(&cfg.ScheduleInterval, DefaultScheduleInterval)
	def(&cfg.PruneInterval, DefaultPruneInterval)
	if cfg.BatchSize == 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg
}

// validate reports the first problem of a config with its defaults set.
func (c *Config) validate() error {
	if c.ClientID == "" {
		return errors.New("maintenance: ClientID is empty")
	}
	for _, d := range []struct {
		name     string
		v        time.Duration
		required bool // it has no default: zero is refused
		signed   bool // a negative value means something (keep forever)
	}{
		{"RescueInterval", c.RescueInterval, true, false},
		{"CompletedRetention", c.CompletedRetention, true, true},
		{"CancelledRetention", c.CancelledRetention, true, true},
		{"DiscardedRetention", c.DiscardedRetention, true, true},
		{"ElectInterval", c.ElectInterval, false, false},
		{"LeaderTTL", c.LeaderTTL, false, false},
		{"ScheduleInterval", c.ScheduleInterval, false, false},
		{"PruneInterval", c.PruneInterval, false, false},
		{"ClientStaleAfter", c.ClientStaleAfter, false, false},
	} {
		switch {
		case d.required && d.v == 0:
			return fmt.Errorf("maintenance: %s is not set", d.name)
		case !d.signed && d.v < 0:
			return fmt.Errorf("maintenance: %s %v is negative", d.name, d.v)
		}
	}
	if c.BatchSize < 0 {
		return fmt.Errorf("maintenance: BatchSize %d is negative", c.BatchSize)
	}
	// A term is trusted for LeaderTTL − ElectInterval after its renewal was sent;
	// that must outlast the next renewal, sent ElectInterval later.
	if c.LeaderTTL <= 2*c.ElectInterval {
		return fmt.Errorf("maintenance: LeaderTTL %v must exceed 2×ElectInterval (%v)", c.LeaderTTL, c.ElectInterval)
	}
	return nil
}

// Stats counts what a service did since it was made.
type Stats struct {
	// Rescued counts jobs taken back from expired leases.
	Rescued int64
	// Scheduled counts scheduled and retryable jobs made available.
	Scheduled int64
	// Pruned counts final jobs deleted.
	Pruned int64
	// ForgottenClients counts client registry rows deleted as stale.
	ForgottenClients int64
	// Elections counts the times the service won leadership.
	Elections int64
	// Refused counts maintenance batches not run because the database no longer
	// recorded this service as leader when the batch began.
	Refused int64
}

// Service elects a maintenance leader among the clients sharing a schema and,
// while it leads, runs the maintenance tasks. It owns every goroutine it starts
// and awaits them in Stop.
type Service struct {
	exec   weirdriver.Executor
	cfg    Config
	logger *slog.Logger

	// epoch anchors deadline to the monotonic clock.
	epoch time.Time
	// deadline is the local end of the current term in nanoseconds since epoch,
	// or 0 when the service does not lead. Only the elector writes it.
	deadline atomic.Int64

	rescued, scheduled, pruned, forgotten, elections, refused atomic.Int64

	// The batch limits of the tasks (see batches); they outlive terms.
	rescueLimit, scheduleLimit, pruneLimit, forgetLimit batchLimit

	mu    sync.Mutex
	state int // one of the state constants below
	// stop ends the elector's loop and the tasks' loops; statements in flight
	// finish, so that none runs on after the service gave up its term.
	stop context.CancelFunc
	// abort cuts every statement in flight. Stop calls it when its ctx ends.
	abort   context.CancelFunc
	elector sync.WaitGroup
}

const (
	stateNew = iota
	stateStarted
	stateStopped
)

// New returns a service that runs statements on exec. Start validates cfg.
func New(exec weirdriver.Executor, cfg *Config) *Service {
	c := cfg.withDefaults()
	return &Service{
		exec:   exec,
		cfg:    c,
		logger: c.Logger.With(slog.String("service", "maintenance"), slog.String("client_id", c.ClientID)),
		epoch:  time.Now(),
	}
}

// Start starts the elector and returns at once. When ctx ends the service stops
// as if Stop were called without a deadline, but only Stop awaits its goroutines.
func (s *Service) Start(ctx context.Context) error {
	if s.exec == nil {
		return errors.New("maintenance: executor is nil")
	}
	if err := s.cfg.validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateNew {
		return ErrStopped
	}
	s.state = stateStarted
	loopCtx, stop := context.WithCancel(ctx)
	// Statements outlive the loops, so that a stopping service lets the one in
	// flight finish and then gives up its term; each has its own deadline, and
	// Stop's ctx cuts them all.
	callCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	s.stop, s.abort = stop, abort
	s.elector.Go(func() { s.elect(loopCtx, callCtx) })
	return nil
}

// Stop stops the maintenance tasks and the elector, gives up leadership if held
// and waits for every goroutine the service started. When ctx ends, statements
// in flight (the resignation too) are cut. It is safe to call twice,
// concurrently, or before Start.
func (s *Service) Stop(ctx context.Context) {
	s.mu.Lock()
	s.state = stateStopped
	stop, abort := s.stop, s.abort
	s.mu.Unlock()
	if stop == nil {
		return
	}
	stopAbort := context.AfterFunc(ctx, abort)
	defer stopAbort()
	stop()
	s.elector.Wait()
	abort()
}

// IsLeader reports whether the service leads now. It turns false by itself when
// the local deadline of the term passes, even if the elector is stuck.
func (s *Service) IsLeader() bool {
	_, ok := s.termDeadline()
	return ok
}

// Stats returns the service's counters.
func (s *Service) Stats() Stats {
	return Stats{
		Rescued:          s.rescued.Load(),
		Scheduled:        s.scheduled.Load(),
		Pruned:           s.pruned.Load(),
		ForgottenClients: s.forgotten.Load(),
		Elections:        s.elections.Load(),
		Refused:          s.refused.Load(),
	}
}

// termDeadline returns the local end of the current term, and false when the
// service does not lead or that end has passed.
func (s *Service) termDeadline() (time.Time, bool) {
	d := time.Duration(s.deadline.Load())
	if d == 0 || time.Since(s.epoch) >= d {
		return time.Time{}, false
	}
	return s.epoch.Add(d), true
}

// term is one period of leadership and its tasks.
type term struct {
	// loop ends when the tasks must start no more statements; stmt, its
	// parent, ends when statements in flight must be cut.
	loop, stmt context.Context
	end, cut   context.CancelFunc
	tasks      sync.WaitGroup
}

// elect is the elector loop. It tries for leadership at once and then every
// ElectInterval, starts the tasks when it wins, and stops them at once when a
// renewal fails or the term's local deadline passes. When ctx ends it lets the
// statements in flight finish, stops the tasks and resigns. It owns the tasks.
// Statements run under callCtx.
func (s *Service) elect(ctx, callCtx context.Context) {
	var (
		t *term
		// mayHold is whether the store may record this client as leader: after
		// any election call that did not answer no.
		mayHold bool
	)
	expiry := time.NewTimer(time.Hour)
	expiry.Stop()
	defer expiry.Stop()
	next := time.NewTimer(0)
	defer next.Stop()

	// lose ends the term. Leadership that is no longer trusted is dropped at once:
	// IsLeader turns false and statements in flight are cut. A graceful end lets
	// them finish first (each ends by the term's local deadline anyway).
	lose := func(graceful bool, why string, attrs ...slog.Attr) {
		if t == nil {
			return
		}
		expiry.Stop()
		t.end()
		if !graceful {
			s.deadline.Store(0)
			t.cut()
		}
		t.tasks.Wait()
		s.deadline.Store(0)
		t.cut()
		t = nil
		s.logger.LogAttrs(context.Background(), slog.LevelInfo, "weir: leadership ended",
			append([]slog.Attr{slog.String("reason", why)}, attrs...)...)
	}
	defer func() {
		lose(true, "stopping")
		if mayHold {
			s.resign(callCtx)
		}
	}()

	for {
		select {
		case <-ctx.Done():
			return
		case <-expiry.C:
			lose(false, "local deadline passed without a renewal")
			continue
		case <-next.C:
		}
		// The term runs from the moment the call is sent: the database's term
		// starts no earlier, so ours ends no later than its.
		sent := time.Now()
		next.Reset(s.cfg.ElectInterval)
		callEnd := sent.Add(s.cfg.LeaderTTL - s.cfg.ElectInterval)
		if d, ok := s.termDeadline(); ok && d.Before(callEnd) {
			callEnd = d
		}
		electCtx, cancel := context.WithDeadline(callCtx, callEnd)
		// A stop cuts the election at once rather than letting it run to its
		// deadline (up to a term): the resignation that follows gives up
		// whatever it may have won, and Stop keeps its budget.
		stopCut := context.AfterFunc(ctx, cancel)
		won, err := s.exec.LeaderElect(electCtx, &weirdriver.LeaderElectParams{
			Name: LeaderName, LeaderID: s.cfg.ClientID, TTL: s.cfg.LeaderTTL,
		})
		stopCut()
		cancel()
		switch {
		case ctx.Err() != nil:
			mayHold = err != nil || won
			return
		case err != nil:
			mayHold = true // the statement may have committed before it failed
			s.logger.Warn("weir: maintenance: elect leader", slog.Any("error", err))
			lose(false, "renewal failed", slog.Any("error", err))
			continue
		case !won:
			mayHold = false
			if t != nil {
				// The store's term ended before the local deadline: the clocks
				// disagree by more than the margin.
				s.logger.Warn("weir: leadership term ended in the database before its local deadline",
					slog.Duration("margin", s.cfg.ElectInterval))
			}
			lose(false, "another client leads")
			// Try again as the holder's term ends rather than up to an
			// interval later: after a leader dies, another leads a statement's
			// time after its term expires.
			if wait, ok := s.untilTermEnds(ctx, callCtx); ok {
				next.Reset(wait)
			}
			continue
		}
		mayHold = true
		deadline := sent.Add(s.cfg.LeaderTTL - s.cfg.ElectInterval)
		left := time.Until(deadline)
		if left <= 0 {
			lose(false, "renewal came back after the local deadline")
			continue
		}
		s.deadline.Store(int64(deadline.Sub(s.epoch)))
		expiry.Reset(left)
		if t == nil {
			t = s.startTerm(callCtx)
		}
	}
}

// minElectGap is the least wait before an election planned by the end of
// another client's term.
const minElectGap = 10 * time.Millisecond

// untilTermEnds is how long until the term that another client holds ends, by
// the database clock, plus a millisecond, when that is sooner than the next
// election interval; false otherwise, or when the lookup failed.
func (s *Service) untilTermEnds(ctx, callCtx context.Context) (time.Duration, bool) {
	lookup, cancel := context.WithTimeout(callCtx, s.cfg.ElectInterval)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	left, ok, err := s.exec.LeaderTermLeft(lookup, LeaderName)
	if err != nil || left >= s.cfg.ElectInterval {
		return 0, false
	}
	if !ok {
		return minElectGap, true // the term ended since the election: try at once
	}
	return max(left+time.Millisecond, minElectGap), true
}

// startTerm starts the maintenance tasks of a term just won.
func (s *Service) startTerm(callCtx context.Context) *term {
	s.elections.Add(1)
	s.logger.Info("weir: leadership won")
	t := &term{}
	t.stmt, t.cut = context.WithCancel(callCtx)
	t.loop, t.end = context.WithCancel(t.stmt)
	t.tasks.Go(func() { s.rescueLoop(t) })
	t.tasks.Go(func() { s.every(t, s.cfg.ScheduleInterval, true, s.schedule) })
	t.tasks.Go(func() { s.every(t, s.cfg.PruneInterval, false, s.prune) })
	if c, ok := s.exec.(weirdriver.ReadyCompacter); ok {
		t.tasks.Go(func() { s.compactLoop(t, c) })
	}
	if s.cfg.ClientStaleAfter > 0 {
		t.tasks.Go(func() { s.every(t, s.cfg.PruneInterval, true, s.forgetClients) })
	}
	if s.cfg.OnTerm != nil {
		t.tasks.Go(func() { s.cfg.OnTerm(t.loop) })
	}
	return t
}

// resign gives up the term, for no longer than the term could still last.
func (s *Service) resign(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.LeaderTTL)
	defer cancel()
	if err := s.exec.LeaderResign(ctx, LeaderName, s.cfg.ClientID); err != nil {
		s.logger.Warn("weir: maintenance: resign leadership", slog.Any("error", err))
	}
}
