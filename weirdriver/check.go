package weirdriver

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// CheckRenew checks a renewal's params: as many tokens as ids, no id twice (one
// statement cannot update a row twice), and a lease of at least a microsecond.
func CheckRenew(p *JobRenewParams) error {
	switch {
	case len(p.IDs) != len(p.LeaseTokens):
		return fmt.Errorf("%d ids but %d tokens", len(p.IDs), len(p.LeaseTokens))
	case len(p.Progress) != 0 && len(p.Progress) != len(p.IDs):
		return fmt.Errorf("%d ids but %d progress entries", len(p.IDs), len(p.Progress))
	case p.LeaseDuration < time.Microsecond:
		return fmt.Errorf("lease duration %v is less than 1µs", p.LeaseDuration)
	}
	seen := make(map[int64]bool, len(p.IDs))
	for _, id := range p.IDs {
		if seen[id] {
			return fmt.Errorf("job %d appears twice in one batch", id)
		}
		seen[id] = true
	}
	return nil
}

// CheckClaim checks a claim's params.
func CheckClaim(p *JobClaimParams) error {
	switch {
	case p.Queue == "":
		return fmt.Errorf("queue is empty")
	case p.Max < 1:
		return fmt.Errorf("max %d is less than 1", p.Max)
	case p.ClientID == "":
		return fmt.Errorf("client id is empty")
	case p.LeaseDuration < time.Microsecond:
		return fmt.Errorf("lease duration %v is less than 1µs", p.LeaseDuration)
	}
	return checkBuckets("key buckets", p.KeyBuckets)
}

// CheckQueueShare checks a request for a share of a queue's global limit.
func CheckQueueShare(p *QueueShareParams) error {
	if err := checkQueueName(p.Queue); err != nil {
		return err
	}
	switch {
	case p.ClientID == "":
		return fmt.Errorf("client id is empty")
	case p.Want < 0 || p.Want > MaxGlobalLimit:
		return fmt.Errorf("want %d is out of range: 0 (give the share up) to %d", p.Want, MaxGlobalLimit)
	case p.Keep < 0 || p.Keep > MaxGlobalLimit:
		return fmt.Errorf("keep %d is out of range: 0 to %d", p.Keep, MaxGlobalLimit)
	case p.Want == 0 && p.Keep > 0:
		return fmt.Errorf("want 0 gives the share up, which keep %d forbids: a client gives it up only when none of its slots is in use", p.Keep)
	case p.Lease < time.Millisecond:
		return fmt.Errorf("lease %v is less than 1ms", p.Lease)
	}
	return nil
}

// CheckKeyShare checks a request about a client's buckets of a queue's keys.
func CheckKeyShare(p *KeyShareParams) error {
	if err := checkQueueName(p.Queue); err != nil {
		return err
	}
	if p.ClientID == "" {
		return fmt.Errorf("client id is empty")
	}
	if p.Lease < time.Millisecond {
		return fmt.Errorf("lease %v is less than 1ms", p.Lease)
	}
	if p.Want < 0 || p.Want > MaxGlobalLimit {
		return fmt.Errorf("want %d is out of range: 0 (not said) to %d", p.Want, MaxGlobalLimit)
	}
	return checkBuckets("release", p.Release)
}

// checkBuckets checks that buckets are distinct buckets of KeyBuckets.
func checkBuckets(what string, buckets []int) error {
	var seen [KeyBuckets]bool
	for _, b := range buckets {
		if b < 0 || b >= KeyBuckets {
			return fmt.Errorf("%s: bucket %d is out of range 0 to %d", what, b, KeyBuckets-1)
		}
		if seen[b] {
			return fmt.Errorf("%s: bucket %d is named twice", what, b)
		}
		seen[b] = true
	}
	return nil
}

// CheckClaimID checks a claim of one job.
func CheckClaimID(p *JobClaimIDParams) error {
	return CheckClaim(&JobClaimParams{Queue: "-", Max: 1, ClientID: p.ClientID, LeaseDuration: p.LeaseDuration})
}

// CheckFinalize checks a batch of outcomes: known outcomes, and no job twice (one
// statement updates a row once, so two outcomes for one job could not both be
// reported truthfully).
func CheckFinalize(params []*JobFinalizeParams) error {
	seen := make(map[int64]bool, len(params))
	for _, p := range params {
		if !p.Outcome.Valid() {
			return fmt.Errorf("job %d: unknown outcome %q", p.ID, p.Outcome)
		}
		if seen[p.ID] {
			return fmt.Errorf("job %d appears twice in one batch", p.ID)
		}
		seen[p.ID] = true
	}
	return nil
}

// CheckRescue checks a rescue's params.
func CheckRescue(p *JobRescueParams) error { return checkLimit(p.Limit) }

// CheckSchedule checks a schedule pass's limit.
func CheckSchedule(limit int) error { return checkLimit(limit) }

// CheckPrune checks a prune's params.
func CheckPrune(p *JobPruneParams) error { return checkLimit(p.Limit) }

// checkLimit checks the most rows one maintenance statement may change.
func checkLimit(limit int) error {
	if limit < 1 {
		return fmt.Errorf("limit %d is less than 1", limit)
	}
	return nil
}

// CheckLeaderElect checks an election's params.
func CheckLeaderElect(p *LeaderElectParams) error {
	switch {
	case p.Name == "":
		return errors.New("name is empty")
	case p.LeaderID == "":
		return errors.New("leader id is empty")
	case p.TTL < time.Microsecond:
		return fmt.Errorf("ttl %v is less than 1µs", p.TTL)
	}
	return nil
}

// CheckClientID checks a registry row's client id.
func CheckClientID(id string) error {
	switch {
	case id == "":
		return errors.New("client id is empty")
	case len(id) > MaxClientIDBytes:
		return fmt.Errorf("client id is %d bytes long; the limit is %d", len(id), MaxClientIDBytes)
	}
	return nil
}

// CheckClientRegister checks a registry row.
func CheckClientRegister(p *ClientRegisterParams) error {
	if err := CheckClientID(p.ID); err != nil {
		return err
	}
	switch {
	case len(p.Host) > MaxClientHostBytes:
		return fmt.Errorf("client %s: host is %d bytes long; the limit is %d", p.ID, len(p.Host), MaxClientHostBytes)
	case p.PID < 0 || p.PID > math.MaxInt32:
		return fmt.Errorf("client %s: pid %d is out of range 0..%d", p.ID, p.PID, math.MaxInt32)
	case len(p.Version) > MaxClientVersionBytes:
		return fmt.Errorf("client %s: version is %d bytes long; the limit is %d", p.ID, len(p.Version), MaxClientVersionBytes)
	case len(p.Queues) > MaxClientQueues:
		return fmt.Errorf("client %s: %d queues; the limit is %d", p.ID, len(p.Queues), MaxClientQueues)
	case !p.StartedAt.IsZero() && !TimeInRange(p.StartedAt):
		return fmt.Errorf("client %s: started-at %s is outside the years 1..9999", p.ID, p.StartedAt.Format(time.RFC3339Nano))
	}
	seen := make(map[string]bool, len(p.Queues))
	for _, q := range p.Queues {
		switch {
		case q.Name == "":
			return fmt.Errorf("client %s: a queue name is empty", p.ID)
		case len(q.Name) > maxQueueNameBytes:
			return fmt.Errorf("client %s: queue name is %d bytes long; the limit is %d", p.ID, len(q.Name), maxQueueNameBytes)
		case seen[q.Name]:
			return fmt.Errorf("client %s: queue %q appears twice", p.ID, q.Name)
		case q.MaxWorkers < 1:
			return fmt.Errorf("client %s: queue %q: max workers %d is less than 1", p.ID, q.Name, q.MaxWorkers)
		}
		seen[q.Name] = true
	}
	return nil
}

// CheckClientPrune checks a prune of stale registry rows.
func CheckClientPrune(p *ClientPruneParams) error {
	if p.StaleAfter < time.Microsecond {
		return fmt.Errorf("stale-after %v is less than 1µs", p.StaleAfter)
	}
	return checkLimit(p.Limit)
}

// The range of times weir stores: years 1 to 9999, UTC, which RFC 3339 (and so
// JSON) can write. PostgreSQL's schema holds every time column to it.
var (
	minTime = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) // exclusive
)

// TimeInRange reports whether t falls in the years 1..9999 UTC.
func TimeInRange(t time.Time) bool {
	return !t.Before(minTime) && t.Before(maxTime)
}

// ClampTime moves t to the nearest end of the years 1..9999 UTC when it falls
// outside them. The runtime's own times (a retry policy's) are clamped rather
// than refused: a refused outcome would fail the write of every outcome in its
// batch.
func ClampTime(t time.Time) time.Time {
	switch {
	case t.Before(minTime):
		return minTime
	case !t.Before(maxTime):
		return maxTime.Add(-time.Microsecond)
	}
	return t
}

// MinThroughputWidth is the narrowest bucket a throughput count takes.
const MinThroughputWidth = time.Second

// CheckThroughput checks a throughput count's params: a start, and buckets of
// MinThroughputWidth or more.
func CheckThroughput(p *JobThroughputParams) error {
	switch {
	case p.Since.IsZero():
		return errors.New("since is zero")
	case p.Width < MinThroughputWidth:
		return fmt.Errorf("bucket width %v is less than %v", p.Width, MinThroughputWidth)
	}
	return nil
}

// The bounds of a queue's rate limit: MaxRateLimit jobs per period at most,
// a period from MinRatePeriod to MaxRatePeriod.
const (
	MaxRateLimit  = 1_000_000
	MinRatePeriod = time.Millisecond
	MaxRatePeriod = 24 * time.Hour
)

// RateBurst is how many jobs a rate limit of limit per period admits at once:
// 2, and what 10 ms of the rate allows. A burst of at least 2 lets a claim
// that comes late by less than period/limit take the job that was due and
// keep the next one's time: with 1, each claim's lateness would be lost, and
// 50 a second ran 46.
func RateBurst(limit int, period time.Duration) int {
	return 2 + int(int64(limit)*int64(10*time.Millisecond)/int64(period))
}

// CheckRateLimit checks a queue's new rate limit: limit 0 (none) or 1 to
// MaxRateLimit per period, from MinRatePeriod to MaxRatePeriod in whole
// microseconds, for a queue name of 1 to 128 bytes.
func CheckRateLimit(name string, limit int, period time.Duration) error {
	if err := checkQueueName(name); err != nil {
		return err
	}
	switch {
	case limit < 0 || limit > MaxRateLimit:
		return fmt.Errorf("rate limit %d is out of range: 0 (none) to %d", limit, MaxRateLimit)
	case limit > 0 && (period < MinRatePeriod || period > MaxRatePeriod || period%time.Microsecond != 0):
		return fmt.Errorf("rate period %v is out of range: %v to %v, in whole microseconds", period, MinRatePeriod, MaxRatePeriod)
	}
	return nil
}

// MaxGlobalLimit is the largest global limit of a queue.
const MaxGlobalLimit = 1_000_000

// CheckGlobalLimit checks a queue's new global limit: 0 (none) to
// MaxGlobalLimit, for a queue name of 1 to 128 bytes.
func CheckGlobalLimit(name string, limit int) error {
	if err := checkQueueName(name); err != nil {
		return err
	}
	if limit < 0 || limit > MaxGlobalLimit {
		return fmt.Errorf("global limit %d is out of range: 0 (none) to %d", limit, MaxGlobalLimit)
	}
	return nil
}

// MaxKeyLimit is the largest limit per key of a queue; a key's path has at
// most MaxKeyDepth fields of 1 to 64 bytes each.
const (
	MaxKeyLimit = 1_000_000
	MaxKeyDepth = 8
)

// ParseKey splits a key limit's key, "args.customer_id" or
// "metadata.tenant.id", into its source ("args" or "metadata") and the path of
// fields under it: 1 to MaxKeyDepth fields of 1 to 64 bytes of letters,
// digits, '_' and '-' each.
func ParseKey(key string) (source string, path []string, err error) {
	parts := strings.Split(key, ".")
	if parts[0] != "args" && parts[0] != "metadata" {
		return "", nil, fmt.Errorf("key %q starts with neither args. nor metadata. (such as args.customer_id)", key)
	}
	path = parts[1:]
	if len(path) == 0 || len(path) > MaxKeyDepth {
		return "", nil, fmt.Errorf("key %q names %d fields under %s: 1 to %d", key, len(path), parts[0], MaxKeyDepth)
	}
	for _, f := range path {
		if !keyField(f) {
			return "", nil, fmt.Errorf("key %q has a field %q outside 1 to 64 bytes of letters, digits, '_' and '-'", key, f)
		}
	}
	return parts[0], path, nil
}

// keyField reports whether f is a valid field of a key's path.
func keyField(f string) bool {
	if len(f) == 0 || len(f) > 64 {
		return false
	}
	for _, c := range []byte(f) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// CheckKeyLimit checks a queue's new limits per key, for a queue name of 1
// to 128 bytes: the zero KeyLimitParams (none), or a key ParseKey accepts
// with a limit of 0 (none) or 1 to MaxKeyLimit running and a rate as
// CheckRateLimit takes it, not both none.
func CheckKeyLimit(name string, p KeyLimitParams) error {
	if err := checkQueueName(name); err != nil {
		return err
	}
	if err := CheckRateLimit(name, p.Rate, p.RatePeriod); err != nil {
		return fmt.Errorf("key %w", err)
	}
	if p.Limit < 0 || p.Limit > MaxKeyLimit {
		return fmt.Errorf("key limit %d is out of range: 0 (none) to %d", p.Limit, MaxKeyLimit)
	}
	if p == (KeyLimitParams{}) {
		return nil
	}
	if p.Limit == 0 && p.Rate == 0 {
		return fmt.Errorf("key %q has neither a limit nor a rate", p.Key)
	}
	_, _, err := ParseKey(p.Key)
	return err
}

// checkQueueName checks the name of a queue whose settings change: 1 to 128
// bytes (the weir package checks its characters).
func checkQueueName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("queue is empty")
	case len(name) > maxQueueNameBytes:
		return fmt.Errorf("queue name is %d bytes long; the limit is %d", len(name), maxQueueNameBytes)
	}
	return nil
}
