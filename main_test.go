package weir_test

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir"
	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirdriver/weirsqlite"
	"github.com/weirq/weir/weirmigrate"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain()) // a worker process of TestCrashBound
	}
	if os.Getenv(limitChildEnv) != "" {
		os.Exit(limitChildMain()) // a client of TestGlobalLimitExact
	}
	dbtest.Main(m)
}

// bundle is what most tests need: a client on a fresh, migrated schema.
type bundle struct {
	client *weir.Client
	driver *weirpgx.Driver
	pool   *pgxpool.Pool
	schema string
}

type setupOpts struct {
	config    *weir.Config
	noMigrate bool
	// maxConns sizes the pool; 0 keeps pgxpool's default.
	maxConns int32
	// appName, if set, is the pool's application_name.
	appName string
	// pool, if set, changes the pool's config further.
	pool func(*pgxpool.Config)
	// url, if set, is the server to connect to instead of dbtest's (such as a
	// PgBouncer in front of it); the schema is made on dbtest's.
	url string
}

func setup(t testing.TB, opts *setupOpts) *bundle {
	t.Helper()
	if opts == nil {
		opts = &setupOpts{}
	}
	b := &bundle{schema: dbtest.Schema(t)}
	b.pool = dbtest.PoolAt(t, cmp.Or(opts.url, dbtest.URL()), func(c *pgxpool.Config) {
		if opts.maxConns > 0 {
			c.MaxConns = opts.maxConns
		}
		if opts.appName != "" {
			c.ConnConfig.RuntimeParams["application_name"] = opts.appName
		}
		if opts.pool != nil {
			opts.pool(c)
		}
	})
	var err error
	b.driver, err = weirpgx.New(b.pool, &weirpgx.Config{Schema: b.schema})
	if err != nil {
		t.Fatal(err)
	}
	if !opts.noMigrate {
		if _, err := weirmigrate.New(b.driver).Up(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
	b.client, err = weir.NewClient(b.driver, opts.config)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// count returns the number of jobs in the bundle's schema matching the SQL condition.
func (b *bundle) count(t testing.TB, where string, args ...any) int {
	t.Helper()
	var n int
	err := b.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM "+b.schema+".weir_job WHERE "+where, args...).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Args types used across the tests.

type emailArgs struct {
	To      string `json:"to"`
	Subject string `json:"subject,omitempty"`
}

func (emailArgs) Kind() string { return "email.send" }

type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "noop" }

// reportArgs carries its own insert defaults.
type reportArgs struct {
	Day string `json:"day"`
}

func (reportArgs) Kind() string { return "report" }
func (reportArgs) InsertOpts() weir.InsertOpts {
	return weir.InsertOpts{Queue: "reports", Priority: 3, MaxAttempts: 5}
}

// listArgs encodes to a JSON array, which weir refuses.
type listArgs []int

func (listArgs) Kind() string { return "list" }

// badJSONArgs cannot be encoded.
type badJSONArgs struct {
	C chan int
}

func (badJSONArgs) Kind() string { return "bad" }

// sqliteStore returns a migrated SQLite file of the test's own, closed at
// cleanup.
func sqliteStore(t *testing.T) *weirsqlite.Driver {
	t.Helper()
	d, err := weirsqlite.Open(filepath.Join(t.TempDir(), "jobs.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if _, err := weirmigrate.New(d).Up(testCtx(t), nil); err != nil {
		t.Fatal(err)
	}
	return d
}
