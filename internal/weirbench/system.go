// Package weirbench is the benchmark engine used by `weir bench` and by the
// comparison program in bench/, which runs weir and River side by side.
//
// It runs the workloads of weir's benchmark specification on PostgreSQL: W1
// (drain), W2 (mixed load at fixed offered rates), W3 (pickup latency), W4 (bulk
// and single inserts) and W5 (WAL bytes and dead tuples per job, table size,
// peak RSS of a worker process). Each job queue under test is a System; Weir
// returns weir's, and a program may add its own (bench/ adds River's, so that
// weir's module does not depend on River). Run alternates the systems round by
// round and returns a Report: a table, JSON and an SVG plot.
//
// Every run starts on a freshly truncated and vacuumed job table. Run truncates
// only tables in schemas it owns: it creates each system's schema and marks it
// with a comment, and it refuses a schema that holds tables but lacks the mark.
package weirbench

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
)

// NoopArgs is the job every workload inserts: a no-op whose Seq numbers it
// within its run, so that the handler can say which job it started.
type NoopArgs struct {
	Seq int64 `json:"seq"`
	// Key, when set (ClientConfig.Keys), is the job's key under W6's limit
	// per key: 1 to Keys, in turn.
	Key int64 `json:"key,omitempty"`
}

// Kind implements the job args interfaces of weir and River.
func (NoopArgs) Kind() string { return "noop" }

// Settings says which of a system's settings a working client uses.
type Settings int

const (
	// Throughput is the system's settings for throughput, used by W1, W2 and W5:
	// weir's recommended ones, River's those of its own `river bench`.
	Throughput Settings = iota
	// Latency is what W3 measures: weir with its defaults, River with the
	// settings of `river bench` (2 ms fetch cooldown, 20 ms fetch poll).
	Latency
	// Defaults is the system's defaults, with 100 handlers where a count must
	// be given.
	Defaults
)

func (s Settings) String() string {
	switch s {
	case Throughput:
		return "throughput"
	case Latency:
		return "latency"
	case Defaults:
		return "defaults"
	}
	return "unknown"
}

// A System is one job queue under test, kept in a schema of its own.
type System interface {
	// Name names the system in the report, in lower case ("weir", "river").
	Name() string
	// Schema is the schema that holds the system's tables.
	Schema() string
	// JobTable is the schema-qualified, quoted name of the job table.
	JobTable() string
	// Describe says what settings s stands for, for the report.
	Describe(s Settings) string
	// Migrate creates the system's tables in its schema, which exists.
	Migrate(ctx context.Context, pool *pgxpool.Pool) error
	// Open returns a client on pool.
	Open(pool *pgxpool.Pool, cfg ClientConfig) (Client, error)
}

// A RowInserter is a System whose job table takes a single-row INSERT written
// out in full, which W4 has pgbench run to measure the ceiling of single
// inserts on the same table, with the same indexes and triggers.
type RowInserter interface {
	// RowInsert is an INSERT of one no-op job into the job table, with no
	// parameters, setting only what the table has no default for.
	RowInsert() string
}

// ClientConfig is what a workload asks of a client.
type ClientConfig struct {
	// Work says whether the client works jobs; one that does not only inserts.
	Work bool
	// Settings are the settings it works with.
	Settings Settings
	// MaxWorkers, when positive, replaces the settings' number of handlers
	// that run at once (W5 runs 2,000).
	MaxWorkers int
	// GlobalLimit, when positive, is the most jobs of the queue running at
	// once across every client (W6); a system without global limits refuses
	// it, and says so by not implementing GlobalLimiter.
	GlobalLimit int
	// KeyLimit, when positive, is the most jobs of the queue with the same
	// NoopArgs.Key running at once across every client (W6), as GlobalLimit.
	KeyLimit int
	// Keys, when positive, numbers the keys of inserted jobs: job seq gets
	// key seq % Keys + 1.
	Keys int
	// OnStart, when not nil, is called by the handler as it starts, with the
	// job's NoopArgs.Seq.
	OnStart func(seq int64)
	// Logger receives the client's warnings.
	Logger *slog.Logger
}

// GlobalLimiter is implemented by a System whose clients take
// ClientConfig.GlobalLimit and ClientConfig.KeyLimit.
type GlobalLimiter interface {
	GlobalLimits() bool
}

// LimitSetter is implemented by a Client that stores W6's limits (a global
// limit, a limit per key of NoopArgs.Key) on the queue before its jobs are
// inserted, as a running system holds them before its jobs arrive. Declared
// only by the working clients' Start, a limit per key would make the first
// of them rewrite the key hint of every waiting job inside the timed drain.
type LimitSetter interface {
	SetLimits(ctx context.Context, global, key int) error
}

// A Client inserts NoopArgs jobs and works them with a handler that does
// nothing but call ClientConfig.OnStart. A client that implements fmt.Stringer
// has its String printed after each run that worked jobs (weir's is its Stats).
type Client interface {
	// InsertMany inserts n jobs numbered first, first+1, ... in one call of the
	// system's fastest bulk insert.
	InsertMany(ctx context.Context, first int64, n int) error
	// Insert inserts job seq in a transaction of its own.
	Insert(ctx context.Context, seq int64) error
	// Start starts working jobs. ctx may be used for the client's whole run.
	Start(ctx context.Context) error
	// Completed counts the jobs whose completion is durable, since Start.
	Completed() int64
	// Stop stops working gracefully within ctx's deadline.
	Stop(ctx context.Context) error
}
