package weir

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// PeriodicJob is a schedule on which the maintenance leader inserts a job. Every
// client of a schema may declare the same schedules; the leader's declaration
// is the one that fires, once per slot (docs/periodic.md).
type PeriodicJob struct {
	// Name identifies the schedule among every client of the schema: its
	// characters are those of kinds and queues, at most 128 bytes.
	Name string
	// Schedule is a cron expression of five fields (minute, hour, day of month,
	// month, day of week) with an optional leading seconds field, or one of
	// @yearly, @monthly, @weekly, @daily, @hourly and @every D (D a whole number
	// of seconds, at least one).
	Schedule string
	// TimeZone is the IANA zone the schedule is read in. Default: UTC. A wall
	// time that a spring-forward transition skips fires once, at the jump; one
	// that a fall-back transition repeats fires at its first occurrence.
	TimeZone string
	// Args returns the job to insert for a slot. It is called by the leader at
	// fire time; a nil JobArgs inserts nothing for that slot. A panic or args
	// that do not validate are logged and the slot is skipped.
	Args func() (JobArgs, *InsertOpts)
	// RunOnStart makes the schedule fire at once when it is first registered
	// (or its Schedule or TimeZone changed), besides its slots.
	RunOnStart bool
	// CatchUp is how many missed slots fire after a time without a leader (a
	// slot is missed when it is more than a minute overdue): 0 skips them, 1
	// runs the latest once, N runs the latest N. Range: 0 to 1,000.
	CatchUp int
}

const (
	// periodicGrace is how late a slot may fire and still count as on time:
	// longer than a leader handover takes with any setting (a term and an
	// election interval: at most 20 s), so a failover misses no slot.
	periodicGrace = time.Minute
	// maxCatchUp bounds PeriodicJob.CatchUp.
	maxCatchUp = 1000
	// maxSlotsScanned bounds the slots one fire walks through after a long
	// time without a leader; older ones are skipped.
	maxSlotsScanned = 100_000
)

// periodicEntry is a declared schedule, checked.
type periodicEntry struct {
	job   PeriodicJob
	sched *schedule
	zone  string // as stored: the IANA name, UTC by default
}

// checkPeriodic checks the declared schedules and returns them by name.
func checkPeriodic(jobs []PeriodicJob) (map[string]*periodicEntry, error) {
	out := make(map[string]*periodicEntry, len(jobs))
	for i, j := range jobs {
		field := fmt.Sprintf("Config.PeriodicJobs[%d]", i)
		if err := validateName(field+".Name", "periodic job name", j.Name); err != nil {
			return nil, err
		}
		if out[j.Name] != nil {
			return nil, invalidf(field+".Name", "periodic job %q is declared twice", j.Name)
		}
		sched, err := parseSchedule(j.Schedule, j.TimeZone)
		if err != nil {
			return nil, invalidf(field+".Schedule", "periodic job %q: %v", j.Name, err)
		}
		if sched.next(time.Now()).IsZero() {
			return nil, invalidf(field+".Schedule", "periodic job %q: schedule %q never fires", j.Name, j.Schedule)
		}
		if j.Args == nil {
			return nil, invalidf(field+".Args", "periodic job %q has no Args function", j.Name)
		}
		if j.CatchUp < 0 || j.CatchUp > maxCatchUp {
			return nil, invalidf(field+".CatchUp", "periodic job %q: catch-up %d is out of range 0..%d", j.Name, j.CatchUp, maxCatchUp)
		}
		zone := j.TimeZone
		if zone == "" {
			zone = "UTC"
		}
		out[j.Name] = &periodicEntry{job: j, sched: sched, zone: zone}
	}
	return out, nil
}

// periodicKey is the unique key of schedule name's job for slot: one job per
// slot, in every state, so that no slot fires twice.
func periodicKey(name string, slot time.Time) []byte {
	h := sha256.New()
	fmt.Fprintf(h, "periodic=%s\x00slot=%d", name, slot.UnixMicro())
	return h.Sum(nil)
}

// runPeriodic registers the client's schedules and fires them while ctx, a
// maintenance term, lasts. wait bounds each sleep, so that an operator's pause,
// resume or trigger is seen within it.
func (c *Client) runPeriodic(ctx context.Context, exec weirdriver.Executor, logger *slog.Logger, wait time.Duration) {
	if err := c.registerPeriodic(ctx, exec); err != nil {
		if ctx.Err() == nil {
			logger.Warn("weir: periodic jobs: register", slog.Any("error", err))
		}
		return
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	var skew time.Duration // the database's clock minus ours, at the last fire
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		rows, err := exec.PeriodicList(ctx)
		if err != nil {
			if ctx.Err() == nil {
				logger.Warn("weir: periodic jobs: list", slog.Any("error", err))
			}
			timer.Reset(wait)
			continue
		}
		sleep := wait
		for _, row := range rows {
			e := c.periodic[row.Name]
			if e == nil || row.OrphanedAt != nil || row.PausedAt != nil {
				continue
			}
			if row.Spec != e.job.Schedule || row.TimeZone != e.zone {
				// Another leader registered its own version meanwhile.
				sleep = 0
				if err := c.registerPeriodic(ctx, exec); err != nil {
					if ctx.Err() == nil {
						logger.Warn("weir: periodic jobs: register", slog.Any("error", err))
					}
					sleep = wait
				}
				break
			}
			until := time.Until(row.NextRunAt.Add(-skew))
			if until > 0 {
				sleep = min(sleep, until)
				continue
			}
			dbNow, err := c.firePeriodic(ctx, exec, logger, e)
			if err != nil {
				if ctx.Err() == nil {
					logger.Warn("weir: periodic jobs: fire", slog.String("periodic_job", e.job.Name), slog.Any("error", err))
				}
				continue
			}
			skew = time.Until(dbNow)
			sleep = 0 // list again: the fire moved its next run
		}
		timer.Reset(max(sleep, time.Millisecond))
	}
}

// registerPeriodic records the client's schedules as the leader's, and marks
// the others orphaned.
func (c *Client) registerPeriodic(ctx context.Context, exec weirdriver.Executor) error {
	now := time.Now()
	params := make([]*weirdriver.PeriodicRegisterParams, 0, len(c.periodic))
	for _, e := range c.periodic {
		next := now
		if !e.job.RunOnStart {
			next = e.sched.next(now)
		}
		params = append(params, &weirdriver.PeriodicRegisterParams{
			Name: e.job.Name, Spec: e.job.Schedule, TimeZone: e.zone, NextRunAt: next.Round(time.Microsecond),
		})
	}
	return exec.PeriodicRegister(ctx, c.config.ID, params)
}

// firePeriodic fires e's due slots in one transaction that holds its row:
// the slots' jobs are inserted and the next run moved past them together, or
// neither, so each slot fires once whoever leads. It returns the database's
// clock.
func (c *Client) firePeriodic(ctx context.Context, exec weirdriver.Executor, logger *slog.Logger, e *periodicEntry) (time.Time, error) {
	tx, err := exec.Begin(ctx)
	if err != nil {
		return time.Time{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	row, now, err := tx.PeriodicLock(ctx, e.job.Name)
	if err != nil {
		return time.Time{}, err
	}
	if row.PausedAt != nil || row.OrphanedAt != nil || row.NextRunAt.After(now) ||
		row.Spec != e.job.Schedule || row.TimeZone != e.zone {
		return now, nil // changed since it was listed
	}

	// The due slots: the stored next run (a slot, or a trigger's or a first
	// registration's moment) and the schedule's slots after it, up to now.
	var onTime, missed []time.Time
	skipped := 0
	for slot, n := row.NextRunAt, 0; !slot.IsZero() && !slot.After(now); slot, n = e.sched.next(slot), n+1 {
		if n == maxSlotsScanned {
			// Too long without a leader to walk every slot: the slots seen so
			// far are all skipped, and the walk goes on from a grace before now.
			skipped += len(missed)
			missed = missed[:0]
			slot = e.sched.next(now.Add(-periodicGrace))
			if slot.IsZero() || slot.After(now) {
				break
			}
		}
		if now.Sub(slot) <= periodicGrace {
			onTime = append(onTime, slot)
			continue
		}
		missed = append(missed, slot)
		if len(missed) > e.job.CatchUp {
			missed = missed[1:]
			skipped++
		}
	}
	if skipped > 0 {
		logger.Warn("weir: periodic job skipped missed slots", slog.String("periodic_job", e.job.Name),
			slog.Int("skipped", skipped), slog.Int("catch_up", e.job.CatchUp))
	}
	fire := append(missed, onTime...)
	last := row.NextRunAt
	if len(fire) > 0 {
		last = fire[len(fire)-1]
	}
	var lastJob *int64
	for _, slot := range fire {
		id, err := c.insertPeriodic(ctx, tx, logger, e, slot)
		if err != nil {
			return time.Time{}, err
		}
		if id != 0 {
			lastJob = &id
		}
	}
	next := e.sched.next(now)
	if next.IsZero() {
		// A schedule with no slot left (a date that never comes again) waits
		// at the end of time.
		next = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	}
	ok, err := tx.PeriodicAdvance(ctx, &weirdriver.PeriodicAdvanceParams{
		Name: e.job.Name, From: row.NextRunAt, NextRunAt: next.Round(time.Microsecond), LastRunAt: last, LastJobID: lastJob,
	})
	if err != nil {
		return time.Time{}, err
	}
	if !ok {
		return time.Time{}, fmt.Errorf("its next run changed under the lock")
	}
	return now, tx.Commit(ctx)
}

// insertPeriodic inserts e's job for slot in tx and returns its id, or 0 when
// the slot inserts nothing: its Args gave none, panicked or gave args that do
// not validate (logged), or the slot's job exists already.
func (c *Client) insertPeriodic(ctx context.Context, tx weirdriver.ExecutorTx, logger *slog.Logger, e *periodicEntry, slot time.Time) (int64, error) {
	attrs := []any{slog.String("periodic_job", e.job.Name), slog.Time("slot", slot)}
	args, opts, err := constructPeriodic(e.job.Args)
	if err != nil {
		logger.Error("weir: periodic job skipped a slot: its Args failed", append(attrs, slog.Any("error", err))...)
		return 0, nil
	}
	if args == nil {
		return 0, nil
	}
	in, err := encodeInsert(args, opts)
	if err == nil {
		in.Metadata, err = withPeriodicMetadata(in.Metadata, e.job.Name, slot)
	}
	if err != nil {
		logger.Error("weir: periodic job skipped a slot: its job is invalid", append(attrs, slog.Any("error", err))...)
		return 0, nil
	}
	in.Unique = UniqueOpts{}
	in.periodicKey = periodicKey(e.job.Name, slot)
	res, err := c.insertEncoded(ctx, tx, []*InsertParams{in})
	if invalid, ok := errors.AsType[*InvalidError](err); ok {
		logger.Error("weir: periodic job skipped a slot: its job is invalid", append(attrs, slog.Any("error", invalid))...)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if res[0].Duplicate {
		return 0, nil
	}
	return res[0].Job.ID, nil
}

// constructPeriodic calls a schedule's Args, turning a panic into an error.
func constructPeriodic(f func() (JobArgs, *InsertOpts)) (args JobArgs, opts *InsertOpts, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: string(debug.Stack())}
		}
	}()
	args, opts = f()
	return args, opts, nil
}

// withPeriodicMetadata adds the schedule's name and the slot to a job's
// metadata, under keys that name weir.
func withPeriodicMetadata(metadata json.RawMessage, name string, slot time.Time) (json.RawMessage, error) {
	m := map[string]any{}
	if len(metadata) > 0 {
		if err := json.Unmarshal(metadata, &m); err != nil {
			return nil, invalidf("InsertOpts.Metadata", "metadata must be a JSON object: %v", err)
		}
	}
	m["weir.periodic"] = name
	m["weir.slot"] = slot.UTC().Format(time.RFC3339Nano)
	return json.Marshal(m)
}

// PeriodicRow is a periodic job's schedule as the store records it.
type PeriodicRow = weirtype.PeriodicRow

// ErrPeriodicDeclared is returned by PeriodicDelete for a schedule that the
// leader declares: it would register it again at once.
var ErrPeriodicDeclared = weirdriver.ErrPeriodicDeclared

// PeriodicList returns every periodic job's schedule, by name: those the leader
// declares and fires, and the orphans no leader declares.
func (c *Client) PeriodicList(ctx context.Context) ([]*PeriodicRow, error) {
	var rows []*PeriodicRow
	err := c.operate(ctx, func() error {
		var err error
		rows, err = c.driver.Executor().PeriodicList(ctx)
		return err
	})
	if err != nil {
		return nil, opErr(err)
	}
	return rows, nil
}

// PeriodicPause stops schedule name from firing until PeriodicResume; the
// slots it misses meanwhile follow its CatchUp. Pausing a paused schedule
// changes nothing.
func (c *Client) PeriodicPause(ctx context.Context, name string) (*PeriodicRow, error) {
	return c.periodicOp(ctx, name, func(ex weirdriver.Executor) (*PeriodicRow, error) { return ex.PeriodicPause(ctx, name, true) })
}

// PeriodicResume lets a paused schedule fire again.
func (c *Client) PeriodicResume(ctx context.Context, name string) (*PeriodicRow, error) {
	return c.periodicOp(ctx, name, func(ex weirdriver.Executor) (*PeriodicRow, error) { return ex.PeriodicPause(ctx, name, false) })
}

// PeriodicTrigger makes schedule name due now: the leader fires it within an
// election interval (at most 5 s), its next slot still to come. A paused
// schedule fires once resumed.
func (c *Client) PeriodicTrigger(ctx context.Context, name string) (*PeriodicRow, error) {
	return c.periodicOp(ctx, name, func(ex weirdriver.Executor) (*PeriodicRow, error) { return ex.PeriodicTrigger(ctx, name) })
}

// PeriodicDelete deletes an orphaned schedule (one the leader does not
// declare) and returns it as it was. A declared one is refused with
// ErrPeriodicDeclared: remove it from the config first.
func (c *Client) PeriodicDelete(ctx context.Context, name string) (*PeriodicRow, error) {
	return c.periodicOp(ctx, name, func(ex weirdriver.Executor) (*PeriodicRow, error) { return ex.PeriodicDelete(ctx, name) })
}

func (c *Client) periodicOp(ctx context.Context, name string, op func(weirdriver.Executor) (*PeriodicRow, error)) (*PeriodicRow, error) {
	if err := validateName("name", "periodic job name", name); err != nil {
		return nil, err
	}
	var row *PeriodicRow
	err := c.operate(ctx, func() error {
		var err error
		row, err = op(c.driver.Executor())
		return err
	})
	if errors.Is(err, weirdriver.ErrNotFound) {
		return nil, opErr(fmt.Errorf("%w: no periodic job %q", ErrNotFound, name))
	}
	if err != nil {
		return nil, opErr(err)
	}
	return row, nil
}
