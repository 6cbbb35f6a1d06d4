package weir

import (
	"context"
	"errors"
	"time"

	"github.com/weirq/weir/internal/maintenance"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// LeaderRow is a leadership's unexpired term: who holds it, since when, and
// until when unless renewed.
type LeaderRow = weirtype.LeaderRow

// Throughput counts the jobs finalized from a time on, by bucket.
type Throughput = weirtype.Throughput

// ThroughputBucket counts the jobs finalized in one bucket of a Throughput.
type ThroughputBucket = weirtype.ThroughputBucket

// Leader returns the term of the client that leads maintenance on the schema
// (rescue, scheduling, pruning, periodic jobs): its id, when it was elected
// and when its term ends unless it renews it, by the database's clock. It
// returns nil, and no error, when nobody leads: no client runs, or a term
// ended and the next election has not happened yet.
func (c *Client) Leader(ctx context.Context) (*LeaderRow, error) {
	var l *LeaderRow
	err := c.operate(ctx, func() (err error) {
		l, err = c.leader(ctx, c.driver.Executor())
		return err
	})
	if err != nil {
		return nil, opErr(err)
	}
	return l, nil
}

// leader is the maintenance leader's term, nil when nobody leads.
func (c *Client) leader(ctx context.Context, exec weirdriver.Executor) (*LeaderRow, error) {
	l, err := exec.LeaderGet(ctx, maintenance.LeaderName)
	if errors.Is(err, weirdriver.ErrNotFound) {
		return nil, nil
	}
	return l, err
}

// JobThroughput counts the jobs finalized (completed, cancelled, discarded)
// from since on, by state, in buckets of width (a second or more) starting at
// since, with the mean wait for a worker of the completed jobs. It lists only
// the buckets that hold a job, oldest first, and the database's clock, by
// which the newest buckets may still be filling. It reads the index on the
// finalization time, so it costs what the jobs finalized since then number,
// whatever the table holds; pruned jobs are not counted.
func (c *Client) JobThroughput(ctx context.Context, since time.Time, width time.Duration) (*Throughput, error) {
	if since.IsZero() {
		return nil, invalidf("since", "throughput since the zero time: give the start of the first bucket")
	}
	if width < weirdriver.MinThroughputWidth {
		return nil, invalidf("width", "throughput bucket width %v is less than %v", width, weirdriver.MinThroughputWidth)
	}
	var res *Throughput
	err := c.operate(ctx, func() (err error) {
		res, err = c.driver.Executor().JobThroughput(ctx, &weirdriver.JobThroughputParams{Since: since, Width: width})
		return err
	})
	if err != nil {
		return nil, opErr(err)
	}
	return res, nil
}
