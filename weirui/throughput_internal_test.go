package weirui

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir"
	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
)

// TestThroughputKeepsFinishedBuckets: a bucket that ended (a minute ago and
// more, by the database's clock) is counted once and kept, so that later
// polls count only the buckets still filling; buckets older than the hour
// are let go; a request waiting for another's count gives up with its
// context.
func TestThroughputKeepsFinishedBuckets(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	pool := dbtest.Pool(t, nil)
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(driver).Up(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	client, err := weir.NewClient(driver, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &handler{client: client, buckets: newFinishedBuckets()}
	table := pgx.Identifier{schema, "weir_job"}.Sanitize()
	finished := func(ago time.Duration, kind string) {
		t.Helper()
		if _, err := pool.Exec(t.Context(), `INSERT INTO `+table+` (state, queue, kind, args, max_attempts, attempt,
			scheduled_at, attempted_at, finalized_at) VALUES ('completed', 'q', $2, '{}', 1, 1,
			now() - $1::interval - interval '2 seconds', now() - $1::interval - interval '1 second', now() - $1::interval)`,
			ago.String(), kind); err != nil {
			t.Fatal(err)
		}
	}
	count := func(now time.Time) map[int64]int64 {
		t.Helper()
		tp, err := h.throughputAt(t.Context(), now)
		if err != nil {
			t.Fatal(err)
		}
		if len(tp.Buckets) != bucketCount {
			t.Fatalf("%d buckets, want %d", len(tp.Buckets), bucketCount)
		}
		out := map[int64]int64{}
		for _, b := range tp.Buckets {
			out[b.Start.Unix()] = b.Completed
			if b.Completed > 0 && (b.Pickup == nil || b.Pickup.Duration != time.Second) {
				t.Errorf("bucket %v: pickup %v, want 1s", b.Start, b.Pickup)
			}
		}
		return out
	}

	now := time.Now()
	old := now.Add(-30 * time.Minute)
	oldStart := old.Truncate(bucketWidth).Unix()
	newStart := now.Truncate(bucketWidth).Unix()
	finished(30*time.Minute, "old")
	finished(0, "new")
	if got := count(now); got[oldStart] != 1 || got[newStart] != 1 {
		t.Fatalf("first count: %v", got)
	}
	if h.buckets.kept[oldStart] == nil || h.buckets.kept[newStart] != nil {
		t.Fatalf("kept %v: want the bucket of half an hour ago, not the current one", h.buckets.kept)
	}
	// The kept bucket is not counted again: deleting its job does not show.
	if _, err := pool.Exec(t.Context(), `DELETE FROM `+table+` WHERE kind = 'old'`); err != nil {
		t.Fatal(err)
	}
	finished(0, "new")
	if got := count(now); got[oldStart] != 1 || got[newStart] != 2 {
		t.Fatalf("second count: %v, want the kept bucket's 1 and the current bucket's 2", got)
	}
	// Two hours on, the kept buckets are out of the hour and let go.
	count(now.Add(2 * time.Hour))
	if h.buckets.kept[oldStart] != nil {
		t.Errorf("a bucket out of the hour is still kept")
	}

	// While another request counts, a request whose context ends gives up.
	<-h.buckets.turn
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := h.throughputAt(ctx, now); !errors.Is(err, context.Canceled) {
		t.Errorf("waiting with a cancelled context: %v", err)
	}
	h.buckets.turn <- struct{}{}
}
