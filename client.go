package weir

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirmigrate"
)

// DefaultMaxArgsBytes is the default limit on a job's encoded args.
const DefaultMaxArgsBytes = 1 << 20

// bulkThreshold is the batch size from which InsertMany writes with the driver's
// bulk path (COPY on PostgreSQL) instead of one INSERT statement.
const bulkThreshold = 64

// Config configures a Client. The zero value of each field means its default.
type Config struct {
	// ID names this client in the rows of the jobs it runs. Default: the host
	// name, the process id and a random suffix.
	ID string
	// MaxArgsBytes limits a job's encoded args (and its metadata). Default: 1 MiB.
	MaxArgsBytes int
	// Workers are the handlers this client runs, by job kind.
	Workers *Workers
	// Logger receives the client's logs. Default: slog.Default().
	Logger *slog.Logger
	// Hooks are called for every job event, detached (see Hook).
	Hooks []Hook
	// InsertMiddleware wraps every insert of this client, the first outermost.
	// See InsertMiddleware.
	InsertMiddleware []InsertMiddleware
	// WorkerMiddleware wraps every attempt of every job this client runs, the
	// first outermost; a worker's own middleware (WorkerWithMiddleware) runs
	// inside it. See WorkerMiddleware.
	WorkerMiddleware []WorkerMiddleware

	// Inline makes the client run each job it inserts in the insert call, for
	// application tests that should need no goroutines and no waiting: once the
	// job is written, it is leased, worked by its worker (middleware, timeout
	// and retry policy as in a started client) and its outcome written, in the
	// caller's transaction for InsertTx and InsertManyTx, before the call
	// returns the job as it is afterwards. One attempt runs, whatever the job's
	// scheduled time; a job that fails stays retryable. Duplicates of unique
	// jobs do not run, replaced ones included. A job whose kind has no worker is refused before
	// anything is written. Start and Stop do nothing. docs/testing-jobs.md
	// says more.
	Inline bool

	// PeriodicJobs are schedules on which the maintenance leader inserts jobs,
	// once per slot whichever client leads (docs/periodic.md).
	PeriodicJobs []PeriodicJob

	// Queues are the queues this client works, with their settings, at most
	// 1,000. A client without queues only inserts and operates. Client.Queues
	// adds, resizes and removes queues later, also while the client runs.
	Queues map[string]QueueConfig
	// LeaseDuration is how long a claim or renewal holds a job (database clock).
	// Default: 30 s. Range: 100 ms to 1 h, and at least 3× HeartbeatInterval.
	LeaseDuration time.Duration
	// HeartbeatInterval is how often the client renews all its leases, in one
	// statement. Default: 5 s. Range: 10 ms to 20 min.
	HeartbeatInterval time.Duration
	// RescueInterval is how often the maintenance leader takes back jobs whose lease
	// expired. Default: 15 s. Range: 10 ms to 1 h.
	RescueInterval time.Duration
	// FetchPollInterval is how often an idle queue looks for work when no
	// notification wakes it (jobs inserted by other processes while the listener
	// was down, scheduled jobs that became due). Default: 1 s. Range: 10 ms to 1 h.
	FetchPollInterval time.Duration
	// PollOnly runs the client without a LISTEN connection, for a database
	// reached through a connection pooler in transaction mode (PgBouncer and
	// the like), where LISTEN does not work. Inserts by this client still wake
	// its own workers at once, and its own JobCancel reaches its own running
	// handler at once; jobs inserted by other clients are found by the poll
	// (FetchPollInterval: choose a short one, such as 100 to 200 ms), and a
	// cancel by another client at this client's next heartbeat. Inserts still
	// send their notifications, for clients that listen. docs/poolers.md says
	// more. An inline client (Inline) ignores it.
	PollOnly bool
	// JobTimeout bounds each attempt; a worker may set its own (Timeout method).
	// Default: 1 min. Range: 1 ms to 30 days; negative means no timeout.
	JobTimeout time.Duration
	// RetryPolicy says when failed jobs run again; a worker may set its own
	// (NextRetry method). Default: ExponentialBackoff{}.
	RetryPolicy RetryPolicy
	// ShutdownReserve is the part of Stop's budget kept for writing outcomes after
	// handlers are cancelled. Default: 1 s, or a fifth of the budget if smaller.
	// Range: 10 ms to 1 h.
	ShutdownReserve time.Duration
	// CompletedRetention, CancelledRetention and DiscardedRetention say how long
	// final jobs are kept before maintenance deletes them. Defaults: 24 h, 7 days,
	// 7 days. Range: 1 s to 10 years; negative means keep forever.
	CompletedRetention time.Duration
	CancelledRetention time.Duration
	DiscardedRetention time.Duration
}

// QueueConfig configures one queue of a client.
type QueueConfig struct {
	// MaxWorkers is the most handlers of this queue that run at once in this
	// client. Range: 1 to 10,000.
	MaxWorkers int
	// Prefetch is how many claimed jobs may wait locally for a free worker, beyond
	// MaxWorkers (or, under a global limit, beyond the client's share of it).
	// 0 means the default: MaxWorkers/4, at most 100; -1 means none. Range:
	// -1 to 10,000. Under a limit of running jobs per key (KeyLimit), only a
	// client holding buckets of the queue's keys prefetches (on PostgreSQL;
	// docs/design/flow-control.md): a job claimed counted would hold one of its
	// key's slots while it waited.
	Prefetch int
	// GlobalLimit, when set, is the most handlers of this queue that may run
	// at once across every client on the database, each client running within
	// its share of it (docs/flow-control.md). Start stores it in the
	// database, whose value is the one every client obeys: of clients that
	// declare different limits, the one started last
	// wins (QueueSet's Add, and Update when it changes the limit, store it
	// too). 0 leaves the stored limit as it is, none or one an operator set
	// (Client.QueueSetGlobalLimit, weir queues set). Range: 0 to 1,000,000.
	GlobalLimit int
	// RateLimit, when set, is the most jobs of this queue started per period
	// across every client, spread evenly (docs/flow-control.md). Start stores
	// it as it stores GlobalLimit; the zero value leaves the stored one.
	RateLimit RateLimit
	// KeyLimit, when set, limits the jobs of this queue with the same key (a
	// field of their args or metadata: per customer, per tenant) across every
	// client: how many run at once, how many start per period, or both
	// (docs/flow-control.md). Start stores it as it stores GlobalLimit; the
	// zero value leaves the stored one.
	KeyLimit KeyLimit
}

// KeyLimit is a queue's limits per key: at most Limit of its jobs with the
// same key run at once, and at most Rate of them start per period, spread
// evenly (as a queue's RateLimit, per key), across every client on the
// database; jobs of other keys are not held back. A job's key is the value,
// as text, of the field Key names in its args or metadata:
// "args.customer_id", "metadata.tenant.id" (1 to 8 fields of letters,
// digits, '_' and '-'); a job without the field counts under the empty key.
// Limit is 0 (none) or 1 to 1,000,000, Rate as a RateLimit, one of them at
// least; the zero KeyLimit is none.
type KeyLimit struct {
	Key   string
	Limit int
	Rate  RateLimit
}

// String is the limits as weir queues shows them: "args.customer_id:2",
// "args.customer_id:10/1s", "args.customer_id:2,10/1s", or "none".
func (k KeyLimit) String() string {
	var parts []string
	if k.Limit != 0 {
		parts = append(parts, strconv.Itoa(k.Limit))
	}
	if k.Rate != (RateLimit{}) {
		parts = append(parts, k.Rate.String())
	}
	if len(parts) == 0 {
		return "none"
	}
	return k.Key + ":" + strings.Join(parts, ",")
}

// params is k as the driver takes it.
func (k KeyLimit) params() weirdriver.KeyLimitParams {
	return weirdriver.KeyLimitParams{Key: k.Key, Limit: k.Limit, Rate: k.Rate.Limit, RatePeriod: k.Rate.Period}
}

// ParseKeyLimit reads key limits as String writes them: "none" (the zero
// KeyLimit), or KEY: then N (1 to 1,000,000 running), N/PERIOD (a rate, as
// ParseRateLimit reads it) or both, N first, separated by a comma
// ("args.customer_id:2,10/1s"). Its error quotes s and says what is wrong.
func ParseKeyLimit(s string) (KeyLimit, error) {
	if s == "none" {
		return KeyLimit{}, nil
	}
	key, rest, ok := strings.Cut(s, ":")
	if !ok || rest == "" {
		return KeyLimit{}, fmt.Errorf("%q is not KEY:N, KEY:N/PERIOD or KEY:N,N/PERIOD (such as args.customer_id:2), nor none", s)
	}
	if _, _, err := weirdriver.ParseKey(key); err != nil {
		return KeyLimit{}, fmt.Errorf("%q: %w", s, err)
	}
	k := KeyLimit{Key: key}
	limit, rate, both := strings.Cut(rest, ",")
	if both && (limit == "" || strings.Contains(limit, "/")) {
		return KeyLimit{}, fmt.Errorf("%q: with both, the limit comes first, then the rate (such as args.customer_id:2,10/1s)", s)
	}
	if !both && strings.Contains(limit, "/") {
		limit, rate = "", limit
	}
	if limit != "" {
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 || n > weirdriver.MaxKeyLimit {
			return KeyLimit{}, fmt.Errorf("%q: the limit %q is not a number from 1 to %d", s, limit, weirdriver.MaxKeyLimit)
		}
		k.Limit = n
	}
	if rate != "" || both {
		r, err := ParseRateLimit(rate)
		if err != nil || r == (RateLimit{}) {
			return KeyLimit{}, fmt.Errorf("%q: the rate %q is not N/PERIOD with N from 1 to %d and PERIOD from 1ms to 24h", s, rate, weirdriver.MaxRateLimit)
		}
		k.Rate = r
	}
	return k, nil
}

// RateLimit is a queue's rate limit: at most Limit job starts per Period
// across every client on the database, spread evenly (one every
// Period/Limit), with bursts of at most 2 + what 10 ms of the rate allows.
// Limit is 1 to 1,000,000, Period 1 ms to 24 h in whole microseconds; the
// zero RateLimit is none.
type RateLimit struct {
	Limit  int
	Period time.Duration
}

// String is the limit as weir queues shows it: "50/1s", or "none".
func (r RateLimit) String() string {
	if r.Limit == 0 {
		return "none"
	}
	return strconv.Itoa(r.Limit) + "/" + fmtDuration(r.Period)
}

// ParseRateLimit reads a rate limit as String writes it: "none" (the zero
// RateLimit), or N/PERIOD with N 1 to 1,000,000 and PERIOD a Go duration from
// 1 ms to 24 h in whole microseconds ("50/1s"). Its error quotes s and says
// what is wrong.
func ParseRateLimit(s string) (RateLimit, error) {
	if s == "none" {
		return RateLimit{}, nil
	}
	n, per, ok := strings.Cut(s, "/")
	limit, err := strconv.Atoi(n)
	if !ok || err != nil || limit < 1 || limit > weirdriver.MaxRateLimit {
		return RateLimit{}, fmt.Errorf("%q is not N/PERIOD with N from 1 to %d (such as 50/1s), nor none", s, weirdriver.MaxRateLimit)
	}
	period, err := time.ParseDuration(per)
	if err != nil || period < weirdriver.MinRatePeriod || period > weirdriver.MaxRatePeriod || period%time.Microsecond != 0 {
		return RateLimit{}, fmt.Errorf("%q: the period is not a duration from 1ms to 24h (such as 1s or 1m)", s)
	}
	return RateLimit{Limit: limit, Period: period}, nil
}

// ParseGlobalLimit reads a global limit as weir queues and the dashboard take
// it: "none" (0), or a number from 1 to 1,000,000. Its error quotes s.
func ParseGlobalLimit(s string) (int, error) {
	if s == "none" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > weirdriver.MaxGlobalLimit {
		return 0, fmt.Errorf("%q is not a number from 1 to %d, nor none", s, weirdriver.MaxGlobalLimit)
	}
	return n, nil
}

// Runtime defaults.
const (
	DefaultLeaseDuration      = 30 * time.Second
	DefaultHeartbeatInterval  = 5 * time.Second
	DefaultRescueInterval     = 15 * time.Second
	DefaultFetchPollInterval  = time.Second
	DefaultJobTimeout         = time.Minute
	DefaultShutdownReserve    = time.Second
	DefaultCompletedRetention = 24 * time.Hour
	DefaultCancelledRetention = 7 * 24 * time.Hour
	DefaultDiscardedRetention = 7 * 24 * time.Hour
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

// The ranges of the runtime's settings. They catch unit mistakes (a lease of 30
// nanoseconds, a poll interval of 1 ns that sends thousands of claims a second on
// an idle queue) and values that would make one client take a whole backlog into
// memory at once (MaxWorkers of a million). docs/runtime.md lists them.
const (
	minInterval     = 10 * time.Millisecond // poll, heartbeat, rescue, shutdown reserve
	maxInterval     = time.Hour
	minLease        = 100 * time.Millisecond
	maxLease        = time.Hour
	minJobTimeout   = time.Millisecond
	maxJobTimeout   = 30 * 24 * time.Hour
	minRetention    = time.Second
	maxRetention    = 10 * 365 * 24 * time.Hour
	maxQueueWorkers = 10_000
	maxPrefetch     = 10_000
	maxQueues       = 1_000
)

// setRuntimeDefaults fills in and checks the runtime's settings.
func (cfg *Config) setRuntimeDefaults() error {
	for _, d := range []struct {
		name     string
		value    *time.Duration
		def      time.Duration
		min, max time.Duration
	}{
		{"LeaseDuration", &cfg.LeaseDuration, DefaultLeaseDuration, minLease, maxLease},
		{"HeartbeatInterval", &cfg.HeartbeatInterval, DefaultHeartbeatInterval, minInterval, maxInterval / 3},
		{"RescueInterval", &cfg.RescueInterval, DefaultRescueInterval, minInterval, maxInterval},
		{"FetchPollInterval", &cfg.FetchPollInterval, DefaultFetchPollInterval, minInterval, maxInterval},
		{"ShutdownReserve", &cfg.ShutdownReserve, DefaultShutdownReserve, minInterval, maxInterval},
	} {
		if *d.value == 0 {
			*d.value = d.def
		}
		if *d.value < d.min || *d.value > d.max {
			return invalidf("Config."+d.name, "Config.%s %s is outside its range %s..%s", d.name, *d.value, fmtDuration(d.min), fmtDuration(d.max))
		}
	}
	if cfg.LeaseDuration < 3*cfg.HeartbeatInterval {
		return invalidf("Config.LeaseDuration", "Config.LeaseDuration %s is under 3× HeartbeatInterval (%s): one late renewal would lose leases",
			cfg.LeaseDuration, cfg.HeartbeatInterval)
	}
	// These may be negative (no timeout, keep forever); a positive value has a range.
	for _, d := range []struct {
		name     string
		value    *time.Duration
		def      time.Duration
		min, max time.Duration
	}{
		{"JobTimeout", &cfg.JobTimeout, DefaultJobTimeout, minJobTimeout, maxJobTimeout},
		{"CompletedRetention", &cfg.CompletedRetention, DefaultCompletedRetention, minRetention, maxRetention},
		{"CancelledRetention", &cfg.CancelledRetention, DefaultCancelledRetention, minRetention, maxRetention},
		{"DiscardedRetention", &cfg.DiscardedRetention, DefaultDiscardedRetention, minRetention, maxRetention},
	} {
		if *d.value == 0 {
			*d.value = d.def
		}
		if *d.value > 0 && (*d.value < d.min || *d.value > d.max) {
			return invalidf("Config."+d.name, "Config.%s %s is outside its range %s..%s (or negative for none)", d.name, *d.value,
				fmtDuration(d.min), fmtDuration(d.max))
		}
	}
	if cfg.RetryPolicy == nil {
		cfg.RetryPolicy = ExponentialBackoff{}
	}
	if len(cfg.Queues) > maxQueues {
		return invalidf("Config.Queues", "Config.Queues has %d queues; the limit is %d", len(cfg.Queues), maxQueues)
	}
	queues := make(map[string]QueueConfig, len(cfg.Queues))
	for name, q := range cfg.Queues {
		if err := validateName("Config.Queues", "queue", name); err != nil {
			return err
		}
		q, err := checkQueue(fmt.Sprintf("Config.Queues[%q]", name), name, q)
		if err != nil {
			return err
		}
		queues[name] = q
	}
	cfg.Queues = queues
	return nil
}

// checkKeyLimit checks queue's key limits k, which are not the zero value.
func checkKeyLimit(field, queue string, k KeyLimit) error {
	if k.Limit < 0 || k.Limit > weirdriver.MaxKeyLimit {
		return invalidf(field, "queue %q: KeyLimit %s: the limit is outside its range 0..%d", queue, k, weirdriver.MaxKeyLimit)
	}
	if k.Rate != (RateLimit{}) {
		if err := checkRate(field, fmt.Sprintf("queue %q: KeyLimit on %q: Rate %d per %s", queue, k.Key, k.Rate.Limit, k.Rate.Period), k.Rate); err != nil {
			return err
		}
	}
	if k.Limit == 0 && k.Rate == (RateLimit{}) {
		return invalidf(field, "queue %q: KeyLimit on %q has Limit 0 and no Rate: set one of them", queue, k.Key)
	}
	if _, _, err := weirdriver.ParseKey(k.Key); err != nil {
		return invalidf(field, "queue %q: KeyLimit %s: %v", queue, k, err)
	}
	return nil
}

// checkQueue checks queue name's settings q and returns them with Prefetch
// resolved: its default filled in, and -1 (none) made 0. field names q in
// errors ("Config.Queues[\"q\"]", or "QueueConfig" for Client.Queues).
func checkQueue(field, name string, q QueueConfig) (QueueConfig, error) {
	if q.MaxWorkers < 1 || q.MaxWorkers > maxQueueWorkers {
		return q, invalidf(field+".MaxWorkers", "queue %q: MaxWorkers %d is outside its range 1..%d", name, q.MaxWorkers, maxQueueWorkers)
	}
	if q.RateLimit != (RateLimit{}) {
		if err := checkRateLimit(field+".RateLimit", name, q.RateLimit); err != nil {
			return q, err
		}
	}
	if q.KeyLimit != (KeyLimit{}) {
		if err := checkKeyLimit(field+".KeyLimit", name, q.KeyLimit); err != nil {
			return q, err
		}
	}
	if q.GlobalLimit < 0 || q.GlobalLimit > weirdriver.MaxGlobalLimit {
		return q, invalidf(field+".GlobalLimit", "queue %q: GlobalLimit %d is outside its range 0..%d (0 leaves the stored limit)",
			name, q.GlobalLimit, weirdriver.MaxGlobalLimit)
	}
	switch {
	case q.Prefetch < -1 || q.Prefetch > maxPrefetch:
		return q, invalidf(field+".Prefetch", "queue %q: Prefetch %d is outside its range -1..%d (-1 for none, 0 for the default)",
			name, q.Prefetch, maxPrefetch)
	case q.Prefetch == 0:
		q.Prefetch = min(q.MaxWorkers/4, 100)
	case q.Prefetch == -1:
		q.Prefetch = 0
	}
	return q, nil
}

// checkRateLimit checks queue's rate limit r, which is not the zero value.
func checkRateLimit(field, queue string, r RateLimit) error {
	return checkRate(field, fmt.Sprintf("queue %q: RateLimit %d per %s", queue, r.Limit, r.Period), r)
}

// checkRate checks rate r, which is not the zero value; what names it in an
// error.
func checkRate(field, what string, r RateLimit) error {
	if r.Limit < 1 || r.Limit > weirdriver.MaxRateLimit {
		return invalidf(field, "%s: the limit is outside its range 1..%d", what, weirdriver.MaxRateLimit)
	}
	if r.Period < weirdriver.MinRatePeriod || r.Period > weirdriver.MaxRatePeriod || r.Period%time.Microsecond != 0 {
		return invalidf(field, "%s: the period is outside its range %s..%s (whole microseconds)",
			what, weirdriver.MinRatePeriod, weirdriver.MaxRatePeriod)
	}
	return nil
}

// fmtDuration writes d without the zero units that time.Duration's String adds
// ("1h", not "1h0m0s").
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ID is the client's instance id.
func (c *Client) ID() string { return c.config.ID }

// Driver is the driver the client runs on.
func (c *Client) Driver() weirdriver.Driver { return c.driver }

func defaultClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "weir"
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	return fmt.Sprintf("%s-%d-%s", truncate(host), os.Getpid(), hex.EncodeToString(suffix[:]))
}

// InsertResult is an inserted job, or the existing job that a unique insert found.
type InsertResult struct {
	Job *JobRow
	// Duplicate is true when the job was not inserted because a job with the same
	// unique key exists; Job is that job.
	Duplicate bool
	// Replaced is true, with Duplicate, when the insert's UniqueOpts.OnConflict
	// (UniqueReplace or UniqueDebounce) changed the existing job; Job is that job
	// as changed. A duplicate that was running or final is never changed.
	Replaced bool
}

// InsertManyParams is one job of an InsertMany call.
type InsertManyParams struct {
	Args       JobArgs
	InsertOpts *InsertOpts
}

// Insert inserts a job in its own transaction.
func (c *Client) Insert(ctx context.Context, args JobArgs, opts *InsertOpts) (*InsertResult, error) {
	res, err := c.insert(ctx, c.driver.Executor(), []InsertManyParams{{Args: args, InsertOpts: opts}})
	if err != nil {
		return nil, err
	}
	c.wakeLocal(res)
	return res[0], nil
}

// wakeLocal wakes this client's own producers for committed new available jobs at
// once, without waiting for the notification's round trip.
func (c *Client) wakeLocal(results []*InsertResult) {
	e := c.engine()
	if e == nil {
		return
	}
	for _, r := range results {
		if r.Duplicate && !r.Replaced || r.Job.State != JobStateAvailable {
			continue
		}
		if p := e.producer(r.Job.Queue); p != nil {
			p.poke()
		}
	}
}

// engine returns the client's engine, or nil before a Start succeeded.
func (c *Client) engine() *engine {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eng
}

// InsertTx inserts a job inside the caller's transaction: the job exists, and wakes
// workers, exactly when tx commits.
func (c *Client) InsertTx(ctx context.Context, tx pgx.Tx, args JobArgs, opts *InsertOpts) (*InsertResult, error) {
	return c.insertOneTx(ctx, tx, args, opts)
}

// InsertSQLTx is InsertTx for a database/sql transaction.
func (c *Client) InsertSQLTx(ctx context.Context, tx *sql.Tx, args JobArgs, opts *InsertOpts) (*InsertResult, error) {
	return c.insertOneTx(ctx, tx, args, opts)
}

func (c *Client) insertOneTx(ctx context.Context, tx any, args JobArgs, opts *InsertOpts) (*InsertResult, error) {
	exec, err := c.driver.UnwrapTx(tx)
	if err != nil {
		return nil, invalidf("tx", "%v", err)
	}
	res, err := c.insert(ctx, exec, []InsertManyParams{{Args: args, InsertOpts: opts}})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// InsertMany inserts jobs in one transaction and returns them in order. Large
// batches of jobs without unique options are written with COPY.
func (c *Client) InsertMany(ctx context.Context, params []InsertManyParams) ([]*InsertResult, error) {
	res, err := c.insert(ctx, c.driver.Executor(), params)
	if err != nil {
		return nil, err
	}
	c.wakeLocal(res)
	return res, nil
}

// InsertManyTx is InsertMany inside the caller's transaction.
func (c *Client) InsertManyTx(ctx context.Context, tx pgx.Tx, params []InsertManyParams) ([]*InsertResult, error) {
	exec, err := c.driver.UnwrapTx(tx)
	if err != nil {
		return nil, invalidf("tx", "%v", err)
	}
	return c.insert(ctx, exec, params)
}

// InsertManySQLTx is InsertManyTx for a database/sql transaction.
func (c *Client) InsertManySQLTx(ctx context.Context, tx *sql.Tx, params []InsertManyParams) ([]*InsertResult, error) {
	exec, err := c.driver.UnwrapTx(tx)
	if err != nil {
		return nil, invalidf("tx", "%v", err)
	}
	return c.insert(ctx, exec, params)
}

// insert encodes every job, passes the batch through the insert middleware,
// and writes it.
func (c *Client) insert(ctx context.Context, exec weirdriver.Inserter, params []InsertManyParams) ([]*InsertResult, error) {
	if len(params) == 0 {
		return nil, invalidf("params", "no jobs to insert")
	}
	jobs := make([]*InsertParams, len(params))
	for i, p := range params {
		in, err := encodeInsert(p.Args, p.InsertOpts)
		if err != nil {
			return nil, atJob(err, i, len(params))
		}
		jobs[i] = in
	}
	return c.insertEncoded(ctx, exec, jobs)
}

// insertEncoded passes encoded jobs through the insert middleware and writes
// them.
func (c *Client) insertEncoded(ctx context.Context, exec weirdriver.Inserter, jobs []*InsertParams) ([]*InsertResult, error) {
	if len(c.config.InsertMiddleware) == 0 {
		res, err := c.write(ctx, exec, jobs)
		if err != nil {
			return nil, err
		}
		return c.runInline(ctx, exec, res)
	}
	// Middleware may change what it is given in place; the caller's slices are
	// not its to change.
	for _, j := range jobs {
		j.Tags, j.Metadata, j.Unique.ByState = slices.Clone(j.Tags), slices.Clone(j.Metadata), slices.Clone(j.Unique.ByState)
		j.Unique.ByArgsKeys = slices.Clone(j.Unique.ByArgsKeys)
	}
	h := chainInsert(c.config.InsertMiddleware, func(ctx context.Context, got []*InsertParams) ([]*InsertResult, error) {
		if len(got) != len(jobs) {
			return nil, fmt.Errorf("weir: insert middleware passed on %d jobs of the %d it was given; nothing was written", len(got), len(jobs))
		}
		return c.write(ctx, exec, got)
	})
	res, err := h(ctx, jobs)
	if err == nil && len(res) != len(jobs) {
		return nil, fmt.Errorf("weir: insert middleware returned %d results for %d jobs, which may have been written", len(res), len(jobs))
	}
	if err != nil {
		return nil, err
	}
	return c.runInline(ctx, exec, res)
}

// checkInline refuses, before anything is written, a batch an inline client
// could not run: a kind without a worker, or a transaction the driver can only
// insert in.
func (c *Client) checkInline(exec weirdriver.Inserter, all []*weirdriver.JobInsertParams) error {
	if _, ok := exec.(weirdriver.Executor); !ok {
		return errInlineTx(exec)
	}
	for i, p := range all {
		if c.config.Workers.byKind[p.Kind] == nil {
			return atJob(invalidf("Kind", "an inline client runs every job it inserts, and it has no worker for kind %q", p.Kind), i, len(all))
		}
	}
	return nil
}

// errInlineTx says that exec, a caller's transaction, can take inserts but not
// the runs of an inline client.
func errInlineTx(exec weirdriver.Inserter) error {
	return invalidf("tx", "an inline client runs jobs in the insert's transaction, and this driver can only insert in a %T: use a pgx.Tx", exec)
}

// runInline runs one attempt of each new job of an inline client's insert, in
// order, on exec, and puts the job as it is afterwards in its result.
func (c *Client) runInline(ctx context.Context, exec weirdriver.Inserter, res []*InsertResult) ([]*InsertResult, error) {
	if !c.config.Inline {
		return res, nil
	}
	runner, ok := exec.(weirdriver.Executor)
	if !ok { // checkInline refuses this before a write; only middleware that skips the write gets here
		return nil, errInlineTx(exec)
	}
	attempts := c.Attempts()
	for _, r := range res {
		if r.Duplicate {
			continue
		}
		run, err := attempts.Work(ctx, runner, r.Job.ID)
		if err != nil {
			return nil, fmt.Errorf("weir: insert: inline run: %w", err)
		}
		r.Job = run.Job
	}
	return res, nil
}

// atJob places a bad-input error about the i-th of n jobs in its batch.
func atJob(err error, i, n int) error {
	if invalid, ok := errors.AsType[*InvalidError](err); ok && n > 1 {
		return &InvalidError{Job: i + 1, Jobs: n, Field: invalid.Field, Message: invalid.Message}
	}
	return err
}

// write checks every job before it writes any, then writes them all or none.
func (c *Client) write(ctx context.Context, exec weirdriver.Inserter, jobs []*InsertParams) ([]*InsertResult, error) {
	now := time.Now()
	all := make([]*weirdriver.JobInsertParams, len(jobs))
	var unique, bulk []int // indexes into all
	var check jsonChecker
	for i, in := range jobs {
		ip, err := c.checkInsert(in, now, &check)
		if err != nil {
			return nil, atJob(err, i, len(jobs))
		}
		all[i] = ip
		if ip.UniqueKey != nil {
			unique = append(unique, i)
		} else {
			bulk = append(bulk, i)
		}
	}

	if c.config.Inline {
		if err := c.checkInline(exec, all); err != nil {
			return nil, err
		}
	}

	results := make([]*InsertResult, len(jobs))
	err := c.withSchemaCheck(ctx, func() error {
		// A batch with too few plain jobs for the bulk path goes through one
		// INSERT, which needs no transaction of its own.
		if len(bulk) < bulkThreshold {
			return c.insertStatement(ctx, exec, all, results)
		}
		tx, err := exec.BeginInsert(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
		if len(unique) > 0 {
			if err := c.insertStatementAt(ctx, tx, all, unique, results); err != nil {
				return err
			}
		}
		bulkParams := make([]*weirdriver.JobInsertParams, len(bulk))
		for j, i := range bulk {
			bulkParams[j] = all[i]
		}
		rows, err := tx.JobInsertBulk(ctx, bulkParams)
		if err != nil {
			return err
		}
		var queues []string
		seen := map[string]bool{}
		for j, i := range bulk {
			results[i] = &InsertResult{Job: rows[j]}
			if rows[j].State == JobStateAvailable && !seen[rows[j].Queue] {
				seen[rows[j].Queue] = true
				queues = append(queues, rows[j].Queue)
			}
		}
		if err := tx.NotifyInsert(ctx, queues); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
	if err != nil {
		return nil, &OpError{Op: "insert", Err: err}
	}
	return results, nil
}

func (c *Client) insertStatement(ctx context.Context, exec weirdriver.Inserter, all []*weirdriver.JobInsertParams, results []*InsertResult) error {
	idx := make([]int, len(all))
	for i := range idx {
		idx[i] = i
	}
	return c.insertStatementAt(ctx, exec, all, idx, results)
}

// insertStatementAt inserts all[idx...] with one statement. Jobs of the batch that
// share a unique key are sent once, folded so that the batch ends as if they had
// been inserted one after another (foldUnique).
func (c *Client) insertStatementAt(ctx context.Context, exec weirdriver.Inserter, all []*weirdriver.JobInsertParams, idx []int, results []*InsertResult) error {
	var (
		send   []*weirdriver.JobInsertParams
		groups [][]int            // per sent job, the indexes into all it stands for
		byKey  = map[string]int{} // unique key -> index into send
	)
	for _, i := range idx {
		if key := all[i].UniqueKey; key != nil {
			k := string(key) + "\x00" + string(all[i].CanonicalArgs)
			if at, ok := byKey[k]; ok {
				groups[at] = append(groups[at], i)
				continue
			}
			byKey[k] = len(send)
		}
		send = append(send, all[i])
		groups = append(groups, []int{i})
	}
	for at, group := range groups {
		if len(group) > 1 {
			send[at] = foldUnique(all, group)
		}
	}
	res, err := exec.JobInsert(ctx, send)
	if err != nil {
		return err
	}
	for at, r := range res {
		// The row is pending after the statement when it was inserted or
		// replaced; each later job of its group then met it pending.
		pending := !r.Duplicate || r.Replaced
		for k, i := range groups[at] {
			skip := all[i].UniqueOnConflict == weirdriver.UniqueOnConflictSkip
			switch {
			case k == 0 && !r.Duplicate:
				results[i] = &InsertResult{Job: r.Job}
			case pending && !skip:
				results[i] = &InsertResult{Job: r.Job, Duplicate: true, Replaced: true}
			default:
				results[i] = &InsertResult{Job: r.Job, Duplicate: true}
			}
		}
	}
	return nil
}

// foldUnique returns the one job to send for jobs all[group...], which share a
// unique key, such that the statement leaves the store as inserting them one
// after another would: the first is inserted (or meets the holder), and each
// later one meets that job pending. So the job sent is the first, carrying the
// args, metadata, tags, priority and max attempts of the last one that replaces
// (UniqueReplace or UniqueDebounce) and the scheduled time of the last one that
// debounces, with the strongest mode among them. Queue, unique states and key
// are the first's.
func foldUnique(all []*weirdriver.JobInsertParams, group []int) *weirdriver.JobInsertParams {
	folded := *all[group[0]]
	for _, i := range group {
		p := all[i]
		switch p.UniqueOnConflict {
		case weirdriver.UniqueOnConflictDebounce:
			folded.ScheduledAt = p.ScheduledAt
			folded.UniqueOnConflict = weirdriver.UniqueOnConflictDebounce
			fallthrough
		case weirdriver.UniqueOnConflictReplace:
			folded.Args, folded.Metadata, folded.Tags = p.Args, p.Metadata, p.Tags
			folded.Priority, folded.MaxAttempts = p.Priority, p.MaxAttempts
			if folded.UniqueOnConflict == weirdriver.UniqueOnConflictSkip {
				folded.UniqueOnConflict = weirdriver.UniqueOnConflictReplace
			}
		}
	}
	return &folded
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
