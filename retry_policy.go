package weir

import (
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy says when a failed job runs again. A worker may override it for its
// kind by implementing RetryPolicy itself.
type RetryPolicy interface {
	// NextRetry returns when job, whose latest attempt (job.Attempt) failed, is due
	// again.
	NextRetry(job *JobRow) time.Time
}

// ExponentialBackoff retries after Base·2^(attempt−1), at most Max, each delay
// spread by ±Jitter (a fraction) so that jobs that failed together do not retry
// together. The zero value means Base 1 s, Max 1 h, Jitter 0.2.
type ExponentialBackoff struct {
	Base   time.Duration
	Max    time.Duration
	Jitter float64
	// now is the clock; nil means time.Now.
	now func() time.Time
}

// Delay returns the backoff before the attempt after attempt, without jitter.
func (p ExponentialBackoff) Delay(attempt int) time.Duration {
	base, ceiling := p.Base, p.Max
	if base <= 0 {
		base = time.Second
	}
	if ceiling <= 0 {
		ceiling = time.Hour
	}
	exp := float64(base) * math.Pow(2, float64(max(attempt, 1)-1))
	if exp >= float64(ceiling) {
		return ceiling
	}
	return time.Duration(exp)
}

// NextRetry implements RetryPolicy.
func (p ExponentialBackoff) NextRetry(job *JobRow) time.Time {
	jitter := p.Jitter
	if jitter <= 0 || jitter >= 1 {
		jitter = 0.2
	}
	now := time.Now
	if p.now != nil {
		now = p.now
	}
	d := float64(p.Delay(job.Attempt)) * (1 - jitter + 2*jitter*rand.Float64())
	return now().Add(time.Duration(d))
}
