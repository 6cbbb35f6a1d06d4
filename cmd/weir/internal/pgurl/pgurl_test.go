package pgurl

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConnectTimeoutConfig: the string's connect_timeout is the bound, however
// long; without one, weir's default bounds each attempt; and the first query's
// deadline never cuts a connection attempt short.
func TestConnectTimeoutConfig(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		url  string
		want time.Duration
	}{
		{"postgres://app@db1/app?connect_timeout=60", time.Minute},
		{"host=db1 user=app connect_timeout=60", time.Minute},
		{"postgres://app@db1/app", defaultConnectTimeout},
		{"postgres://app@db1/app?connect_timeout=0", defaultConnectTimeout},
		{"host=db1 user=app", defaultConnectTimeout},
	} {
		cfg, err := Config(tt.url)
		if err != nil {
			t.Fatalf("%q: %v", tt.url, err)
		}
		if got := cfg.ConnConfig.ConnectTimeout; got != tt.want {
			t.Errorf("%q: connect timeout %s, want %s", tt.url, got, tt.want)
		}
		if budget := pingBudget(cfg); budget <= tt.want {
			t.Errorf("%q: the ping's deadline %s cuts the connect timeout %s short", tt.url, budget, tt.want)
		}
	}
	cfg, err := Config("postgres://app:pw@db1:5433,db2,db3:5433/app?connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(postgresHosts(cfg), " "), "db1:5433 db2:5432 db3:5433"; got != want {
		t.Errorf("hosts %q, want %q", got, want)
	}
	if budget := pingBudget(cfg); budget <= 3*5*time.Second {
		t.Errorf("the ping's deadline %s cuts three hosts' attempts short", budget)
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	in := "failed to connect to `user=u database=d`:\n\ta: refused\n\ta: refused\n\tb: refused"
	if got, want := OneLine(in), "failed to connect to `user=u database=d`: a: refused b: refused"; got != want {
		t.Fatalf("OneLine = %q, want %q", got, want)
	}
}
