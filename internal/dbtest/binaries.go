package dbtest

import (
	"errors"
	"os"
	"testing"

	"github.com/weirq/weir/internal/pgcluster"
)

// envRequirePGBinaries, set to "1", makes a test that needs PostgreSQL's own
// programs (initdb, pg_ctl, pg_basebackup, pgbench) fail instead of skipping
// when they are not installed (CI sets it).
const envRequirePGBinaries = "WEIR_REQUIRE_PG_BINARIES"

// PGBinariesRequired reports whether WEIR_REQUIRE_PG_BINARIES=1: a test that
// would do less without PostgreSQL's programs must then fail.
func PGBinariesRequired() bool {
	return os.Getenv(envRequirePGBinaries) == "1"
}

// NoPGBinaries ends tb for want of PostgreSQL's programs, which err
// explains: it skips tb, or fails it if WEIR_REQUIRE_PG_BINARIES=1.
func NoPGBinaries(tb testing.TB, err error) {
	tb.Helper()
	if PGBinariesRequired() {
		tb.Fatalf("dbtest: %v, and %s=1 (Debian: apt-get install postgresql)", err, envRequirePGBinaries)
	}
	tb.Skipf("dbtest: skipped: %v; set %s=1 to fail instead", err, envRequirePGBinaries)
}

// Started checks the error of starting a throwaway cluster
// (pgcluster.Start, pgcluster.StartPair): nil returns, PostgreSQL not
// installed (pgcluster.ErrNoBinaries) goes to NoPGBinaries, and any other
// error fails tb.
func Started(tb testing.TB, err error) {
	tb.Helper()
	if errors.Is(err, pgcluster.ErrNoBinaries) {
		NoPGBinaries(tb, err)
	}
	if err != nil {
		tb.Fatalf("dbtest: starting a throwaway cluster: %v", err)
	}
}
