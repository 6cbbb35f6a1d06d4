package weirui

import (
	"context"
	"net/http"
	"time"
)

// ThroughputAt is the throughput of h (a NewHandler's) as at now.
func ThroughputAt(ctx context.Context, h http.Handler, now time.Time) (*throughput, error) {
	return h.(*handler).throughputAt(ctx, now)
}

// KeptBucket reports whether h keeps the finished bucket that starts at start.
func KeptBucket(h http.Handler, start time.Time) bool {
	return h.(*handler).buckets.kept[start.Unix()] != nil
}

// HoldThroughputTurn takes h's turn to count, as a request counting would,
// until release.
func HoldThroughputTurn(h http.Handler) (release func()) {
	f := h.(*handler).buckets
	<-f.turn
	return func() { f.turn <- struct{}{} }
}

// BucketWidth and BucketCount are the throughput's buckets.
const (
	BucketWidth = bucketWidth
	BucketCount = bucketCount
)

// SetNow makes h (a NewHandler's) limit failed logins by the clock now.
func SetNow(h http.Handler, now func() time.Time) {
	l := h.(*handler).auth.logins
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now = now
}
