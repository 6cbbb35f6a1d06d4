package weir_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver"
)

// tickArgs is a periodic job's args.
type tickArgs struct{}

func (tickArgs) Kind() string { return "tick" }

// everySecond is a schedule firing at every second.
func everySecond(name string) weir.PeriodicJob {
	return weir.PeriodicJob{
		Name: name, Schedule: "* * * * * *",
		Args: func() (weir.JobArgs, *weir.InsertOpts) { return tickArgs{}, &weir.InsertOpts{Queue: "ticks"} },
	}
}

// periodicConfig is a client config that works no queue the periodic jobs
// insert into, declaring jobs.
func periodicConfig(logs *jsonLogs, jobs ...weir.PeriodicJob) *weir.Config {
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error { return nil }), nil)
	cfg.PeriodicJobs = jobs
	// Elections every 500 ms (terms of 1.5 s): on a loaded machine, elections
	// every 100 ms may fail one after another, and nobody fires meanwhile.
	cfg.RescueInterval = 500 * time.Millisecond
	if logs != nil {
		cfg.Logger = logs.logger()
	}
	return cfg
}

// slotsOf returns the slots of the periodic jobs of schedule name in the
// store, one entry per job, in slot order, with each job's insert lateness.
func slotsOf(t *testing.T, d weirdriver.Driver, name string) (slots []time.Time, late []time.Duration) {
	t.Helper()
	jobs, err := d.Executor().JobList(testCtx(t), &weirdriver.JobListParams{Kinds: []string{"tick"}, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		var m map[string]any
		if err := json.Unmarshal(j.Metadata, &m); err != nil {
			t.Fatal(err)
		}
		if m["weir.periodic"] != name {
			continue
		}
		slot, err := time.Parse(time.RFC3339Nano, m["weir.slot"].(string))
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, slot)
		late = append(late, j.CreatedAt.Sub(slot))
	}
	slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
	return slots, late
}

// checkEverySecond fails unless slots are consecutive seconds, none twice.
func checkEverySecond(t *testing.T, slots []time.Time) {
	t.Helper()
	for i := 1; i < len(slots); i++ {
		if d := slots[i].Sub(slots[i-1]); d != time.Second {
			t.Fatalf("slots %s and %s are %v apart: a slot was doubled or missed (all: %v)",
				slots[i-1].Format(time.TimeOnly), slots[i].Format(time.TimeOnly), d, slots)
		}
	}
}

// TestPeriodicExactlyOnceAcrossLeaders: three clients declare the same
// every-second schedule; leadership is handed over twice while it fires; then
// every client stops while slots fall due, and a newcomer takes over: every
// slot from the first to the last has exactly one job, on each store. The
// time without a leader is what shows a leader that resets the schedule when
// it registers it (next run from its own start instead of the stored one): a
// handover within a second finds the stored next run still ahead, the same
// slot either way.
func TestPeriodicExactlyOnceAcrossLeaders(t *testing.T) {
	t.Parallel()
	for _, d := range bothStores(t) {
		t.Run(d.Name(), func(t *testing.T) {
			t.Parallel()
			start := func() *weir.Client {
				c, err := weir.NewClient(d, periodicConfig(nil, everySecond("tick")))
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Start(testCtx(t)); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Stop(testCtx(t)) })
				return c
			}
			twoMoreSlots := func() {
				t.Helper()
				before, _ := slotsOf(t, d, "tick")
				waitFor(t, 20*time.Second, "two more slots fired", func() bool {
					now, _ := slotsOf(t, d, "tick")
					return len(now) >= len(before)+2
				})
			}
			clients := []*weir.Client{start(), start(), start()}
			handovers := 0
			for round := range 3 {
				twoMoreSlots()
				if round == 2 {
					break
				}
				// Stop whichever leads: another takes over.
				waitFor(t, 20*time.Second, "a leader", func() bool {
					return slices.ContainsFunc(clients, func(c *weir.Client) bool { return c != nil && c.IsLeader() })
				})
				for i, c := range clients {
					if c != nil && c.IsLeader() {
						if err := c.Stop(testCtx(t)); err != nil {
							t.Fatal(err)
						}
						clients[i] = nil
						handovers++
						break
					}
				}
			}
			if handovers != 2 {
				t.Fatalf("%d handovers, want 2", handovers)
			}

			// No leader while two slots fall due; the newcomer fires them (they
			// are within the grace of a handover) and goes on.
			for _, c := range clients {
				if c != nil {
					if err := c.Stop(testCtx(t)); err != nil {
						t.Fatal(err)
					}
				}
			}
			next := storedNextRun(t, d, "tick")
			waitFor(t, 20*time.Second, "two slots due with no leader", func() bool { return time.Now().After(next.Add(time.Second)) })
			start()
			twoMoreSlots()

			slots, late := slotsOf(t, d, "tick")
			checkEverySecond(t, slots)
			t.Logf("%d slots, %s to %s; lateness of the insert: max %v", len(slots),
				slots[0].Format(time.TimeOnly), slots[len(slots)-1].Format(time.TimeOnly), slices.Max(late))
		})
	}
}

// storedNextRun returns the next run stored for schedule name.
func storedNextRun(t *testing.T, d weirdriver.Driver, name string) time.Time {
	t.Helper()
	rows, err := d.Executor().PeriodicList(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		if row.Name == name {
			return row.NextRunAt
		}
	}
	t.Fatalf("no schedule %q stored", name)
	return time.Time{}
}

// bothStores returns a migrated PostgreSQL schema and SQLite file.
func bothStores(t *testing.T) []weirdriver.Driver {
	t.Helper()
	return []weirdriver.Driver{setup(t, nil).driver, sqliteStore(t)}
}

// TestPeriodicMissedSlots: after a time without a leader, CatchUp says how
// many missed slots fire; the on-time slot always does.
func TestPeriodicMissedSlots(t *testing.T) {
	t.Parallel()
	for _, catchUp := range []int{0, 1, 3} {
		t.Run(strconv.Itoa(catchUp), func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			// As if a leader had registered it and none fired since: due ten
			// and a half minutes ago.
			job := weir.PeriodicJob{Name: "minutely", Schedule: "@every 1m", CatchUp: catchUp,
				Args: func() (weir.JobArgs, *weir.InsertOpts) { return tickArgs{}, nil }}
			due := time.Now().Add(-10*time.Minute - 30*time.Second).Round(time.Second)
			if err := b.driver.Executor().PeriodicRegister(testCtx(t), "gone", []*weirdriver.PeriodicRegisterParams{
				{Name: "minutely", Spec: job.Schedule, TimeZone: "UTC", NextRunAt: due},
			}); err != nil {
				t.Fatal(err)
			}
			logs := &jsonLogs{}
			c := b.start(t, periodicConfig(logs, job))
			waitFor(t, 10*time.Second, "the fire", func() bool {
				rows, err := b.driver.Executor().PeriodicList(testCtx(t))
				return err == nil && rows[0].NextRunAt.After(time.Now())
			})
			slots, _ := slotsOf(t, b.driver, "minutely")
			// Eleven slots were due: ten missed, the latest on time.
			want := []time.Time{}
			for k := 10 - catchUp; k <= 10; k++ {
				want = append(want, due.Add(time.Duration(k)*time.Minute))
			}
			if !slices.EqualFunc(slots, want, time.Time.Equal) {
				t.Fatalf("fired %v, want %v", slots, want)
			}
			if err := c.Stop(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			recs := logs.records(t, "weir: periodic job skipped missed slots")
			if len(recs) != 1 || recs[0]["skipped"] != json.Number(strconv.Itoa(10-catchUp)) {
				t.Fatalf("skip logged as %v", recs)
			}
		})
	}
}

// TestPeriodicArgsFailures: a slot whose Args panics, or gives args that do
// not validate, is logged and skipped; the schedule goes on.
func TestPeriodicArgsFailures(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	logs := &jsonLogs{}
	var n atomic.Int32
	job := everySecond("flaky")
	job.Args = func() (weir.JobArgs, *weir.InsertOpts) {
		switch n.Add(1) {
		case 1:
			panic("no args today")
		case 2:
			return tickArgs{}, &weir.InsertOpts{Priority: 9}
		case 3:
			return nil, nil // nothing this slot
		}
		return tickArgs{}, nil
	}
	b.start(t, periodicConfig(logs, job))
	waitFor(t, 20*time.Second, "a job after the failed slots", func() bool {
		slots, _ := slotsOf(t, b.driver, "flaky")
		return len(slots) > 0
	})
	if recs := logs.records(t, "weir: periodic job skipped a slot: its Args failed"); len(recs) != 1 ||
		!strings.Contains(recs[0]["error"].(string), "no args today") {
		t.Fatalf("the panic was logged as %v", recs)
	}
	if recs := logs.records(t, "weir: periodic job skipped a slot: its job is invalid"); len(recs) != 1 ||
		!strings.Contains(recs[0]["error"].(string), "priority 9") {
		t.Fatalf("the invalid args were logged as %v", recs)
	}
	if slots, _ := slotsOf(t, b.driver, "flaky"); len(slots) != 1 {
		t.Fatalf("jobs for slots %v, want the fourth slot's only", slots)
	}
}

// TestPeriodicOperate: a paused schedule does not fire, a triggered one fires
// at once with its next slot kept, RunOnStart fires at registration, and a
// schedule no leader declares is orphaned and kept.
func TestPeriodicOperate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ex := b.driver.Executor()
	hourly := weir.PeriodicJob{Name: "hourly", Schedule: "@hourly",
		Args: func() (weir.JobArgs, *weir.InsertOpts) { return tickArgs{}, nil }}
	onStart := hourly
	onStart.Name, onStart.RunOnStart = "on-start", true
	c := b.start(t, periodicConfig(nil, hourly, onStart))
	waitFor(t, 10*time.Second, "the run on start", func() bool {
		slots, _ := slotsOf(t, b.driver, "on-start")
		return len(slots) == 1
	})
	if slots, _ := slotsOf(t, b.driver, "hourly"); len(slots) != 0 {
		t.Fatalf("the hourly fired at registration: %v", slots)
	}

	if _, err := ex.PeriodicPause(testCtx(t), "hourly", true); err != nil {
		t.Fatal(err)
	}
	if _, err := ex.PeriodicTrigger(testCtx(t), "hourly"); err != nil {
		t.Fatal(err)
	}
	// Trigger the other one too, and wait for it: the paused one has had the
	// same chance to fire.
	if _, err := ex.PeriodicTrigger(testCtx(t), "on-start"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the trigger", func() bool {
		slots, _ := slotsOf(t, b.driver, "on-start")
		return len(slots) == 2
	})
	if slots, _ := slotsOf(t, b.driver, "hourly"); len(slots) != 0 {
		t.Fatalf("a paused schedule fired: %v", slots)
	}
	if _, err := ex.PeriodicPause(testCtx(t), "hourly", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the trigger after the resume", func() bool {
		slots, _ := slotsOf(t, b.driver, "hourly")
		return len(slots) == 1
	})
	rows, err := ex.PeriodicList(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if !r.NextRunAt.After(time.Now()) || r.NextRunAt.Minute() != 0 || r.NextRunAt.Second() != 0 {
			t.Fatalf("%s: next run %v, want the next full hour", r.Name, r.NextRunAt)
		}
	}

	// A new leader that declares only the hourly orphans the other.
	if err := c.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	b.start(t, periodicConfig(nil, hourly))
	waitFor(t, 20*time.Second, "the orphan's mark", func() bool {
		rows, err := ex.PeriodicList(testCtx(t))
		return err == nil && len(rows) == 2 && rows[1].Name == "on-start" && rows[1].OrphanedAt != nil
	})
	if _, err := ex.PeriodicDelete(testCtx(t), "hourly"); !errors.Is(err, weirdriver.ErrPeriodicDeclared) {
		t.Fatalf("delete of a declared schedule: %v", err)
	}
}

// TestPeriodicLeaderWithoutSchedules: a leader that declares no periodic jobs
// orphans the schedules a stopped client declared, so that they no longer
// show as active under a client that is gone, and an operator may delete
// them.
func TestPeriodicLeaderWithoutSchedules(t *testing.T) {
	t.Parallel()
	for _, d := range bothStores(t) {
		t.Run(d.Name(), func(t *testing.T) {
			t.Parallel()
			ex := d.Executor()
			start := func(cfg *weir.Config) *weir.Client {
				t.Helper()
				c, err := weir.NewClient(d, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Start(testCtx(t)); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Stop(testCtx(t)) })
				return c
			}
			hourly := weir.PeriodicJob{Name: "hourly", Schedule: "@hourly",
				Args: func() (weir.JobArgs, *weir.InsertOpts) { return tickArgs{}, nil }}
			old := start(periodicConfig(nil, hourly))
			waitFor(t, 20*time.Second, "the schedule's registration", func() bool {
				rows, err := ex.PeriodicList(testCtx(t))
				return err == nil && len(rows) == 1 && rows[0].OrphanedAt == nil
			})
			if err := old.Stop(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			start(periodicConfig(nil))
			waitFor(t, 20*time.Second, "the orphan's mark", func() bool {
				rows, err := ex.PeriodicList(testCtx(t))
				return err == nil && len(rows) == 1 && rows[0].OrphanedAt != nil
			})
			if _, err := ex.PeriodicDelete(testCtx(t), "hourly"); err != nil {
				t.Fatalf("delete of the orphan: %v", err)
			}
		})
	}
}

// TestPeriodicConfigRefused: every bad schedule is refused by NewClient with
// the field it is about.
func TestPeriodicConfigRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	args := func() (weir.JobArgs, *weir.InsertOpts) { return tickArgs{}, nil }
	ok := weir.PeriodicJob{Name: "ok", Schedule: "@daily", Args: args}
	for _, c := range []struct {
		jobs  []weir.PeriodicJob
		field string
		msg   string
	}{
		{[]weir.PeriodicJob{{Schedule: "@daily", Args: args}}, "Config.PeriodicJobs[0].Name", "empty"},
		{[]weir.PeriodicJob{{Name: "bad name!", Schedule: "@daily", Args: args}}, "Config.PeriodicJobs[0].Name", "bad name!"},
		{[]weir.PeriodicJob{ok, ok}, "Config.PeriodicJobs[1].Name", `"ok" is declared twice`},
		{[]weir.PeriodicJob{{Name: "x", Schedule: "every day", Args: args}}, "Config.PeriodicJobs[0].Schedule", `"every day"`},
		{[]weir.PeriodicJob{{Name: "x", Schedule: "@daily", TimeZone: "Europe/Atlantis", Args: args}}, "Config.PeriodicJobs[0].Schedule", `"Europe/Atlantis"`},
		{[]weir.PeriodicJob{{Name: "x", Schedule: "@daily"}}, "Config.PeriodicJobs[0].Args", "no Args"},
		{[]weir.PeriodicJob{{Name: "x", Schedule: "0 0 30 2 *", Args: args}}, "Config.PeriodicJobs[0].Schedule", "never fires"},
		{[]weir.PeriodicJob{{Name: "x", Schedule: "@daily", Args: args, CatchUp: -1}}, "Config.PeriodicJobs[0].CatchUp", "-1"},
	} {
		_, err := weir.NewClient(b.driver, &weir.Config{PeriodicJobs: c.jobs})
		invalid, isInvalid := errors.AsType[*weir.InvalidError](err)
		if !isInvalid || invalid.Field != c.field || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%+v: %v, want an InvalidError on %s saying %q", c.jobs, err, c.field, c.msg)
		}
	}
}

// TestPeriodicOnTime measures, with the default settings, how late an
// every-second schedule's jobs are inserted after their slots. It prints the
// figure; the exactly-once tests check the slots.
func TestPeriodicOnTime(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.start(t, &weir.Config{
		Workers:      probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error { return nil }),
		Queues:       map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 1}},
		PeriodicJobs: []weir.PeriodicJob{everySecond("on-time")},
	})
	waitFor(t, 30*time.Second, "five slots", func() bool {
		slots, _ := slotsOf(t, b.driver, "on-time")
		return len(slots) >= 5
	})
	slots, late := slotsOf(t, b.driver, "on-time")
	checkEverySecond(t, slots)
	slices.Sort(late)
	t.Logf("default settings: %d slots inserted after their slot by median %v, worst %v", len(late), late[len(late)/2], late[len(late)-1])
}

// TestPeriodicLeaderDeclarationWins: when another client registers its own
// version of a schedule while this one leads (a deposed leader's late
// registration), the leader registers its version again and fires that.
func TestPeriodicLeaderDeclarationWins(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job := everySecond("versioned")
	b.start(t, periodicConfig(nil, job))
	ex := b.driver.Executor()
	waitFor(t, 20*time.Second, "a slot", func() bool {
		slots, _ := slotsOf(t, b.driver, "versioned")
		return len(slots) > 0
	})
	if err := ex.PeriodicRegister(testCtx(t), "deposed", []*weirdriver.PeriodicRegisterParams{
		{Name: "versioned", Spec: "@yearly", TimeZone: "UTC", NextRunAt: time.Now().AddDate(1, 0, 0)},
	}); err != nil {
		t.Fatal(err)
	}
	before, _ := slotsOf(t, b.driver, "versioned")
	waitFor(t, 20*time.Second, "the leader's version back, and firing", func() bool {
		rows, err := ex.PeriodicList(testCtx(t))
		slots, _ := slotsOf(t, b.driver, "versioned")
		return err == nil && len(rows) == 1 && rows[0].Spec == job.Schedule && rows[0].DeclaredBy != "deposed" && len(slots) > len(before)+1
	})
}

// TestPeriodicKeyIgnoresMiddlewareUnique: a slot's job is unique by its slot
// alone, even when insert middleware makes every job unique by its args and
// replacing: two slots with equal args are two jobs.
func TestPeriodicKeyIgnoresMiddlewareUnique(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cfg := periodicConfig(nil, everySecond("same-args"))
	cfg.InsertMiddleware = []weir.InsertMiddleware{func(next weir.InsertHandler) weir.InsertHandler {
		return func(ctx context.Context, jobs []*weir.InsertParams) ([]*weir.InsertResult, error) {
			for _, j := range jobs {
				j.Unique = weir.UniqueOpts{ByArgs: true, OnConflict: weir.UniqueReplace}
			}
			return next(ctx, jobs)
		}
	}}
	b.start(t, cfg)
	waitFor(t, 20*time.Second, "two slots' jobs", func() bool {
		slots, _ := slotsOf(t, b.driver, "same-args")
		return len(slots) >= 2
	})
	slots, _ := slotsOf(t, b.driver, "same-args")
	checkEverySecond(t, slots)
}
