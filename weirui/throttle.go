package weirui

import (
	"math"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/weirq/weir"
)

// Failed logins are limited per client address by a token bucket: up to
// Options.FailedLogins.Limit in a row, then one more each Period/Limit. A
// request with credentials from an address whose bucket is empty is refused
// (429) without its credentials being checked, so that guessing runs at that
// rate at most.

// defaultFailedLogins is Options.FailedLogins' default: 10 in a row, then one
// every 6 s.
var defaultFailedLogins = weir.RateLimit{Limit: 10, Period: time.Minute}

// maxLoginBuckets bounds the addresses remembered.
const maxLoginBuckets = 10_000

// loginLimiter keeps the failed logins' buckets by client address.
type loginLimiter struct {
	burst   float64
	every   time.Duration
	mu      sync.Mutex
	now     func() time.Time
	buckets map[string]*loginBucket
}

// loginBucket holds the failures an address may still make, as of at.
type loginBucket struct {
	tokens float64
	at     time.Time
}

func newLoginLimiter(rate weir.RateLimit) *loginLimiter {
	return &loginLimiter{burst: float64(rate.Limit), every: rate.Period / time.Duration(rate.Limit),
		now: time.Now, buckets: map[string]*loginBucket{}}
}

// bucket returns key's bucket refilled to now; nil when key has none (a full
// bucket).
func (l *loginLimiter) bucket(key string, now time.Time) *loginBucket {
	b := l.buckets[key]
	if b == nil {
		return nil
	}
	b.tokens = math.Min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.every))
	b.at = now
	if b.tokens >= l.burst {
		delete(l.buckets, key)
		return nil
	}
	return b
}

// wait is how long key must wait before its credentials are checked again:
// zero when they may be checked now.
func (l *loginLimiter) wait(key string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.bucket(key, now)
	if b == nil || b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(l.every))
}

// failed counts a failed login of key, and reports whether it emptied the
// bucket: the address's next request with credentials is refused.
func (l *loginLimiter) failed(key string) (emptied bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.bucket(key, now)
	if b == nil {
		if len(l.buckets) >= maxLoginBuckets {
			l.prune(now)
		}
		b = &loginBucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	b.tokens = math.Max(0, b.tokens-1)
	return b.tokens < 1
}

// prune forgets the buckets that have refilled, and all of them when none
// has: the limit then starts again for every address.
func (l *loginLimiter) prune(now time.Time) {
	for key := range l.buckets {
		l.bucket(key, now)
	}
	if len(l.buckets) >= maxLoginBuckets {
		clear(l.buckets)
	}
}

// clientKey is the address a request's failed logins count against: its
// peer's IPv4 address, or the /64 prefix of its IPv6 address (which one
// host commonly holds whole).
func clientKey(r *http.Request) string {
	host := clientAddr(r)
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	if addr = addr.Unmap(); addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String()
	}
	return addr.String()
}

// clientAddr is the host of a request's peer address.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// retryAfter is a wait in whole seconds, rounded up, for Retry-After.
func retryAfter(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}
