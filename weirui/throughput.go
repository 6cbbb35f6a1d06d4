package weirui

import (
	"context"
	"time"

	"github.com/weirq/weir"
)

// Throughput buckets: the last hour in twelve buckets of five minutes.
const (
	bucketWidth = 5 * time.Minute
	bucketCount = 12
)

// settleTime is how long after a bucket ends, by the database's clock, it
// is taken as finished and kept: a job's finalized_at is its transaction's
// start, and a transaction that began in the bucket may commit a little
// after it ends.
const settleTime = time.Minute

// throughput is the jobs finalized over the last hour, by bucket, newest
// first.
type throughput struct {
	Buckets []*bucket
}

type bucket struct {
	Start     time.Time `json:"start"`
	Completed int64     `json:"completed"`
	Cancelled int64     `json:"cancelled"`
	Discarded int64     `json:"discarded"`
	// PerMinute is Completed over the bucket's minutes.
	PerMinute float64 `json:"completed_per_minute"`
	// Pickup is the mean time from scheduled_at to attempted_at of the
	// completed jobs: their last attempt's wait for a worker.
	Pickup *jsonDuration `json:"pickup_mean"`
}

type jsonDuration struct{ time.Duration }

func (d jsonDuration) MarshalText() ([]byte, error) {
	return []byte(d.Round(time.Millisecond).String()), nil
}

func (d *jsonDuration) String() string { return d.Round(time.Millisecond).String() }

// finishedBuckets keeps the counts of the buckets that have ended, by start,
// so that a poll counts only the buckets still filling: the newest one (and
// the one before it, for a minute after it ends). Each request that finds a
// bucket missing counts from the oldest missing one on; one counts at a time,
// and the others wait for it and then find its buckets kept.
type finishedBuckets struct {
	turn chan struct{} // holds a token while a request counts
	kept map[int64]*weir.ThroughputBucket
}

func newFinishedBuckets() *finishedBuckets {
	f := &finishedBuckets{turn: make(chan struct{}, 1), kept: map[int64]*weir.ThroughputBucket{}}
	f.turn <- struct{}{}
	return f
}

func (h *handler) throughput(ctx context.Context) (*throughput, error) {
	return h.throughputAt(ctx, time.Now())
}

// throughputAt is the hour before now in buckets, newest first.
func (h *handler) throughputAt(ctx context.Context, now time.Time) (*throughput, error) {
	newest := now.Truncate(bucketWidth)
	oldest := newest.Add(-(bucketCount - 1) * bucketWidth)
	f := h.buckets
	select {
	case <-f.turn:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { f.turn <- struct{}{} }()

	for start := range f.kept {
		if start < oldest.Unix() {
			delete(f.kept, start)
		}
	}
	since := oldest
	for since.Before(newest) && f.kept[since.Unix()] != nil {
		since = since.Add(bucketWidth)
	}
	res, err := h.client.JobThroughput(ctx, since, bucketWidth)
	if err != nil {
		return nil, err
	}
	counted := map[int64]*weir.ThroughputBucket{}
	for _, b := range res.Buckets {
		counted[b.Start.Unix()] = b
	}
	// Keep what has ended by the database's clock, empty buckets too.
	for start := since; start.Before(newest); start = start.Add(bucketWidth) {
		if !start.Add(bucketWidth + settleTime).After(res.Now) {
			b := counted[start.Unix()]
			if b == nil {
				b = &weir.ThroughputBucket{Start: start.UTC()}
			}
			f.kept[start.Unix()] = b
		}
	}

	out := &throughput{}
	for i := range bucketCount {
		start := newest.Add(-time.Duration(i) * bucketWidth)
		b := &bucket{Start: start.UTC()}
		c := counted[start.Unix()]
		if start.Before(since) {
			c = f.kept[start.Unix()]
		}
		if c != nil {
			b.Completed, b.Cancelled, b.Discarded = c.Completed, c.Cancelled, c.Discarded
			if c.Completed > 0 {
				b.Pickup = &jsonDuration{c.PickupMean}
			}
		}
		minutes := bucketWidth.Minutes()
		if i == 0 {
			minutes = max(now.Sub(start).Minutes(), 1.0/60)
		}
		b.PerMinute = float64(b.Completed) / minutes
		out.Buckets = append(out.Buckets, b)
	}
	return out, nil
}
