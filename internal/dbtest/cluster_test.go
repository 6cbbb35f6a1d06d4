package dbtest

import (
	"errors"
	"os"
	"testing"
	"time"
)

// TestThrowawayCluster starts a second throwaway cluster, uses it and stops
// it. It is skipped with -short and when initdb and pg_ctl are missing.
func TestThrowawayCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster; skipped with -short")
	}
	t.Parallel()
	c, err := startCluster()
	if errors.Is(err, errNoBinaries) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			c.stop()
		}
	})

	if err := ping(c.url, 5*time.Second); err != nil {
		t.Fatalf("pinging throwaway cluster: %v", err)
	}
	stopped = true
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
		t.Errorf("directory %s not removed: %v", c.dir, err)
	}
	if err := ping(c.url, 2*time.Second); err == nil {
		t.Errorf("throwaway cluster still answers after stop")
	}
}
