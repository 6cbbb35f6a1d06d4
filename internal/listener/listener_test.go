package listener_test

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/internal/clock"
	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/internal/listener"
	"github.com/weirq/weir/weirdriver/weirpgx"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// waitLimit bounds every wait for something that should happen much sooner.
const waitLimit = 30 * time.Second

// calls records what a listener told the client, in order, as "connected",
// "insert <queue>", "cancel <id>" or "unknown <payload>", and signals each.
type calls struct {
	mu   sync.Mutex
	list []string
	made chan struct{} // capacity 1: a call was made
}

func (c *calls) add(s string) {
	c.mu.Lock()
	c.list = append(c.list, s)
	c.mu.Unlock()
	select {
	case c.made <- struct{}{}:
	default:
	}
}

func (c *calls) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.list)
}

// await waits until s was called n times, and returns every call then.
func (c *calls) await(t *testing.T, s string, n int) []string {
	t.Helper()
	limit := time.NewTimer(waitLimit)
	defer limit.Stop()
	for c.count(s) < n {
		select {
		case <-c.made:
		case <-limit.C:
			t.Fatalf("no call %q (number %d) within %v; calls: %q", s, n, waitLimit, c.all())
		}
	}
	return c.all()
}

// count returns how many calls were s.
func (c *calls) count(s string) int {
	n := 0
	for _, x := range c.all() {
		if x == s {
			n++
		}
	}
	return n
}

// warnings records the listener's warnings: the retry_in of each.
type warnings struct {
	mu      sync.Mutex
	retries []time.Duration
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *warnings) WithGroup(string) slog.Handler            { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "retry_in" {
			w.mu.Lock()
			w.retries = append(w.retries, a.Value.Duration())
			w.mu.Unlock()
		}
		return true
	})
	return nil
}

// env is a listener on one test's schema, whose clock the test moves.
type env struct {
	schema string
	pool   *pgxpool.Pool // the test's own connections
	driver *weirpgx.Driver
	clk    *clock.Fake
	calls  *calls
	warns  *warnings
}

func setup(t *testing.T) *env {
	t.Helper()
	e := &env{schema: dbtest.Schema(t), pool: dbtest.Pool(t, nil), clk: clock.NewFake(time.Unix(0, 0)),
		calls: &calls{made: make(chan struct{}, 1)}, warns: &warnings{}}
	e.driver = e.newDriver(t, e.pool)
	return e
}

func (e *env) newDriver(t *testing.T, pool *pgxpool.Pool) *weirpgx.Driver {
	t.Helper()
	d, err := weirpgx.New(pool, &weirpgx.Config{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// run runs a listener on d until the test ends or the returned stop is
// called; stop fails the test unless Run returns promptly.
func (e *env) run(t *testing.T, d *weirpgx.Driver) (stop func()) {
	t.Helper()
	l := listener.New(listener.Config{
		Driver: d, Logger: slog.New(e.warns), Clock: e.clk,
		Connected: func() { e.calls.add("connected") },
		Insert:    func(q string) { e.calls.add("insert " + q) },
		Cancel:    func(id int64) { e.calls.add("cancel " + strconv.FormatInt(id, 10)) },
		Unknown:   func(p string) { e.calls.add("unknown " + p) },
	})
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		l.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			limit := time.NewTimer(waitLimit)
			defer limit.Stop()
			select {
			case <-returned:
			case <-limit.C:
				t.Errorf("Run did not return within %v of its context's end", waitLimit)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// notify sends payload on channel, in a transaction of its own.
func (e *env) notify(t *testing.T, channel, payload string) {
	t.Helper()
	if _, err := e.pool.Exec(t.Context(), "SELECT pg_notify($1, $2)", channel, payload); err != nil {
		t.Fatal(err)
	}
}

// TestHints: an insert notification names its queue to Insert; a control
// message "cancel <id>" goes to Cancel, "pause <queue>" to nobody, and any
// other to Unknown; a notification on another channel is ignored.
func TestHints(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.run(t, e.driver)
	e.calls.await(t, "connected", 1)
	ctl, ins := e.driver.ControlChannel(), e.driver.InsertChannel()
	e.notify(t, ins, "emails")
	e.notify(t, ctl, "cancel 42")
	e.notify(t, ctl, "pause emails")
	e.notify(t, ctl, "cancel forty-two")
	e.notify(t, ctl, "resume everything")
	e.notify(t, e.schema+".elsewhere", "nothing")
	e.notify(t, ins, "last") // notifications of one session arrive in order
	got := e.calls.await(t, "insert last", 1)
	want := []string{"connected", "insert emails", "cancel 42", "unknown cancel forty-two", "unknown resume everything", "insert last"}
	if !slices.Equal(got, want) {
		t.Fatalf("calls %q, want %q", got, want)
	}
}

// TestReconnect: when the listening connection breaks, the listener listens
// again at once (no wait), says so with Connected (notifications may have been
// missed), and receives what is sent afterwards.
func TestReconnect(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.run(t, e.driver)
	e.calls.await(t, "connected", 1)
	e.terminateListener(t)
	e.calls.await(t, "connected", 2)
	if n := e.calls.count("connected"); n != 2 {
		t.Fatalf("connected %d times, want 2", n)
	}
	e.notify(t, e.driver.InsertChannel(), "after")
	e.calls.await(t, "insert after", 1)
	if left := e.clk.Armed(); len(left) != 0 {
		t.Fatalf("a reconnect after a broken connection waited: timers %v", left)
	}
}

// terminateListener ends the server session that listens on the schema's
// channels.
func (e *env) terminateListener(t *testing.T) {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE query LIKE 'LISTEN %' AND strpos(query, $1) > 0`, e.driver.InsertChannel()).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminated %d listening sessions: %v", n, err)
	}
}

// role makes a role for the test, dropped at its end, and returns its name.
func (e *env) role(t *testing.T) string {
	t.Helper()
	role := e.schema + "_listener"
	if _, err := e.pool.Exec(t.Context(), "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" NOLOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := e.pool.Exec(context.Background(), "DROP ROLE "+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	return role
}

// setLogin lets role log in, or not.
func (e *env) setLogin(t *testing.T, role string, login bool) {
	t.Helper()
	opt := " NOLOGIN"
	if login {
		opt = " LOGIN"
	}
	if _, err := e.pool.Exec(t.Context(), "ALTER ROLE "+pgx.Identifier{role}.Sanitize()+opt); err != nil {
		t.Fatal(err)
	}
}

// awaitWait waits until the listener waits to try again, and returns how long.
func (e *env) awaitWait(t *testing.T) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	left, err := e.clk.AwaitArmed(ctx, 1)
	if err != nil || len(left) != 1 {
		t.Fatalf("no wait to listen again within %v: %v %v", waitLimit, left, err)
	}
	return left[0]
}

// TestListenBackoff: while the database refuses the listening connection,
// the listener warns and tries again after 100 ms, then twice as long each
// time up to 5 s; once it connects it says so, and a later failure waits 100
// ms again. A stop during a wait returns at once.
func TestListenBackoff(t *testing.T) {
	t.Parallel()
	e := setup(t)
	role := e.role(t)
	cfg := e.pool.Config().Copy()
	cfg.ConnConfig.User, cfg.ConnConfig.Password = role, ""
	cfg.MinConns = 0
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg) // connects lazily: the role cannot log in yet
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	stop := e.run(t, e.newDriver(t, pool))

	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000}
	for i, w := range want {
		w *= time.Millisecond
		if got := e.awaitWait(t); got != w {
			t.Fatalf("wait %d is %v, want %v", i+1, got, w)
		}
		if i == len(want)-1 {
			e.setLogin(t, role, true)
		}
		e.clk.Advance(w)
	}
	e.calls.await(t, "connected", 1)
	e.warns.mu.Lock()
	retries := slices.Clone(e.warns.retries)
	e.warns.mu.Unlock()
	if len(retries) != len(want) || retries[0] != 100*time.Millisecond || retries[len(retries)-1] != 5*time.Second {
		t.Fatalf("warned with retry_in %v, want one warning per wait", retries)
	}

	e.setLogin(t, role, false)
	e.terminateListener(t)
	if got := e.awaitWait(t); got != 100*time.Millisecond {
		t.Fatalf("after a connection the first wait is %v, want 100ms", got)
	}
	stop()
	if n := e.calls.count("connected"); n != 1 {
		t.Fatalf("connected %d times, want 1", n)
	}
}
