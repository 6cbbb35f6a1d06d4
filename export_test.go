package weir

import "time"

// SetClientRefreshInterval makes c, once started, refresh its row in the
// client registry every d instead of every 5 s. Call it before Start.
func SetClientRefreshInterval(c *Client, d time.Duration) { c.registryInterval = d }

// SetShareInterval makes c, once started, renew its shares of global limits
// and its buckets of keys every d in steady state instead of every 250 ms (or
// HeartbeatInterval). Call it before Start.
func SetShareInterval(c *Client, d time.Duration) { c.shareInterval = d }

// ClientRegistryWrites counts the registry writes c's engine sent, failed
// ones included; 0 before Start.
func ClientRegistryWrites(c *Client) int64 {
	if e := c.engine(); e != nil {
		return e.registryWrites.Load()
	}
	return 0
}

// WorkersAlive counts the worker goroutines of c's producers: running a job,
// idle, or started and not yet running; 0 before Start.
func WorkersAlive(c *Client) int {
	e := c.engine()
	if e == nil {
		return 0
	}
	n := 0
	for _, p := range *e.producers.Load() {
		p.mu.Lock()
		n += p.running + len(p.idleWorkers) + p.spawning
		p.mu.Unlock()
	}
	return n
}
