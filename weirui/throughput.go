package weirui

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Throughput buckets: the last hour in twelve buckets of five minutes.
const (
	bucketWidth = 5 * time.Minute
	bucketCount = 12
)

// throughput is the jobs finalized over the last hour, by bucket, newest
// first. It is nil where the driver gives no SQL pool (SQLite).
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

// pgPool is what weirpgx.Driver offers beyond weirdriver.Driver.
type pgPool interface {
	Pool() *pgxpool.Pool
	Schema() string
}

// throughputSQL reads one hour of weir_job_finalized_idx (finalized_at,
// partial on finalized_at IS NOT NULL): the rows finalized in that hour and
// no others. Buckets are counted from the query's start so that they line
// up on five-minute marks.
const throughputSQL = `
SELECT to_timestamp(floor(extract(epoch FROM finalized_at) / $1) * $1) AS start,
       count(*) FILTER (WHERE state = 'completed'),
       count(*) FILTER (WHERE state = 'cancelled'),
       count(*) FILTER (WHERE state = 'discarded'),
       extract(epoch FROM avg(attempted_at - scheduled_at) FILTER (WHERE state = 'completed'))
FROM %s
WHERE finalized_at IS NOT NULL AND finalized_at >= to_timestamp(floor(extract(epoch FROM now()) / $1) * $1 - $1 * ($2 - 1))
GROUP BY 1
ORDER BY 1 DESC`

func (h *handler) throughput(ctx context.Context) (*throughput, error) {
	pp, ok := h.client.Driver().(pgPool)
	if !ok {
		return nil, nil
	}
	table := pgx.Identifier{pp.Schema(), "weir_job"}.Sanitize()
	width := bucketWidth.Seconds()
	rows, err := pp.Pool().Query(ctx, fmt.Sprintf(throughputSQL, table), width, bucketCount)
	if err != nil {
		return nil, err
	}
	byStart := map[int64]*bucket{}
	for rows.Next() {
		b := &bucket{}
		var pickup *float64
		if err := rows.Scan(&b.Start, &b.Completed, &b.Cancelled, &b.Discarded, &pickup); err != nil {
			rows.Close()
			return nil, err
		}
		if pickup != nil {
			b.Pickup = &jsonDuration{time.Duration(*pickup * float64(time.Second))}
		}
		byStart[b.Start.Unix()] = b
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// Every bucket of the hour, empty ones too, newest first.
	newest := time.Now().Truncate(bucketWidth)
	out := &throughput{}
	for i := range bucketCount {
		start := newest.Add(-time.Duration(i) * bucketWidth)
		b := byStart[start.Unix()]
		if b == nil {
			b = &bucket{}
		}
		b.Start = start.UTC()
		minutes := bucketWidth.Minutes()
		if i == 0 {
			minutes = max(time.Since(start).Minutes(), 1.0/60)
		}
		b.PerMinute = float64(b.Completed) / minutes
		out.Buckets = append(out.Buckets, b)
	}
	return out, nil
}
