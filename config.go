package weir

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// DefaultMaxArgsBytes is the default limit on a job's encoded args.
const DefaultMaxArgsBytes = 1 << 20

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
	if err := cfg.setIntervals(); err != nil {
		return err
	}
	if err := cfg.setTimeouts(); err != nil {
		return err
	}
	if cfg.RetryPolicy == nil {
		cfg.RetryPolicy = ExponentialBackoff{}
	}
	return cfg.setQueues()
}

// durationSetting is one duration of the runtime's settings: its name, its
// field, its default and its range.
type durationSetting struct {
	name     string
	value    *time.Duration
	def      time.Duration
	min, max time.Duration
}

// setIntervals fills in and checks the lease and the intervals.
func (cfg *Config) setIntervals() error {
	for _, d := range []durationSetting{
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
	return nil
}

// setTimeouts fills in and checks JobTimeout and the retentions. These may
// be negative (no timeout, keep forever); a positive value has a range.
func (cfg *Config) setTimeouts() error {
	for _, d := range []durationSetting{
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
	return nil
}

// setQueues checks the queues and resolves their settings (checkQueue).
func (cfg *Config) setQueues() error {
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

func defaultClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "weir"
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	return fmt.Sprintf("%s-%d-%s", truncate(host), os.Getpid(), hex.EncodeToString(suffix[:]))
}
