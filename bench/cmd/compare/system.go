package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// noop is the job both systems insert and work: a no-op with one field.
type noop struct {
	N int `json:"n"`
}

func (noop) Kind() string { return "noop" }

// A system is one job queue under test, kept in its own schema.
type system interface {
	Name() string
	// JobTable is the schema-qualified job table.
	JobTable() string
	// Migrate creates the schema and the system's tables in it.
	Migrate(ctx context.Context, pool *pgxpool.Pool) error
	// Open returns a client on pool; work says whether it will work jobs.
	Open(pool *pgxpool.Pool, work bool) (client, error)
}

// A client inserts and works noop jobs.
type client interface {
	// InsertMany inserts n jobs with the system's fastest bulk insert.
	InsertMany(ctx context.Context, n int) error
	// Insert inserts one job in its own transaction.
	Insert(ctx context.Context) error
	// Drain starts working, waits until n jobs are completed durably, stops, and
	// returns the time from the start to the last completion.
	Drain(ctx context.Context, n int) (time.Duration, error)
}

// stopBudget bounds a client's graceful stop once its jobs are done.
const stopBudget = 30 * time.Second

// warnLogger gives both systems' warnings to stderr: a warning during a run
// (a write retried, a lease lost) explains a figure that is off.
var warnLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
