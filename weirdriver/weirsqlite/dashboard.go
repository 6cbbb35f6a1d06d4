package weirsqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// QueueListEstimated counts exactly, as QueueList does: an embedded store
// holds what one machine runs, and SQLite has no sampling to make a large
// table's count cheaper.
func (e *executor) QueueListEstimated(ctx context.Context) ([]*weirtype.QueueStats, error) {
	return e.QueueList(ctx)
}

// jobThroughput counts the jobs finalized from ?1 on by bucket of ?2
// microseconds starting at ?1, through weir_job_finalized_idx. Returns each
// bucket's number, its completed, cancelled and discarded jobs and the mean
// pickup of its completed ones in microseconds (NULL when none completed).
const jobThroughput = `
SELECT (finalized_at - ?1) / ?2 AS n,
	sum(state = 'completed'), sum(state = 'cancelled'), sum(state = 'discarded'),
	avg(CASE WHEN state = 'completed' THEN attempted_at - scheduled_at END)
FROM weir_job
WHERE finalized_at IS NOT NULL AND finalized_at >= ?1
GROUP BY n
ORDER BY n`

func (e *executor) JobThroughput(ctx context.Context, p *weirdriver.JobThroughputParams) (_ *weirtype.Throughput, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckThroughput(p); err != nil {
		return nil, fmt.Errorf("count throughput: %w", err)
	}
	res := &weirtype.Throughput{Now: fromMicros(nowMicros())}
	rows, err := e.reader().QueryContext(ctx, jobThroughput, p.Since.UnixMicro(), p.Width.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("count throughput: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			n      int64
			b      weirtype.ThroughputBucket
			pickup sql.NullFloat64
		)
		if err := rows.Scan(&n, &b.Completed, &b.Cancelled, &b.Discarded, &pickup); err != nil {
			return nil, fmt.Errorf("count throughput: %w", err)
		}
		b.Start = p.Since.Add(time.Duration(n) * p.Width).UTC()
		if pickup.Valid {
			b.PickupMean = time.Duration(pickup.Float64) * time.Microsecond
		}
		res.Buckets = append(res.Buckets, &b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count throughput: %w", err)
	}
	return res, nil
}
