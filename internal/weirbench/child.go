package weirbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// ChildEnv is the environment variable by which Run tells the program it
// re-executes (Options.ChildCommand) to be W5's worker process. A program that
// finds it set calls RunChild with its value, and does nothing else.
const ChildEnv = "WEIRBENCH_WORKER"

// childSpec is what the worker process is to do.
type childSpec struct {
	System      string        `json:"system"`
	DatabaseURL string        `json:"database_url"`
	App         string        `json:"app"`
	MaxConns    int           `json:"max_conns"`
	Jobs        int           `json:"jobs"`
	Workers     int           `json:"workers"`
	Timeout     time.Duration `json:"timeout"`
	// Scale, when set, makes it one of W8's worker processes (scale.go).
	Scale *scaleSpec `json:"scale,omitempty"`
}

// childResult is what it writes on stdout.
type childResult struct {
	Elapsed time.Duration `json:"elapsed"`
	PeakRSS int64         `json:"peak_rss,omitempty"` // bytes; 0: not known
	Stats   string        `json:"stats,omitempty"`
}

// rss is W5's peak RSS: RSSJobs jobs are bulk-inserted, then a process of its
// own, this program re-executed, drains them with RSSWorkers handlers and the
// Throughput settings, and exits. On Linux the process reports its own peak
// (VmHWM); elsewhere the kernel's maxrss of the process is taken, which may
// include the parent's peak.
func (b *bench) rss(ctx context.Context, sys System) ([]result, error) {
	n := b.o.RSSJobs
	table := sys.JobTable()
	if err := b.withClient(ctx, sys, ClientConfig{}, func(c Client) error { return b.insertAll(ctx, c, n) }); err != nil {
		return nil, err
	}
	b.status("VACUUM ANALYZE")
	if err := execSQL(ctx, b.admin, "VACUUM ANALYZE "+table); err != nil {
		return nil, err
	}
	app := "weirbench_" + sys.Name() + "_worker"
	spec, err := json.Marshal(childSpec{
		System: sys.Name(), DatabaseURL: b.o.DatabaseURL, App: app, MaxConns: b.o.MaxConns,
		Jobs: n, Workers: b.o.RSSWorkers, Timeout: b.o.Timeout,
	})
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, b.o.ChildCommand[0], b.o.ChildCommand[1:]...)
	cmd.Env = append(os.Environ(), ChildEnv+"="+string(spec))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, b.p
	start := time.Now()
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				b.status("worker process draining %s jobs: %.0f s", group(int64(n)), time.Since(start).Seconds())
			}
		}
	}()
	err = cmd.Run()
	close(done)
	if err != nil {
		return nil, fmt.Errorf("worker process: %w", err)
	}
	var res childResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("worker process wrote %q: %w", strings.TrimSpace(out.String()), err)
	}
	peak := res.PeakRSS
	if peak == 0 {
		var ok bool
		if peak, ok = maxRSS(cmd.ProcessState); !ok {
			return nil, fmt.Errorf("the peak RSS of a process is not known on %s", runtime.GOOS)
		}
	}
	if res.Stats != "" {
		b.p.Linef("%s: worker process: %s", b.tag, res.Stats)
	}
	if err := waitGone(ctx, b.admin, app); err != nil {
		return nil, err
	}
	completed, err := countRows(ctx, b.admin, table, "state = 'completed'")
	if err != nil {
		return nil, err
	}
	if completed != int64(n) {
		return nil, fmt.Errorf("%s: %d jobs completed in the table, want %d", sys.Name(), completed, n)
	}
	return []result{
		{fig("W5 peak RSS", "W5 peak RSS", "MiB", "lower", "cost"), mib(peak)},
		{fig("W5 drain "+group(int64(n))+" in own process", "W5 drain "+compactJobs(n), "jobs/s", "higher", "throughput"),
			float64(n) / res.Elapsed.Seconds()},
	}, nil
}

// compactJobs writes a job count briefly: 1000000 → "1M".
func compactJobs(n int) string {
	if n >= 1_000_000 && n%100_000 == 0 {
		return fmt.Sprintf("%gM", float64(n)/1e6)
	}
	return compact(n)
}

// RunChild is W5's worker process, run by a program that found ChildEnv in
// its environment, with spec its value and the systems Run was given: it
// works the jobs Run inserted until all are completed, then writes what it
// measured on stdout. Warnings go to stderr.
func RunChild(ctx context.Context, spec string, stdout, stderr io.Writer, systems ...System) error {
	var s childSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		return fmt.Errorf("weirbench: bad %s: %w", ChildEnv, err)
	}
	var sys System
	for _, candidate := range systems {
		if candidate.Name() == s.System {
			sys = candidate
		}
	}
	if sys == nil {
		return fmt.Errorf("weirbench: worker process for %q, which is not a system here", s.System)
	}
	if s.Scale != nil {
		return runScaleChild(ctx, s, sys, os.Stdin, stdout, stderr)
	}
	pool, err := openPool(ctx, s.DatabaseURL, s.App, s.MaxConns)
	if err != nil {
		return err
	}
	defer pool.Close()
	c, err := sys.Open(pool, ClientConfig{
		Work:       true,
		Settings:   Throughput,
		MaxWorkers: s.Workers,
		Logger:     slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	b := &bench{o: Options{Timeout: s.Timeout}, p: newProgress(nil)}
	elapsed, err := b.work(ctx, c, s.Jobs)
	if err != nil {
		return err
	}
	res := childResult{Elapsed: elapsed}
	res.PeakRSS, _ = peakRSS()
	if str, ok := c.(fmt.Stringer); ok {
		res.Stats = str.String()
	}
	return json.NewEncoder(stdout).Encode(res)
}
