package weirbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// pressureSteps is how many steps W7 reports its figures by when it runs for
// less than pressureSteps minutes; a longer run reports them minute by minute
// (W7's goal is met in every minute).
const pressureSteps = 10

// pressure is W7: W2's producer offers PressureRate jobs/s for
// PressureDuration while a client works them, with (held) or without another
// session holding a REPEATABLE READ snapshot open from before the first insert
// to the end. The snapshot's session reads no table of the system's: it stands
// for a long report on other tables, or a transaction left open, which keep
// VACUUM from removing any row version that died after they began.
func (b *bench) pressure(held bool) func(context.Context, System) ([]result, error) {
	rate := b.o.PressureRate
	name := "W7 clean"
	if held {
		name = "W7 snapshot held"
	}
	return func(ctx context.Context, sys System) ([]result, error) {
		var holder *pgx.Conn
		if held {
			var err error
			if holder, err = holdSnapshot(ctx, b.o.DatabaseURL); err != nil {
				return nil, err
			}
			defer holder.Close(context.WithoutCancel(ctx))
		}
		step := min(b.o.PressureDuration/pressureSteps, time.Minute)
		o, err := b.offerStepped(ctx, sys, Throughput, rate, b.o.PressureDuration, step, b.produceBatches)
		if err != nil {
			return nil, err
		}
		if holder != nil {
			// The snapshot is still held: it must have been, all along.
			if err := holder.Ping(ctx); err != nil {
				return nil, fmt.Errorf("the session holding the snapshot: %w", err)
			}
		}
		heap, indexes, dead, err := schemaSizes(ctx, b.admin, sys.Schema())
		if err != nil {
			return nil, err
		}
		mode, err := readyModeFigures(ctx, b.admin, sys.Schema(), name)
		if err != nil {
			return nil, err
		}
		secs := o.elapsed.Seconds()
		res := []result{
			{fig(name+" completed", name+" done", "jobs/s", "higher", "throughput"), float64(o.completed) / secs},
			{fig(name+" inserted", "", "jobs/s", "", ""), float64(o.inserted) / secs},
			{fig(name+" backlog at end", "", "jobs", "lower", ""), float64(max(o.inserted-o.completed, 0))},
			{fig(name+" pickup p50", name+" p50", "ms", "lower", "latency"), percentile(o.pickups, 0.50)},
			{fig(name+" pickup p99", name+" p99", "ms", "lower", "latency"), percentile(o.pickups, 0.99)},
			{fig(name+" dead tuples at end", "", "per job", "lower", ""), div(dead, o.completedAll)},
			{fig(name+" tables at end", "", "MiB", "lower", ""), mib(heap)},
			{fig(name+" indexes at end", "", "MiB", "lower", ""), mib(indexes)},
		}
		res = append(res, mode...)
		// By step: completed/s over the step, and the pickup p50 and p99 of
		// the jobs inserted in it.
		byStep := pickupsByStep(o.rec, o.start, step, len(o.marks))
		prev := int64(0)
		for i, m := range o.marks {
			at := time.Duration(i+1) * step
			point := func(what, unit string, v float64) result {
				f := fig(fmt.Sprintf("%s, %s %s", name, at, what), "", unit, "", "")
				f.Series, f.At = name+" "+what, at.Seconds()
				return result{f, v}
			}
			res = append(res,
				point("completed", "jobs/s", float64(m-prev)/step.Seconds()),
				point("pickup p50", "ms", percentile(byStep[i], 0.50)),
				point("pickup p99", "ms", percentile(byStep[i], 0.99)),
			)
			prev = m
		}
		return res, nil
	}
}

// pickupsByStep splits rec's pickup latencies (ms, sorted in each step) by the
// step of the offer in which each job's insert returned.
func pickupsByStep(rec *recorder, start int64, step time.Duration, steps int) [][]float64 {
	out := make([][]float64, steps)
	until := since()
	for i, c := range rec.committed {
		if c == 0 {
			continue
		}
		k := int((c - start) / int64(step))
		if k < 0 || k >= steps {
			continue
		}
		s := rec.started[i].Load()
		if s == 0 || s > until {
			s = until
		}
		out[k] = append(out[k], float64(max(s-c, 0))/1e6)
	}
	for _, p := range out {
		slices.Sort(p)
	}
	return out
}

// holdSnapshot opens a session of its own at url and leaves it in a
// REPEATABLE READ transaction that has taken its snapshot, until the returned
// connection is closed.
func holdSnapshot(ctx context.Context, url string) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("open the session that holds a snapshot: %w", err)
	}
	_, err = conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ")
	if err == nil {
		var n int64
		err = conn.QueryRow(ctx, "SELECT count(*) FROM pg_class").Scan(&n)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("take a snapshot and hold it: %w", err), conn.Close(ctx))
	}
	return conn, nil
}
