package weirsqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirdrivertest"
	"github.com/weirq/weir/weirdriver/weirsqlite"
	"github.com/weirq/weir/weirmigrate"
	"github.com/weirq/weir/weirtype"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// open opens a driver on path and closes it at cleanup.
func open(t testing.TB, path string) *weirsqlite.Driver {
	t.Helper()
	d, err := weirsqlite.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return d
}

// newDB opens a driver on a fresh, migrated database file.
func newDB(t testing.TB) *weirsqlite.Driver {
	t.Helper()
	d := open(t, filepath.Join(t.TempDir(), "weir.db"))
	if _, err := weirmigrate.New(d).Up(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	return d
}

func setup(t *testing.T) weirdriver.Driver { return newDB(t) }

func TestConformance(t *testing.T) {
	t.Parallel()
	weirdrivertest.RunWith(t, setup, weirdrivertest.Options{NoKeyShares: true})
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func job(kind, queue string) *weirdriver.JobInsertParams {
	return &weirdriver.JobInsertParams{Kind: kind, Queue: queue, Args: json.RawMessage(`{}`), Priority: 2, MaxAttempts: 3}
}

func TestOpenNotADatabase(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "notes.txt")
	content := []byte(strings.Repeat("These are my notes, not a database.\n", 200))
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := weirsqlite.Open(path, nil)
	if err == nil {
		d.Close()
		t.Fatal("Open of a text file succeeded")
	}
	if e, ok := errors.AsType[*weirsqlite.OpenError](err); !ok || e.Path != path ||
		!strings.HasPrefix(e.Err.Error(), "not a usable SQLite database: ") || err.Error() != "weirsqlite: open "+path+": "+e.Err.Error() {
		t.Fatalf("error %q is not an *OpenError naming the path and saying what is wrong", err)
	}
	// Open must not have touched the file: no WAL switch, no header written.
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(content) {
		t.Fatal("Open changed the file it refused")
	}
}

func TestOpenBadPaths(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, path := range []string{"", ":memory:", "file:x.db?mode=memory", dir, filepath.Join(dir, "missing", "weir.db")} {
		d, err := weirsqlite.Open(path, nil)
		if err == nil {
			d.Close()
			t.Errorf("Open(%q) succeeded", path)
			continue
		}
		if e, ok := errors.AsType[*weirsqlite.OpenError](err); !ok || e.Path != path || !strings.Contains(err.Error(), path) {
			t.Errorf("Open(%q): error %q is not an *OpenError naming the path", path, err)
		}
	}
	if _, err := weirsqlite.Open(filepath.Join(dir, "a.db"), &weirsqlite.Config{BusyTimeout: -time.Second}); !errors.As(err, new(*weirsqlite.OpenError)) {
		t.Errorf("negative busy timeout: %v, want an *OpenError", err)
	}
}

// TestOpenSettings checks the durability settings every connection runs with, and
// that a path with URI characters is a plain file name.
func TestOpenSettings(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "we?ir#1%.db")
	d := open(t, path)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file not created under its name: %v", err)
	}
	if d.Path() != path {
		t.Errorf("Path() = %q, want %q", d.Path(), path)
	}
	for pragma, want := range map[string]string{
		"journal_mode": "wal", "synchronous": "2", "foreign_keys": "1", "busy_timeout": "10000", "fullfsync": "1",
	} {
		var got string
		if err := d.DB().QueryRowContext(testCtx(t), "PRAGMA "+pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %s, want %s", pragma, got, want)
		}
	}
	if d.Name() != "sqlite" || d.Schema() != "main" || d.InsertChannel() != "weir_insert" || d.ControlChannel() != "weir_control" {
		t.Errorf("names: %s %s %s %s", d.Name(), d.Schema(), d.InsertChannel(), d.ControlChannel())
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestSchemaMissing(t *testing.T) {
	t.Parallel()
	d := open(t, filepath.Join(t.TempDir(), "weir.db"))
	if _, err := d.Executor().JobGet(testCtx(t), 1); !errors.Is(err, weirdriver.ErrSchemaMissing) {
		t.Fatalf("get without schema: %v, want ErrSchemaMissing", err)
	}
	if _, err := d.Executor().JobInsert(testCtx(t), []*weirdriver.JobInsertParams{job("k", "q")}); !errors.Is(err, weirdriver.ErrSchemaMissing) {
		t.Fatalf("insert without schema: %v, want ErrSchemaMissing", err)
	}
	err := weirmigrate.New(d).Check(testCtx(t))
	if !errors.Is(err, weirmigrate.ErrNotMigrated) || !strings.Contains(err.Error(), "001_baseline") {
		t.Fatalf("check: %v", err)
	}
	// Migrated, then the queue table dropped by hand: a call that needs it says
	// the schema is missing.
	if _, err := weirmigrate.New(d).Up(testCtx(t), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DB().ExecContext(testCtx(t), "DROP TABLE weir_queue"); err != nil {
		t.Fatal(err)
	}
	if err := d.Executor().QueuePause(testCtx(t), "q"); !errors.Is(err, weirdriver.ErrSchemaMissing) {
		t.Fatalf("pause without the queue table: %v, want ErrSchemaMissing", err)
	}
}

func TestMigrateDownAndUp(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	m := weirmigrate.New(d)
	down, err := m.Down(testCtx(t), &weirmigrate.DownOpts{All: true})
	if err != nil {
		t.Fatal(err)
	}
	n := len(d.Migrations())
	if len(down) != n || down[n-1].String() != "001_baseline" {
		t.Fatalf("down: %v", down)
	}
	var tables int
	if err := d.DB().QueryRowContext(testCtx(t), `SELECT count(*) FROM sqlite_schema WHERE name LIKE 'weir_%' AND name <> 'weir_migration'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("%d weir tables or indexes left after down", tables)
	}
	up, err := m.Up(testCtx(t), nil)
	if err != nil || len(up) != n {
		t.Fatalf("up again: %v, %v", up, err)
	}
	if err := m.Check(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestDownRefusesToDropUserData checks that reverting the baseline is refused
// while jobs, periodic schedules or queue settings (each alone) would be
// dropped, naming what and how many, and changes nothing; Force drops them.
func TestDownRefusesToDropUserData(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		write func(t *testing.T, ex weirdriver.Executor) error
		says  string
	}{
		{"jobs", func(t *testing.T, ex weirdriver.Executor) error {
			_, err := ex.JobInsert(testCtx(t), []*weirdriver.JobInsertParams{job("k", "q"), job("k", "q")})
			return err
		}, "would drop 2 jobs (with their outputs), in sqlite"},
		{"schedules", func(t *testing.T, ex weirdriver.Executor) error {
			return ex.PeriodicRegister(testCtx(t), "leader", []*weirdriver.PeriodicRegisterParams{
				{Name: "a", Spec: "@daily", TimeZone: "UTC", NextRunAt: time.Now()},
				{Name: "b", Spec: "@daily", TimeZone: "UTC", NextRunAt: time.Now()},
			})
		}, "would drop 2 periodic schedules, in sqlite"},
		{"queue settings", func(t *testing.T, ex weirdriver.Executor) error {
			return ex.QueuePause(testCtx(t), "mail")
		}, "would drop the settings (pauses and limits) of 1 queue, in sqlite"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := newDB(t)
			m := weirmigrate.New(d)
			if err := c.write(t, d.Executor()); err != nil {
				t.Fatal(err)
			}
			n := len(d.Migrations())
			for _, opts := range []*weirmigrate.DownOpts{{All: true}, {Steps: n}, {TargetVersion: 0, All: true}} {
				done, err := m.Down(testCtx(t), opts)
				dropErr, ok := errors.AsType[*weirmigrate.DropsDataError](err)
				if !ok || len(dropErr.Drops) != 1 || dropErr.Drops[0].Migration.String() != "001_baseline" ||
					!strings.Contains(err.Error(), "reverting 001_baseline "+c.says) {
					t.Fatalf("down %+v: reverted %v, error %v; want a DropsDataError saying %q", *opts, done, err, c.says)
				}
			}
			if err := m.Check(testCtx(t)); err != nil {
				t.Fatalf("after the refusals: %v", err)
			}
			done, err := m.Down(testCtx(t), &weirmigrate.DownOpts{All: true, Force: true})
			if err != nil || len(done) != 1 || done[0].String() != "001_baseline" {
				t.Fatalf("forced down: %v, %v", done, err)
			}
		})
	}
}

// TestNewerMigrations checks that a database with a migration this weir does
// not know passes Check only when the migration is marked compatible.
func TestNewerMigrations(t *testing.T) {
	t.Parallel()
	for _, compatible := range []bool{true, false} {
		t.Run(fmt.Sprint(compatible), func(t *testing.T) {
			t.Parallel()
			d := newDB(t)
			m := weirmigrate.New(d)
			next := len(d.Migrations()) + 1
			if _, err := d.DB().ExecContext(testCtx(t), "INSERT INTO weir_migration (version, name, applied_at, compatible) VALUES (?1, 'from_the_future', 0, ?2)",
				next, compatible); err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("%03d_from_the_future", next)
			err := m.Check(testCtx(t))
			if compatible && err != nil {
				t.Fatalf("check with compatible %s: %v", name, err)
			}
			if !compatible && (!errors.Is(err, weirmigrate.ErrIncompatible) || !strings.Contains(err.Error(), name)) {
				t.Fatalf("check with %s not marked: %v, want ErrIncompatible naming it", name, err)
			}
			status, err := m.Status(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			last := status[len(status)-1]
			if len(status) != next || last.String() != name || !last.Unknown || !last.Applied || last.Compatible != compatible {
				t.Fatalf("status ends with %+v", last)
			}
		})
	}
}

// TestIDsNeverReused: ids are fencing keys, so deleting the newest job must not
// hand its id to the next one.
func TestIDsNeverReused(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	res, err := d.Executor().JobInsert(testCtx(t), []*weirdriver.JobInsertParams{job("k", "q")})
	if err != nil {
		t.Fatal(err)
	}
	first := res[0].Job.ID
	if _, err := d.Executor().JobDelete(testCtx(t), first); err != nil {
		t.Fatal(err)
	}
	res, err = d.Executor().JobInsert(testCtx(t), []*weirdriver.JobInsertParams{job("k", "q")})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Job.ID <= first {
		t.Fatalf("new job got id %d after job %d was deleted", res[0].Job.ID, first)
	}
}

// waitNote returns the next notification or fails after a generous timeout.
func waitNote(t *testing.T, l weirdriver.Listener) *weirdriver.Notification {
	t.Helper()
	n, err := l.WaitForNotification(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// pending drains what l has queued now: the broker delivers during the publishing
// call, so whatever a finished call published is already there.
func pending(t *testing.T, l weirdriver.Listener) []string {
	t.Helper()
	var got []string
	for {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		n, err := l.WaitForNotification(ctx)
		if errors.Is(err, context.Canceled) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n.Channel+" "+n.Payload)
	}
}

func listen(t *testing.T, d weirdriver.Driver) weirdriver.Listener {
	t.Helper()
	l, err := d.Listen(testCtx(t), d.InsertChannel(), d.ControlChannel())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l
}

func TestNotifications(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	l := listen(t, d)
	exec := d.Executor()

	// A plain insert publishes its queue once; a scheduled job nothing.
	later := job("k", "later")
	later.ScheduledAt = time.Now().Add(time.Hour)
	if _, err := exec.JobInsert(testCtx(t), []*weirdriver.JobInsertParams{job("k", "a"), job("k", "a"), later}); err != nil {
		t.Fatal(err)
	}
	if got := pending(t, l); !slices.Equal(got, []string{"weir_insert a"}) {
		t.Fatalf("insert published %v", got)
	}

	// In a transaction: nothing before the commit, everything after it.
	tx, err := exec.Begin(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.JobInsert(testCtx(t), []*weirdriver.JobInsertParams{job("k", "tx")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.NotifyInsert(testCtx(t), []string{"tx-bulk"}); err != nil {
		t.Fatal(err)
	}
	if got := pending(t, l); len(got) != 0 {
		t.Fatalf("published before commit: %v", got)
	}
	if err := tx.Commit(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got := pending(t, l); !slices.Equal(got, []string{"weir_insert tx", "weir_insert tx-bulk"}) {
		t.Fatalf("after commit: %v", got)
	}

	// A rolled-back transaction publishes nothing, nor does a rolled-back savepoint.
	tx, err = exec.Begin(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.JobInsert(testCtx(t), []*weirdriver.JobInsertParams{job("k", "gone")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	tx, err = exec.Begin(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	sp, err := tx.Begin(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.JobInsert(testCtx(t), []*weirdriver.JobInsertParams{job("k", "sp-gone")}); err != nil {
		t.Fatal(err)
	}
	if err := sp.Rollback(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	sp, err = tx.Begin(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.JobInsert(testCtx(t), []*weirdriver.JobInsertParams{job("k", "sp-kept")}); err != nil {
		t.Fatal(err)
	}
	if err := sp.Commit(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got := pending(t, l); !slices.Equal(got, []string{"weir_insert sp-kept"}) {
		t.Fatalf("after rollbacks and a kept savepoint: %v", got)
	}
	list, err := exec.JobList(testCtx(t), &weirdriver.JobListParams{Queues: []string{"gone", "sp-gone", "sp-kept"}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Queue != "sp-kept" {
		t.Fatalf("jobs after rollbacks: %+v", list)
	}

	// Operator statements: retry and resume wake the queue, pause and cancel of a
	// running job go to the control channel; delete and cancel of a waiting job
	// publish nothing.
	waiting := insert(t, d, job("k", "w"))
	running := insert(t, d, job("k", "r"))
	claimed, _, err := exec.JobClaim(testCtx(t), &weirdriver.JobClaimParams{Queue: "r", Max: 1, ClientID: "c", LeaseDuration: time.Minute})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v %v", claimed, err)
	}
	pending(t, l)
	if _, err := exec.JobCancel(testCtx(t), waiting.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.JobCancel(testCtx(t), running.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.JobRetry(testCtx(t), waiting.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.JobDelete(testCtx(t), waiting.ID); err != nil {
		t.Fatal(err)
	}
	if err := exec.QueuePause(testCtx(t), "p"); err != nil {
		t.Fatal(err)
	}
	if err := exec.QueueResume(testCtx(t), "p"); err != nil {
		t.Fatal(err)
	}
	if err := exec.QueueResume(testCtx(t), "not-paused"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"weir_control cancel " + strconv.FormatInt(running.ID, 10),
		"weir_insert w",
		"weir_control pause p",
		"weir_insert p",
	}
	if got := pending(t, l); !slices.Equal(got, want) {
		t.Fatalf("operator statements published %v, want %v", got, want)
	}
}

// TestNotificationsCallerTx: inside a caller's transaction nothing is published,
// neither at the insert nor at the commit the driver cannot see.
func TestNotificationsCallerTx(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	l := listen(t, d)
	for _, commit := range []bool{true, false} {
		tx, err := d.DB().BeginTx(testCtx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		exec, err := d.UnwrapTx(tx)
		if err != nil {
			t.Fatal(err)
		}
		res, err := exec.JobInsert(testCtx(t), []*weirdriver.JobInsertParams{job("k", "caller")})
		if err != nil {
			t.Fatal(err)
		}
		var bulk []*weirdriver.JobInsertParams
		for range 100 {
			bulk = append(bulk, job("k", "caller-bulk"))
		}
		sp, err := exec.BeginInsert(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := sp.JobInsertBulk(testCtx(t), bulk)
		if err != nil {
			t.Fatal(err)
		}
		if err := sp.NotifyInsert(testCtx(t), []string{"caller-bulk"}); err != nil {
			t.Fatal(err)
		}
		if err := sp.Commit(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := pending(t, l); len(got) != 0 {
			t.Fatalf("caller's transaction (commit %v) published %v", commit, got)
		}
		for _, id := range []int64{res[0].Job.ID, jobs[99].ID} {
			_, err = d.Executor().JobGet(testCtx(t), id)
			if commit && err != nil {
				t.Fatalf("job %d after the caller's commit: %v", id, err)
			}
			if !commit && !errors.Is(err, weirdriver.ErrNotFound) {
				t.Fatalf("job %d after the caller's rollback: %v, want ErrNotFound", id, err)
			}
		}
	}
}

func insert(t *testing.T, d weirdriver.Driver, p *weirdriver.JobInsertParams) *weirtype.JobRow {
	t.Helper()
	res, err := d.Executor().JobInsert(testCtx(t), []*weirdriver.JobInsertParams{p})
	if err != nil {
		t.Fatal(err)
	}
	return res[0].Job
}

// TestListenerClose: Close wakes a wait in progress, is safe twice, and closing
// the driver closes its listeners.
func TestListenerClose(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	l, err := d.Listen(testCtx(t), d.InsertChannel())
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := l.WaitForNotification(context.Background())
		waited <- err
	}()
	if err := l.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err == nil {
		t.Fatal("wait across Close returned no error")
	}
	if err := l.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}

	l2, err := d.Listen(testCtx(t), d.InsertChannel())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l2.WaitForNotification(testCtx(t)); err == nil {
		t.Fatal("wait after the driver closed succeeded")
	}
	if _, err := d.Listen(testCtx(t), d.InsertChannel()); err == nil {
		t.Fatal("listen after the driver closed succeeded")
	}
}

// TestListenerFallsBehind: a listener nobody reads keeps a bounded queue, then
// reports itself broken so that its owner listens anew (and polls).
func TestListenerFallsBehind(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	l := listen(t, d)
	queues := make([]string, 10001)
	for i := range queues {
		queues[i] = "q" + strconv.Itoa(i)
	}
	if err := d.Executor().NotifyInsert(testCtx(t), queues); err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitForNotification(testCtx(t)); err == nil {
		t.Fatal("a listener that dropped notifications did not say so")
	}
	// A fresh listener works.
	l2 := listen(t, d)
	if err := d.Executor().NotifyInsert(testCtx(t), []string{"x"}); err != nil {
		t.Fatal(err)
	}
	if n := waitNote(t, l2); n.Payload != "x" {
		t.Fatalf("got %+v", n)
	}
}

// TestTwoProcessesClaim runs two drivers on one file, as two processes would, and
// claims from both at once: no job is claimed twice, none is left, and neither
// claimer fails with SQLITE_BUSY.
func TestTwoProcessesClaim(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "shared.db")
	a := open(t, path)
	if _, err := weirmigrate.New(a).Up(testCtx(t), nil); err != nil {
		t.Fatal(err)
	}
	b := open(t, path)
	const n = 600
	batch := make([]*weirdriver.JobInsertParams, n)
	for i := range batch {
		batch[i] = job("k", "shared")
	}
	if _, err := a.Executor().JobInsertBulk(testCtx(t), batch); err != nil {
		t.Fatal(err)
	}

	drivers := []*weirsqlite.Driver{a, b, a, b}
	claimed := make([][]int64, len(drivers))
	errs := make([]error, len(drivers))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, d := range drivers {
		wg.Go(func() {
			<-start
			exec := d.Executor()
			client := "client-" + strconv.Itoa(i)
			for {
				jobs, _, err := exec.JobClaim(testCtx(t), &weirdriver.JobClaimParams{Queue: "shared", Max: 5, ClientID: client, LeaseDuration: time.Minute})
				if err != nil {
					errs[i] = err
					return
				}
				if len(jobs) == 0 {
					return
				}
				params := make([]*weirdriver.JobFinalizeParams, len(jobs))
				for j, job := range jobs {
					claimed[i] = append(claimed[i], job.ID)
					params[j] = &weirdriver.JobFinalizeParams{ID: job.ID, LeaseToken: job.LeaseToken, Outcome: weirdriver.OutcomeCompleted}
				}
				applied, err := exec.JobFinalize(testCtx(t), params)
				if err != nil {
					errs[i] = err
					return
				}
				if slices.Contains(applied, false) {
					errs[i] = fmt.Errorf("a completion was stale: %v", applied)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	seen := make(map[int64]int, n)
	for i := range drivers {
		if errs[i] != nil {
			t.Fatalf("claimer %d: %v", i, errs[i])
		}
		for _, id := range claimed[i] {
			if prev, ok := seen[id]; ok {
				t.Fatalf("job %d claimed by %d and %d", id, prev, i)
			}
			seen[id] = i
		}
	}
	if len(seen) != n {
		t.Fatalf("claimed %d jobs, want %d", len(seen), n)
	}
	for _, d := range []*weirsqlite.Driver{a, b} {
		queues, err := d.Executor().QueueList(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(queues) != 1 || queues[0].Counts[weirtype.JobStateCompleted] != n || len(queues[0].Counts) != 1 {
			t.Fatalf("queues: %+v", queues[0])
		}
	}
}

// TestBadInputs checks what the schema refuses and what the driver refuses
// before it sends anything.
func TestBadInputs(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	exec := d.Executor()
	for name, mod := range map[string]func(*weirdriver.JobInsertParams){
		"args array":        func(p *weirdriver.JobInsertParams) { p.Args = json.RawMessage(`[1]`) },
		"args not JSON":     func(p *weirdriver.JobInsertParams) { p.Args = json.RawMessage(`{nope`) },
		"args missing":      func(p *weirdriver.JobInsertParams) { p.Args = nil },
		"metadata string":   func(p *weirdriver.JobInsertParams) { p.Metadata = json.RawMessage(`"m"`) },
		"priority 0":        func(p *weirdriver.JobInsertParams) { p.Priority = 0 },
		"priority 5":        func(p *weirdriver.JobInsertParams) { p.Priority = 5 },
		"max attempts 0":    func(p *weirdriver.JobInsertParams) { p.MaxAttempts = 0 },
		"empty queue":       func(p *weirdriver.JobInsertParams) { p.Queue = "" },
		"long kind":         func(p *weirdriver.JobInsertParams) { p.Kind = strings.Repeat("k", 129) },
		"max attempts 2^15": func(p *weirdriver.JobInsertParams) { p.MaxAttempts = 1 << 15 },
	} {
		p := job("k", "bad")
		mod(p)
		// The bad job comes second: the whole call must write nothing.
		if _, err := exec.JobInsert(testCtx(t), []*weirdriver.JobInsertParams{job("k", "bad"), p}); err == nil {
			t.Errorf("insert with %s succeeded", name)
		}
		if _, err := exec.JobInsertBulk(testCtx(t), []*weirdriver.JobInsertParams{job("k", "bad"), p}); err == nil {
			t.Errorf("bulk insert with %s succeeded", name)
		}
	}
	unique := job("k", "bad")
	unique.UniqueKey, unique.UniqueStates = []byte("u"), []weirtype.JobState{weirtype.JobStateAvailable}
	if _, err := exec.JobInsertBulk(testCtx(t), []*weirdriver.JobInsertParams{unique}); err == nil {
		t.Error("bulk insert of a unique job succeeded")
	}
	if n, err := exec.JobList(testCtx(t), &weirdriver.JobListParams{Limit: 100}); err != nil || len(n) != 0 {
		t.Fatalf("jobs after refused inserts: %d, %v", len(n), err)
	}
	if _, err := exec.JobList(testCtx(t), &weirdriver.JobListParams{Limit: -1}); err == nil {
		t.Error("list with a negative limit succeeded")
	}
	if err := exec.QueuePause(testCtx(t), ""); err == nil {
		t.Error("pause of an empty queue name succeeded")
	}
	if _, err := exec.LeaderElect(testCtx(t), &weirdriver.LeaderElectParams{Name: strings.Repeat("n", 129), LeaderID: "a", TTL: time.Minute}); err == nil {
		t.Error("election with a 129-character name succeeded")
	}

	for name, tx := range map[string]any{"nil *sql.Tx": (*sql.Tx)(nil), "string": "tx", "nil": nil} {
		if _, err := d.UnwrapTx(tx); err == nil {
			t.Errorf("UnwrapTx(%s) succeeded", name)
		}
	}

	// A finished transaction refuses more work and a second commit.
	tx, err := exec.Begin(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(testCtx(t)); err == nil {
		t.Error("second commit succeeded")
	}
	if err := tx.Rollback(testCtx(t)); err != nil {
		t.Errorf("rollback after commit: %v", err)
	}
	if _, err := tx.JobInsert(testCtx(t), []*weirdriver.JobInsertParams{job("k", "late")}); err == nil {
		t.Error("insert in a committed transaction succeeded")
	}
	if err := tx.NotifyInsert(testCtx(t), []string{"late"}); err == nil {
		t.Error("notify in a committed transaction succeeded")
	}
}

// TestTxIsAllOrNothing: a failing call inside a transaction leaves the
// transaction as it was before the call, as a failed statement would on
// PostgreSQL (where it would abort the transaction instead).
func TestTxIsAllOrNothing(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	tx, err := d.Executor().Begin(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	kept := job("k", "tx")
	if _, err := tx.JobInsert(testCtx(t), []*weirdriver.JobInsertParams{kept}); err != nil {
		t.Fatal(err)
	}
	bad := job("k", "tx")
	bad.Priority = 9
	var batch []*weirdriver.JobInsertParams
	for range 600 { // more than one multi-row INSERT
		batch = append(batch, job("k", "tx"))
	}
	batch = append(batch, bad)
	if _, err := tx.JobInsertBulk(testCtx(t), batch); err == nil {
		t.Fatal("bulk insert with a bad job succeeded")
	}
	if err := tx.Commit(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	jobs, err := d.Executor().JobList(testCtx(t), &weirdriver.JobListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 {
		t.Fatalf("%d jobs after the failed bulk insert, want the 1 inserted before it", len(jobs))
	}
}

// TestUniqueStates checks the unique_states mask: a key is free once its holder
// leaves the mask's states, and a job whose own state is outside its mask takes
// no key.
func TestUniqueStates(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	exec := d.Executor()
	mk := func(states ...weirtype.JobState) *weirdriver.JobInsertParams {
		p := job("u", "uq")
		p.UniqueKey, p.UniqueStates = []byte("key"), states
		return p
	}
	all := []weirtype.JobState{weirtype.JobStateScheduled, weirtype.JobStateAvailable, weirtype.JobStateRunning,
		weirtype.JobStateRetryable, weirtype.JobStateCompleted}
	res, err := exec.JobInsert(testCtx(t), []*weirdriver.JobInsertParams{mk(all...), mk(all...), job("k", "uq")})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Duplicate || !res[1].Duplicate || res[1].Job.ID != res[0].Job.ID || res[2].Duplicate {
		t.Fatalf("batch with a repeated key: %+v", res)
	}
	first := res[0].Job
	claimed, _, err := exec.JobClaim(testCtx(t), &weirdriver.JobClaimParams{Queue: "uq", Max: 1, ClientID: "c", LeaseDuration: time.Minute})
	if err != nil || len(claimed) != 1 || claimed[0].ID != first.ID {
		t.Fatalf("claim: %v %v", claimed, err)
	}
	if dup := insertUnique(t, exec, mk(all...)); !dup.Duplicate || dup.Job.State != weirtype.JobStateRunning {
		t.Fatalf("insert while the holder runs: %+v", dup)
	}
	if _, err := exec.JobFinalize(testCtx(t), []*weirdriver.JobFinalizeParams{{ID: first.ID, LeaseToken: claimed[0].LeaseToken, Outcome: weirdriver.OutcomeCompleted}}); err != nil {
		t.Fatal(err)
	}
	// Completed is in the mask: still a duplicate.
	if dup := insertUnique(t, exec, mk(all...)); !dup.Duplicate || dup.Job.ID != first.ID {
		t.Fatalf("insert after completion, completed in the mask: %+v", dup)
	}
	// The index holds the completed holder (its own mask has completed), so a new
	// available job collides whenever available is in the new job's mask.
	if dup := insertUnique(t, exec, mk(weirtype.JobStateAvailable)); !dup.Duplicate {
		t.Fatalf("insert of an available job against an indexed completed holder: %+v", dup)
	}
	// A job whose own state is outside its mask is not indexed and always inserts.
	if got := insertUnique(t, exec, mk(weirtype.JobStateScheduled)); got.Duplicate {
		t.Fatalf("insert of an available job with only scheduled in its mask: %+v", got)
	}
}

func insertUnique(t *testing.T, exec weirdriver.Executor, p *weirdriver.JobInsertParams) weirdriver.JobInsertResult {
	t.Helper()
	res, err := exec.JobInsert(testCtx(t), []*weirdriver.JobInsertParams{p})
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

// TestFilesPrivate: a database file that Open creates, and the -wal and -shm
// files SQLite makes beside it, are readable and writable by their owner only;
// a file that exists keeps the mode its owner gave it.
func TestFilesPrivate(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	if _, err := d.Executor().JobInsert(testCtx(t), []*weirdriver.JobInsertParams{job("k", "q")}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{d.Path(), d.Path() + "-wal", d.Path() + "-shm"} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if mode := fi.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s has mode %v, want -rw-------", filepath.Base(name), mode)
		}
	}

	shared := filepath.Join(t.TempDir(), "shared.db")
	if err := os.WriteFile(shared, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o640); err != nil { // whatever the umask
		t.Fatal(err)
	}
	open(t, shared)
	if fi, err := os.Stat(shared); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("an existing file's mode after Open: %v, %v; want -rw-r-----", fi.Mode(), err)
	}
}
