package soak

// The failover fault: with --start-postgres and the failover fault, the soak
// runs on a primary and a streaming standby (pgcluster.Pair) through their
// multi-host URL, and every --failover-every crashes the primary, promotes
// the standby and rebuilds the old primary as the new standby.
//
// With an asynchronous standby (--standby async) each failover first cuts
// replication for asyncWindow, so that the failover loses what the primary
// committed meanwhile: the unreplicated window, from the cut (everything
// committed before it is on the standby) to the crash. Jobs whose insert
// returned inside a window may be lost, and outcomes written inside it are
// undone (the job runs again). The checker accepts a lost job only when its
// insert returned inside a window, and counts it apart; anything else the
// rewind breaks (a lease token given out again, a stale outcome that wins)
// stays a violation.

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/weirq/weir/cmd/weir/internal/pgurl"
	"github.com/weirq/weir/internal/pgcluster"
)

const faultFailover = "failover" // crash the primary, promote the standby, rebuild

// The standby kinds of --standby.
const (
	standbySync  = "sync"
	standbyAsync = "async"
)

// asyncWindow is how long an asynchronous failover keeps replication cut
// before it crashes the primary.
const asyncWindow = time.Second

// failoverState is the pair and what the failovers did; mu serializes the
// failovers with the pgrestart fault.
type failoverState struct {
	mu      sync.Mutex
	pair    *pgcluster.Pair
	windows []timeWindow // the unreplicated windows, local clock
}

// timeWindow is an interval of time.
type timeWindow struct{ From, To time.Time }

// validateFailover checks the failover fault's settings, when it is on.
func (c *Config) validateFailover() error {
	if !slices.Contains(c.Faults, faultFailover) {
		return nil
	}
	if !c.StartPostgres {
		return errors.New("the failover fault needs --start-postgres: weir soak fails over only a primary and standby it started itself")
	}
	if c.Standby != standbySync && c.Standby != standbyAsync {
		return fmt.Errorf("--standby %q is neither sync nor async", c.Standby)
	}
	if c.FailoverEvery <= 0 {
		return fmt.Errorf("--failover-every %s must be positive", c.FailoverEvery)
	}
	if c.PgBouncer {
		return errors.New("the failover fault and --pgbouncer do not go together: the PgBouncer weir soak starts points at one server, which a failover takes away")
	}
	return nil
}

// startPair starts the primary and its standby and sets the run's URL to
// their multi-host URL.
func (s *soakRun) startPair() error {
	sync := s.cfg.Standby != standbyAsync
	fmt.Fprintf(s.stderr, "soak: starting a throwaway PostgreSQL primary and a streaming standby (%s)\n", s.cfg.Standby)
	p, err := pgcluster.StartPair(pgcluster.PairOptions{
		DirPrefix: "weir-soak-pg-",
		Database:  "soak",
		Settings:  []string{"max_connections=200"},
		Sync:      sync,
	})
	if err != nil {
		return fmt.Errorf("soak: --start-postgres: %v", err)
	}
	s.fo = &failoverState{pair: p}
	s.url = p.URL()
	fmt.Fprintf(s.stderr, "soak: PostgreSQL %s in %s (primary on port %d, standby on %d)\n",
		p.Primary().Version(), p.Dir(), p.Primary().Port(), p.Standby().Port())
	return nil
}

// pgServer returns the server the pgrestart fault restarts, the primary, and
// a function to call when done, which lets failovers go on.
func (s *soakRun) pgServer() (*pgcluster.Cluster, func()) {
	if s.fo == nil {
		return s.cluster, func() {}
	}
	s.fo.mu.Lock()
	return s.fo.pair.Primary(), s.fo.mu.Unlock
}

// failover is one failover fault: (async: cut replication, wait asyncWindow,)
// crash the primary, promote the standby, rebuild the old primary as the
// new standby.
func (s *soakRun) failover() {
	fo := s.fo
	fo.mu.Lock()
	defer fo.mu.Unlock()
	p := fo.pair
	at := time.Now()
	how := s.cfg.Standby
	var window timeWindow
	err := func() error {
		if !p.Sync() {
			from, err := p.CutReplication()
			if err != nil {
				return fmt.Errorf("cut replication: %w", err)
			}
			window.From, at = from, from
			time.Sleep(asyncWindow) // the fault: commits meanwhile reach only the primary
		}
		err := p.CrashPrimary()
		if !window.From.IsZero() {
			window.To = time.Now()
			fo.windows = append(fo.windows, window)
			how += fmt.Sprintf(", unreplicated %s", window.To.Sub(window.From).Round(time.Millisecond))
		}
		if err != nil {
			return err
		}
		crashed := time.Now()
		if err := p.Promote(); err != nil {
			return err
		}
		how += fmt.Sprintf(", promoted in %s", time.Since(crashed).Round(time.Millisecond))
		rebuilding := time.Now()
		if err := p.Rebuild(); err != nil {
			return err
		}
		how += fmt.Sprintf(", rebuilt in %s", time.Since(rebuilding).Round(time.Millisecond))
		return nil
	}()
	if err != nil {
		how += ": " + pgurl.OneLine(err.Error())
	}
	s.addFault(faultEvent{Kind: faultFailover, At: at, Until: time.Now(), Detail: how})
	s.logf("failover (%s) in %s", how, time.Since(at).Round(time.Millisecond))
}

// asyncWindows returns the unreplicated windows on the database clock.
func (s *soakRun) asyncWindows() []timeWindow {
	if s.fo == nil {
		return nil
	}
	s.fo.mu.Lock()
	defer s.fo.mu.Unlock()
	var ws []timeWindow
	for _, w := range s.fo.windows {
		ws = append(ws, timeWindow{s.dbTime(w.From), s.dbTime(w.To)})
	}
	return ws
}

// endPair deals with the pair at the end of the run, as endCluster with a
// single cluster.
func (s *soakRun) endPair(runErr error) {
	p := s.fo.pair
	s.fo.mu.Lock()
	defer s.fo.mu.Unlock()
	switch {
	case s.cfg.KeepPostgres:
		fmt.Fprintf(s.stderr, "soak: the primary and standby keep running at %s; stop them with: %s; %s\n",
			p.URL(), p.Primary().Command("stop"), p.Standby().Command("stop"))
	case runErr != nil:
		if err := p.Shutdown(); err != nil {
			fmt.Fprintf(s.stderr, "soak: %v\n", err)
		}
		fmt.Fprintf(s.stderr, "soak: the stopped primary in %s keeps the audit trail (database soak, schema %s); start it with: %s\n",
			p.Primary().Dir(), s.cfg.Schema, p.Primary().Command("start"))
	default:
		if err := p.Stop(); err != nil {
			fmt.Fprintf(s.stderr, "soak: %v\n", err)
		}
	}
}

// dupAsyncUndone is the cause of a duplicate whose outcome, written inside an
// unreplicated window, was lost with it: see undoneByAsyncFailover.
const dupAsyncUndone = "async undone"

// undoneByAsyncFailover reports whether the work of x, run by a worker that
// was stopping gracefully, may have been undone by an asynchronous failover
// (and its Stop, which returned nil, have written its outcome to the old
// primary only): its handler's end is missing (the probe writes it
// before it returns, so it was lost, or never written), it started before an
// unreplicated window, and its lease was still unexpired when the window
// began, so that its end and its outcome could have been written inside the
// window and lost with it.
func (c *checker) undoneByAsyncFailover(x *auditExec, e *leaseEnd) bool {
	if !x.Ended.IsZero() {
		return false
	}
	for _, w := range c.d.AsyncWindows {
		if x.Started.Before(w.To) && !e.ExpiresAt.Before(w.From) {
			return true
		}
	}
	return false
}

// inAsyncWindow reports whether t falls in an unreplicated window.
func (c *checker) inAsyncWindow(t time.Time) bool {
	for _, w := range c.d.AsyncWindows {
		if !t.Before(w.From) && !t.After(w.To) {
			return true
		}
	}
	return false
}

// lostInAsyncWindow reports whether the ith insert, whose job is gone,
// returned inside an unreplicated window, and counts it: such a loss is the
// asynchronous standby's, allowed and counted apart.
func (c *checker) lostInAsyncWindow(i int) bool {
	if i >= len(c.d.InsertedAt) || !c.inAsyncWindow(c.d.InsertedAt[i]) {
		return false
	}
	c.r.AsyncLost++
	return true
}

// checkInsertedTwice finds job ids that two inserts returned: after a
// failover to an asynchronous standby, the id sequence is rewound, and a job
// inserted in the window is lost and its id given to another. The earlier
// insert must have returned inside an unreplicated window, else G1 is broken.
func (c *checker) checkInsertedTwice() {
	first := map[int64]int{}
	for i, id := range c.d.Inserted {
		j, seen := first[id]
		if !seen {
			first[id] = i
			continue
		}
		if c.lostInAsyncWindow(j) {
			c.r.AsyncReused++
		} else {
			c.r.Lost++
			c.violate("G1", "job id %d was returned by two inserts, the first outside any unreplicated window", id)
		}
		first[id] = i
	}
	for i := range c.d.Faults {
		if c.d.Faults[i].Kind == faultFailover {
			c.r.Failovers++
		}
	}
}
