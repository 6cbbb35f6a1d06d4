package registry

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/internal/clock"
	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
	"github.com/weirq/weir/weirtype"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// waitLimit bounds every wait for something that should happen much sooner.
const waitLimit = 30 * time.Second

// warnings keeps the message and error of each record logged.
type warnings struct {
	mu    sync.Mutex
	lines []string
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *warnings) WithGroup(string) slog.Handler            { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "error" {
			line += ": " + a.Value.String()
		}
		return true
	})
	w.mu.Lock()
	w.lines = append(w.lines, line)
	w.mu.Unlock()
	return nil
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.lines)
}

// env is one test's schema, migrated, with an executor on it.
type env struct {
	schema string
	pool   *pgxpool.Pool
	exec   weirdriver.Executor
	clk    *clock.Fake
	warns  *warnings
	writes atomic.Int64
}

func setup(t *testing.T) *env {
	t.Helper()
	e := &env{schema: dbtest.Schema(t), pool: dbtest.Pool(t, nil), clk: clock.NewFake(time.Unix(0, 0)), warns: &warnings{}}
	d, err := weirpgx.New(e.pool, &weirpgx.Config{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(d).Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	e.exec = d.Executor()
	return e
}

// registry returns a registry of client id working queues, on the test's
// clock and logger.
func (e *env) registry(id string, queues map[string]int) *Registry {
	return New(Config{Exec: e.exec, ID: id, Queues: queues, Logger: slog.New(e.warns), Writes: &e.writes, Clock: e.clk})
}

// rows returns the registry's rows.
func (e *env) rows(t *testing.T) []*weirtype.ClientRow {
	t.Helper()
	rows, err := e.exec.ClientList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// awaitRow waits until the registry holds exactly one row and ok accepts it.
func (e *env) awaitRow(t *testing.T, what string, ok func(*weirtype.ClientRow) bool) *weirtype.ClientRow {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond) // observes the database, which signals nothing
	defer tick.Stop()
	limit := time.NewTimer(waitLimit)
	defer limit.Stop()
	for {
		if rows := e.rows(t); len(rows) == 1 && ok(rows[0]) {
			return rows[0]
		}
		select {
		case <-tick.C:
		case <-limit.C:
			t.Fatalf("no row with %s within %v; rows: %+v", what, waitLimit, e.rows(t))
		}
	}
}

// run runs r until the test ends, and waits until its ticker is set.
func (e *env) run(t *testing.T, r *Registry) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-returned
	})
	wait, cancelWait := context.WithTimeout(t.Context(), waitLimit)
	defer cancelWait()
	if _, err := e.clk.AwaitArmed(wait, 1); err != nil {
		t.Fatalf("Run set no ticker: %v", err)
	}
}

// refuse makes every write to the registry's table fail until the returned
// allow is called.
func (e *env) refuse(t *testing.T) (allow func()) {
	t.Helper()
	fn := pgx.Identifier{e.schema, "refuse_writes"}.Sanitize()
	table := pgx.Identifier{e.schema, "weir_client"}.Sanitize()
	if _, err := e.pool.Exec(t.Context(), `CREATE OR REPLACE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN RAISE EXCEPTION 'test: writes refused'; END$$;
		CREATE TRIGGER refuse_writes BEFORE INSERT OR UPDATE OR DELETE ON `+table+`
		FOR EACH ROW EXECUTE FUNCTION `+fn+`()`); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := e.pool.Exec(t.Context(), "DROP TRIGGER refuse_writes ON "+table); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRegisterAndRemove: Register writes the row that ClientList reads back
// (id, host, pid, weir's version, the queues by name); Remove deletes it.
func TestRegisterAndRemove(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.registry("client-a", map[string]int{"zeta": 1, "alpha": 5})
	r.Register(t.Context())
	rows := e.rows(t)
	if len(rows) != 1 {
		t.Fatalf("%d rows after Register, want 1", len(rows))
	}
	host, _ := os.Hostname()
	row := rows[0]
	wantQueues := []weirtype.ClientQueue{{Name: "alpha", MaxWorkers: 5}, {Name: "zeta", MaxWorkers: 1}}
	if row.ID != "client-a" || row.Host != host || row.PID != os.Getpid() || row.Version != "(devel)" ||
		!slices.Equal(row.Queues, wantQueues) || row.StartedAt.IsZero() {
		t.Fatalf("row %+v; want client-a on %s, pid %d, version (devel), queues %v", row, host, os.Getpid(), wantQueues)
	}
	r.Remove(t.Context())
	if rows := e.rows(t); len(rows) != 0 {
		t.Fatalf("rows %+v after Remove", rows)
	}
	if w := e.warns.all(); len(w) != 0 {
		t.Fatalf("logged %q", w)
	}
}

// TestRefreshEveryInterval: Run writes nothing until an interval has passed;
// then it refreshes the row, and a row that the leader forgot meanwhile comes
// back with the started_at of the first registration.
func TestRefreshEveryInterval(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.registry("client-b", map[string]int{"q": 1})
	r.Register(t.Context())
	first := e.rows(t)[0]
	if _, err := e.pool.Exec(t.Context(), "DELETE FROM "+pgx.Identifier{e.schema, "weir_client"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	e.run(t, r)
	if left := e.clk.Armed(); !slices.Equal(left, []time.Duration{Interval}) {
		t.Fatalf("Run waits %v, want one interval (%v)", left, Interval)
	}
	if n := e.writes.Load(); n != 1 {
		t.Fatalf("%d writes before an interval passed, want 1 (the registration)", n)
	}
	e.clk.Advance(Interval)
	row := e.awaitRow(t, "client-b", func(r *weirtype.ClientRow) bool { return r.ID == "client-b" })
	if !row.StartedAt.Equal(first.StartedAt) || row.HeartbeatAt.Before(first.HeartbeatAt) {
		t.Fatalf("refreshed row started %v, heartbeat %v; want started %v as first registered, heartbeat after %v",
			row.StartedAt, row.HeartbeatAt, first.StartedAt, first.HeartbeatAt)
	}
}

// TestSetQueuesWritesAtOnce: a change of the queues is written without
// waiting for the next refresh.
func TestSetQueuesWritesAtOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.registry("client-c", map[string]int{"old": 1})
	r.Register(t.Context())
	e.run(t, r)
	r.SetQueues(map[string]int{"new": 3, "b": 2})
	want := []weirtype.ClientQueue{{Name: "b", MaxWorkers: 2}, {Name: "new", MaxWorkers: 3}}
	e.awaitRow(t, "the new queues", func(r *weirtype.ClientRow) bool { return slices.Equal(r.Queues, want) })
	if left := e.clk.Armed(); !slices.Equal(left, []time.Duration{Interval}) {
		t.Fatalf("the clock moved: timers %v", left)
	}
}

// TestFailureLoggedOncePerKind: a write that fails is logged once for its
// kind (register, refresh, remove), not again until a write of that kind
// succeeded; a write cut because its context ended is not logged.
func TestFailureLoggedOncePerKind(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.registry("client-d", map[string]int{"q": 1})
	allow := e.refuse(t)
	r.Register(t.Context())
	r.Register(t.Context())
	r.write(t.Context(), "refresh")
	r.write(t.Context(), "refresh")
	allow()
	r.write(t.Context(), "refresh") // succeeds: the next refresh failure is logged
	e.refuse(t)
	r.write(t.Context(), "refresh")
	r.Register(t.Context()) // no register succeeded since the logged one
	r.Remove(t.Context())
	r.Remove(t.Context())
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	e.registry("client-e", nil).Register(cancelled)

	want := []string{
		"WARN weir: client registry: register failed",
		"WARN weir: client registry: refresh failed",
		"WARN weir: client registry: refresh failed",
		"WARN weir: client registry: remove failed",
	}
	got := e.warns.all()
	if len(got) != len(want) {
		t.Fatalf("logged %q, want %q", got, want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]+": ") || !strings.Contains(got[i], "writes refused") {
			t.Fatalf("line %d is %q, want %q with the database's error", i, got[i], want[i])
		}
	}
	if n := e.writes.Load(); n != 10 {
		t.Fatalf("%d writes counted, want 10", n)
	}
}

// TestBadRowIsRefused: a row the registry's table cannot hold (an id longer
// than its limit) is refused with an error that says so, and nothing is
// written.
func TestBadRowIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.registry(strings.Repeat("x", weirdriver.MaxClientIDBytes+1), nil).Register(t.Context())
	got := e.warns.all()
	if len(got) != 1 || !strings.Contains(got[0], "client id is 129 bytes long; the limit is 128") {
		t.Fatalf("logged %q, want the id's length named", got)
	}
	if rows := e.rows(t); len(rows) != 0 {
		t.Fatalf("rows %+v", rows)
	}
}

// TestVersion: a build of weir's own tree records no version: "(devel)".
func TestVersion(t *testing.T) {
	if v := Version(); v != "(devel)" {
		t.Fatalf("Version() = %q in weir's own tests, want (devel)", v)
	}
}
