// Package dbtest gives each Go test package a real PostgreSQL server and
// each test its own schema.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { dbtest.Main(m) }
//
// and in tests:
//
//	schema := dbtest.Schema(t)
//	pool := dbtest.Pool(t, func(c *pgxpool.Config) {
//		c.ConnConfig.RuntimeParams["search_path"] = schema
//	})
//
// Main looks for a server in this order:
//
//  1. TEST_DATABASE_URL, if set (it must answer within 5 s);
//  2. postgres://postgres@127.0.0.1:5432/test?sslmode=disable, if it answers;
//  3. a throwaway cluster made with initdb and pg_ctl (found on PATH or under
//     /usr/lib/postgresql/*/bin), stopped and deleted when the tests end.
//     When running as root, initdb and pg_ctl run as the "postgres" OS user.
//
// Setting DBTEST_FORCE_THROWAWAY=1 skips steps 1 and 2, so the throwaway
// cluster is always used.
//
// Each schema Schema creates is marked with its host, process and time of
// creation (mark.go), and dropped when its test ends; DBTEST_KEEP_FAILED=1
// keeps the schema of a failed test instead. Before the tests run, Main drops
// the marked schemas that other test binaries left behind: those whose
// process on this host is gone, and any older than six hours. It never drops
// a schema without the mark.
//
// A throwaway cluster is not cleaned up if the test binary crashes (for
// example on a panic or a -timeout); it is stopped on SIGINT and SIGTERM.
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/weirq/weir/internal/pgcluster"
)

// Environment variables read by Main.
const (
	envURL   = "TEST_DATABASE_URL"      // server to use
	envForce = "DBTEST_FORCE_THROWAWAY" // "1": always use a throwaway cluster
)

// defaultURL is the server tried when TEST_DATABASE_URL is not set.
const defaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// url is the connection string of the server chosen by Main.
var url string

// Main finds a PostgreSQL server, runs the package's tests against it and
// exits. It stops any throwaway cluster it started and, if the tests passed,
// fails when goroutines leaked (checked with goleak).
func Main(m *testing.M) {
	os.Exit(run(m))
}

// run does the work of Main and returns the exit code.
func run(m *testing.M) int {
	u, c, err := findServer()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dbtest: %v\n", err)
		return 1
	}
	url = u
	sweepStale()

	code := runTests(m, c)
	if err := stopPgBouncer(); err != nil {
		fmt.Fprintf(os.Stderr, "dbtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if c != nil {
		if err := c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "dbtest: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	if code != 0 {
		return code
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintf(os.Stderr, "dbtest: goroutines leaked: %v\n", err)
		return 1
	}
	return 0
}

// runTests runs m. If c is a throwaway cluster, it is stopped when the
// process gets SIGINT or SIGTERM while the tests run.
func runTests(m *testing.M, c *pgcluster.Cluster) int {
	if c == nil {
		return m.Run()
	}
	ctx, stopNotify := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopNotify()
	finished := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-finished:
		case <-ctx.Done():
			fmt.Fprintln(os.Stderr, "dbtest: interrupted, stopping throwaway cluster")
			if err := stopPgBouncer(); err != nil {
				fmt.Fprintf(os.Stderr, "dbtest: %v\n", err)
			}
			if err := c.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "dbtest: %v\n", err)
			}
			os.Exit(1)
		}
	}()
	code := m.Run()
	close(finished)
	<-done
	return code
}

// findServer picks the server to test against. It returns its URL and, if
// it started one, the throwaway cluster.
func findServer() (string, *pgcluster.Cluster, error) {
	if os.Getenv(envForce) != "1" {
		if u := os.Getenv(envURL); u != "" {
			if err := ping(u, 5*time.Second); err != nil {
				return "", nil, fmt.Errorf("TEST_DATABASE_URL does not answer: %w", err)
			}
			logServer("TEST_DATABASE_URL", u)
			return u, nil, nil
		}
		if err := ping(defaultURL, 2*time.Second); err == nil {
			logServer("default local server", defaultURL)
			return defaultURL, nil, nil
		}
	}
	c, err := startCluster()
	if errors.Is(err, pgcluster.ErrNoBinaries) {
		return "", nil, fmt.Errorf("no PostgreSQL found: set TEST_DATABASE_URL, "+
			"run a server at %s, or install the Debian postgresql package so initdb and pg_ctl exist (%w)",
			defaultURL, err)
	}
	if err != nil {
		return "", nil, err
	}
	logServer("throwaway cluster in "+c.Dir(), c.URL())
	return c.URL(), c, nil
}

// logServer prints one line to stderr naming the server in use, without
// any password.
func logServer(what, u string) {
	addr := u
	if cfg, err := pgx.ParseConfig(u); err == nil {
		addr = fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	}
	fmt.Fprintf(os.Stderr, "dbtest: using PostgreSQL at %s (%s)\n", addr, what)
}

// ping connects to u and runs SELECT 1, giving up after timeout.
func ping(u string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close(ctx)
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return fmt.Errorf("running SELECT 1: %w", err)
	}
	return nil
}

// URL returns the connection string of the server found by Main. The tests
// may use its database freely. It panics if Main was not used.
func URL() string {
	// Main reads these before go test starts recording which environment
	// variables the tests use; read them again so that cached test results
	// depend on them.
	_, _ = os.Getenv(envURL), os.Getenv(envForce)
	if url == "" {
		panic("dbtest: URL called without dbtest.Main; add func TestMain(m *testing.M) { dbtest.Main(m) } to the package's tests")
	}
	return url
}

// Schema creates a fresh, empty schema with a unique name, marked as this
// process's, drops it (with CASCADE) when the test ends, and returns its
// name.
func Schema(tb testing.TB) string {
	tb.Helper()
	name := SchemaName(tb)
	id := pgx.Identifier{name}.Sanitize()
	// One simple-protocol round trip: one transaction, so no schema is left
	// without its mark.
	if err := execSQL(tb.Context(), "CREATE SCHEMA "+id+"; COMMENT ON SCHEMA "+id+" IS "+quote(newMark(time.Now()).String())); err != nil {
		tb.Fatalf("dbtest: creating schema %s: %v", name, err)
	}
	return name
}

// SchemaName returns a unique name of a schema that does not exist, for the
// code under test to create; the schema is dropped (with CASCADE) when the
// test ends, if it exists then. Such a schema carries no mark: if the binary
// dies before the test ends, no sweep drops it.
func SchemaName(tb testing.TB) string {
	tb.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		tb.Fatalf("dbtest: making schema name: %v", err)
	}
	name := "t_" + hex.EncodeToString(b)
	tb.Cleanup(func() {
		keep := keepFailed(tb.Failed())
		// tb.Context is already canceled when cleanups run.
		if err := release(context.Background(), name, keep, time.Now()); err != nil {
			tb.Errorf("dbtest: releasing schema %s: %v", name, err)
		} else if keep {
			tb.Logf("dbtest: kept schema %s of the failed test (%s=1)", name, envKeep)
		}
	})
	return name
}

// execSQL runs sql on a new connection to URL, with a 30 s timeout.
func execSQL(ctx context.Context, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, URL())
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// Pool returns a pool connected to URL, closed when the test ends. If tweak
// is not nil, it may change the pool's configuration first.
func Pool(tb testing.TB, tweak func(*pgxpool.Config)) *pgxpool.Pool {
	tb.Helper()
	return PoolAt(tb, URL(), tweak)
}

// PoolAt is Pool on the server connString names, such as PgBouncer's.
func PoolAt(tb testing.TB, connString string, tweak func(*pgxpool.Config)) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		tb.Fatalf("dbtest: parsing URL: %v", err)
	}
	if tweak != nil {
		tweak(cfg)
	}
	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("dbtest: creating pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		tb.Fatalf("dbtest: pinging pool: %v", err)
	}
	return pool
}
