package dbtest_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/internal/pgcluster"
)

// ending records how a helper ended a test: skipped or failed, with its
// message. Like testing's own, its Skipf and Fatalf stop the goroutine.
type ending struct {
	testing.TB
	skipped, failed string
}

func (e *ending) Helper() {}

func (e *ending) Skipf(format string, args ...any) {
	e.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (e *ending) Fatalf(format string, args ...any) {
	e.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// endingOf runs dbtest.Started with err on a goroutine of its own and says
// how it ended.
func endingOf(t *testing.T, err error) *ending {
	e := &ending{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		dbtest.Started(e, err)
	}()
	<-done
	return e
}

// TestStartedRequireSwitch: missing PostgreSQL programs skip a test, or fail
// it with WEIR_REQUIRE_PG_BINARIES=1; any other error of a start fails it,
// and a start without error goes on.
func TestStartedRequireSwitch(t *testing.T) {
	missing := fmt.Errorf("starting: %w", pgcluster.ErrNoBinaries)
	other := errors.New("initdb: disk full")
	for _, tt := range []struct {
		env             string
		err             error
		skipped, failed bool
	}{
		{"", nil, false, false},
		{"1", nil, false, false},
		{"", missing, true, false},
		{"0", missing, true, false},
		{"1", missing, false, true},
		{"", other, false, true},
		{"1", other, false, true},
	} {
		t.Setenv("WEIR_REQUIRE_PG_BINARIES", tt.env)
		e := endingOf(t, tt.err)
		if (e.skipped != "") != tt.skipped || (e.failed != "") != tt.failed {
			t.Errorf("WEIR_REQUIRE_PG_BINARIES=%q, %v: skipped %q, failed %q", tt.env, tt.err, e.skipped, e.failed)
		}
		if tt.err == missing {
			msg := e.skipped + e.failed
			if !strings.Contains(msg, "WEIR_REQUIRE_PG_BINARIES") || !strings.Contains(msg, "initdb and pg_ctl not found") {
				t.Errorf("WEIR_REQUIRE_PG_BINARIES=%q: message %q names neither the switch nor what is missing", tt.env, msg)
			}
		}
		if tt.err == other && !strings.Contains(e.failed, "disk full") {
			t.Errorf("another error: message %q", e.failed)
		}
	}
}
