package dbtest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/internal/pgcluster"
)

// TestPgBouncerIsStrict checks that the shared PgBouncer pools by transaction
// and resets each server connection: what a session sets does not outlive its
// transaction, and pgx's default statement cache (named prepared statements)
// fails, while the URL's cache_describe works.
func TestPgBouncerIsStrict(t *testing.T) {
	t.Parallel()
	u := dbtest.PgBouncer(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	// cache_describe: the same statement, many times, works.
	for i := range 20 {
		var n int
		if err := conn.QueryRow(ctx, "SELECT $1::int + 1", i).Scan(&n); err != nil || n != i+1 {
			t.Fatalf("through PgBouncer with cache_describe: %d, %v", n, err)
		}
	}

	// A session setting does not last past its transaction.
	if _, err := conn.Exec(ctx, "SET statement_timeout = '4321ms'"); err != nil {
		t.Fatal(err)
	}
	var timeout string
	if err := conn.QueryRow(ctx, "SHOW statement_timeout").Scan(&timeout); err != nil {
		t.Fatal(err)
	}
	if timeout == "4321ms" {
		t.Fatal("a SET outlived its transaction: PgBouncer does not reset server connections")
	}

	// A session advisory lock is released at the end of its transaction
	// (DISCARD ALL): unlocking it afterwards finds nothing to unlock.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(860017)"); err != nil {
		t.Fatal(err)
	}
	var held bool
	if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock(860017)").Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held {
		t.Fatal("a session advisory lock outlived its transaction")
	}

	// pgx's default mode (named prepared statements) breaks.
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	cached, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cached.Close(context.Background())
	var lastErr error
	for i := 0; i < 5 && lastErr == nil; i++ {
		var n int
		lastErr = cached.QueryRow(ctx, "SELECT $1::int + 2", i).Scan(&n)
	}
	var pgErr *pgconn.PgError
	if !errors.As(lastErr, &pgErr) || (pgErr.Code != "26000" && pgErr.Code != "42P05") {
		t.Fatalf("named prepared statements through PgBouncer: got %v, want a prepared statement error", lastErr)
	}
	if !strings.Contains(pgErr.Message, "prepared statement") {
		t.Errorf("message %q", pgErr.Message)
	}
}

// TestStartPgBouncer checks a PgBouncer of its own: it serves, it starts again
// on the same port, Stop ends the process, and a URL with a password is
// refused without showing it.
func TestStartPgBouncer(t *testing.T) {
	t.Parallel()
	dbtest.PgBouncer(t) // skips without pgbouncer
	if _, err := pgcluster.StartPgBouncer("postgres://postgres:hunter2@127.0.0.1:5432/test", pgcluster.PgBouncerOptions{}); err == nil ||
		strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "password") {
		t.Errorf("a URL with a password: %v", err)
	}
	b, err := pgcluster.StartPgBouncer(dbtest.URL(), pgcluster.PgBouncerOptions{PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop() //nolint:errcheck // stopped below; this is for a failure
	ping := func() error {
		conn, err := pgx.Connect(t.Context(), b.ClientURL(""))
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		var one int
		return conn.QueryRow(t.Context(), "SELECT 1").Scan(&one)
	}
	if err := ping(); err != nil {
		t.Fatal(err)
	}
	port := b.Port()
	if err := b.Restart(); err != nil {
		t.Fatal(err)
	}
	if b.Port() != port {
		t.Errorf("port %d after a restart, was %d", b.Port(), port)
	}
	if err := ping(); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Exited():
	default:
		t.Fatal("Stop returned while PgBouncer runs")
	}
	if err := ping(); err == nil {
		t.Fatal("PgBouncer answers after Stop")
	}
}
