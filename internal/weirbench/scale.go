package weirbench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// W8, scale-out: the same work done by 1, 2 and 4 worker processes, each this
// program re-executed (Options.ChildCommand) with a share of the handlers and
// connections, against one database. Each worker process is told to start
// at once, and reports its completed count as it goes; the run ends when the
// counts add up.

// scaleSpec is a W8 worker process's part of childSpec.
type scaleSpec struct {
	// Procs is how many worker processes share the run; the process runs
	// Workers handlers on a pool of MaxConns.
	Procs int `json:"procs"`
	// Record asks the process for each job's start time (wall clock, ns), to
	// measure pickup latency.
	Record bool `json:"record"`
	// Capacity bounds the job numbers it records.
	Capacity int `json:"capacity"`
	// GlobalLimit and KeyLimit, when positive, are the queue's global limit
	// and its limit per key (W6).
	GlobalLimit int `json:"global_limit,omitempty"`
	KeyLimit    int `json:"key_limit,omitempty"`
}

// scaleResult is what a W8 worker process writes last.
type scaleResult struct {
	Completed int64   `json:"completed"`
	Claims    int64   `json:"claims"` // -1: the system does not count them
	Stats     string  `json:"stats,omitempty"`
	Started   []int64 `json:"started,omitempty"` // by seq: wall-clock ns; 0: not started here
}

// scaleProc is a running W8 worker process, seen from the parent.
type scaleProc struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	completed atomic.Int64
	ready     chan struct{}
	result    chan scaleResult
	err       error // of reading its output; set before result is closed
}

// startScaleProcs starts n worker processes of sys, which share MaxConns
// connections and MaxWorkers handlers, and waits until each is ready.
func (b *bench) startScaleProcs(ctx context.Context, sys System, n int, record bool, capacity int, limits drainLimits) ([]*scaleProc, error) {
	workers := max(b.o.ScaleWorkers/n, 1)
	conns := max(b.o.MaxConns/n, 4)
	var procs []*scaleProc
	for i := range n {
		spec, err := json.Marshal(childSpec{
			System: sys.Name(), DatabaseURL: b.o.DatabaseURL, App: fmt.Sprintf("weirbench_%s_scale%d", sys.Name(), i),
			MaxConns: conns, Workers: workers, Timeout: b.o.Timeout,
			Scale: &scaleSpec{Procs: n, Record: record, Capacity: capacity, GlobalLimit: limits.global, KeyLimit: limits.key},
		})
		if err != nil {
			return procs, err
		}
		cmd := exec.CommandContext(ctx, b.o.ChildCommand[0], b.o.ChildCommand[1:]...)
		cmd.Env = append(os.Environ(), ChildEnv+"="+string(spec))
		cmd.Stderr = b.p
		p := &scaleProc{cmd: cmd, ready: make(chan struct{}), result: make(chan scaleResult, 1)}
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			return procs, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return procs, err
		}
		if err := cmd.Start(); err != nil {
			return procs, fmt.Errorf("start worker process: %w", err)
		}
		procs = append(procs, p)
		go p.read(out)
	}
	for _, p := range procs {
		select {
		case <-p.ready:
		case <-p.result:
			return procs, fmt.Errorf("worker process ended before it was ready: %w", p.err)
		case <-ctx.Done():
			return procs, ctx.Err()
		}
	}
	return procs, nil
}

// read follows the process's output: "ready", then "completed N" lines, then
// "result JSON".
func (p *scaleProc) read(out io.Reader) {
	defer close(p.result)
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<30)
	readyOnce := sync.OnceFunc(func() { close(p.ready) })
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "ready":
			readyOnce()
		case strings.HasPrefix(line, "completed "):
			if n, err := strconv.ParseInt(strings.TrimPrefix(line, "completed "), 10, 64); err == nil {
				p.completed.Store(n)
			}
		case strings.HasPrefix(line, "result "):
			var r scaleResult
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "result ")), &r); err != nil {
				p.err = fmt.Errorf("worker process result: %w", err)
				return
			}
			p.completed.Store(r.Completed)
			p.result <- r
			return
		}
	}
	p.err = errors.Join(sc.Err(), errors.New("worker process wrote no result"))
}

// finishScaleProcs tells every process to stop, and collects their results.
func finishScaleProcs(procs []*scaleProc) ([]scaleResult, error) {
	var errs []error
	for _, p := range procs {
		p.stdin.Close()
	}
	var out []scaleResult
	for _, p := range procs {
		r, ok := <-p.result
		if werr := p.cmd.Wait(); werr != nil {
			errs = append(errs, fmt.Errorf("worker process: %w", werr))
		}
		if !ok {
			errs = append(errs, p.err)
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// scaleDrain is W8's drain by n processes: ScaleJobs jobs inserted, then
// worked down by n worker processes at once.
func (b *bench) scaleDrain(n int) func(context.Context, System) ([]result, error) {
	name := fmt.Sprintf("W8 drain by %d process", n)
	if n > 1 {
		name += "es"
	}
	return func(ctx context.Context, sys System) ([]result, error) {
		return b.procsDrain(ctx, sys, n, b.o.ScaleJobs, drainLimits{}, name, fmt.Sprintf("W8 drain ×%d", n))
	}
}

// limitDrains is W6: LimitJobs jobs drained by LimitProcs processes without
// a limit, then again with the queue's global limit at GlobalLimit, and again
// with a limit of KeyLimit per key over LimitKeys keys, on a system that has
// those limits.
func (b *bench) limitDrains(ctx context.Context, sys System) ([]result, error) {
	n, jobs := b.o.LimitProcs, b.o.LimitJobs
	res, err := b.procsDrain(ctx, sys, n, jobs, drainLimits{}, fmt.Sprintf("W6 drain by %d processes, no limit", n), fmt.Sprintf("W6 ×%d no limit", n))
	if err != nil {
		return nil, err
	}
	if l, ok := sys.(GlobalLimiter); !ok || !l.GlobalLimits() {
		b.p.Linef("%s: %s has no global limit: W6 runs without one only", b.tag, sys.Name())
		return res, nil
	}
	limited, err := b.procsDrain(ctx, sys, n, jobs, drainLimits{global: b.o.GlobalLimit},
		fmt.Sprintf("W6 drain by %d processes, global limit %s", n, group(int64(b.o.GlobalLimit))), fmt.Sprintf("W6 ×%d limit %s", n, compact(b.o.GlobalLimit)))
	res = append(res, limited...)
	if err != nil {
		return res, err
	}
	keyed, err := b.procsDrain(ctx, sys, n, jobs, drainLimits{key: b.o.KeyLimit, keys: b.o.LimitKeys},
		fmt.Sprintf("W6 drain by %d processes, %s per key of %s", n, group(int64(b.o.KeyLimit)), group(int64(b.o.LimitKeys))),
		fmt.Sprintf("W6 ×%d %s/key", n, compact(b.o.KeyLimit)))
	res = append(res, keyed...)
	if err != nil {
		return res, err
	}
	// Each limited drain against the unlimited one of the same round: this
	// machine's speed drifts between rounds more than within one, so the
	// median of these ratios is steadier than the ratio of the medians.
	unlimited := res[0].v
	res = append(res,
		result{fig(fmt.Sprintf("W6 global limit %s / no limit, in each round", group(int64(b.o.GlobalLimit))), "", "ratio", "higher", ""),
			limited[0].v / unlimited},
		result{fig(fmt.Sprintf("W6 %s per key / no limit, in each round", group(int64(b.o.KeyLimit))), "", "ratio", "higher", ""),
			keyed[0].v / unlimited})
	return res, nil
}

// drainLimits are the limits of a W6 drain: the queue's global limit, its
// limit per key and the number of keys its jobs have; 0: none.
type drainLimits struct {
	global, key, keys int
}

// procsDrain inserts jobs jobs, then has n worker processes work them down
// at once under limits, and returns the throughput as the figure named name
// (short on plots).
func (b *bench) procsDrain(ctx context.Context, sys System, n, jobs int, limits drainLimits, name, short string) ([]result, error) {
	if err := b.withClient(ctx, sys, ClientConfig{Keys: limits.keys}, func(c Client) error {
		if ls, ok := c.(LimitSetter); ok {
			if err := ls.SetLimits(ctx, limits.global, limits.key); err != nil {
				return err
			}
		}
		return b.insertAll(ctx, c, jobs)
	}); err != nil {
		return nil, err
	}
	if err := execSQL(ctx, b.admin, "VACUUM ANALYZE "+sys.JobTable()); err != nil {
		return nil, err
	}
	procs, err := b.startScaleProcs(ctx, sys, n, false, 0, limits)
	if err != nil {
		_, ferr := finishScaleProcs(procs)
		return nil, errors.Join(err, ferr)
	}
	start := time.Now()
	for _, p := range procs {
		if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
			_, ferr := finishScaleProcs(procs)
			return nil, errors.Join(err, ferr)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, b.o.Timeout)
	defer cancel()
	var elapsed time.Duration
	for {
		var sum int64
		for _, p := range procs {
			sum += p.completed.Load()
		}
		if sum >= int64(jobs) {
			elapsed = time.Since(start)
			break
		}
		b.status("%d processes: %s of %s jobs completed", n, group(sum), group(int64(jobs)))
		select {
		case <-wctx.Done():
			_, ferr := finishScaleProcs(procs)
			return nil, errors.Join(fmt.Errorf("%s of %s jobs completed: %w", group(sum), group(int64(jobs)), wctx.Err()), ferr)
		case <-time.After(5 * time.Millisecond):
		}
	}
	results, err := finishScaleProcs(procs)
	if err != nil {
		return nil, err
	}
	// The processes' counts said the drain was over; the table must agree.
	done, err := countRows(ctx, b.admin, sys.JobTable(), "state = 'completed'")
	if err != nil {
		return nil, err
	}
	if done != int64(jobs) {
		return nil, fmt.Errorf("%s: %d jobs completed in the table, want %d", name, done, jobs)
	}
	claims, counted := sumClaims(results)
	b.p.Linef("%s: %s", b.tag, scaleStats(results))
	res := []result{{fig(name, short, "jobs/s", "higher", "throughput"), float64(jobs) / elapsed.Seconds()}}
	if counted {
		res = append(res, result{fig(name+" claims", "", "per s", "", ""), float64(claims) / elapsed.Seconds()})
	}
	return res, nil
}

// scaleMixed is W8's mixed load: ScaleRate jobs/s offered for ScaleDuration
// by W2's producer in this process, worked by ScaleProcs processes.
func (b *bench) scaleMixed(ctx context.Context, sys System) ([]result, error) {
	n, rate, d := b.o.ScaleMixedProcs, b.o.ScaleRate, b.o.ScaleDuration
	name := fmt.Sprintf("W8 %s/s by %d processes", group(int64(rate)), n)
	short := fmt.Sprintf("W8 %s/s ×%d", compact(rate), n)
	capacity := int(float64(rate)*d.Seconds()) + rate + b.o.Batch
	rec := newRecorder(capacity)
	var (
		o       offered
		results []scaleResult
	)
	err := b.withClient(ctx, sys, ClientConfig{}, func(c Client) error {
		procs, err := b.startScaleProcs(ctx, sys, n, true, capacity, drainLimits{})
		if err != nil {
			_, ferr := finishScaleProcs(procs)
			return errors.Join(err, ferr)
		}
		for _, p := range procs {
			if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
				_, ferr := finishScaleProcs(procs)
				return errors.Join(err, ferr)
			}
		}
		counter := procsClient{Client: c, procs: procs}
		if err := b.watchOffer(ctx, counter, rec, rate, d, b.produceBatches, &o); err != nil {
			_, ferr := finishScaleProcs(procs)
			return errors.Join(err, ferr)
		}
		// Wait up to pickupGrace for the last jobs, by the processes' counts.
		deadline := time.Now().Add(pickupGrace)
		for counter.Completed() < rec.inserted.Load() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		until := since()
		results, err = finishScaleProcs(procs)
		if err != nil {
			return err
		}
		wallEpoch := epoch.UnixNano()
		for _, r := range results {
			for seq, at := range r.Started {
				if at != 0 && seq < len(rec.started) {
					rec.started[seq].CompareAndSwap(0, at-wallEpoch)
				}
			}
		}
		o.pickups = rec.pickups(until)
		return nil
	})
	if err != nil {
		return nil, err
	}
	b.p.Linef("%s: %s", b.tag, scaleStats(results))
	secs := o.elapsed.Seconds()
	res := []result{
		{fig(name+" completed", short+" done", "jobs/s", "higher", "throughput"), float64(o.completed) / secs},
		{fig(name+" backlog at end", "", "jobs", "lower", ""), float64(max(o.inserted-o.completed, 0))},
		{fig(name+" pickup p50", short+" p50", "ms", "lower", "latency"), percentile(o.pickups, 0.50)},
		{fig(name+" pickup p99", short+" p99", "ms", "lower", "latency"), percentile(o.pickups, 0.99)},
	}
	if claims, counted := sumClaims(results); counted {
		res = append(res, result{fig(name+" claims", "", "per s", "", ""), float64(claims) / secs})
	}
	return res, nil
}

// procsClient is the inserting client of this process, whose Completed is
// the worker processes' sum, for watchOffer.
type procsClient struct {
	Client
	procs []*scaleProc
}

func (p procsClient) Completed() int64 {
	var sum int64
	for _, proc := range p.procs {
		sum += proc.completed.Load()
	}
	return sum
}

func sumClaims(results []scaleResult) (int64, bool) {
	var sum int64
	for _, r := range results {
		if r.Claims < 0 {
			return 0, false
		}
		sum += r.Claims
	}
	return sum, len(results) > 0
}

func scaleStats(results []scaleResult) string {
	var parts []string
	for i, r := range results {
		parts = append(parts, fmt.Sprintf("process %d: %s jobs %s", i, group(r.Completed), r.Stats))
	}
	return strings.Join(parts, "; ")
}

// runScaleChild is a W8 worker process: ready, then working from "go" on
// stdin until stdin ends, reporting its completed count every 5 ms.
func runScaleChild(ctx context.Context, s childSpec, sys System, stdin io.Reader, stdout, stderr io.Writer) error {
	pool, err := openPool(ctx, s.DatabaseURL, s.App, s.MaxConns)
	if err != nil {
		return err
	}
	defer pool.Close()
	var started []atomic.Int64
	cfg := ClientConfig{
		Work: true, Settings: Throughput, MaxWorkers: s.Workers, GlobalLimit: s.Scale.GlobalLimit, KeyLimit: s.Scale.KeyLimit,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if s.Scale.Record {
		started = make([]atomic.Int64, s.Scale.Capacity)
		cfg.OnStart = func(seq int64) {
			if seq >= 0 && seq < int64(len(started)) {
				started[seq].CompareAndSwap(0, time.Now().UnixNano())
			}
		}
	}
	c, err := sys.Open(pool, cfg)
	if err != nil {
		return err
	}
	if closer, ok := c.(interface{ Close() }); ok {
		defer closer.Close()
	}
	var mu sync.Mutex // serialises stdout
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stdout, format+"\n", args...)
	}
	say("ready")
	in := bufio.NewReader(stdin)
	if line, err := in.ReadString('\n'); err != nil || strings.TrimSpace(line) != "go" {
		return fmt.Errorf("weirbench: worker process told %q, not go: %v", line, err)
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, in)
		close(eof)
	}()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	wctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
loop:
	for {
		select {
		case <-eof:
			break loop
		case <-wctx.Done():
			break loop
		case <-tick.C:
			say("completed %d", c.Completed())
		}
	}
	sctx, scancel := context.WithTimeout(context.Background(), stopBudget)
	defer scancel()
	err = c.Stop(sctx)
	r := scaleResult{Completed: c.Completed(), Claims: -1}
	if cc, ok := c.(interface{ Claims() int64 }); ok {
		r.Claims = cc.Claims()
	}
	if str, ok := c.(fmt.Stringer); ok {
		r.Stats = str.String()
	}
	if started != nil {
		r.Started = make([]int64, len(started))
		for i := range started {
			r.Started[i] = started[i].Load()
		}
	}
	data, merr := json.Marshal(r)
	if merr != nil {
		return errors.Join(err, merr)
	}
	say("result %s", data)
	return errors.Join(err, wctx.Err())
}
