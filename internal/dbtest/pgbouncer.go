package dbtest

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/weirq/weir/internal/pgcluster"
)

// envRequirePgBouncer, set to "1", makes PgBouncer fail a test instead of
// skipping it when pgbouncer is not installed (CI sets it).
const envRequirePgBouncer = "WEIR_REQUIRE_PGBOUNCER"

// The PgBouncer the package's tests share, started by the first PgBouncer
// call and stopped when Main's tests end.
var bouncer struct {
	once sync.Once
	mu   sync.Mutex // guards b against stopPgBouncer from a signal's goroutine
	b    *pgcluster.PgBouncer
	err  error
}

// PgBouncer returns the connection string of the database URL names, reached
// through a PgBouncer in transaction mode that resets each server connection
// after every transaction (pgcluster.StartPgBouncer), with
// default_query_exec_mode=cache_describe, the setting docs/poolers.md asks
// for. The package's tests share the PgBouncer. When pgbouncer is not
// installed the test is skipped, or fails if WEIR_REQUIRE_PGBOUNCER=1.
func PgBouncer(tb testing.TB) string {
	tb.Helper()
	required := os.Getenv(envRequirePgBouncer) == "1"
	bouncer.once.Do(func() {
		b, err := pgcluster.StartPgBouncer(URL(), pgcluster.PgBouncerOptions{PoolSize: 20})
		bouncer.mu.Lock()
		bouncer.b, bouncer.err = b, err
		bouncer.mu.Unlock()
	})
	if errors.Is(bouncer.err, pgcluster.ErrNoPgBouncer) && !required {
		tb.Skipf("dbtest: skipped: %v; set %s=1 to fail instead", bouncer.err, envRequirePgBouncer)
	}
	if bouncer.err != nil {
		tb.Fatalf("dbtest: starting PgBouncer: %v", bouncer.err)
	}
	bouncer.mu.Lock()
	defer bouncer.mu.Unlock()
	if bouncer.b == nil {
		tb.Fatal("dbtest: PgBouncer was stopped")
	}
	return bouncer.b.ClientURL("")
}

// stopPgBouncer stops the shared PgBouncer, if a test started it.
func stopPgBouncer() error {
	bouncer.mu.Lock()
	b := bouncer.b
	bouncer.b = nil
	bouncer.mu.Unlock()
	if b == nil {
		return nil
	}
	if err := b.Stop(); err != nil {
		return fmt.Errorf("stopping PgBouncer: %w", err)
	}
	return nil
}
