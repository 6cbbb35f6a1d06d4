package weir

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirmigrate"
)

// Client inserts jobs, runs them and lets operators see and steer them.
type Client struct {
	config Config
	driver weirdriver.Driver
	events *eventBus

	// mu guards the fields below. It is never held across I/O, so that Stats,
	// IsLeader and inserts never wait for a Start that waits for the database.
	mu    sync.Mutex
	state clientState
	// startDone is closed when the Start in flight (state clientStarting) ends.
	startDone chan struct{}
	eng       *engine // set when Start succeeded

	// periodic holds Config.PeriodicJobs, checked, by name.
	periodic map[string]*periodicEntry

	// registryInterval, when set, replaces how often the engine refreshes the
	// client's registry row (tests; export_test.go); shareInterval likewise
	// how often it renews its shares and buckets in steady state.
	registryInterval time.Duration
	shareInterval    time.Duration
}

// clientState is where a client stands in its one life: a failed Start goes
// back to clientIdle; a Stop does not change it (the engine knows it stopped).
type clientState int

const (
	clientIdle     clientState = iota // not started, or the last Start failed
	clientStarting                    // a Start runs: it checks the schema and starts the engine
	clientStarted                     // the engine runs, or ran and was stopped
)

// NewClient returns a client on driver. It does no I/O; a schema that is not
// migrated shows up as an error wrapping ErrNotMigrated at first use.
func NewClient(driver weirdriver.Driver, config *Config) (*Client, error) {
	if driver == nil {
		return nil, invalidf("driver", "driver is nil")
	}
	c := &Client{driver: driver, events: &eventBus{}}
	if config != nil {
		c.config = *config
	}
	c.events.hooks = c.config.Hooks
	cfg := &c.config
	if cfg.MaxArgsBytes < 0 {
		return nil, invalidf("Config.MaxArgsBytes", "Config.MaxArgsBytes %d is negative", cfg.MaxArgsBytes)
	}
	if cfg.MaxArgsBytes == 0 {
		cfg.MaxArgsBytes = DefaultMaxArgsBytes
	}
	if cfg.ID == "" {
		cfg.ID = defaultClientID()
	} else if len(cfg.ID) > maxNameLen {
		return nil, invalidf("Config.ID", "Config.ID is %d bytes long; the limit is %d", len(cfg.ID), maxNameLen)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Workers == nil {
		cfg.Workers = NewWorkers()
	}
	for i, mw := range cfg.InsertMiddleware {
		if mw == nil {
			return nil, invalidf("Config.InsertMiddleware", "Config.InsertMiddleware[%d] is nil", i)
		}
	}
	for i, mw := range cfg.WorkerMiddleware {
		if mw == nil {
			return nil, invalidf("Config.WorkerMiddleware", "Config.WorkerMiddleware[%d] is nil", i)
		}
	}
	// The client's own copies: a caller that changes its slices later changes
	// nothing.
	cfg.InsertMiddleware = slices.Clone(cfg.InsertMiddleware)
	cfg.WorkerMiddleware = slices.Clone(cfg.WorkerMiddleware)
	if err := cfg.setRuntimeDefaults(); err != nil {
		return nil, err
	}
	periodic, err := checkPeriodic(cfg.PeriodicJobs)
	if err != nil {
		return nil, err
	}
	c.periodic = periodic
	cfg.PeriodicJobs = slices.Clone(cfg.PeriodicJobs)
	return c, nil
}

// ID is the client's instance id.
func (c *Client) ID() string { return c.config.ID }

// Driver is the driver the client runs on.
func (c *Client) Driver() weirdriver.Driver { return c.driver }

// engine returns the client's engine, or nil before a Start succeeded.
func (c *Client) engine() *engine {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eng
}

// withSchemaCheck runs fn and, when it fails because the schema is missing or
// behind, returns an error that names the missing migrations.
func (c *Client) withSchemaCheck(ctx context.Context, fn func() error) error {
	err := fn()
	if err == nil || !errors.Is(err, weirdriver.ErrSchemaMissing) {
		return err
	}
	if checkErr := weirmigrate.New(c.driver).Check(ctx); checkErr != nil {
		if ctx.Err() != nil {
			return err // cancelled: the first error is the one to report
		}
		return checkErr
	}
	return err
}
