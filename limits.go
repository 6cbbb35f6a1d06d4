package weir

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/weirq/weir/weirdriver"
)

// KeyLimit is a queue's limits per key: at most Limit of its jobs with the
// same key run at once, and at most Rate of them start per period, spread
// evenly (as a queue's RateLimit, per key), across every client on the
// database; jobs of other keys are not held back. A job's key is the value,
// as text, of the field Key names in its args or metadata:
// "args.customer_id", "metadata.tenant.id" (1 to 8 fields of letters,
// digits, '_' and '-'); a job without the field counts under the empty key.
// Limit is 0 (none) or 1 to 1,000,000, Rate as a RateLimit, one of them at
// least; the zero KeyLimit is none.
type KeyLimit struct {
	Key   string
	Limit int
	Rate  RateLimit
}

// String is the limits as weir queues shows them: "args.customer_id:2",
// "args.customer_id:10/1s", "args.customer_id:2,10/1s", or "none".
func (k KeyLimit) String() string {
	var parts []string
	if k.Limit != 0 {
		parts = append(parts, strconv.Itoa(k.Limit))
	}
	if k.Rate != (RateLimit{}) {
		parts = append(parts, k.Rate.String())
	}
	if len(parts) == 0 {
		return "none"
	}
	return k.Key + ":" + strings.Join(parts, ",")
}

// params is k as the driver takes it.
func (k KeyLimit) params() weirdriver.KeyLimitParams {
	return weirdriver.KeyLimitParams{Key: k.Key, Limit: k.Limit, Rate: k.Rate.Limit, RatePeriod: k.Rate.Period}
}

// ParseKeyLimit reads key limits as String writes them: "none" (the zero
// KeyLimit), or KEY: then N (1 to 1,000,000 running), N/PERIOD (a rate, as
// ParseRateLimit reads it) or both, N first, separated by a comma
// ("args.customer_id:2,10/1s"). Its error quotes s and says what is wrong.
func ParseKeyLimit(s string) (KeyLimit, error) {
	if s == "none" {
		return KeyLimit{}, nil
	}
	key, rest, ok := strings.Cut(s, ":")
	if !ok || rest == "" {
		return KeyLimit{}, fmt.Errorf("%q is not KEY:N, KEY:N/PERIOD or KEY:N,N/PERIOD (such as args.customer_id:2), nor none", s)
	}
	if _, _, err := weirdriver.ParseKey(key); err != nil {
		return KeyLimit{}, fmt.Errorf("%q: %w", s, err)
	}
	k := KeyLimit{Key: key}
	limit, rate, both := strings.Cut(rest, ",")
	if both && (limit == "" || strings.Contains(limit, "/")) {
		return KeyLimit{}, fmt.Errorf("%q: with both, the limit comes first, then the rate (such as args.customer_id:2,10/1s)", s)
	}
	if !both && strings.Contains(limit, "/") {
		limit, rate = "", limit
	}
	if limit != "" {
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 || n > weirdriver.MaxKeyLimit {
			return KeyLimit{}, fmt.Errorf("%q: the limit %q is not a number from 1 to %d", s, limit, weirdriver.MaxKeyLimit)
		}
		k.Limit = n
	}
	if rate != "" || both {
		r, err := ParseRateLimit(rate)
		if err != nil || r == (RateLimit{}) {
			return KeyLimit{}, fmt.Errorf("%q: the rate %q is not N/PERIOD with N from 1 to %d and PERIOD from 1ms to 24h", s, rate, weirdriver.MaxRateLimit)
		}
		k.Rate = r
	}
	return k, nil
}

// RateLimit is a queue's rate limit: at most Limit job starts per Period
// across every client on the database, spread evenly (one every
// Period/Limit), with bursts of at most 2 + what 10 ms of the rate allows.
// Limit is 1 to 1,000,000, Period 1 ms to 24 h in whole microseconds; the
// zero RateLimit is none.
type RateLimit struct {
	Limit  int
	Period time.Duration
}

// String is the limit as weir queues shows it: "50/1s", or "none".
func (r RateLimit) String() string {
	if r.Limit == 0 {
		return "none"
	}
	return strconv.Itoa(r.Limit) + "/" + fmtDuration(r.Period)
}

// ParseRateLimit reads a rate limit as String writes it: "none" (the zero
// RateLimit), or N/PERIOD with N 1 to 1,000,000 and PERIOD a Go duration from
// 1 ms to 24 h in whole microseconds ("50/1s"). Its error quotes s and says
// what is wrong.
func ParseRateLimit(s string) (RateLimit, error) {
	if s == "none" {
		return RateLimit{}, nil
	}
	n, per, ok := strings.Cut(s, "/")
	limit, err := strconv.Atoi(n)
	if !ok || err != nil || limit < 1 || limit > weirdriver.MaxRateLimit {
		return RateLimit{}, fmt.Errorf("%q is not N/PERIOD with N from 1 to %d (such as 50/1s), nor none", s, weirdriver.MaxRateLimit)
	}
	period, err := time.ParseDuration(per)
	if err != nil || period < weirdriver.MinRatePeriod || period > weirdriver.MaxRatePeriod || period%time.Microsecond != 0 {
		return RateLimit{}, fmt.Errorf("%q: the period is not a duration from 1ms to 24h (such as 1s or 1m)", s)
	}
	return RateLimit{Limit: limit, Period: period}, nil
}

// ParseGlobalLimit reads a global limit as weir queues and the dashboard take
// it: "none" (0), or a number from 1 to 1,000,000. Its error quotes s.
func ParseGlobalLimit(s string) (int, error) {
	if s == "none" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > weirdriver.MaxGlobalLimit {
		return 0, fmt.Errorf("%q is not a number from 1 to %d, nor none", s, weirdriver.MaxGlobalLimit)
	}
	return n, nil
}

// checkKeyLimit checks queue's key limits k, which are not the zero value.
func checkKeyLimit(field, queue string, k KeyLimit) error {
	if k.Limit < 0 || k.Limit > weirdriver.MaxKeyLimit {
		return invalidf(field, "queue %q: KeyLimit %s: the limit is outside its range 0..%d", queue, k, weirdriver.MaxKeyLimit)
	}
	if k.Rate != (RateLimit{}) {
		if err := checkRate(field, fmt.Sprintf("queue %q: KeyLimit on %q: Rate %d per %s", queue, k.Key, k.Rate.Limit, k.Rate.Period), k.Rate); err != nil {
			return err
		}
	}
	if k.Limit == 0 && k.Rate == (RateLimit{}) {
		return invalidf(field, "queue %q: KeyLimit on %q has Limit 0 and no Rate: set one of them", queue, k.Key)
	}
	if _, _, err := weirdriver.ParseKey(k.Key); err != nil {
		return invalidf(field, "queue %q: KeyLimit %s: %v", queue, k, err)
	}
	return nil
}

// checkRateLimit checks queue's rate limit r, which is not the zero value.
func checkRateLimit(field, queue string, r RateLimit) error {
	return checkRate(field, fmt.Sprintf("queue %q: RateLimit %d per %s", queue, r.Limit, r.Period), r)
}

// checkRate checks rate r, which is not the zero value; what names it in an
// error.
func checkRate(field, what string, r RateLimit) error {
	if r.Limit < 1 || r.Limit > weirdriver.MaxRateLimit {
		return invalidf(field, "%s: the limit is outside its range 1..%d", what, weirdriver.MaxRateLimit)
	}
	if r.Period < weirdriver.MinRatePeriod || r.Period > weirdriver.MaxRatePeriod || r.Period%time.Microsecond != 0 {
		return invalidf(field, "%s: the period is outside its range %s..%s (whole microseconds)",
			what, weirdriver.MinRatePeriod, weirdriver.MaxRatePeriod)
	}
	return nil
}

// fmtDuration writes d without the zero units that time.Duration's String adds
// ("1h", not "1h0m0s").
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
