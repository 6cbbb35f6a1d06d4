package weir

import (
	"sync/atomic"
)

// stats are the client's counters.
type stats struct {
	claims      atomic.Int64
	renewals    atomic.Int64
	staleWrites atomic.Int64
	leasesLost  atomic.Int64
	finalized   atomic.Int64
	released    atomic.Int64
	abandoned   atomic.Int64
}

// Stats are counters of what the client's runtime did since Start.
type Stats struct {
	// Claims counts claim statements run, by all queues.
	Claims int64
	// Renewals counts renewal statements sent: one per heartbeat interval while
	// the client holds leases, and early ones that operators' cancels ask for.
	Renewals int64
	// StaleWrites counts fenced writes that matched no row: the lease had been lost.
	StaleWrites int64
	// LeasesLost counts leases the client found lost, by renewal or local deadline.
	LeasesLost int64
	// Finalized counts outcomes written, Released among them.
	Finalized int64
	// Released counts jobs given back before their handler started, without
	// spending an attempt: prefetched jobs at Stop, and the buffered jobs of a
	// bucket of keys that the client lets go (docs/design/flow-control.md).
	Released int64
	// Abandoned counts outcomes not written because the lease could no longer be
	// trusted, Stop's budget ran out, or the handler returned after Stop had
	// returned; rescue takes those jobs.
	Abandoned int64
	// EventsDropped counts events not delivered to a full subscription or hook
	// queue, or left in the hook queue when Stop's budget ran out.
	EventsDropped int64
	// HookPanics counts hook calls that panicked (the first is logged).
	HookPanics int64
	// Maintenance, counted while this client leads: the jobs rescued from
	// expired leases, the scheduled and retryable jobs made available, the
	// final jobs pruned, and the terms won (LeaderElections).
	Rescued, Scheduled, Pruned, LeaderElections int64
}

// Stats returns the runtime's counters.
func (c *Client) Stats() Stats {
	s := Stats{EventsDropped: c.events.dropped.Load(), HookPanics: c.events.hookPanics.Load()}
	c.mu.Lock()
	e := c.eng
	c.mu.Unlock()
	if e != nil {
		s.Claims = e.stats.claims.Load()
		s.Renewals = e.stats.renewals.Load()
		s.StaleWrites = e.stats.staleWrites.Load()
		s.LeasesLost = e.stats.leasesLost.Load()
		s.Finalized = e.stats.finalized.Load()
		s.Released = e.stats.released.Load()
		s.Abandoned = e.stats.abandoned.Load()
		m := e.maint.Stats()
		s.Rescued, s.Scheduled, s.Pruned, s.LeaderElections = m.Rescued, m.Scheduled, m.Pruned, m.Elections
	}
	return s
}
