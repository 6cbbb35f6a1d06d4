package weir

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Stop stops the client gracefully; ctx's deadline is the whole budget. It stops
// claiming, gives back prefetched jobs, lets running handlers finish, cancels them
// (cause ErrShutdown) when only ShutdownReserve of the budget is left, writes every
// outcome, and then stops the heartbeat, the listener and maintenance. It returns
// no later than the deadline plus a few milliseconds. Handlers that have not
// returned by then are abandoned (their leases lapse and rescue takes their jobs)
// and named in the error.
func (c *Client) Stop(ctx context.Context) error {
	return c.stop(ctx, false)
}

// StopAndCancel stops the client at once: it cancels running handlers (cause
// ErrShutdown) without waiting for them to finish by themselves, then stops as Stop
// does. A second Stop, or Stop after StopAndCancel, waits for the first.
func (c *Client) StopAndCancel(ctx context.Context) error {
	return c.stop(ctx, true)
}

// isStopping reports whether a Stop began.
func (e *engine) isStopping() bool {
	e.stopMu.Lock()
	defer e.stopMu.Unlock()
	return e.stopping
}

func (c *Client) stop(ctx context.Context, hard bool) error {
	e, err := c.settledEngine(ctx)
	if err != nil {
		return fmt.Errorf("weir: stop: waiting for Start: %w", err)
	}
	if e == nil {
		return nil
	}
	if hard {
		e.cancelHandlers() // a second, harder stop while a graceful one runs goes to step 4
	}
	e.stopMu.Lock()
	first := !e.stopping
	e.stopping = true
	e.stopMu.Unlock()
	if first {
		e.stopErr = e.shutdown(ctx, hard)
		close(e.stopped)
		return e.stopErr
	}
	select {
	case <-e.stopped:
		return e.stopErr
	case <-ctx.Done():
		return fmt.Errorf("weir: stop: %w", ctx.Err())
	}
}

// shutdown runs the steps of docs/design/contract.md's Shutdown.
func (e *engine) shutdown(ctx context.Context, hard bool) error {
	whole := ctx // the whole budget, tail included
	deadline, hasDeadline := ctx.Deadline()
	if hasDeadline {
		// What follows the last wait (cutting what is in flight, stopping the
		// services) takes milliseconds, more on a loaded machine: it gets the end
		// of the budget, so that Stop returns by the deadline, not just after it.
		deadline = deadline.Add(-stopTail(e.cfg.ShutdownReserve, time.Until(deadline)))
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	// Every wait below ends by the budget; what is still in flight then is cut.
	stopHard := context.AfterFunc(ctx, e.hardCancel)
	defer stopHard()

	e.completer.BeginStop()

	// 1. Stop claiming and wake every goroutine that waits for work. The
	// queues stop changing: every producer, those of queues being removed
	// included, is one of these.
	producers := e.closeQueues()
	for _, p := range producers {
		p.stopClaiming()
	}
	e.stopClaim()
	waitCtx(ctx, e.producerLoops.Wait)

	// 2. Give back prefetched jobs, fenced, without spending an attempt.
	for _, p := range producers {
		p.releaseBuffered()
	}

	// 3. Let running handlers finish while heartbeats go on; 4. at the soft
	// deadline, cancel those left.
	soft, cancelSoft := ctx, context.CancelFunc(func() {})
	if !hard {
		soft, cancelSoft = softDeadline(ctx, e.cfg.ShutdownReserve)
	}
	defer cancelSoft()
	if hard {
		e.cancelHandlers()
	}
	if !waitIdle(soft, producers) {
		e.cancelHandlers()
	}
	allReturned := waitIdle(ctx, producers)
	for _, p := range producers {
		p.stopWorkers(allReturned)
	}
	// Give the shares of global limits back, so that the other clients need
	// not wait for their leases to end; a producer whose handlers still run
	// keeps its share until its lease ends.
	for _, p := range producers {
		p.giveUpShare(ctx)
		p.giveUpKeys(ctx)
	}

	// 5. Drain every finalization before stopping what keeps leases alive.
	drainErr := e.completer.WaitDrained(ctx)
	e.completer.Close()

	// 6. Stop the remaining services and give up leadership. The resignation
	// may use the tail of the budget: a leader whose handlers used all the rest
	// still gives up its term, rather than holding it like a crashed one until
	// it lapses (G9).
	e.maint.Stop(whole)
	e.serviceCancel()
	e.services.Wait()
	<-e.completerDone
	e.events.stop(ctx) // hooks drain within the budget; subscriptions close
	// 7. Leave the client registry, last: its refreshes stopped with the
	// services, so none writes the row back. Like the resignation it may use
	// the tail of the budget; a row left behind is forgotten by the leader.
	e.registry.Remove(whole)

	var problems []string
	switch abandoned := e.runningJobs(); {
	case len(abandoned) > 0:
		problems = append(problems, "handlers did not return and were abandoned (rescue will take their jobs): "+abandoned)
	case !allReturned:
		// They returned between the deadline and now: their outcomes may have
		// missed the drain.
		problems = append(problems, "handlers returned only after the deadline; their outcomes may be unwritten (rescue will take those jobs)")
	}
	if drainErr != nil {
		problems = append(problems, "some outcomes were not written before the deadline (rescue will take their jobs)")
	}
	if ids := e.completer.UnwrittenJobs(); len(ids) > 0 {
		// The lease was lost (stale), or could not be trusted long enough to
		// write the outcome: these jobs ran here and may run again.
		problems = append(problems, fmt.Sprintf("the outcomes of jobs %v were not written: their leases were lost "+
			"or could not be renewed in time, so they may run again", ids))
	}
	e.limited.flush()
	if len(problems) > 0 {
		return fmt.Errorf("weir: stop: %s", strings.Join(problems, "; "))
	}
	return nil
}

// maxStopTail bounds the end of Stop's budget kept for its last steps.
const maxStopTail = 50 * time.Millisecond

// stopTail is the end of a budget of left kept for Stop's last steps: half the
// reserve handlers get (see shutdown), at most maxStopTail.
func stopTail(reserve, left time.Duration) time.Duration {
	return min(reserve, left/5, 2*maxStopTail) / 2
}

// waitCtx runs wait in a goroutine and reports whether it returned before ctx
// ended. The goroutine outlives a false return only as long as wait blocks: here,
// only while a claim cut by the budget unwinds.
func waitCtx(ctx context.Context, wait func()) bool {
	done := make(chan struct{})
	go func() {
		wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// softDeadline returns the context at whose end handlers still running are
// cancelled: ctx's deadline minus the reserve (at most a fifth of what is
// left), so that they have the reserve to return and have their outcomes
// written. Without a deadline, it is ctx.
func softDeadline(ctx context.Context, reserve time.Duration) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	reserve = min(reserve, time.Until(deadline)/5)
	return context.WithDeadline(ctx, deadline.Add(-reserve))
}

// waitIdle reports whether every handler of producers returned before ctx
// ended.
func waitIdle(ctx context.Context, producers []*producer) bool {
	for _, p := range producers {
		if !p.waitIdle(ctx) {
			return false
		}
	}
	return true
}

// cancelHandlers cancels every running handler with cause ErrShutdown.
func (e *engine) cancelHandlers() {
	e.leases.CancelRunning(ErrShutdown)
}

// runningJobs names the jobs whose handlers have not returned.
func (e *engine) runningJobs() string {
	var names []string
	for _, row := range e.leases.Running() {
		names = append(names, "job "+strconv.FormatInt(row.ID, 10)+" ("+row.Kind+")")
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
