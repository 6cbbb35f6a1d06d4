package weirdrivertest

import (
	"errors"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

func periodicByName(t *testing.T, d weirdriver.Driver) map[string]*weirtype.PeriodicRow {
	t.Helper()
	rows, err := d.Executor().PeriodicList(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*weirtype.PeriodicRow{}
	for i, r := range rows {
		if i > 0 && rows[i-1].Name >= r.Name {
			t.Fatalf("periodic list not in name order: %q then %q", rows[i-1].Name, r.Name)
		}
		out[r.Name] = r
	}
	return out
}

// testPeriodicRegister: registering keeps a known schedule's next run unless
// its spec or zone changed, and marks what the leader no longer declares
// orphaned, until it is declared again.
func testPeriodicRegister(t *testing.T, d weirdriver.Driver) {
	ex := d.Executor()
	at := func(h int) time.Time { return time.Date(2030, 1, 1, h, 0, 0, 0, time.UTC) }
	register := func(by string, params ...*weirdriver.PeriodicRegisterParams) {
		t.Helper()
		if err := ex.PeriodicRegister(ctx(t), by, params); err != nil {
			t.Fatal(err)
		}
	}
	register("a", &weirdriver.PeriodicRegisterParams{Name: "hourly", Spec: "0 * * * *", TimeZone: "UTC", NextRunAt: at(1)},
		&weirdriver.PeriodicRegisterParams{Name: "daily", Spec: "0 3 * * *", TimeZone: "Europe/Berlin", NextRunAt: at(2)})
	got := periodicByName(t, d)
	if len(got) != 2 || !got["hourly"].NextRunAt.Equal(at(1)) || got["daily"].TimeZone != "Europe/Berlin" ||
		got["hourly"].DeclaredBy != "a" || got["hourly"].OrphanedAt != nil || got["hourly"].LastRunAt != nil {
		t.Fatalf("after the first registration: %+v %+v", got["hourly"], got["daily"])
	}

	// The same hourly, a changed daily, no third: the hourly keeps its next
	// run, the daily takes the new one.
	register("b", &weirdriver.PeriodicRegisterParams{Name: "hourly", Spec: "0 * * * *", TimeZone: "UTC", NextRunAt: at(5)},
		&weirdriver.PeriodicRegisterParams{Name: "daily", Spec: "0 4 * * *", TimeZone: "Europe/Berlin", NextRunAt: at(6)})
	got = periodicByName(t, d)
	if !got["hourly"].NextRunAt.Equal(at(1)) || !got["daily"].NextRunAt.Equal(at(6)) || got["daily"].Spec != "0 4 * * *" ||
		got["hourly"].DeclaredBy != "b" {
		t.Fatalf("after a re-registration: %+v %+v", got["hourly"], got["daily"])
	}

	register("c", &weirdriver.PeriodicRegisterParams{Name: "daily", Spec: "0 4 * * *", TimeZone: "Europe/Berlin", NextRunAt: at(7)})
	got = periodicByName(t, d)
	if got["hourly"].OrphanedAt == nil || got["daily"].OrphanedAt != nil || !got["daily"].NextRunAt.Equal(at(6)) {
		t.Fatalf("after the hourly was left out: %+v %+v", got["hourly"], got["daily"])
	}
	orphaned := *got["hourly"].OrphanedAt
	register("c", &weirdriver.PeriodicRegisterParams{Name: "daily", Spec: "0 4 * * *", TimeZone: "Europe/Berlin", NextRunAt: at(7)})
	if again := periodicByName(t, d)["hourly"]; again.OrphanedAt == nil || !again.OrphanedAt.Equal(orphaned) {
		t.Fatalf("a second registration without it moved the orphan's mark: %v, was %v", again.OrphanedAt, orphaned)
	}
	register("d", &weirdriver.PeriodicRegisterParams{Name: "hourly", Spec: "0 * * * *", TimeZone: "UTC", NextRunAt: at(8)})
	if got := periodicByName(t, d); got["hourly"].OrphanedAt != nil || got["daily"].OrphanedAt == nil {
		t.Fatalf("declared again: %+v %+v", got["hourly"], got["daily"])
	}
}

// testPeriodicFireAndOperate: a fire locks the row in a transaction and
// advances it only from the next run it read; operators pause, resume,
// trigger, and delete only what is orphaned.
func testPeriodicFireAndOperate(t *testing.T, d weirdriver.Driver) {
	ex := d.Executor()
	due := time.Now().Add(-time.Minute).Round(time.Millisecond)
	if err := ex.PeriodicRegister(ctx(t), "leader", []*weirdriver.PeriodicRegisterParams{
		{Name: "p", Spec: "@every 1m", TimeZone: "UTC", NextRunAt: due},
		{Name: "q", Spec: "@every 1h", TimeZone: "UTC", NextRunAt: due.Add(time.Hour)},
	}); err != nil {
		t.Fatal(err)
	}
	tx, err := ex.Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx(t)) //nolint:errcheck // a no-op after Commit
	row, now, err := tx.PeriodicLock(ctx(t), "p")
	if err != nil {
		t.Fatal(err)
	}
	if !row.NextRunAt.Equal(due) || !near(now, time.Now()) {
		t.Fatalf("locked %+v at %v", row, now)
	}
	job := int64(42)
	next := due.Add(time.Minute)
	stale := &weirdriver.PeriodicAdvanceParams{Name: "p", From: due.Add(time.Second), NextRunAt: next, LastRunAt: due, LastJobID: &job}
	if ok, err := tx.PeriodicAdvance(ctx(t), stale); err != nil || ok {
		t.Fatalf("advance from a next run that is not the row's: %v %v", ok, err)
	}
	if ok, err := tx.PeriodicAdvance(ctx(t), &weirdriver.PeriodicAdvanceParams{Name: "p", From: due, NextRunAt: next, LastRunAt: due, LastJobID: &job}); err != nil || !ok {
		t.Fatalf("advance: %v %v", ok, err)
	}
	if err := tx.Commit(ctx(t)); err != nil {
		t.Fatal(err)
	}
	p := periodicByName(t, d)["p"]
	if !p.NextRunAt.Equal(next) || p.LastRunAt == nil || !p.LastRunAt.Equal(due) || p.LastJobID == nil || *p.LastJobID != 42 {
		t.Fatalf("after the advance: %+v", p)
	}
	if _, _, err := ex.PeriodicLock(ctx(t), "missing"); !errors.Is(err, weirdriver.ErrNotFound) {
		t.Fatalf("lock of a missing schedule: %v", err)
	}

	paused, err := ex.PeriodicPause(ctx(t), "q", true)
	if err != nil || paused.PausedAt == nil {
		t.Fatalf("pause: %+v %v", paused, err)
	}
	if again, err := ex.PeriodicPause(ctx(t), "q", true); err != nil || !again.PausedAt.Equal(*paused.PausedAt) {
		t.Fatalf("a second pause moved the mark: %+v %v", again, err)
	}
	if resumed, err := ex.PeriodicPause(ctx(t), "q", false); err != nil || resumed.PausedAt != nil {
		t.Fatalf("resume: %+v %v", resumed, err)
	}
	triggered, err := ex.PeriodicTrigger(ctx(t), "q")
	if err != nil || !near(triggered.NextRunAt, time.Now()) {
		t.Fatalf("trigger: %+v %v", triggered, err)
	}
	for _, op := range []func() error{
		func() error { _, err := ex.PeriodicPause(ctx(t), "missing", true); return err },
		func() error { _, err := ex.PeriodicTrigger(ctx(t), "missing"); return err },
		func() error { _, err := ex.PeriodicDelete(ctx(t), "missing"); return err },
	} {
		if err := op(); !errors.Is(err, weirdriver.ErrNotFound) {
			t.Fatalf("an operation on a missing schedule: %v", err)
		}
	}
	if _, err := ex.PeriodicDelete(ctx(t), "q"); !errors.Is(err, weirdriver.ErrPeriodicDeclared) {
		t.Fatalf("delete of a declared schedule: %v", err)
	}
	if err := ex.PeriodicRegister(ctx(t), "leader", []*weirdriver.PeriodicRegisterParams{{Name: "p", Spec: "@every 1m", TimeZone: "UTC", NextRunAt: due}}); err != nil {
		t.Fatal(err)
	}
	deleted, err := ex.PeriodicDelete(ctx(t), "q")
	if err != nil || deleted.Name != "q" {
		t.Fatalf("delete of an orphan: %+v %v", deleted, err)
	}
	if got := periodicByName(t, d); len(got) != 1 || got["p"] == nil {
		t.Fatalf("after the delete: %v", got)
	}
}
