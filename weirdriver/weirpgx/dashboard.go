package weirpgx

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// The statements of the calls a dashboard polls (QueueListEstimated), which
// must answer in milliseconds on a table of millions of jobs without a
// migration of their own: they read the indexes that the claim path and
// maintenance already keep.

// jobSizeSQL reads what the planner knows of the job table's size:
// reltuples and relpages as the last VACUUM or ANALYZE left them (reltuples
// -1 before the first), and the pages the table has now.
const jobSizeSQL = `
SELECT c.reltuples, c.relpages, pg_relation_size(c.oid) / current_setting('block_size')::bigint
FROM pg_class AS c
WHERE c.oid = '{job}'::regclass`

// queueCountsSQL counts the jobs of each queue by state, one branch per
// partial index: weir_job_available_idx (an index-only scan, which also
// gives the oldest scheduled time), weir_job_pending_idx (scheduled and
// retryable) and weir_job_running_idx, then the final states by %s, either
// queueFinalExact or queueFinalSampled. Paused queues without jobs come with
// state NULL. Returns name, state, count, the oldest scheduled time of its
// available jobs, whether the count is a sample's, and paused; ordered by
// name and state.
const queueCountsSQL = `
WITH c AS (
	SELECT queue, 'available'::text AS state, count(*) AS n, min(scheduled_at) AS oldest, false AS sampled
	FROM {job} WHERE state = 'available' GROUP BY queue
	UNION ALL
	SELECT queue, state, count(*), NULL, false
	FROM {job} WHERE state IN ('scheduled', 'retryable') GROUP BY queue, state
	UNION ALL
	SELECT queue, 'running', count(*), NULL, false
	FROM {job} WHERE state = 'running' GROUP BY queue
	UNION ALL
	%s
)
SELECT coalesce(c.queue, p.name), c.state, coalesce(c.n, 0), c.oldest, coalesce(c.sampled, false), p.paused_at IS NOT NULL,
	coalesce(p.global_limit, 0), coalesce(p.rate_limit, 0), coalesce(p.rate_period_us, 0),
	coalesce(p.key_limit, 0), coalesce(p.key_rate, 0), coalesce(p.key_rate_period_us, 0), coalesce(p.key, '')
FROM c
FULL JOIN ` + queueSettings + ` AS p ON p.name = c.queue
ORDER BY 1, 2`

// queueFinalExact counts the final jobs exactly: on a small table.
const queueFinalExact = `SELECT queue, state, count(*), NULL, false
	FROM {job} WHERE finalized_at IS NOT NULL GROUP BY queue, state`

// queueFinalSampled counts the final jobs in a sample of the table's pages,
// $1 percent of them (SYSTEM sampling reads whole pages, chosen at random).
const queueFinalSampled = `SELECT queue, state, count(*), NULL, true
	FROM {job} TABLESAMPLE SYSTEM ($1::real) WHERE finalized_at IS NOT NULL GROUP BY queue, state`

// scanQueues reads the rows of queueListSQL or queueCountsSQL into queues,
// and sums the counts of the states that are not final (counted exactly) and
// the counts of a sample.
func scanQueues(r rows) (out []*weirtype.QueueStats, pending, sampled int64, err error) {
	for r.Next() {
		var (
			queue     string
			state     *weirtype.JobState
			n         int64
			oldest    *time.Time
			isSampled bool
			paused    bool
			limit     int
			rate      int
			periodUS  int64
			keyLimit  int
			keyRate   int
			keyPerUS  int64
			key       string
		)
		if err := r.Scan(&queue, &state, &n, &oldest, &isSampled, &paused, &limit, &rate, &periodUS,
			&keyLimit, &keyRate, &keyPerUS, &key); err != nil {
			return nil, 0, 0, fmt.Errorf("list queues: %w", err)
		}
		if len(out) == 0 || out[len(out)-1].Name != queue {
			out = append(out, &weirtype.QueueStats{Name: queue, Counts: map[weirtype.JobState]int64{}, Paused: paused,
				GlobalLimit: limit, RateLimit: rate, RatePeriod: time.Duration(periodUS) * time.Microsecond,
				KeyLimit: keyLimit, KeyRate: keyRate, KeyRatePeriod: time.Duration(keyPerUS) * time.Microsecond, Key: key})
		}
		if state == nil {
			continue
		}
		q := out[len(out)-1]
		q.Counts[*state] = n
		if *state == weirtype.JobStateAvailable && oldest != nil {
			q.OldestAvailableAt = oldest.UTC()
		}
		if isSampled {
			sampled += n
		} else if !state.Final() {
			pending += n
		}
	}
	if err := r.Err(); err != nil {
		return nil, 0, 0, fmt.Errorf("list queues: %w", err)
	}
	return out, pending, sampled, nil
}

// estimateSizes decide when QueueListEstimated samples the final jobs.
type estimateSizes struct {
	// exactPages: a table of at most this many pages (8 kB each by default)
	// is counted exactly; scanning it costs about what sampling would.
	exactPages int64
	// samplePages: a larger table has about this many of its pages sampled.
	samplePages int64
}

// defaultEstimateSizes: 2,000 pages are 16 MB, some 50,000 jobs of small
// args; a sample of them costs tens of milliseconds at most, and counts a
// state that holds 1% of one of ten queues' jobs from about 50 sampled jobs
// (to within some 15% when they are spread over the table).
var defaultEstimateSizes = estimateSizes{exactPages: 2000, samplePages: 2000}

func (e *executor) QueueListEstimated(ctx context.Context) (_ []*weirtype.QueueStats, err error) {
	defer func() { err = schemaErr(err) }()
	var (
		reltuples       float64
		relpages, pages int64
	)
	if err := e.db.QueryRow(ctx, e.q.jobSize).Scan(&reltuples, &relpages, &pages); err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	// Never analyzed (reltuples -1), or small: count exactly.
	sample := reltuples >= 0 && relpages > 0 && pages > e.q.estimate.exactPages
	var (
		sql  = e.q.queueCountsExact
		args []any
	)
	if sample {
		sql = e.q.queueCountsSampled
		args = append(args, min(100, 100*float64(e.q.estimate.samplePages)/float64(pages)))
	}
	r, err := e.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	defer r.Close()
	out, pending, sampled, err := scanQueues(r)
	if err != nil {
		return nil, err
	}
	if sample {
		// The planner's estimate of the rows now (its density times the
		// pages the table has now), less the jobs counted exactly, is the
		// final jobs; the sample shares them out by queue and state.
		final := max(0, reltuples/float64(relpages)*float64(pages)-float64(pending))
		for _, q := range out {
			q.Estimated = map[weirtype.JobState]bool{}
			for _, s := range weirtype.JobStates() {
				if !s.Final() {
					continue
				}
				q.Estimated[s] = true
				if n, ok := q.Counts[s]; ok && sampled > 0 {
					q.Counts[s] = int64(math.Round(final * float64(n) / float64(sampled)))
				}
			}
		}
	}
	return out, nil
}

// jobThroughputSQL counts the jobs finalized from $1 on by bucket of $2
// seconds starting at $1, reading the range of weir_job_finalized_idx
// (finalized_at, partial on finalized_at IS NOT NULL) and those rows, no
// others. Returns the database's now() with each bucket's number, its
// completed, cancelled and discarded jobs and the mean pickup of its
// completed ones in seconds; one row of NULLs but now() when no job was
// finalized.
const jobThroughputSQL = `
WITH b AS (
	SELECT floor(extract(epoch FROM finalized_at - $1::timestamptz) / $2::float8)::bigint AS n,
		count(*) FILTER (WHERE state = 'completed') AS completed,
		count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
		count(*) FILTER (WHERE state = 'discarded') AS discarded,
		extract(epoch FROM avg(attempted_at - scheduled_at) FILTER (WHERE state = 'completed'))::float8 AS pickup
	FROM {job}
	WHERE finalized_at IS NOT NULL AND finalized_at >= $1::timestamptz
	GROUP BY 1
)
SELECT now(), b.n, b.completed, b.cancelled, b.discarded, b.pickup
FROM (SELECT) AS one LEFT JOIN b ON true
ORDER BY b.n`

func (e *executor) JobThroughput(ctx context.Context, p *weirdriver.JobThroughputParams) (_ *weirtype.Throughput, err error) {
	defer func() { err = schemaErr(err) }()
	if err := weirdriver.CheckThroughput(p); err != nil {
		return nil, fmt.Errorf("count throughput: %w", err)
	}
	r, err := e.db.Query(ctx, e.q.jobThroughput, p.Since, p.Width.Seconds())
	if err != nil {
		return nil, fmt.Errorf("count throughput: %w", err)
	}
	defer r.Close()
	res := &weirtype.Throughput{}
	for r.Next() {
		var (
			n                               *int64
			completed, cancelled, discarded *int64
			pickup                          *float64
		)
		if err := r.Scan(&res.Now, &n, &completed, &cancelled, &discarded, &pickup); err != nil {
			return nil, fmt.Errorf("count throughput: %w", err)
		}
		if n == nil {
			continue
		}
		b := &weirtype.ThroughputBucket{
			Start:     p.Since.Add(time.Duration(*n) * p.Width).UTC(),
			Completed: *completed, Cancelled: *cancelled, Discarded: *discarded,
		}
		if pickup != nil {
			b.PickupMean = time.Duration(*pickup * float64(time.Second))
		}
		res.Buckets = append(res.Buckets, b)
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("count throughput: %w", err)
	}
	res.Now = res.Now.UTC()
	return res, nil
}
