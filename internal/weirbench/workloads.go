package weirbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// drain is W1: jobs inserted first, then worked down by one client. WAL and
// table counters are taken around the working only; a checkpoint first makes
// each run pay for full-page images alike. With Options.DrainCeiling, the
// raw SQL ceiling (sqlDrain) follows, and its ratio to the drain.
func (b *bench) drain(ctx context.Context, sys System) ([]result, error) {
	n := b.o.DrainJobs
	table := sys.JobTable()
	var (
		elapsed    time.Duration
		wal0, wal1 int64
		before     tableStats
		heapBefore int64
	)
	err := b.withClient(ctx, sys, ClientConfig{Work: true, Settings: Throughput}, func(c Client) error {
		if err := b.insertAll(ctx, c, n); err != nil {
			return err
		}
		b.status("VACUUM ANALYZE, CHECKPOINT")
		if err := execSQL(ctx, b.admin, "VACUUM ANALYZE "+table, "CHECKPOINT"); err != nil {
			return err
		}
		var err error
		if heapBefore, _, err = tableSizes(ctx, b.admin, table); err != nil {
			return err
		}
		if before, err = readTableStats(ctx, b.admin, table); err != nil {
			return err
		}
		if wal0, err = walPosition(ctx, b.admin); err != nil {
			return err
		}
		if elapsed, err = b.work(ctx, c, n); err != nil {
			return err
		}
		if wal1, err = walPosition(ctx, b.admin); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	done, err := completedRows(ctx, b.admin, sys, int64(n))
	if err != nil {
		return nil, err
	}
	if done != int64(n) {
		return nil, fmt.Errorf("%s: %d jobs completed in the table, want %d", sys.Name(), done, n)
	}
	after, err := readTableStats(ctx, b.admin, table)
	if err != nil {
		return nil, err
	}
	mode, err := readyModeFigures(ctx, b.admin, sys.Schema(), "W1")
	if err != nil {
		return nil, err
	}
	b.status("VACUUM")
	if err := execSQL(ctx, b.admin, "VACUUM "+table); err != nil {
		return nil, err
	}
	heapAfter, indexesAfter, err := tableSizes(ctx, b.admin, table)
	if err != nil {
		return nil, err
	}
	rate := float64(n) / elapsed.Seconds()
	res := []result{{fig("W1 drain", "W1 drain", "jobs/s", "higher", "throughput"), rate}}
	if b.o.DrainCeiling {
		ceiling, err := b.sqlDrain(ctx, n)
		if err != nil {
			return nil, err
		}
		res = append(res,
			result{fig("W1 raw SQL ceiling", "W1 raw SQL", "jobs/s", "higher", ""), ceiling},
			result{fig("W1 drain / raw SQL ceiling", "W1 drain / raw SQL", "ratio", "higher", ""), rate / ceiling})
	}
	perJob := func(v int64) float64 { return float64(v) / float64(n) }
	return append(append(res, []result{
		{fig("W1 WAL", "W1 WAL/job", "bytes/job", "lower", "cost"), perJob(wal1 - wal0)},
		{fig("W1 dead tuples left", "W1 dead tuples/job", "per job", "lower", "cost"), perJob(after.dead)},
		{fig("W1 row updates", "", "per job", "lower", ""), perJob(after.updates - before.updates)},
		{fig("W1 HOT updates", "", "per job", "", ""), perJob(after.hotUpdates - before.hotUpdates)},
		{fig("W1 autovacuums during drain", "", "count", "", ""), float64(after.autovacuums - before.autovacuums)},
		{fig("W1 table before drain", "", "MiB", "", ""), mib(heapBefore)},
		{fig("W1 table after drain and VACUUM", "W1 table after", "MiB", "lower", "cost"), mib(heapAfter)},
		{fig("W1 indexes after drain and VACUUM", "", "MiB", "lower", ""), mib(indexesAfter)},
	}...), mode...), nil
}

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }

// bulk is W4's bulk insert.
func (b *bench) bulk(ctx context.Context, sys System) ([]result, error) {
	var elapsed time.Duration
	err := b.withClient(ctx, sys, ClientConfig{}, func(c Client) error {
		start := time.Now()
		err := b.insertAll(ctx, c, b.o.InsertJobs)
		elapsed = time.Since(start)
		return err
	})
	if err != nil {
		return nil, err
	}
	return []result{{fig("W4 bulk insert", "W4 bulk", "jobs/s", "higher", "throughput"), float64(b.o.InsertJobs) / elapsed.Seconds()}}, nil
}

// singles is W4's single inserts from goroutines at once, each job in its own
// transaction, for the insert duration.
func (b *bench) singles(goroutines int) func(context.Context, System) ([]result, error) {
	f := fig(fmt.Sprintf("W4 single insert x%d", goroutines), fmt.Sprintf("W4 single x%d", goroutines), "jobs/s", "higher", "throughput")
	ceilingFig := fig(fmt.Sprintf("W4 pgbench single-row insert x%d", goroutines), fmt.Sprintf("W4 pgbench x%d", goroutines), "rows/s", "higher", "")
	ratioFig := fig(fmt.Sprintf("W4 single insert x%d / pgbench", goroutines), fmt.Sprintf("W4 single x%d / pgbench", goroutines), "ratio", "higher", "")
	return func(ctx context.Context, sys System) ([]result, error) {
		var (
			inserted atomic.Int64
			elapsed  time.Duration
		)
		err := b.withClient(ctx, sys, ClientConfig{}, func(c Client) error {
			errs := make([]error, goroutines)
			var wg sync.WaitGroup
			start := time.Now()
			deadline := start.Add(b.o.InsertDuration)
			for i := range goroutines {
				wg.Go(func() {
					for time.Now().Before(deadline) {
						seq := inserted.Add(1) - 1
						if errs[i] = c.Insert(ctx, seq); errs[i] != nil {
							return
						}
						b.status("%s jobs inserted", group(inserted.Load()))
					}
				})
			}
			wg.Wait()
			elapsed = time.Since(start)
			return errors.Join(errs...)
		})
		if err != nil {
			return nil, err
		}
		rate := float64(inserted.Load()) / elapsed.Seconds()
		res := []result{{f, rate}}
		if ceiling, ok := b.ceiling(ctx, sys, goroutines); ok {
			res = append(res, result{ceilingFig, ceiling}, result{ratioFig, rate / ceiling})
		}
		return res, nil
	}
}

// ceiling is W4's ceiling of single inserts from clients connections: what
// pgbench inserts a second with sys's RowInsert, on the same table, for the
// insert duration. It is not measured (false) for a system without a
// RowInsert or where pgbench is missing or fails, which is logged.
func (b *bench) ceiling(ctx context.Context, sys System, clients int) (float64, bool) {
	ri, ok := sys.(RowInserter)
	if !ok {
		return 0, false
	}
	path, err := PgbenchPath()
	if err == nil {
		var tps float64
		if tps, err = pgbenchRate(ctx, path, b.o.DatabaseURL, ri.RowInsert(), clients, b.o.InsertDuration); err == nil {
			return tps, true
		}
	}
	b.logger.Warn("weirbench: W4's ceiling of single inserts not measured", "system", sys.Name(), "error", err)
	return 0, false
}

// mixedTick is how often W2's producer inserts, in one bulk insert, the jobs
// that have come due.
const mixedTick = 10 * time.Millisecond

// latencyInserters is the number of goroutines that insert W3's jobs, one job
// per transaction.
const latencyInserters = 8

// pickupGrace is how long W2 and W3 wait, once the offer ends, for the jobs
// inserted to start; a job that has not started by then counts with the time
// it has waited so far.
const pickupGrace = time.Second

// epoch is the origin of the recorders' times, on the monotonic clock.
var epoch = time.Now()

func since() int64 { return int64(time.Since(epoch)) }

// recorder keeps, for each job a run offers, when its insert returned and when
// its handler started.
type recorder struct {
	committed []int64        // by seq: ns after epoch at which the insert returned; 0: not inserted
	started   []atomic.Int64 // by seq: ns after epoch at which the handler started; 0: not yet
	inserted  atomic.Int64
	nstarted  atomic.Int64
}

func newRecorder(capacity int) *recorder {
	return &recorder{committed: make([]int64, capacity), started: make([]atomic.Int64, capacity)}
}

// start is the handlers' ClientConfig.OnStart.
func (r *recorder) start(seq int64) {
	if seq < 0 || seq >= int64(len(r.started)) {
		return
	}
	if r.started[seq].CompareAndSwap(0, since()) {
		r.nstarted.Add(1)
	}
}

// waitStarted waits until every job inserted has started, or grace has passed,
// and returns the time it stopped waiting.
func (r *recorder) waitStarted(ctx context.Context, grace time.Duration) int64 {
	deadline := time.Now().Add(grace)
	for r.nstarted.Load() < r.inserted.Load() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	return since()
}

// pickups returns the jobs' pickup latencies in ms, sorted: from the return of
// the insert to the start of the handler. A job that had not started by until
// counts with until instead, a lower bound of its latency. A handler that
// started before its insert returned (the commit reached the server before its
// answer reached us) counts 0.
func (r *recorder) pickups(until int64) []float64 {
	var out []float64
	for i, c := range r.committed {
		if c == 0 {
			continue
		}
		s := r.started[i].Load()
		if s == 0 || s > until {
			s = until
		}
		out = append(out, float64(max(s-c, 0))/1e6)
	}
	slices.Sort(out)
	return out
}

// An offered run is W2's or W3's: a producer offers rate jobs/s for d while
// the client works them.
type offered struct {
	completed, inserted int64 // at the end of the offer (inserted: once the producer stopped)
	elapsed             time.Duration
	wal                 int64     // WAL written during the offer
	pickups             []float64 // ms, sorted
	completedAll        int64     // once the client stopped
	dead                int64     // dead tuples left then
	start               int64     // ns after epoch at which the offer began
	// step and marks, when step is set: the client's completed count at
	// each step of the offer, the first at step after its start.
	step  time.Duration
	marks []int64
	rec   *recorder // the run's recorder, for figures by step
}

// producer inserts jobs into c at rate from start to deadline, recording in rec.
type producer func(ctx context.Context, c Client, rec *recorder, rate int, start, deadline time.Time) error

func (b *bench) offer(ctx context.Context, sys System, set Settings, rate int, d time.Duration, produce producer) (offered, error) {
	return b.offerStepped(ctx, sys, set, rate, d, 0, produce)
}

// offerStepped is offer, recording the completed count every step (none when
// step is zero).
func (b *bench) offerStepped(ctx context.Context, sys System, set Settings, rate int, d, step time.Duration, produce producer) (offered, error) {
	rec := newRecorder(int(float64(rate)*d.Seconds()) + rate + b.o.Batch)
	o := offered{step: step, rec: rec}
	err := b.withClient(ctx, sys, ClientConfig{Work: true, Settings: set, OnStart: rec.start}, func(c Client) error {
		if err := execSQL(ctx, b.admin, "CHECKPOINT"); err != nil {
			return err
		}
		wal0, err := walPosition(ctx, b.admin)
		if err != nil {
			return err
		}
		if err := c.Start(ctx); err != nil {
			return err
		}
		if err := b.watchOffer(ctx, c, rec, rate, d, produce, &o); err != nil {
			return errors.Join(err, b.stop(c))
		}
		wal1, err := walPosition(ctx, b.admin)
		if err != nil {
			return errors.Join(err, b.stop(c))
		}
		o.wal = wal1 - wal0
		b.status("waiting up to %s for the jobs inserted to start", pickupGrace)
		o.pickups = rec.pickups(rec.waitStarted(ctx, pickupGrace))
		err = b.stop(c)
		o.completedAll = c.Completed()
		return err
	})
	if err != nil {
		return o, err
	}
	if err := checkOfferedRows(ctx, b.admin, sys, o.inserted, o.completedAll); err != nil {
		return o, err
	}
	stats, err := readTableStats(ctx, b.admin, sys.JobTable())
	o.dead = stats.dead
	return o, err
}

// watchOffer runs produce until the deadline, showing progress, and fills in
// o's counts at the end of the offer.
func (b *bench) watchOffer(ctx context.Context, c Client, rec *recorder, rate int, d time.Duration, produce producer, o *offered) error {
	start := time.Now()
	o.start = since()
	deadline := start.Add(d)
	prodCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- produce(prodCtx, c, rec, rate, start, deadline) }()
	end := time.NewTimer(time.Until(deadline))
	defer end.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	finished := false // the producer has returned without an error
	for {
		select {
		case <-end.C:
			o.completed, o.elapsed = c.Completed(), time.Since(start)
			for o.step > 0 && time.Duration(len(o.marks)+1)*o.step <= d {
				o.marks = append(o.marks, o.completed)
			}
			if !finished {
				if err := <-done; err != nil {
					return err
				}
			}
			o.inserted = rec.inserted.Load()
			return nil
		case err := <-done:
			// The producer returns at the deadline; the timer fires about then.
			if err != nil {
				return err
			}
			finished, done = true, nil
		case <-tick.C:
			if o.step > 0 && time.Since(start) >= time.Duration(len(o.marks)+1)*o.step {
				o.marks = append(o.marks, c.Completed())
			}
			b.status("%.0f of %.0f s, %s inserted, %s completed", time.Since(start).Seconds(), d.Seconds(),
				group(rec.inserted.Load()), group(c.Completed()))
		}
	}
}

// produceBatches is W2's producer: every mixedTick, one bulk insert of the
// jobs that have come due since the last (several when more than a batch).
func (b *bench) produceBatches(ctx context.Context, c Client, rec *recorder, rate int, start, deadline time.Time) error {
	tick := time.NewTicker(mixedTick)
	defer tick.Stop()
	var sent int64
	limit := int64(len(rec.committed))
	for {
		now := time.Now()
		if !now.Before(deadline) {
			return nil
		}
		due := min(int64(now.Sub(start).Seconds()*float64(rate)), limit)
		for sent < due {
			k := min(due-sent, int64(b.o.Batch))
			if err := c.InsertMany(ctx, sent, int(k)); err != nil {
				return fmt.Errorf("insert jobs: %w", err)
			}
			t := since()
			for i := sent; i < sent+k; i++ {
				rec.committed[i] = t
			}
			sent += k
			rec.inserted.Add(k)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// produceSingles is W3's producer: jobs come due one by one at rate, and
// latencyInserters goroutines insert each in a transaction of its own. Jobs
// still waiting for an inserter at the deadline are not inserted.
func (b *bench) produceSingles(ctx context.Context, c Client, rec *recorder, rate int, start, deadline time.Time) error {
	seqs := make(chan int64, len(rec.committed))
	errs := make([]error, latencyInserters)
	var wg sync.WaitGroup
	for i := range latencyInserters {
		wg.Go(func() {
			for seq := range seqs {
				if errs[i] != nil || !time.Now().Before(deadline) {
					continue
				}
				if err := c.Insert(ctx, seq); err != nil {
					errs[i] = fmt.Errorf("insert job: %w", err)
					continue
				}
				rec.committed[seq] = since()
				rec.inserted.Add(1)
			}
		})
	}
	var sent int64
	limit := int64(len(rec.committed))
	for now := time.Now(); now.Before(deadline) && ctx.Err() == nil; now = time.Now() {
		for due := min(int64(now.Sub(start).Seconds()*float64(rate)), limit); sent < due; sent++ {
			seqs <- sent
		}
		time.Sleep(time.Millisecond)
	}
	close(seqs)
	wg.Wait()
	return errors.Join(append(errs, ctx.Err())...)
}

// mixed is W2 at one offered rate.
func (b *bench) mixed(rate int) func(context.Context, System) ([]result, error) {
	name, short := "W2 "+group(int64(rate))+"/s", "W2 "+compact(rate)+"/s"
	return func(ctx context.Context, sys System) ([]result, error) {
		o, err := b.offer(ctx, sys, Throughput, rate, b.o.MixedDuration, b.produceBatches)
		if err != nil {
			return nil, err
		}
		secs := o.elapsed.Seconds()
		return []result{
			{fig(name+" completed", short+" completed", "jobs/s", "higher", "throughput"), float64(o.completed) / secs},
			{fig(name+" inserted", "", "jobs/s", "", ""), float64(o.inserted) / secs},
			{fig(name+" backlog at end", "", "jobs", "lower", ""), float64(max(o.inserted-o.completed, 0))},
			{fig(name+" pickup p50", short+" p50", "ms", "lower", "latency"), percentile(o.pickups, 0.50)},
			{fig(name+" pickup p99", short+" p99", "ms", "lower", "latency"), percentile(o.pickups, 0.99)},
			{fig(name+" WAL", "", "bytes/job", "lower", ""), div(o.wal, o.completed)},
			{fig(name+" dead tuples left", "", "per job", "lower", ""), div(o.dead, o.completedAll)},
		}, nil
	}
}

// latency is W3, with the systems' Latency or Defaults settings.
func (b *bench) latency(set Settings) func(context.Context, System) ([]result, error) {
	rate := b.o.LatencyRate
	name, short := "W3 "+group(int64(rate))+"/s", "W3"
	if set == Defaults {
		name, short = "W3 defaults "+group(int64(rate))+"/s", "W3 defaults"
	}
	return func(ctx context.Context, sys System) ([]result, error) {
		o, err := b.offer(ctx, sys, set, rate, b.o.LatencyDuration, b.produceSingles)
		if err != nil {
			return nil, err
		}
		return []result{
			{fig(name+" pickup p50", short+" p50", "ms", "lower", "latency"), percentile(o.pickups, 0.50)},
			{fig(name+" pickup p99", short+" p99", "ms", "lower", "latency"), percentile(o.pickups, 0.99)},
			{fig(name+" pickup max", "", "ms", "lower", ""), percentile(o.pickups, 1)},
			{fig(name+" inserted", "", "jobs/s", "", ""), float64(o.inserted) / o.elapsed.Seconds()},
		}, nil
	}
}

// div is a/b, or 0 when b is 0.
func div(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
