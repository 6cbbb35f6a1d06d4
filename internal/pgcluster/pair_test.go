package pgcluster_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/internal/pgcluster"
)

// startPair starts a pair for t. Where PostgreSQL is not installed it skips
// t, or fails it with WEIR_REQUIRE_PG_BINARIES=1 (dbtest.Started).
func startPair(t *testing.T, sync bool) *pgcluster.Pair {
	t.Helper()
	p, err := pgcluster.StartPair(pgcluster.PairOptions{DirPrefix: "pgpair-test-", Database: "app", Sync: sync})
	dbtest.Started(t, err)
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// execOn runs sql on a new connection to url.
func execOn(t *testing.T, url, sql string) error {
	t.Helper()
	conn, err := connect(t, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err = conn.Exec(ctx, sql)
	return err
}

// waitCount waits until the table kept on url holds want rows.
func waitCount(t *testing.T, url string, want int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := connect(t, url)
		n := -1
		if err == nil {
			err = conn.QueryRow(t.Context(), "SELECT count(*) FROM kept").Scan(&n)
			conn.Close(context.Background())
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rows in kept on the standby (error %v), want %d", n, err, want)
		}
		time.Sleep(20 * time.Millisecond) // polls the standby's replay
	}
}

// serverPort returns the port of the server the multi-host URL reaches.
func serverPort(t *testing.T, url string) int {
	t.Helper()
	conn, err := connect(t, url)
	if err != nil {
		t.Fatalf("connecting through %s: %v", url, err)
	}
	defer conn.Close(context.Background())
	var port string
	if err := conn.QueryRow(t.Context(), "SELECT current_setting('port')").Scan(&port); err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	return n
}

// wantSyncState checks that the primary streams to one standby, synchronous
// or not as sync says.
func wantSyncState(t *testing.T, p *pgcluster.Pair, sync bool) {
	t.Helper()
	conn, err := connect(t, p.Primary().URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var states []string
	rows, err := conn.Query(t.Context(), "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'")
	if err == nil {
		states, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	want := "async"
	if sync {
		want = "sync"
	}
	if len(states) != 1 || states[0] != want {
		t.Fatalf("the primary streams to %v, want one %s standby", states, want)
	}
}

// TestPairFailover replicates, fails over twice through the multi-host URL,
// with a synchronous and an asynchronous standby.
func TestPairFailover(t *testing.T) {
	for _, sync := range []bool{true, false} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			p := startPair(t, sync)
			url := p.URL()
			if !strings.Contains(url, "target_session_attrs=read-write") || strings.Count(url, "127.0.0.1:") != 2 {
				t.Fatalf("URL() = %q, want two hosts and target_session_attrs=read-write", url)
			}
			if got := serverPort(t, url); got != p.Primary().Port() {
				t.Fatalf("the URL reaches port %d, the primary is on %d", got, p.Primary().Port())
			}
			if err := execOn(t, url, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)"); err != nil {
				t.Fatal(err)
			}
			// The standby replays it, and refuses writes.
			waitCount(t, p.Standby().URL(), 1)
			if err := execOn(t, p.Standby().URL(), "INSERT INTO kept VALUES (0)"); err == nil {
				t.Fatal("the standby accepted a write")
			}
			wantSyncState(t, p, sync)

			rows := 1
			for round := range 2 {
				old := p.Primary().Port()
				if err := p.CrashPrimary(); err != nil {
					t.Fatal(err)
				}
				if err := p.Promote(); err != nil {
					t.Fatal(err)
				}
				if got := p.Primary().Port(); got == old {
					t.Fatalf("round %d: the primary is still on port %d after Promote", round, old)
				}
				// A write through the same URL reaches the new primary.
				if err := execOn(t, url, "INSERT INTO kept VALUES (2)"); err != nil {
					t.Fatalf("round %d: writing after the failover: %v", round, err)
				}
				rows++
				if got := serverPort(t, url); got != p.Primary().Port() {
					t.Fatalf("round %d: the URL reaches port %d, the new primary is on %d", round, got, p.Primary().Port())
				}
				if n := count(t, url); n != rows {
					t.Fatalf("round %d: %d rows after the failover, want %d", round, n, rows)
				}
				if err := p.Rebuild(); err != nil {
					t.Fatal(err)
				}
				if p.Standby().Port() != old {
					t.Fatalf("round %d: the standby is on port %d, want the old primary's %d", round, p.Standby().Port(), old)
				}
				wantSyncState(t, p, sync)
				if err := execOn(t, url, "INSERT INTO kept VALUES (3)"); err != nil {
					t.Fatal(err)
				}
				rows++
				waitCount(t, p.Standby().URL(), rows)
			}
		})
	}
}

// TestPairCutReplication loses, with an asynchronous standby, what the
// primary committed while replication was cut.
func TestPairCutReplication(t *testing.T) {
	p := startPair(t, false)
	url := p.URL()
	if err := execOn(t, url, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	waitCount(t, p.Standby().URL(), 1)
	if _, err := p.CutReplication(); err != nil {
		t.Fatal(err)
	}
	if err := execOn(t, url, "INSERT INTO kept VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CutReplication(); err == nil {
		t.Fatal("a second CutReplication did not fail")
	}
	if err := p.ResumeReplication(); err != nil {
		t.Fatal(err)
	}
	waitCount(t, p.Standby().URL(), 2) // resumed: it comes

	if _, err := p.CutReplication(); err != nil {
		t.Fatal(err)
	}
	if err := execOn(t, url, "INSERT INTO kept VALUES (3)"); err != nil {
		t.Fatal(err)
	}
	if err := p.CrashPrimary(); err != nil {
		t.Fatal(err)
	}
	if err := p.Promote(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, url); n != 2 {
		t.Fatalf("%d rows after a failover with replication cut, want 2 (the third lost)", n)
	}
}

// TestPairErrors checks the order of the failover steps.
func TestPairErrors(t *testing.T) {
	p := startPair(t, false)
	if err := p.Promote(); err == nil || !strings.Contains(err.Error(), "CrashPrimary first") {
		t.Errorf("Promote before CrashPrimary: %v", err)
	}
	if err := p.Rebuild(); err == nil {
		t.Error("Rebuild with a running standby did not fail")
	}
	if err := p.CrashPrimary(); err != nil {
		t.Fatal(err)
	}
	if err := p.CrashPrimary(); err == nil {
		t.Error("a second CrashPrimary did not fail")
	}
}
