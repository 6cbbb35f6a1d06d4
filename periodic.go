package weir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/weirq/weir/internal/periodic"
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
	// @yearly, @monthly, @weekly, @daily, @hourly and @every D (D a duration
	// with its unit, such as 30s, 5m or 1h30m: a whole number of seconds, at
	// least one; a bare number is refused).
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

// maxCatchUp bounds PeriodicJob.CatchUp.
const maxCatchUp = 1000

// periodicEntry is a declared schedule, checked: the schedule
// internal/periodic fires, and the Args that make its jobs.
type periodicEntry struct {
	*periodic.Job
	args func() (JobArgs, *InsertOpts)
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
		sched, err := periodic.Parse(j.Schedule, j.TimeZone)
		if err != nil {
			return nil, invalidf(field+".Schedule", "periodic job %q: %v", j.Name, err)
		}
		if sched.Next(time.Now()).IsZero() {
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
		out[j.Name] = &periodicEntry{
			Job:  &periodic.Job{Name: j.Name, Spec: j.Schedule, Zone: zone, Schedule: sched, RunOnStart: j.RunOnStart, CatchUp: j.CatchUp},
			args: j.Args,
		}
	}
	return out, nil
}

// periodicFirer returns what fires the client's schedules on exec while it
// leads, logging to logger; wait bounds each sleep, so that an operator's
// pause, resume or trigger is seen within it.
func (c *Client) periodicFirer(exec weirdriver.Executor, logger *slog.Logger, wait time.Duration) *periodic.Firer {
	jobs := make([]*periodic.Job, 0, len(c.periodic))
	for _, e := range c.periodic {
		jobs = append(jobs, e.Job)
	}
	return periodic.New(periodic.Config{
		Exec: exec, ClientID: c.config.ID, Jobs: jobs, Logger: logger, Wait: wait,
		Insert: func(ctx context.Context, tx weirdriver.ExecutorTx, name string, slot time.Time) (int64, error) {
			return c.insertPeriodic(ctx, tx, logger, c.periodic[name], slot)
		},
	})
}

// insertPeriodic inserts e's job for slot in tx and returns its id, or 0 when
// the slot inserts nothing: its Args gave none, panicked or gave args that do
// not validate (logged), or the slot's job exists already.
func (c *Client) insertPeriodic(ctx context.Context, tx weirdriver.ExecutorTx, logger *slog.Logger, e *periodicEntry, slot time.Time) (int64, error) {
	attrs := []any{slog.String("periodic_job", e.Name), slog.Time("slot", slot)}
	args, opts, err := constructPeriodic(e.args)
	if err != nil {
		logger.Error("weir: periodic job skipped a slot: its Args failed", append(attrs, slog.Any("error", err))...)
		return 0, nil
	}
	if args == nil {
		return 0, nil
	}
	in, err := encodeInsert(args, opts)
	if err == nil {
		in.Metadata, err = withPeriodicMetadata(in.Metadata, e.Name, slot)
	}
	if err != nil {
		logger.Error("weir: periodic job skipped a slot: its job is invalid", append(attrs, slog.Any("error", err))...)
		return 0, nil
	}
	in.Unique = UniqueOpts{}
	in.periodicKey = periodic.Key(e.Name, slot)
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
