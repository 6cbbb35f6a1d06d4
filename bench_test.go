package weir_test

import (
	"fmt"
	"testing"

	"github.com/weirq/weir"
)

// Run with: make bench (go test -run '^$' -bench . -benchtime ... .)
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
