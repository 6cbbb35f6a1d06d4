package weirsqlite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weirq/weir"
)

type failArgs struct{}

func (failArgs) Kind() string { return "fail" }

// TestHandlerErrorNotStorable checks that a handler's error is recorded as on
// PostgreSQL: NUL and invalid UTF-8 replaced by U+FFFD.
func TestHandlerErrorNotStorable(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(func(ctx context.Context, job *weir.Job[failArgs]) error {
		return errors.New("bad\x00byte\xff")
	}))
	c := startClient(t, d, &weir.Config{
		Workers: workers,
		Queues:  map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 1}},
	})
	events, stop := c.Subscribe(weir.EventJobDiscarded)
	defer stop()
	res, err := c.Insert(testCtx(t), failArgs{}, &weir.InsertOpts{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-events:
	case <-time.After(30 * time.Second):
		t.Fatalf("job %d was never discarded", res.Job.ID)
	}
	j, err := c.JobGet(testCtx(t), res.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != weir.JobStateDiscarded || len(j.Errors) != 1 || j.Errors[0].Error != "bad\uFFFDbyte\uFFFD" {
		t.Fatalf("job %s with errors %+v", j.State, j.Errors)
	}
}

// farRetry retries after the years weir stores.
type farRetry struct{}

func (farRetry) NextRetry(*weir.JobRow) time.Time {
	return time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)
}

// TestRetryPastYear9999 checks that a retry policy's time past the year 9999 is
// stored as the last moment of that year, as on PostgreSQL, rather than
// overflowing the microsecond count.
func TestRetryPastYear9999(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(func(ctx context.Context, job *weir.Job[failArgs]) error {
		return errors.New("again")
	}))
	c := startClient(t, d, &weir.Config{
		Workers:     workers,
		Queues:      map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 1}},
		RetryPolicy: farRetry{},
	})
	events, stop := c.Subscribe(weir.EventJobFailed)
	defer stop()
	res, err := c.Insert(testCtx(t), failArgs{}, &weir.InsertOpts{MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-events:
	case <-time.After(30 * time.Second):
		t.Fatalf("job %d never failed", res.Job.ID)
	}
	j, err := c.JobGet(testCtx(t), res.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(9999, 12, 31, 23, 59, 59, 999_999_000, time.UTC); j.State != weir.JobStateRetryable || !j.ScheduledAt.Equal(want) {
		t.Fatalf("job %s at %s, want retryable at %s", j.State, j.ScheduledAt, want)
	}
}
