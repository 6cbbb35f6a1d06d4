package weirtype

import "time"

// QueueStats counts a queue's jobs by state, with the queue's limits and
// whether it is paused.
type QueueStats struct {
	Name   string
	Counts map[JobState]int64
	// OldestAvailableAt is the scheduled time of the queue's oldest available
	// job, the one waiting longest for a worker; zero when none is available.
	OldestAvailableAt time.Time
	// Paused is set while the queue is paused.
	Paused bool
	// GlobalLimit is the queue's global limit, 0 when it has none.
	GlobalLimit int
	// RateLimit jobs per RatePeriod is the queue's rate limit; 0 when it has
	// none.
	RateLimit  int
	RatePeriod time.Duration
	// KeyLimit is the queue's limit of running jobs per key and KeyRate per
	// KeyRatePeriod its rate limit per key, 0 when it has none; Key is the
	// field that keys them, "" when it has neither.
	KeyLimit      int
	KeyRate       int
	KeyRatePeriod time.Duration
	Key           string
	// Estimated marks the states whose count is an estimate (a listing for a
	// page that polls a large table); the other counts are exact. Nil when
	// every count is exact.
	Estimated map[JobState]bool
}

// Throughput counts the jobs finalized from a time on, in buckets of a fixed
// width, oldest first: only the buckets that hold a job are listed.
type Throughput struct {
	// Now is the database's clock when it counted: a bucket that ended a
	// little before Now may still gain a job whose transaction had not
	// committed.
	Now     time.Time
	Buckets []*ThroughputBucket
}

// ThroughputBucket counts the jobs finalized in [Start, Start+width).
type ThroughputBucket struct {
	Start     time.Time
	Completed int64
	Cancelled int64
	Discarded int64
	// PickupMean is the mean time from scheduled_at to attempted_at of the
	// completed jobs, their last attempt's wait for a worker; zero when none
	// completed.
	PickupMean time.Duration
}
