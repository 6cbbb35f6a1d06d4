package weir_test

import (
	"cmp"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir"
)

// TestConfigRanges checks every runtime setting just inside and just outside each
// end of its range: NewClient accepts the one and refuses the other with an error
// that wraps ErrInvalid and names the field, the value and the range.
func TestConfigRanges(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{noMigrate: true})
	const (
		ms  = time.Millisecond
		day = 24 * time.Hour
	)
	type bound struct {
		field string
		// errField is the InvalidError's Field; field when empty.
		errField string
		set      func(*weir.Config)
		// value and want name the value in the error and its range.
		value, want string
		ok          bool
	}
	dur := func(field string, d time.Duration, ok bool, want string, set func(*weir.Config, time.Duration)) bound {
		return bound{field: field, value: d.String(), want: want, ok: ok, set: func(c *weir.Config) { set(c, d) }}
	}
	lease := func(c *weir.Config, d time.Duration) { c.LeaseDuration, c.HeartbeatInterval = d, 10*ms }
	heartbeat := func(c *weir.Config, d time.Duration) { c.HeartbeatInterval, c.LeaseDuration = d, time.Hour }
	rescue := func(c *weir.Config, d time.Duration) { c.RescueInterval = d }
	poll := func(c *weir.Config, d time.Duration) { c.FetchPollInterval = d }
	reserve := func(c *weir.Config, d time.Duration) { c.ShutdownReserve = d }
	timeout := func(c *weir.Config, d time.Duration) { c.JobTimeout = d }
	completed := func(c *weir.Config, d time.Duration) { c.CompletedRetention = d }
	cancelled := func(c *weir.Config, d time.Duration) { c.CancelledRetention = d }
	discarded := func(c *weir.Config, d time.Duration) { c.DiscardedRetention = d }
	queue := func(field string, q weir.QueueConfig, value int, ok bool, want string) bound {
		return bound{field: field, errField: `Config.Queues["q"].` + field, value: strconv.Itoa(value), want: want, ok: ok, set: func(c *weir.Config) {
			c.Queues = map[string]weir.QueueConfig{"q": q}
		}}
	}
	queues := func(n int, ok bool) bound {
		return bound{field: "Config.Queues", value: strconv.Itoa(n), want: "the limit is 1000", ok: ok, set: func(c *weir.Config) {
			c.Queues = map[string]weir.QueueConfig{}
			for i := range n {
				c.Queues["q"+strconv.Itoa(i)] = weir.QueueConfig{MaxWorkers: 1}
			}
		}}
	}
	const (
		leaseRange    = "100ms..1h"
		hbRange       = "10ms..20m"
		intRange      = "10ms..1h"
		timeoutRange  = "1ms..720h"
		retainRange   = "1s..87600h"
		workersRange  = "1..10000"
		prefetchRange = "-1..10000"
		limitRange    = "0..1000000"
	)
	for _, c := range []bound{
		dur("Config.LeaseDuration", 100*ms-1, false, leaseRange, lease),
		dur("Config.LeaseDuration", 100*ms, true, "", lease),
		dur("Config.LeaseDuration", time.Hour, true, "", lease),
		dur("Config.LeaseDuration", time.Hour+1, false, leaseRange, lease),
		dur("Config.HeartbeatInterval", 10*ms-1, false, hbRange, heartbeat),
		dur("Config.HeartbeatInterval", 10*ms, true, "", heartbeat),
		dur("Config.HeartbeatInterval", 20*time.Minute, true, "", heartbeat),
		dur("Config.HeartbeatInterval", 20*time.Minute+1, false, hbRange, heartbeat),
		dur("Config.RescueInterval", 10*ms-1, false, intRange, rescue),
		dur("Config.RescueInterval", 10*ms, true, "", rescue),
		dur("Config.RescueInterval", time.Hour, true, "", rescue),
		dur("Config.RescueInterval", time.Hour+1, false, intRange, rescue),
		dur("Config.FetchPollInterval", time.Nanosecond, false, intRange, poll),
		dur("Config.FetchPollInterval", 10*ms-1, false, intRange, poll),
		dur("Config.FetchPollInterval", 10*ms, true, "", poll),
		dur("Config.FetchPollInterval", time.Hour, true, "", poll),
		dur("Config.FetchPollInterval", time.Hour+1, false, intRange, poll),
		dur("Config.FetchPollInterval", -1, false, intRange, poll),
		dur("Config.ShutdownReserve", 10*ms-1, false, intRange, reserve),
		dur("Config.ShutdownReserve", 10*ms, true, "", reserve),
		dur("Config.ShutdownReserve", time.Hour, true, "", reserve),
		dur("Config.ShutdownReserve", time.Hour+1, false, intRange, reserve),
		dur("Config.JobTimeout", ms-1, false, timeoutRange, timeout),
		dur("Config.JobTimeout", ms, true, "", timeout),
		dur("Config.JobTimeout", 30*day, true, "", timeout),
		dur("Config.JobTimeout", 30*day+1, false, timeoutRange, timeout),
		dur("Config.JobTimeout", -1, true, "", timeout), // none
		dur("Config.CompletedRetention", time.Second-1, false, retainRange, completed),
		dur("Config.CompletedRetention", time.Second, true, "", completed),
		dur("Config.CompletedRetention", 3650*day, true, "", completed),
		dur("Config.CompletedRetention", 3650*day+1, false, retainRange, completed),
		dur("Config.CompletedRetention", -1, true, "", completed), // forever
		dur("Config.CancelledRetention", time.Second-1, false, retainRange, cancelled),
		dur("Config.CancelledRetention", 3650*day+1, false, retainRange, cancelled),
		dur("Config.DiscardedRetention", time.Second-1, false, retainRange, discarded),
		dur("Config.DiscardedRetention", 3650*day+1, false, retainRange, discarded),
		queue("MaxWorkers", weir.QueueConfig{MaxWorkers: 0}, 0, false, workersRange),
		queue("MaxWorkers", weir.QueueConfig{MaxWorkers: 1}, 1, true, ""),
		queue("MaxWorkers", weir.QueueConfig{MaxWorkers: 10_000}, 10_000, true, ""),
		queue("MaxWorkers", weir.QueueConfig{MaxWorkers: 10_001}, 10_001, false, workersRange),
		queue("MaxWorkers", weir.QueueConfig{MaxWorkers: 1_000_000}, 1_000_000, false, workersRange),
		queue("Prefetch", weir.QueueConfig{MaxWorkers: 1, Prefetch: -2}, -2, false, prefetchRange),
		queue("Prefetch", weir.QueueConfig{MaxWorkers: 1, Prefetch: -1e9}, -1e9, false, prefetchRange),
		queue("Prefetch", weir.QueueConfig{MaxWorkers: 1, Prefetch: -1}, -1, true, ""),
		queue("Prefetch", weir.QueueConfig{MaxWorkers: 1, Prefetch: 10_000}, 10_000, true, ""),
		queue("Prefetch", weir.QueueConfig{MaxWorkers: 1, Prefetch: 10_001}, 10_001, false, prefetchRange),
		queue("Prefetch", weir.QueueConfig{MaxWorkers: 1, Prefetch: 1e9}, 1e9, false, prefetchRange),
		queue("GlobalLimit", weir.QueueConfig{MaxWorkers: 1, GlobalLimit: -1}, -1, false, limitRange),
		queue("GlobalLimit", weir.QueueConfig{MaxWorkers: 1, GlobalLimit: 0}, 0, true, ""),
		queue("GlobalLimit", weir.QueueConfig{MaxWorkers: 1, GlobalLimit: 1_000_000}, 1_000_000, true, ""),
		queue("GlobalLimit", weir.QueueConfig{MaxWorkers: 1, GlobalLimit: 1_000_001}, 1_000_001, false, limitRange),
		queue("RateLimit", weir.QueueConfig{MaxWorkers: 1, RateLimit: weir.RateLimit{Limit: 0, Period: time.Second}}, 0, false, "1..1000000"),
		queue("RateLimit", weir.QueueConfig{MaxWorkers: 1, RateLimit: weir.RateLimit{Limit: 1_000_001, Period: time.Second}}, 1_000_001, false, "1..1000000"),
		queue("RateLimit", weir.QueueConfig{MaxWorkers: 1, RateLimit: weir.RateLimit{Limit: 1_000_000, Period: time.Second}}, 1_000_000, true, ""),
		queue("RateLimit", weir.QueueConfig{MaxWorkers: 1, RateLimit: weir.RateLimit{Limit: 5, Period: 24*time.Hour + time.Microsecond}}, 5, false, "1ms..24h0m0s"),
		queue("KeyLimit", weir.QueueConfig{MaxWorkers: 1, KeyLimit: weir.KeyLimit{Key: "args.a", Limit: 0}}, 0, false, "no Rate"),
		queue("KeyLimit", weir.QueueConfig{MaxWorkers: 1, KeyLimit: weir.KeyLimit{Key: "args.a", Limit: 1_000_001}}, 1_000_001, false, "0..1000000"),
		queue("KeyLimit", weir.QueueConfig{MaxWorkers: 1, KeyLimit: weir.KeyLimit{Key: "args.a", Rate: weir.RateLimit{Limit: 10, Period: time.Second}}}, 10, true, ""),
		queue("KeyLimit", weir.QueueConfig{MaxWorkers: 1, KeyLimit: weir.KeyLimit{Key: "args.a", Rate: weir.RateLimit{Limit: 10}}}, 10, false, "1ms..24h0m0s"),
		queue("KeyLimit", weir.QueueConfig{MaxWorkers: 1, KeyLimit: weir.KeyLimit{Key: "args.a", Limit: 1_000_000}}, 1_000_000, true, ""),
		queue("KeyLimit", weir.QueueConfig{MaxWorkers: 1, KeyLimit: weir.KeyLimit{Key: "a", Limit: 1}}, 1, false, "neither args. nor metadata."),
		queues(1000, true),
		queues(1001, false),
	} {
		name := c.field + "=" + c.value
		cfg := &weir.Config{}
		c.set(cfg)
		_, err := weir.NewClient(b.driver, cfg)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v, want accepted", name, err)
		case !c.ok && !errors.Is(err, weir.ErrInvalid):
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		case !c.ok:
			want := cmp.Or(c.errField, c.field)
			if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != want {
				t.Errorf("%s: %#v, want an *InvalidError about %s", name, e, want)
			}
			for _, part := range []string{c.field, c.value, c.want} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("%s: error %q does not name %q", name, err, part)
				}
			}
		}
	}
}
