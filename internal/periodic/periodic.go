// Package periodic fires a client's periodic jobs while the client is the
// maintenance leader: it registers the schedules the client declares as the
// leader's, and fires each one's due slots with the insert function the
// client gives it, in one transaction per fire that holds the schedule's row,
// so that each slot fires once whichever client leads (docs/periodic.md).
package periodic

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"time"

	"github.com/weirq/weir/internal/clock"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

const (
	// grace is how late a slot may fire and still count as on time: longer
	// than a leader handover takes with any setting (a term and an election
	// interval: at most 20 s), so a failover misses no slot.
	grace = time.Minute
	// maxSlotsScanned bounds the slots one fire walks through after a long
	// time without a leader; older ones are skipped.
	maxSlotsScanned = 100_000
)

// endOfTime is the next run of a schedule with no slot left (a date that
// never comes again).
var endOfTime = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// Job is a declared schedule, checked.
type Job struct {
	// Name identifies the schedule among every client of the schema.
	Name string
	// Spec is the schedule as declared, Zone its IANA time zone as stored
	// ("UTC" when none was declared), and Schedule Spec read in Zone.
	Spec, Zone string
	Schedule   *Schedule
	// RunOnStart makes the schedule fire at once when it is first registered
	// (or its Spec or Zone changed), besides its slots.
	RunOnStart bool
	// CatchUp is how many missed slots fire after a time without a leader.
	CatchUp int
}

// Key is the unique key of schedule name's job for slot: one job per slot,
// in every state, so that no slot fires twice.
func Key(name string, slot time.Time) []byte {
	h := sha256.New()
	fmt.Fprintf(h, "periodic=%s\x00slot=%d", name, slot.UnixMicro())
	return h.Sum(nil)
}

// Config is what a Firer works with.
type Config struct {
	// Exec runs the firer's statements.
	Exec weirdriver.Executor
	// ClientID names the leader the schedules are registered for.
	ClientID string
	// Jobs are the schedules the client declares.
	Jobs []*Job
	// Logger receives the firer's warnings.
	Logger *slog.Logger
	// Wait bounds each sleep, so that an operator's pause, resume or trigger
	// is seen within it.
	Wait time.Duration
	// Insert inserts the job of schedule name for slot in tx, the fire's
	// transaction, and returns its id, or 0 when the slot inserts nothing.
	// Its error fails the fire: nothing of it is written.
	Insert func(ctx context.Context, tx weirdriver.ExecutorTx, name string, slot time.Time) (int64, error)
	// Clock is the time the firing loop reads and waits on; nil is the
	// system's.
	Clock clock.Clock
}

// Firer registers and fires a client's schedules.
type Firer struct {
	cfg  Config
	jobs map[string]*Job
}

// New returns a firer of cfg's schedules.
func New(cfg Config) *Firer {
	cfg.Clock = clock.Or(cfg.Clock)
	jobs := make(map[string]*Job, len(cfg.Jobs))
	for _, j := range cfg.Jobs {
		jobs[j.Name] = j
	}
	return &Firer{cfg: cfg, jobs: jobs}
}

// Run registers the schedules and fires them while ctx, a maintenance term,
// lasts. It runs with no schedules too: registering none orphans every stored
// one, so that what the table says matches what the leader declares.
func (f *Firer) Run(ctx context.Context) {
	if err := f.register(ctx); err != nil {
		f.warn(ctx, "weir: periodic jobs: register", err)
		return
	}
	var skew time.Duration // the database's clock minus ours, at the last fire
	for {
		var sleep time.Duration
		sleep, skew = f.pass(ctx, skew)
		timer := f.cfg.Clock.NewTimer(max(sleep, time.Millisecond))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
		}
	}
}

// pass lists the schedules and fires those due, reading their next runs
// with skew, and returns how long to sleep before the next pass, and the
// skew after it.
func (f *Firer) pass(ctx context.Context, skew time.Duration) (time.Duration, time.Duration) {
	rows, err := f.cfg.Exec.PeriodicList(ctx)
	if err != nil {
		f.warn(ctx, "weir: periodic jobs: list", err)
		return f.cfg.Wait, skew
	}
	sleep := f.cfg.Wait
	for _, row := range rows {
		if f.stale(row) {
			if err := f.register(ctx); err != nil {
				f.warn(ctx, "weir: periodic jobs: register", err)
				return f.cfg.Wait, skew
			}
			return 0, skew
		}
		j := f.jobs[row.Name]
		if j == nil || row.PausedAt != nil {
			continue
		}
		if until := row.NextRunAt.Add(-skew).Sub(f.cfg.Clock.Now()); until > 0 {
			sleep = min(sleep, until)
			continue
		}
		dbNow, err := f.fire(ctx, j)
		if err != nil {
			f.warn(ctx, "weir: periodic jobs: fire", err, slog.String("periodic_job", j.Name))
			continue
		}
		skew = dbNow.Sub(f.cfg.Clock.Now())
		sleep = 0 // list again: the fire moved its next run
	}
	return sleep, skew
}

// stale reports whether row is not as this leader registered it: a schedule
// it does not declare that is not orphaned, or one it declares that is
// orphaned or has another spec or zone. Another client registered its own
// declarations since (a deposed leader, late), and this leader's, even an
// empty set, are the ones that count.
func (f *Firer) stale(row *weirtype.PeriodicRow) bool {
	j := f.jobs[row.Name]
	if j == nil {
		return row.OrphanedAt == nil
	}
	return row.OrphanedAt != nil || row.Spec != j.Spec || row.TimeZone != j.Zone
}

// warn logs err under msg with attrs, unless ctx ended: the term's end cut
// the statement.
func (f *Firer) warn(ctx context.Context, msg string, err error, attrs ...any) {
	if ctx.Err() == nil {
		f.cfg.Logger.Warn(msg, append(attrs, slog.Any("error", err))...)
	}
}

// register records the schedules as the leader's, and marks the others
// orphaned.
func (f *Firer) register(ctx context.Context) error {
	now := f.cfg.Clock.Now()
	params := make([]*weirdriver.PeriodicRegisterParams, 0, len(f.cfg.Jobs))
	for _, j := range f.cfg.Jobs {
		next := now
		if !j.RunOnStart {
			next = j.Schedule.Next(now)
		}
		params = append(params, &weirdriver.PeriodicRegisterParams{
			Name: j.Name, Spec: j.Spec, TimeZone: j.Zone, NextRunAt: next.Round(time.Microsecond),
		})
	}
	return f.cfg.Exec.PeriodicRegister(ctx, f.cfg.ClientID, params)
}

// fire fires j's due slots in one transaction that holds its row: the slots'
// jobs are inserted and the next run moved past them together, or neither,
// so each slot fires once whoever leads. It returns the database's clock.
func (f *Firer) fire(ctx context.Context, j *Job) (time.Time, error) {
	tx, err := f.cfg.Exec.Begin(ctx)
	if err != nil {
		return time.Time{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	row, now, err := tx.PeriodicLock(ctx, j.Name)
	if err != nil {
		return time.Time{}, err
	}
	if row.PausedAt != nil || row.OrphanedAt != nil || row.NextRunAt.After(now) ||
		row.Spec != j.Spec || row.TimeZone != j.Zone {
		return now, nil // changed since it was listed
	}
	slots, skipped := j.due(row.NextRunAt, now)
	if skipped > 0 {
		f.cfg.Logger.Warn("weir: periodic job skipped missed slots", slog.String("periodic_job", j.Name),
			slog.Int("skipped", skipped), slog.Int("catch_up", j.CatchUp))
	}
	lastJob, err := f.insert(ctx, tx, j, slots)
	if err != nil {
		return time.Time{}, err
	}
	if err := j.advance(ctx, tx, row.NextRunAt, now, slots, lastJob); err != nil {
		return time.Time{}, err
	}
	return now, tx.Commit(ctx)
}

// due returns the slots of j to fire at now, its stored next run being from
// (a slot, or a trigger's or a first registration's moment): the latest
// CatchUp of the missed ones (more than grace overdue), then those on time.
// skipped counts the missed ones that do not fire.
func (j *Job) due(from, now time.Time) (slots []time.Time, skipped int) {
	var onTime, missed []time.Time
	for slot, n := from, 0; !slot.IsZero() && !slot.After(now); slot, n = j.Schedule.Next(slot), n+1 {
		if n == maxSlotsScanned {
			// Too long without a leader to walk every slot: the slots seen so
			// far are all skipped, and the walk goes on from a grace before now.
			skipped += len(missed)
			missed = missed[:0]
			slot = j.Schedule.Next(now.Add(-grace))
			if slot.IsZero() || slot.After(now) {
				break
			}
		}
		if now.Sub(slot) <= grace {
			onTime = append(onTime, slot)
			continue
		}
		missed = append(missed, slot)
		if len(missed) > j.CatchUp {
			missed = missed[1:]
			skipped++
		}
	}
	return append(missed, onTime...), skipped
}

// insert inserts j's jobs for slots in tx and returns the id of the last one
// inserted, nil when none was.
func (f *Firer) insert(ctx context.Context, tx weirdriver.ExecutorTx, j *Job, slots []time.Time) (*int64, error) {
	var last *int64
	for _, slot := range slots {
		id, err := f.cfg.Insert(ctx, tx, j.Name, slot)
		if err != nil {
			return nil, err
		}
		if id != 0 {
			last = &id
		}
	}
	return last, nil
}

// advance moves j's next run, stored as from, past now in tx, recording the
// last of the slots fired (from when none fired) and the last job inserted.
func (j *Job) advance(ctx context.Context, tx weirdriver.ExecutorTx, from, now time.Time, fired []time.Time, lastJob *int64) error {
	last := from
	if len(fired) > 0 {
		last = fired[len(fired)-1]
	}
	next := j.Schedule.Next(now)
	if next.IsZero() {
		next = endOfTime
	}
	ok, err := tx.PeriodicAdvance(ctx, &weirdriver.PeriodicAdvanceParams{
		Name: j.Name, From: from, NextRunAt: next.Round(time.Microsecond), LastRunAt: last, LastJobID: lastJob,
	})
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("its next run changed under the lock")
	}
	return nil
}
