package weirtest_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/weirq/weir"
	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirdriver/weirsqlite"
	"github.com/weirq/weir/weirmigrate"
	"github.com/weirq/weir/weirtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type sendWelcome struct {
	To string `json:"to"`
}

func (sendWelcome) Kind() string { return "welcome.send" }

type receipt struct {
	Order int `json:"order"`
}

func (receipt) Kind() string { return "receipt.send" }

// store is a migrated database of each kind, with a client that only inserts,
// and a way to open a transaction on it of each type it takes.
type store struct {
	name   string
	driver weirdriver.Driver
	client *weir.Client
	// begin opens a transaction of each type the driver takes, by name; each
	// returns the transaction, an insert in it, and its rollback.
	begin map[string]func(t *testing.T) (tx any, insert func(weir.JobArgs), rollback func())
}

func stores(t *testing.T) []*store {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.Pool(t, nil)
	pg, err := weirpgx.New(pool, &weirpgx.Config{Schema: dbtest.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	lite, err := weirsqlite.Open(filepath.Join(t.TempDir(), "jobs.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })
	var out []*store
	for _, d := range []weirdriver.Driver{pg, lite} {
		if _, err := weirmigrate.New(d).Up(ctx, nil); err != nil {
			t.Fatal(err)
		}
		c, err := weir.NewClient(d, nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &store{name: d.Name(), driver: d, client: c, begin: map[string]func(*testing.T) (any, func(weir.JobArgs), func()){}})
	}
	pgStore, liteStore := out[0], out[1]
	sqlTx := func(db *sql.DB, c *weir.Client) func(t *testing.T) (any, func(weir.JobArgs), func()) {
		return func(t *testing.T) (any, func(weir.JobArgs), func()) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			return tx, func(args weir.JobArgs) {
				if _, err := c.InsertSQLTx(ctx, tx, args, nil); err != nil {
					t.Fatal(err)
				}
			}, func() { _ = tx.Rollback() }
		}
	}
	pgStore.begin["pgx"] = func(t *testing.T) (any, func(weir.JobArgs), func()) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return tx, func(args weir.JobArgs) {
			if _, err := pgStore.client.InsertTx(ctx, tx, args, nil); err != nil {
				t.Fatal(err)
			}
		}, func() { _ = tx.Rollback(ctx) }
	}
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	pgStore.begin["database/sql"] = sqlTx(db, pgStore.client)
	liteStore.begin["database/sql"] = sqlTx(lite.DB(), liteStore.client)
	return out
}

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as testing's does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs f with a recorder and returns the message it failed with, ""
// if it did not fail.
func failure(f func(tb testing.TB)) string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.msg
}

func wantFailure(t *testing.T, what, got string, parts ...string) {
	t.Helper()
	if got == "" {
		t.Fatalf("%s did not fail", what)
	}
	for _, p := range parts {
		if !strings.Contains(got, p) {
			t.Fatalf("%s failed with %q, which does not say %q", what, got, p)
		}
	}
}

func TestRequireInserted(t *testing.T) {
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			ctx := context.Background()
			r := s.driver.Executor()
			later := time.Now().Add(time.Hour)
			_, err := s.client.Insert(ctx, sendWelcome{To: "ada@example.com"}, &weir.InsertOpts{
				Queue: "mail", Priority: 2, Tags: []string{"signup", "eu"}, ScheduledAt: later,
				Metadata: json.RawMessage(`{"tenant": "acme", "trace": {"id": 7}}`),
			})
			if err != nil {
				t.Fatal(err)
			}
			job := weirtest.RequireInserted(ctx, t, r, sendWelcome{}, &weirtest.RequireInsertedOpts{
				Queue: "mail", Priority: 2, Tags: []string{"eu"}, State: weir.JobStateScheduled,
				ScheduledAfter: later.Add(-time.Second), ScheduledBefore: later.Add(time.Second),
				Metadata: json.RawMessage(`{"trace": {"id": 7}}`),
			})
			if job.Args.To != "ada@example.com" || job.Kind != "welcome.send" {
				t.Fatalf("RequireInserted returned %+v", job)
			}

			for _, c := range []struct {
				opts  weirtest.RequireInsertedOpts
				parts []string
			}{
				{weirtest.RequireInsertedOpts{Queue: "default"}, []string{`queue "mail", want "default"`}},
				{weirtest.RequireInsertedOpts{Priority: 1, MaxAttempts: 3}, []string{"priority 2, want 1", "max attempts 25, want 3"}},
				{weirtest.RequireInsertedOpts{State: weir.JobStateAvailable}, []string{"state scheduled, want available"}},
				{weirtest.RequireInsertedOpts{ScheduledBefore: time.Now()}, []string{"scheduled at", "after"}},
				{weirtest.RequireInsertedOpts{Tags: []string{"us"}}, []string{`want "us" among them`}},
				{weirtest.RequireInsertedOpts{Metadata: json.RawMessage(`{"tenant": "other", "plan": "pro"}`)},
					[]string{`metadata has no key "plan"`, `metadata "tenant" is "acme", want "other"`}},
			} {
				msg := failure(func(tb testing.TB) { weirtest.RequireInserted(ctx, tb, r, sendWelcome{}, &c.opts) })
				wantFailure(t, fmt.Sprintf("RequireInserted with %+v", c.opts), msg, append(c.parts, fmt.Sprint(job.ID))...)
			}
			wantFailure(t, "RequireInserted of a kind not inserted",
				failure(func(tb testing.TB) { weirtest.RequireInserted(ctx, tb, r, receipt{}, nil) }),
				`no job of kind "receipt.send" was inserted`, `1 of kind "welcome.send"`)

			weirtest.RequireNotInserted(ctx, t, r, receipt{}, nil)
			weirtest.RequireNotInserted(ctx, t, r, sendWelcome{}, &weirtest.RequireInsertedOpts{Queue: "default"})
			wantFailure(t, "RequireNotInserted of a kind inserted",
				failure(func(tb testing.TB) { weirtest.RequireNotInserted(ctx, tb, r, sendWelcome{}, nil) }),
				`1 job(s) of kind "welcome.send"`, "want none")

			if _, err := s.client.Insert(ctx, receipt{Order: 1}, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := s.client.Insert(ctx, sendWelcome{To: "bob@example.com"}, nil); err != nil {
				t.Fatal(err)
			}
			wantFailure(t, "RequireInserted of a kind inserted twice",
				failure(func(tb testing.TB) { weirtest.RequireInserted(ctx, tb, r, sendWelcome{}, nil) }),
				`2 jobs of kind "welcome.send"`, "want exactly one")
			jobs := weirtest.RequireManyInserted(ctx, t, r, []weirtest.ExpectedJob{
				{Args: sendWelcome{}, Opts: &weirtest.RequireInsertedOpts{Queue: "mail"}},
				{Args: receipt{}},
				{Args: sendWelcome{}, Opts: &weirtest.RequireInsertedOpts{Queue: weir.DefaultQueue}},
			})
			if len(jobs) != 3 || jobs[1].Kind != "receipt.send" {
				t.Fatalf("RequireManyInserted returned %d jobs", len(jobs))
			}
			wantFailure(t, "RequireManyInserted in another order",
				failure(func(tb testing.TB) {
					weirtest.RequireManyInserted(ctx, tb, r, []weirtest.ExpectedJob{{Args: receipt{}}, {Args: sendWelcome{}}, {Args: sendWelcome{}}})
				}),
				`got ["welcome.send" "receipt.send" "welcome.send"]`, `want ["receipt.send" "welcome.send" "welcome.send"]`)
			wantFailure(t, "RequireManyInserted with an option not met",
				failure(func(tb testing.TB) {
					weirtest.RequireManyInserted(ctx, tb, r, []weirtest.ExpectedJob{
						{Args: sendWelcome{}}, {Args: receipt{}, Opts: &weirtest.RequireInsertedOpts{Queue: "billing"}}, {Args: sendWelcome{}},
					})
				}),
				`job 1 (kind "receipt.send"`, `queue "default", want "billing"`)
		})
	}
}

// TestRequireInsertedTx: inside a transaction, the helpers see its own
// inserts; outside it, they see only what is committed.
func TestRequireInsertedTx(t *testing.T) {
	for _, s := range stores(t) {
		for kind, begin := range s.begin {
			t.Run(s.name+"/"+kind, func(t *testing.T) {
				ctx := context.Background()
				tx, insert, rollback := begin(t)
				defer rollback()
				insert(receipt{Order: 42})
				job := weirtest.RequireInserted(ctx, t, weirtest.Tx(t, s.driver, tx), receipt{}, nil)
				if job.Args.Order != 42 {
					t.Fatalf("the job in the transaction: %+v", job)
				}
				weirtest.RequireManyInserted(ctx, t, weirtest.Tx(t, s.driver, tx), []weirtest.ExpectedJob{{Args: receipt{}}})
				weirtest.RequireNotInserted(ctx, t, s.driver.Executor(), receipt{}, nil)
			})
		}
	}
}

func TestTxRefusesOtherTypes(t *testing.T) {
	for _, s := range stores(t) {
		wantFailure(t, "Tx of an int", failure(func(tb testing.TB) { weirtest.Tx(tb, s.driver, 42) }), "int", "not supported")
	}
}
