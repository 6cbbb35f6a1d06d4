package weirpgx_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirdrivertest"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// setup returns a driver on a fresh, migrated schema.
func setup(t *testing.T) weirdriver.Driver {
	t.Helper()
	d, err := weirpgx.New(dbtest.Pool(t, nil), &weirpgx.Config{Schema: dbtest.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(d).Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestConformance(t *testing.T) {
	t.Parallel()
	weirdrivertest.Run(t, setup)
}

func TestNewRejectsBadSchema(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t, nil)
	for _, schema := range []string{"Upper", "1abc", "semi;colon", "with space", "a-b", string(make([]byte, 64)),
		"information_schema", "pg_catalog", "pg_toast", "pg_temp", "pg_temp_3", "pg_toast_temp_3", "pg_mine"} {
		_, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema})
		if e, ok := errors.AsType[*weirpgx.SchemaError](err); !ok || e.Schema != schema ||
			!strings.HasPrefix(e.Message, fmt.Sprintf("schema %q is ", schema)) || err.Error() != "weirpgx: "+e.Message {
			t.Errorf("schema %q: %v, want a *SchemaError naming it", schema, err)
		}
	}
	if _, err := weirpgx.New(nil, nil); err == nil {
		t.Error("nil pool accepted")
	}
	for _, schema := range []string{"public", "weir", "_pg", "pgx", "pg", "information", "information_schema2"} {
		if err := weirpgx.ValidateSchema(schema); err != nil {
			t.Errorf("schema %q refused: %v", schema, err)
		}
	}
}

// setupThrough returns a driver on a fresh, migrated schema, through the
// shared PgBouncer in transaction mode (dbtest.PgBouncer). tweak, if not nil,
// changes the pool's configuration.
func setupThrough(t *testing.T, tweak func(*pgxpool.Config)) weirdriver.Driver {
	t.Helper()
	pool := dbtest.PoolAt(t, dbtest.PgBouncer(t), tweak)
	d, err := weirpgx.New(pool, &weirpgx.Config{Schema: dbtest.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(d).Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestConformanceThroughPgBouncer runs the conformance suite through a
// PgBouncer in transaction mode that resets every server connection after
// each transaction, with the URL setting docs/poolers.md gives: a statement
// that relied on session state (a named prepared statement, a session
// advisory lock, a SET) would fail here. The checks that LISTEN are skipped:
// LISTEN does not work through such a pooler (Config.PollOnly).
func TestConformanceThroughPgBouncer(t *testing.T) {
	t.Parallel()
	dbtest.PgBouncer(t) // skips the test, not each case, without pgbouncer
	weirdrivertest.RunWith(t, func(t *testing.T) weirdriver.Driver { return setupThrough(t, nil) },
		weirdrivertest.Options{NoListen: true})
}

// TestPreparedStatementErrorHint checks that pgx's default statement cache
// through PgBouncer in transaction mode fails with an error that names the
// URL setting.
func TestPreparedStatementErrorHint(t *testing.T) {
	t.Parallel()
	pool := dbtest.PoolAt(t, dbtest.PgBouncer(t), func(c *pgxpool.Config) {
		c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	})
	schema := dbtest.Schema(t)
	direct, err := weirpgx.New(dbtest.Pool(t, nil), &weirpgx.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(direct).Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	d, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for range 5 { // the first statement on a connection may pass
		if _, last = d.MigrationsApplied(t.Context()); last != nil {
			break
		}
	}
	if last == nil || !strings.Contains(last.Error(), "default_query_exec_mode=cache_describe") {
		t.Fatalf("MigrationsApplied through PgBouncer with named prepared statements: %v; want the URL setting named", last)
	}
	for range 5 {
		if _, last = d.Executor().JobGet(t.Context(), 1); last != nil && !errors.Is(last, weirdriver.ErrNotFound) {
			break
		}
	}
	if last == nil || !strings.Contains(last.Error(), "default_query_exec_mode=cache_describe") {
		t.Fatalf("JobGet through PgBouncer with named prepared statements: %v; want the URL setting named", last)
	}
}

// TestNoSessionAdvisoryLock checks that migrating leaves no advisory lock held
// on the pool's connections: the migration lock is transaction-scoped, so a
// pooler in transaction mode (which may not reset connections) passes no lock
// on to another client.
func TestNoSessionAdvisoryLock(t *testing.T) {
	t.Parallel()
	app := "weir-test-" + dbtest.SchemaName(t)
	pool := dbtest.Pool(t, func(c *pgxpool.Config) {
		c.MaxConns = 1 // the connection that migrated stays open
		c.ConnConfig.RuntimeParams["application_name"] = app
	})
	d, err := weirpgx.New(pool, &weirpgx.Config{Schema: dbtest.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second finds nothing to do, and still takes the lock
		if _, err := weirmigrate.New(d).Up(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
	}
	var locks int
	err = dbtest.Pool(t, nil).QueryRow(t.Context(), `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE l.locktype = 'advisory' AND a.application_name = $1`, app).Scan(&locks)
	if err != nil {
		t.Fatal(err)
	}
	if locks != 0 {
		t.Fatalf("%d advisory locks held on the pool's connection after migrating", locks)
	}
}
