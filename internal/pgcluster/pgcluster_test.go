package pgcluster_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/internal/pgcluster"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// connect connects to url, giving up after 10 s.
func connect(t *testing.T, url string) (*pgx.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return pgx.Connect(ctx, url)
}

// count returns the number of rows of table kept, on a new connection.
func count(t *testing.T, url string) int {
	t.Helper()
	conn, err := connect(t, url)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM kept").Scan(&n); err != nil {
		t.Fatalf("counting rows: %v", err)
	}
	return n
}

// TestCluster starts a cluster, uses it, restarts it both ways, and stops it.
func TestCluster(t *testing.T) {
	c, err := pgcluster.Start(pgcluster.Options{
		DirPrefix: "pgcluster-test-",
		Database:  "app",
		Settings:  []string{"max_connections=42"},
	})
	dbtest.Started(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
	})
	t.Logf("PostgreSQL %s in %s, port %d", c.Version(), c.Dir(), c.Port())

	url := c.URL()
	if want := "127.0.0.1:" + strconv.Itoa(c.Port()) + "/app?"; !strings.Contains(url, want) {
		t.Errorf("URL() = %q, want it to contain %q", url, want)
	}
	if c.Version() == "" {
		t.Errorf("Version() is empty")
	}
	if cmd := c.Command("start"); !strings.Contains(cmd, c.Dir()) || !strings.HasSuffix(cmd, " start") {
		t.Errorf("Command(start) = %q", cmd)
	}

	conn, err := connect(t, url)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	var db, maxConns string
	if err := conn.QueryRow(t.Context(), "SELECT current_database(), current_setting('max_connections')").Scan(&db, &maxConns); err != nil {
		t.Fatalf("querying: %v", err)
	}
	if db != "app" || maxConns != "42" {
		t.Errorf("database %q, max_connections %s; want app, 42", db, maxConns)
	}
	if _, err := conn.Exec(t.Context(), "CREATE TABLE kept AS SELECT generate_series(1, 3) AS n"); err != nil {
		t.Fatalf("creating table: %v", err)
	}
	conn.Close(context.Background())

	// Each way down and up again keeps the data.
	for _, step := range []struct {
		name string
		down func() error
		up   func() error // nil: down came back up itself
	}{
		{"Restart", c.Restart, nil},
		{"Crash", c.Crash, c.StartServer},
		{"Shutdown", c.Shutdown, c.StartServer},
	} {
		if err := step.down(); err != nil {
			t.Fatal(err)
		}
		if step.up != nil {
			if conn, err := connect(t, url); err == nil {
				conn.Close(context.Background())
				t.Fatalf("the server still answers after %s", step.name)
			}
			if _, err := os.Stat(c.Dir()); err != nil {
				t.Fatalf("directory gone after %s: %v", step.name, err)
			}
			if err := step.up(); err != nil {
				t.Fatal(err)
			}
		}
		if n := count(t, url); n != 3 {
			t.Errorf("after %s: %d rows, want 3", step.name, n)
		}
	}

	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.Dir()); !os.IsNotExist(err) {
		t.Errorf("directory %s not removed: %v", c.Dir(), err)
	}
	if conn, err := connect(t, url); err == nil {
		conn.Close(context.Background())
		t.Error("the server still answers after Stop")
	}
}
