package periodic

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/weirq/weir/internal/clock"
	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/internal/teststore"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// job returns schedule name on spec, in UTC.
func job(t *testing.T, name, spec string, runOnStart bool, catchUp int) *Job {
	t.Helper()
	s, err := Parse(spec, "")
	if err != nil {
		t.Fatal(err)
	}
	return &Job{Name: name, Spec: spec, Zone: "UTC", Schedule: s, RunOnStart: runOnStart, CatchUp: catchUp}
}

// inserts records the slots a firer inserted jobs for, inserting each job
// in the fire's transaction, or failing with err when it is set.
type inserts struct {
	slots []time.Time
	ids   []int64
	err   error
}

func (in *inserts) insert(ctx context.Context, tx weirdriver.ExecutorTx, name string, slot time.Time) (int64, error) {
	if in.err != nil {
		return 0, in.err
	}
	res, err := tx.JobInsert(ctx, []*weirdriver.JobInsertParams{{
		Kind: name, Queue: "periodic", Args: []byte(`{}`), Priority: 1, MaxAttempts: 1, UniqueKey: Key(name, slot),
		UniqueStates: weirtype.JobStates(),
	}})
	if err != nil {
		return 0, err
	}
	in.slots = append(in.slots, slot)
	in.ids = append(in.ids, res[0].Job.ID)
	return res[0].Job.ID, nil
}

// firer returns a firer of jobs on exec whose clock is a fake one that starts
// at start, to the microsecond, as the stores keep times.
func firer(exec weirdriver.Executor, in *inserts, start time.Time, jobs ...*Job) (*Firer, *clock.Fake) {
	clk := clock.NewFake(start.Truncate(time.Microsecond))
	return New(Config{
		Exec: exec, ClientID: "leader", Jobs: jobs, Wait: 5 * time.Second, Insert: in.insert,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clk,
	}), clk
}

// row returns schedule name as the store holds it.
func row(t *testing.T, exec weirdriver.Executor, name string) *weirtype.PeriodicRow {
	t.Helper()
	rows, err := exec.PeriodicList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no schedule %q", name)
	return nil
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestDue: of the slots from the stored next run up to now, those more than
// a grace overdue are missed and only the latest CatchUp of them fire, then
// every slot on time; after more slots than one fire walks, the walk goes on
// from a grace before now and skips every slot before.
func TestDue(t *testing.T) {
	now := at("2026-01-01T10:00:30Z")
	for _, c := range []struct {
		catchUp, skipped int
		first            string
	}{
		{0, 10, "2026-01-01T10:00:00Z"},
		{1, 9, "2026-01-01T09:59:00Z"},
		{3, 7, "2026-01-01T09:57:00Z"},
	} {
		// From 09:50 to 10:00: 09:50 to 09:59 are missed, 10:00 is on time.
		slots, skipped := job(t, "j", "* * * * *", false, c.catchUp).due(at("2026-01-01T09:50:00Z"), now)
		if skipped != c.skipped || len(slots) != c.catchUp+1 || !slots[0].Equal(at(c.first)) || !slots[len(slots)-1].Equal(at("2026-01-01T10:00:00Z")) {
			t.Fatalf("catch-up %d: %d slots %v, %d skipped; want %d from %s to 10:00, %d skipped", c.catchUp, len(slots), slots, skipped, c.catchUp+1, c.first, c.skipped)
		}
	}
	// 30 hours of slots every second: the first 100,000 are skipped, and
	// the slots of the last minute fire (those after a grace before now).
	slots, skipped := job(t, "j", "* * * * * *", false, 2).due(now.Add(-30*time.Hour), now)
	if skipped != maxSlotsScanned || len(slots) != 60 || !slots[0].Equal(now.Add(-grace).Add(time.Second)) {
		t.Fatalf("after 30 hours: %d slots from %v, %d skipped; want 60 from %v, %d skipped", len(slots), slots[0], skipped, now.Add(-grace).Add(time.Second), maxSlotsScanned)
	}
}

// TestRegister: the declared schedules are recorded as the leader's, due at
// their next slot after the clock's now, or at now with RunOnStart; a
// schedule the leader does not declare is orphaned.
func TestRegister(t *testing.T) {
	t.Parallel()
	now := at("2026-01-01T10:00:30Z")
	for _, d := range teststore.Both(t) {
		exec := d.Executor()
		if err := exec.PeriodicRegister(t.Context(), "before", []*weirdriver.PeriodicRegisterParams{{Name: "old", Spec: "@daily", TimeZone: "UTC", NextRunAt: now}}); err != nil {
			t.Fatal(err)
		}
		f, _ := firer(exec, &inserts{}, now, job(t, "hourly", "0 * * * *", false, 0), job(t, "start", "0 * * * *", true, 0))
		if err := f.register(t.Context()); err != nil {
			t.Fatal(err)
		}
		hourly, start, old := row(t, exec, "hourly"), row(t, exec, "start"), row(t, exec, "old")
		if !hourly.NextRunAt.Equal(at("2026-01-01T11:00:00Z")) || hourly.Spec != "0 * * * *" || hourly.TimeZone != "UTC" || hourly.DeclaredBy != "leader" || hourly.OrphanedAt != nil {
			t.Fatalf("%s: hourly registered as %+v", d.Name(), hourly)
		}
		if !start.NextRunAt.Equal(now) {
			t.Fatalf("%s: a schedule that runs on start is due at %v, want %v", d.Name(), start.NextRunAt, now)
		}
		if old.OrphanedAt == nil {
			t.Fatalf("%s: the schedule no one declares is not orphaned: %+v", d.Name(), old)
		}
	}
}

// TestFire: a fire inserts the due slots' jobs and moves the next run past
// the database's now, recording the last slot and its job, in one
// transaction: when an insert fails, nothing of the fire is written.
func TestFire(t *testing.T) {
	t.Parallel()
	for _, d := range teststore.Both(t) {
		exec := d.Executor()
		j := job(t, "minutely", "* * * * *", false, 2)
		// Registered ten minutes ago: about eight slots are missed by now.
		f, _ := firer(exec, &inserts{err: errors.New("refused")}, time.Now().Add(-10*time.Minute), j)
		if err := f.register(t.Context()); err != nil {
			t.Fatal(err)
		}
		before := row(t, exec, "minutely")
		if _, err := f.fire(t.Context(), j); err == nil {
			t.Fatalf("%s: a fire whose insert failed succeeded", d.Name())
		}
		if after := row(t, exec, "minutely"); !after.NextRunAt.Equal(before.NextRunAt) || after.LastRunAt != nil {
			t.Fatalf("%s: a failed fire moved the schedule: %+v", d.Name(), after)
		}

		in := &inserts{}
		f, _ = firer(exec, in, time.Now(), j)
		dbNow, err := f.fire(t.Context(), j)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := j.due(before.NextRunAt, dbNow)
		if len(in.slots) != len(want) || len(want) < 3 || !in.slots[0].Equal(want[0]) {
			t.Fatalf("%s: fired %v, want %v", d.Name(), in.slots, want)
		}
		after := row(t, exec, "minutely")
		last := in.slots[len(in.slots)-1]
		if !after.NextRunAt.After(dbNow) || after.LastRunAt == nil || !after.LastRunAt.Equal(last) ||
			after.LastJobID == nil || *after.LastJobID != in.ids[len(in.ids)-1] {
			t.Fatalf("%s: after the fire at %v: %+v; want the next run after it, the last run %v and job %d",
				d.Name(), dbNow, after, last, in.ids[len(in.ids)-1])
		}
		jobs, err := exec.JobList(t.Context(), &weirdriver.JobListParams{Kinds: []string{"minutely"}, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) != len(in.ids) {
			t.Fatalf("%s: %d jobs in the store, want the %d the fire inserted", d.Name(), len(jobs), len(in.ids))
		}
	}
}

// awaitWait waits until Run sleeps, returns how long it asked to, and ends
// the sleep.
func awaitWait(t *testing.T, clk *clock.Fake) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	left, err := clk.AwaitArmed(ctx, 1)
	if err != nil || len(left) != 1 {
		t.Fatalf("Run did not sleep: %v %v", left, err)
	}
	return left[0]
}

// TestRun: Run fires what is due at once, then lists again; it sleeps until
// the next run, at most Wait; it registers again when another leader
// registered its own version of a schedule; it does not fire a paused
// schedule; it returns when its term ends.
func TestRun(t *testing.T) {
	t.Parallel()
	exec := teststore.Both(t)[0].Executor()
	in := &inserts{}
	f, clk := firer(exec, in, time.Now(), job(t, "hourly", "@every 1h", true, 0))
	ctx, end := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(ctx)
	}()
	wantWait := func(what string, want time.Duration) {
		t.Helper()
		if got := awaitWait(t, clk); got != want {
			t.Fatalf("%s: Run waits %v, want %v", what, got, want)
		}
	}
	// wake ends Run's sleep of d.
	wake := func(d time.Duration) { clk.Advance(d) }
	wantWait("after the fire", time.Millisecond)
	if len(in.slots) != 1 {
		t.Fatalf("fired %d slots, want the start's one", len(in.slots))
	}
	wake(time.Millisecond)
	wantWait("with the next run an hour away", f.cfg.Wait)

	// Another leader's version of the schedule: Run registers its own again.
	if err := exec.PeriodicRegister(t.Context(), "other", []*weirdriver.PeriodicRegisterParams{{Name: "hourly", Spec: "@every 2h", TimeZone: "UTC", NextRunAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	wake(f.cfg.Wait)
	wantWait("after registering again", time.Millisecond)
	if r := row(t, exec, "hourly"); r.Spec != "@every 1h" || r.DeclaredBy != "leader" {
		t.Fatalf("after registering again: %+v", r)
	}

	// Registering again made it due at once (RunOnStart): paused, it does
	// not fire.
	if _, err := exec.PeriodicPause(t.Context(), "hourly", true); err != nil {
		t.Fatal(err)
	}
	wake(time.Millisecond)
	wantWait("with the schedule paused", f.cfg.Wait)
	if len(in.slots) != 1 {
		t.Fatalf("a paused schedule fired: %v", in.slots)
	}
	end()
	<-done
}

// TestRunWithoutSchedules: a leader that declares no schedules orphans every
// stored one, and again when another client registers its own declarations
// while this one leads (a deposed leader, late).
func TestRunWithoutSchedules(t *testing.T) {
	t.Parallel()
	for _, d := range teststore.Both(t) {
		exec := d.Executor()
		declare := func() {
			t.Helper()
			if err := exec.PeriodicRegister(t.Context(), "before", []*weirdriver.PeriodicRegisterParams{{Name: "old", Spec: "@daily", TimeZone: "UTC", NextRunAt: time.Now()}}); err != nil {
				t.Fatal(err)
			}
		}
		declare()
		f, clk := firer(exec, &inserts{}, time.Now())
		ctx, end := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			f.Run(ctx)
		}()
		if got := awaitWait(t, clk); got != f.cfg.Wait {
			t.Fatalf("%s: Run waits %v, want %v", d.Name(), got, f.cfg.Wait)
		}
		if r := row(t, exec, "old"); r.OrphanedAt == nil {
			t.Fatalf("%s: a leader without schedules left %+v declared", d.Name(), r)
		}
		declare()
		clk.Advance(f.cfg.Wait)
		if got := awaitWait(t, clk); got != time.Millisecond {
			t.Fatalf("%s: after another client's registration Run waits %v, want to register again", d.Name(), got)
		}
		if r := row(t, exec, "old"); r.OrphanedAt == nil {
			t.Fatalf("%s: another client's late registration stands: %+v", d.Name(), r)
		}
		end()
		<-done
	}
}
