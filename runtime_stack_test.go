package weir_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/weirq/weir"
)

// TestIdleWorkerKeepsStack checks that a worker's stack, grown by its handler,
// is not shrunk by garbage collections while the worker waits for its next
// job: otherwise every job after a collection grows it again, copying it frame
// by frame, which under load costs a deep handler (such as one that traces)
// about a tenth of the drain.
//
// Not parallel: it reads the process's stack memory, which other tests'
// goroutines would move.
func TestIdleWorkerKeepsStack(t *testing.T) {
	b := setup(t, nil)
	const workers = 64
	var running sync.WaitGroup
	running.Add(workers)
	release := make(chan struct{})
	w := probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		deepStack(12 << 10) // the stack grows to 16 KiB
		running.Done()
		<-release // so that every job has a worker of its own
		return nil
	})
	for range workers {
		b.insertProbe(t, "deep", nil)
	}
	c := b.start(t, fastConfig(w, map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: workers}}))
	running.Wait()
	close(release)
	waitFor(t, 10*time.Second, "the jobs' outcomes", func() bool { return c.Stats().Finalized == workers })

	before := stackInuse()
	for range 3 {
		runtime.GC()
	}
	after := stackInuse()
	t.Logf("stack memory: %d KiB before the collections, %d KiB after", before>>10, after>>10)
	// Shrunk, each idle worker's 16 KiB would go to 8, then 4 or less.
	if shrunk := int64(before) - int64(after); shrunk > workers*4<<10 {
		t.Fatalf("the collections freed %d KiB of stack: idle workers' stacks shrank", shrunk>>10)
	}
}

// deepStack uses at least n bytes of stack.
//
//go:noinline
func deepStack(n int) byte {
	var frame [1024]byte
	frame[n%len(frame)] = byte(n)
	if n <= len(frame) {
		return frame[0]
	}
	return deepStack(n-len(frame)) + frame[1]
}

func stackInuse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.StackInuse
}
