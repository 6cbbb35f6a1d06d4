package weir_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir"
)

// Run with: make bench (inserts) and make bench-drain (W1).
// Each benchmark reports jobs/s; see docs/benchmarks.md.

func BenchmarkInsert(b *testing.B) {
	bb := setup(b, nil)
	ctx := testCtx(b)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := bb.client.Insert(ctx, noopArgs{N: i}, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkInsertParallel inserts from 8 goroutines at once.
func BenchmarkInsertParallel(b *testing.B) {
	bb := setup(b, &setupOpts{maxConns: 8})
	ctx := testCtx(b)
	b.SetParallelism(4) // times GOMAXPROCS: 8 goroutines on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := bb.client.Insert(ctx, noopArgs{}, nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

func BenchmarkInsertMany(b *testing.B) {
	for _, size := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			bb := setup(b, nil)
			ctx := testCtx(b)
			params := make([]weir.InsertManyParams, size)
			for i := range params {
				params[i] = weir.InsertManyParams{Args: noopArgs{N: i}}
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := bb.client.InsertMany(ctx, params); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// BenchmarkDrain is W1: 200,000 no-op jobs inserted first, then one client works
// them down. Run with -benchtime 1x (make bench-drain); it reports jobs/s from Start
// to the last outcome written.
func BenchmarkDrain(b *testing.B) {
	const n = 200_000
	const app = "weir_bench_drain"
	bb := setup(b, &setupOpts{maxConns: 20, appName: app})
	ctx := testCtx(b)
	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(func(context.Context, *weir.Job[noopArgs]) error { return nil }))
	var (
		total        time.Duration
		goCPU, dbCPU time.Duration
	)
	b.StopTimer()
	for range b.N {
		if _, err := bb.pool.Exec(ctx, "TRUNCATE "+bb.schema+".weir_job"); err != nil {
			b.Fatal(err)
		}
		batch := make([]weir.InsertManyParams, 5000)
		for i := range batch {
			batch[i] = weir.InsertManyParams{Args: noopArgs{N: i}}
		}
		for range n / len(batch) {
			if _, err := bb.client.InsertMany(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := bb.pool.Exec(ctx, "VACUUM ANALYZE "+bb.schema+".weir_job"); err != nil {
			b.Fatal(err)
		}
		c, err := weir.NewClient(bb.driver, &weir.Config{
			Workers: workers,
			Queues:  map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 1000, Prefetch: 1000}},
			Logger:  slog.New(slog.DiscardHandler),
		})
		if err != nil {
			b.Fatal(err)
		}
		go0, db0 := processCPU(b), backendCPU(b, bb.pool, app)
		start := time.Now()
		if err := c.Start(ctx); err != nil {
			b.Fatal(err)
		}
		tick := time.NewTicker(5 * time.Millisecond)
		for c.Stats().Finalized < n {
			<-tick.C
		}
		tick.Stop()
		total += time.Since(start)
		goCPU += processCPU(b) - go0
		for pid, t := range backendCPU(b, bb.pool, app) {
			dbCPU += t - db0[pid]
		}
		if err := c.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		if got := bb.count(b, "state = 'completed'"); got != n {
			b.Fatalf("%d jobs completed, want %d", got, n)
		}
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "jobs/s")
	// CPU per job, of this process and of the pool's server backends: steadier
	// than jobs/s on a machine shared with other work.
	b.ReportMetric(float64(goCPU.Microseconds())/float64(n*b.N), "client-cpu-µs/job")
	b.ReportMetric(float64(dbCPU.Microseconds())/float64(n*b.N), "server-cpu-µs/job")
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendCPU is the CPU time each server backend with application_name app
// has used, by pid, read from /proc (the server runs on this machine); none
// where /proc does not show them.
func backendCPU(b *testing.B, pool *pgxpool.Pool, app string) map[int32]time.Duration {
	rows, err := pool.Query(context.Background(),
		"SELECT pid FROM pg_stat_activity WHERE application_name = $1", app)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	cpu := make(map[int32]time.Duration, len(pids))
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The fields after the command name, which is in parentheses:
		// utime and stime are the 12th and 13th, in clock ticks (100 per second).
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		cpu[pid] = time.Duration(ut+st) * 10 * time.Millisecond
	}
	return cpu
}
