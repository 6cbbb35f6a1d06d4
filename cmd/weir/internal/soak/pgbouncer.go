package soak

import (
	"fmt"
	"sync"
	"time"

	"github.com/weirq/weir/internal/pgcluster"
)

// soakBouncer is the PgBouncer of a run with Config.PgBouncer: the workers
// connect through it (the orchestrator does not), and it is started again
// when it exits during the run. PgBouncer 1.18 is known to crash on some
// cancel requests under load; such a crash is a fault the workers ride out
// (their connections drop), counted and reported, not a failure of the run.
type soakBouncer struct {
	b        *pgcluster.PgBouncer
	url      string // the workers' connection string
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	restarts int
}

// startBouncer starts the PgBouncer in front of s.url and a goroutine that
// restarts it when it exits.
func (s *soakRun) startBouncer() error {
	b, err := pgcluster.StartPgBouncer(s.url, pgcluster.PgBouncerOptions{PoolSize: 40})
	if err != nil {
		return fmt.Errorf("soak: --pgbouncer: %v", err)
	}
	sb := &soakBouncer{b: b, url: b.ClientURL(""), stop: make(chan struct{}), done: make(chan struct{})}
	s.bouncer = sb
	fmt.Fprintf(s.stderr, "soak: PgBouncer (transaction mode) on 127.0.0.1:%d; workers connect through it, poll-only\n", b.Port())
	go func() {
		defer close(sb.done)
		for {
			select {
			case <-sb.stop:
				return
			case <-b.Exited():
			}
			select {
			case <-sb.stop: // stopped by stopBouncer, not a crash
				return
			default:
			}
			s.addFault(faultEvent{Kind: "pgbouncer", At: time.Now(), Detail: "exited; restarted"})
			s.logf("PgBouncer exited; restarting it (see %s)", b.Log())
			sb.mu.Lock()
			sb.restarts++
			sb.mu.Unlock()
			if err := b.Restart(); err != nil {
				s.logf("PgBouncer did not start again: %v", err)
				fmt.Fprintf(s.stderr, "soak: PgBouncer did not start again: %v\n", err)
				return
			}
		}
	}()
	return nil
}

// workerURL is the connection string of the workers: PgBouncer's with
// Config.PgBouncer, else the database's.
func (s *soakRun) workerURL() string {
	if s.bouncer != nil {
		return s.bouncer.url
	}
	return s.url
}

// stopBouncer stops the PgBouncer and says how often it had to be restarted.
func (s *soakRun) stopBouncer() {
	sb := s.bouncer
	close(sb.stop)
	<-sb.done // a restart in flight ends first
	if err := sb.b.Stop(); err != nil {
		fmt.Fprintf(s.stderr, "soak: %v\n", err)
	}
	sb.mu.Lock()
	n := sb.restarts
	sb.mu.Unlock()
	if n > 0 {
		fmt.Fprintf(s.stderr, "soak: PgBouncer exited during the run and was restarted, %d time(s): a fault, not a failure (docs/poolers.md)\n", n)
	}
}
