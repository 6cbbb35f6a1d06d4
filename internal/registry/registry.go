// Package registry keeps a running client's row in the client registry
// (weir_client): written when the client starts, refreshed every Interval,
// deleted when it stops. The maintenance leader deletes the rows that go
// unrefreshed for StaleAfter, so that a crashed client disappears.
//
// The registry is informational, for operators: nothing that claims, renews
// or finalizes jobs reads it, and its writes are statements of their own, on
// a goroutine of their own, never part of a lease renewal. A write that fails
// is logged once (and again only after a write of the same kind succeeded)
// and otherwise ignored.
package registry

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirq/weir/internal/clock"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// The registry's timing, the same for every client: the leader of one client
// forgets the rows of all, so the staleness it allows must exceed every
// client's refresh interval.
const (
	// Interval is how often a client refreshes its row.
	Interval = 5 * time.Second
	// StaleAfter is how long a row goes unrefreshed before the leader forgets
	// it: twelve refreshes missed in a row.
	StaleAfter = time.Minute
	// writeTimeout bounds each write, whatever Config.Interval is: a write
	// stuck longer is cut, and the next refresh tries again.
	writeTimeout = Interval
)

// modulePath is weir's module, whose version a row records.
const modulePath = "github.com/weirq/weir"

// Config is what a registry works with.
type Config struct {
	Exec weirdriver.Executor
	// ID is the client's instance id; Queues the queues it works.
	ID     string
	Queues map[string]int // name → max workers
	// Interval is how often the row is refreshed. Default: Interval.
	Interval time.Duration
	Logger   *slog.Logger
	// Writes, when set, counts the writes sent, failed ones included.
	Writes *atomic.Int64
	// Clock times the refreshes. Default: clock.Real.
	Clock clock.Clock
}

// Registry writes one client's row. Its calls are made one after another:
// Register, then Run on a goroutine, then Remove once Run returned; SetQueues
// may be called at any time.
type Registry struct {
	cfg Config
	// failing holds the kinds of write whose last try failed and was logged.
	failing map[string]bool
	// changed holds a pending SetQueues for Run to write (capacity 1).
	changed chan struct{}

	// mu guards params: SetQueues changes its queues while Run writes it.
	mu     sync.Mutex
	params weirdriver.ClientRegisterParams
}

// New returns a registry for the client cfg describes.
func New(cfg Config) *Registry {
	if cfg.Interval <= 0 {
		cfg.Interval = Interval
	}
	cfg.Clock = clock.Or(cfg.Clock)
	host, _ := os.Hostname()
	if len(host) > weirdriver.MaxClientHostBytes {
		host = host[:weirdriver.MaxClientHostBytes]
	}
	return &Registry{
		cfg: cfg,
		params: weirdriver.ClientRegisterParams{
			ID: cfg.ID, Host: host, PID: os.Getpid(), Version: Version(), Queues: clientQueues(cfg.Queues),
		},
		failing: map[string]bool{},
		changed: make(chan struct{}, 1),
	}
}

// clientQueues lists queues (name → max workers) as the row records them, by
// name.
func clientQueues(queues map[string]int) []weirtype.ClientQueue {
	list := make([]weirtype.ClientQueue, 0, len(queues))
	for name, max := range queues {
		list = append(list, weirtype.ClientQueue{Name: name, MaxWorkers: max})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return list
}

// SetQueues replaces the queues the row lists (name → max workers): the
// client added, removed or resized one while it runs. Run writes the row at
// once rather than at its next refresh.
func (r *Registry) SetQueues(queues map[string]int) {
	list := clientQueues(queues)
	r.mu.Lock()
	r.params.Queues = list
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// Version is weir's module version as the build recorded it: "(devel)" for a
// build of weir's own tree, "" when the build recorded none.
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	if info.Main.Path == modulePath {
		return info.Main.Version
	}
	for _, m := range info.Deps {
		if m.Path == modulePath {
			if m.Replace != nil && m.Replace.Version != "" {
				return m.Replace.Version
			}
			return m.Version
		}
	}
	return ""
}

// Register writes the row, for no longer than ctx and writeTimeout allow.
func (r *Registry) Register(ctx context.Context) {
	r.write(ctx, "register")
}

// Run refreshes the row every interval until ctx ends.
func (r *Registry) Run(ctx context.Context) {
	tick := r.cfg.Clock.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
			r.write(ctx, "refresh")
		case <-r.changed:
			r.write(ctx, "refresh")
		}
	}
}

// write registers or refreshes the row. It keeps the started_at the first
// success returned, so that a row the leader forgot while the database was
// out of reach comes back with it.
func (r *Registry) write(ctx context.Context, kind string) {
	r.mu.Lock()
	params := r.params // the queues' slice is replaced, never changed in place
	r.mu.Unlock()
	var started time.Time
	if r.do(ctx, kind, func(ctx context.Context) (err error) {
		started, err = r.cfg.Exec.ClientRegister(ctx, &params)
		return err
	}) {
		r.mu.Lock()
		r.params.StartedAt = started
		r.mu.Unlock()
	}
}

// Remove deletes the row, for no longer than ctx and writeTimeout allow. If it
// fails, the leader forgets the row once it is stale.
func (r *Registry) Remove(ctx context.Context) {
	r.do(ctx, "remove", func(ctx context.Context) error { return r.cfg.Exec.ClientDelete(ctx, r.cfg.ID) })
}

// do runs one write, for no longer than ctx and writeTimeout allow, and
// reports whether it succeeded. It logs the first failure of a kind of write,
// and none after it until one of that kind succeeds; a write cut because ctx
// ended (Start's context, or Stop's budget) is not logged.
func (r *Registry) do(ctx context.Context, kind string, write func(context.Context) error) bool {
	if r.cfg.Writes != nil {
		r.cfg.Writes.Add(1)
	}
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	err := write(wctx)
	cancel()
	if err == nil {
		delete(r.failing, kind)
		return true
	}
	if r.failing[kind] || ctx.Err() != nil {
		return false
	}
	r.failing[kind] = true
	// Informational: jobs run as before, so once per kind is enough.
	r.cfg.Logger.Warn("weir: client registry: "+kind+" failed", slog.String("client_id", r.cfg.ID), slog.Any("error", err))
	return false
}
