package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/internal/weirbench"
)

// requireNode skips t where node or the peers' packages are missing, or fails
// it if WEIR_REQUIRE_NODE=1 (as CI sets it).
func requireNode(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath(*nodeProgram)
	if err == nil {
		_, err = os.Stat(filepath.Join(*nodeDir, "node_modules"))
	}
	if err == nil {
		return
	}
	if os.Getenv("WEIR_REQUIRE_NODE") == "1" {
		t.Fatalf("node or the peers' packages missing, and WEIR_REQUIRE_NODE=1 (apt-get install nodejs npm; bench/node/install.sh): %v", err)
	}
	t.Skipf("node or the peers' packages missing (apt-get install nodejs npm; bench/node/install.sh): %v", err)
}

func init() {
	// The tests run in cmd/compare; the peers are in bench/node.
	*nodeDir = filepath.Join("..", "..", "node")
}

// TestNodePeers drives each Node.js peer through peer.js as the workloads do:
// it migrates, inserts in bulk and singly, works every job, and stops; each
// job's start must be reported with its number, and every completion must be
// counted, and be in the table, once Stop returns.
func TestNodePeers(t *testing.T) {
	requireNode(t)
	for _, sys := range []*nodeSystem{graphileSystem(), pgbossSystem()} {
		t.Run(sys.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			sys.schema = dbtest.Schema(t)
			pool := dbtest.Pool(t, nil)
			if err := sys.Migrate(ctx, pool); err != nil {
				t.Fatal(err)
			}
			if d := sys.Describe(weirbench.Throughput); !strings.Contains(d, sys.info.Version) || sys.info.Version == "" {
				t.Errorf("settings %q do not name the version %q", d, sys.info.Version)
			}
			const n = 101
			var (
				mu      sync.Mutex
				seen    = map[int64]bool{}
				allSeen = make(chan struct{})
			)
			c, err := sys.Open(pool, weirbench.ClientConfig{Work: true, Settings: weirbench.Throughput, OnStart: func(seq int64) {
				mu.Lock()
				defer mu.Unlock()
				if seen[seq] {
					t.Errorf("job %d started twice", seq)
				}
				seen[seq] = true
				if len(seen) == n {
					close(allSeen)
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.(*nodeClient).Close()
			insertAndStart(t, c, n)
			select {
			case <-allSeen:
			case <-time.After(time.Minute):
				mu.Lock()
				t.Fatalf("%d of %d jobs started in a minute", len(seen), n)
			}
			if err := c.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if got := c.Completed(); got != n {
				t.Errorf("%d completions counted after Stop, want %d", got, n)
			}
			mu.Lock()
			for seq := range int64(n) {
				if !seen[seq] {
					t.Errorf("job %d: no start reported", seq)
				}
			}
			mu.Unlock()
			where := "state = 'completed'"
			if sys.deletes {
				where = "true" // a completed job is gone
			}
			var rows int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+sys.JobTable()+" WHERE "+where).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 0, false: n}[sys.deletes]; rows != want {
				t.Errorf("%d rows where %s, want %d", rows, where, want)
			}
			// A request after the process has gone fails, and says so.
			c.(*nodeClient).Close()
			if err := c.Insert(context.Background(), n); err == nil || !strings.Contains(err.Error(), "peer.js") {
				t.Errorf("insert after Close: %v", err)
			}
		})
	}
}

// TestNodeMissing checks that a peer without node fails, and says how to
// install it, rather than skipping.
func TestNodeMissing(t *testing.T) {
	saved := *nodeProgram
	*nodeProgram = filepath.Join(t.TempDir(), "no-node")
	defer func() { *nodeProgram = saved }()
	err := graphileSystem().Migrate(t.Context(), dbtest.Pool(t, nil))
	if err == nil || !strings.Contains(err.Error(), "Node.js not found") || !strings.Contains(err.Error(), "install.sh") {
		t.Errorf("migrate without node: %v", err)
	}
}

// insertAndStart inserts jobs 0 to n-1 into c, all but the last in one bulk
// insert and the last alone, so that both insert paths run, and starts c.
func insertAndStart(t *testing.T, c weirbench.Client, n int) {
	t.Helper()
	if err := c.InsertMany(t.Context(), 0, n-1); err != nil {
		t.Fatal(err)
	}
	if err := c.Insert(t.Context(), int64(n-1)); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
}
