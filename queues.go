package weir

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// QueueSet adds, removes and resizes the queues a client works, before Start
// or while it runs; Client.Queues returns it. Its calls may be made from any
// goroutine, and each is one step: a refused call changes nothing.
// docs/runtime.md ("Queues at run time") says what each guarantees.
type QueueSet struct {
	c *Client
}

// Queues returns the handle that adds, removes and resizes the client's
// queues.
func (c *Client) Queues() *QueueSet { return &QueueSet{c: c} }

// errQueuesStopped says that a client that is stopping or stopped no longer
// changes its queues.
func errQueuesStopped(op, name string) error {
	return fmt.Errorf("weir: %s queue %q: the client is stopping or stopped, and its queues no longer change: %w", op, name, ErrStopped)
}

// Add adds queue name with settings cfg, which are checked as NewClient checks
// Config.Queues. On a started client the queue's producer starts at once (it
// claims straight away), after cfg's GlobalLimit, RateLimit and KeyLimit, when set, are
// stored in the database as Start stores them; its handlers get the values of
// Start's context, as every handler does, not ctx's. Before Start, the queue
// joins the configuration Start uses. ctx bounds the wait for a Start in
// flight and the database writes.
//
// Add refuses, with an error wrapping ErrInvalid that says what is wrong, a
// name outside the character set, a queue the client has (or is still
// removing: handlers of its jobs run), settings outside their ranges, and a
// 1,001st queue; and, with one wrapping ErrStopped, a client that is stopping
// or stopped.
func (s *QueueSet) Add(ctx context.Context, name string, cfg QueueConfig) error {
	q, err := checkQueueArgs(name, cfg)
	if err != nil {
		return err
	}
	e, err := s.c.changeIdleQueues(ctx, "add", name, func(queues map[string]QueueConfig) error {
		if _, ok := queues[name]; ok {
			return errQueueExists(name)
		}
		if err := checkQueueCount(len(queues)); err != nil {
			return err
		}
		queues[name] = q
		return nil
	})
	if e == nil || err != nil {
		return err
	}
	return e.addQueue(ctx, name, q)
}

// Update gives queue name the settings cfg, checked as Add checks them. On a
// started client a new MaxWorkers or Prefetch takes effect at once: a higher
// MaxWorkers starts prefetched jobs and claims more straight away; a lower
// one stops no handler that runs, and the queue claims nothing until fewer
// than it run. A GlobalLimit, RateLimit or KeyLimit that differs from the one the
// client declared is stored in the database, as Start stores one; a zero one
// leaves the stored limit. ctx bounds the wait for a Start in flight and the
// database writes.
//
// Update refuses, with an error wrapping ErrInvalid, a queue the client does
// not work and settings outside their ranges; and, with one wrapping
// ErrStopped, a client that is stopping or stopped.
func (s *QueueSet) Update(ctx context.Context, name string, cfg QueueConfig) error {
	q, err := checkQueueArgs(name, cfg)
	if err != nil {
		return err
	}
	e, err := s.c.changeIdleQueues(ctx, "update", name, func(queues map[string]QueueConfig) error {
		if _, ok := queues[name]; !ok {
			return errNoQueue(name)
		}
		queues[name] = q
		return nil
	})
	if e == nil || err != nil {
		return err
	}
	return e.updateQueue(ctx, name, q)
}

// Remove removes queue name. Before Start, it leaves the configuration Start
// uses. On a started client it does for the queue what Stop does for all:
// the queue claims no more (a claim in flight is let finish), its prefetched
// jobs go back to available without spending an attempt, and Remove waits for
// its running handlers to return and hands their outcomes to the completer,
// which writes them as it writes any (Stop drains them). The queue's jobs in
// the database are not touched: other clients may work them, and a job
// inserted afterwards waits for one.
//
// ctx bounds the wait. When it has a deadline, the handlers still running
// when only Config.ShutdownReserve (at most a fifth) of it is left are
// cancelled with cause ErrShutdown, so that a handler that then returns an
// error has its job released without spending an attempt, as at Stop. When
// ctx ends before every handler returned, the queue is removed all the same,
// and Remove returns an error wrapping ctx's that names the jobs still
// running: their handlers run on, their outcomes are written as they return,
// and Stop waits for them as for any handler. Until they returned, the name
// cannot be added again.
//
// Remove refuses, with an error wrapping ErrInvalid, a queue the client does
// not work; and, with one wrapping ErrStopped, a client that is stopping or
// stopped (Stop then stops the queue). Removing the last queue of a started
// client is allowed: it then claims nothing.
func (s *QueueSet) Remove(ctx context.Context, name string) error {
	if err := validateName("name", "queue", name); err != nil {
		return err
	}
	e, err := s.c.changeIdleQueues(ctx, "remove", name, func(queues map[string]QueueConfig) error {
		if _, ok := queues[name]; !ok {
			return errNoQueue(name)
		}
		delete(queues, name)
		return nil
	})
	if e == nil || err != nil {
		return err
	}
	return e.removeQueue(ctx, name)
}

// List returns the settings of the queues the client works, by name: a copy,
// which the caller may change. Prefetch is the one in effect, its default
// resolved (-1 for none); GlobalLimit, RateLimit and KeyLimit are those the client
// declared, not necessarily those stored (QueueList reads those). A queue
// being removed is not listed.
func (s *QueueSet) List() map[string]QueueConfig {
	c := s.c
	c.mu.Lock()
	e := c.eng
	queues := c.config.Queues
	c.mu.Unlock()
	if e != nil {
		queues = e.queueConfigs()
	}
	list := make(map[string]QueueConfig, len(queues))
	for name, q := range queues {
		list[name] = settingsInEffect(q)
	}
	return list
}

// settingsInEffect is q as List shows it: the settings NewClient resolved,
// with a Prefetch of none written -1, so that Update given them changes
// nothing.
func settingsInEffect(q QueueConfig) QueueConfig {
	if q.Prefetch == 0 {
		q.Prefetch = -1
	}
	return q
}

// checkQueueArgs checks the arguments of Add and Update, and returns cfg
// resolved (checkQueue).
func checkQueueArgs(name string, cfg QueueConfig) (QueueConfig, error) {
	if err := validateName("name", "queue", name); err != nil {
		return cfg, err
	}
	return checkQueue("QueueConfig", name, cfg)
}

// changeIdleQueues applies change, under c.mu, to a copy of the queues Start
// will use, and stores it, when the client has not started; it waits for a
// Start in flight first, as long as ctx lasts. On a started client it changes
// nothing and returns the engine.
func (c *Client) changeIdleQueues(ctx context.Context, op, name string, change func(map[string]QueueConfig) error) (*engine, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.waitStartLocked(ctx); err != nil {
		return nil, fmt.Errorf("weir: %s queue %q: waiting for Start: %w", op, name, err)
	}
	if c.eng != nil {
		return c.eng, nil
	}
	// A copy: the map Start was given, or List returned, is never changed.
	queues := make(map[string]QueueConfig, len(c.config.Queues)+1)
	maps.Copy(queues, c.config.Queues)
	if err := change(queues); err != nil {
		return nil, err
	}
	c.config.Queues = queues
	return nil, nil
}

// errQueueExists refuses to add queue name, which the client works.
func errQueueExists(name string) error {
	return invalidf("name", "queue %q exists: use Update to change its settings", name)
}

// errNoQueue refuses to change queue name, which the client does not work.
func errNoQueue(name string) error {
	return invalidf("name", "queue %q is not one of the client's queues", name)
}

// checkQueueCount refuses a queue beyond the limit to a client that works n.
func checkQueueCount(n int) error {
	if n >= maxQueues {
		return invalidf("Config.Queues", "the client works %d queues; the limit is %d", n, maxQueues)
	}
	return nil
}

// The engine's side: the queues of a started client.

// producer returns the producer of queue, or nil when the client does not
// work it.
func (e *engine) producer(queue string) *producer {
	return (*e.producers.Load())[queue]
}

// queueConfigs returns the settings of the queues the client works.
func (e *engine) queueConfigs() map[string]QueueConfig {
	producers := *e.producers.Load()
	queues := make(map[string]QueueConfig, len(producers))
	for name, p := range producers {
		queues[name] = p.config()
	}
	return queues
}

// addQueue adds queue name with settings q to the running client.
func (e *engine) addQueue(ctx context.Context, name string, q QueueConfig) error {
	e.changeMu.Lock()
	defer e.changeMu.Unlock()
	if err := e.checkAdd(name); err != nil {
		return err
	}
	if err := storeLimits(ctx, e.deps.exec, name, q, QueueConfig{}); err != nil {
		return fmt.Errorf("weir: add queue %q: %w", name, err)
	}
	p := newProducer(e.deps, name, q)
	return e.changeQueues("add", name, func(producers map[string]*producer) error {
		producers[name] = p
		p.start(e.claimCtx, &e.producerLoops)
		return nil
	})
}

// checkAdd refuses to add queue name when Stop began, when the client works
// it or is still removing it, or when it works as many queues as it may.
func (e *engine) checkAdd(name string) error {
	e.queuesMu.Lock()
	defer e.queuesMu.Unlock()
	if e.queuesClosedLocked() {
		return errQueuesStopped("add", name)
	}
	producers := *e.producers.Load()
	if producers[name] != nil {
		return errQueueExists(name)
	}
	for p := range e.removing {
		if !p.finished() {
			if p.queue == name {
				return invalidf("name", "queue %q is still being removed: handlers of its jobs run; add it once they returned", name)
			}
			continue
		}
		// A Remove that returned early left it: it ended since.
		p.workers.Wait() // its workers end as they see it finished: at once
		delete(e.removing, p)
	}
	return checkQueueCount(len(producers))
}

// updateQueue gives queue name the settings q on the running client.
func (e *engine) updateQueue(ctx context.Context, name string, q QueueConfig) error {
	e.changeMu.Lock()
	defer e.changeMu.Unlock()
	p, err := e.liveProducer("update", name)
	if err != nil {
		return err
	}
	// changeMu keeps p the queue's producer until the change below.
	if err := storeLimits(ctx, e.deps.exec, name, q, p.config()); err != nil {
		return fmt.Errorf("weir: update queue %q: %w", name, err)
	}
	return e.changeQueues("update", name, func(map[string]*producer) error {
		p.setConfig(q)
		return nil
	})
}

// liveProducer returns the producer of queue name, unless Stop began or the
// client does not work it.
func (e *engine) liveProducer(op, name string) (*producer, error) {
	e.queuesMu.Lock()
	defer e.queuesMu.Unlock()
	if e.queuesClosedLocked() {
		return nil, errQueuesStopped(op, name)
	}
	p := e.producer(name)
	if p == nil {
		return nil, errNoQueue(name)
	}
	return p, nil
}

// removeQueue removes queue name from the running client, and waits, as long
// as ctx lasts, for its producer to end (retire).
func (e *engine) removeQueue(ctx context.Context, name string) error {
	e.changeMu.Lock()
	var p *producer
	err := e.changeQueues("remove", name, func(producers map[string]*producer) error {
		if p = producers[name]; p == nil {
			return errNoQueue(name)
		}
		delete(producers, name)
		e.removing[p] = struct{}{}
		return nil
	})
	e.changeMu.Unlock()
	if err != nil {
		return err
	}
	return e.retire(ctx, p)
}

// changeQueues applies change to a copy of the producers and stores it, and
// tells the registry, unless Stop began. change runs under queuesMu and must
// not wait.
func (e *engine) changeQueues(op, name string, change func(map[string]*producer) error) error {
	e.queuesMu.Lock()
	defer e.queuesMu.Unlock()
	if e.queuesClosedLocked() {
		return errQueuesStopped(op, name)
	}
	producers := maps.Clone(*e.producers.Load())
	if err := change(producers); err != nil {
		return err
	}
	e.producers.Store(&producers)
	e.registry.SetQueues(registryQueues(producers))
	return nil
}

// queuesClosedLocked reports whether Stop began: the queues no longer change.
// e.queuesMu is held.
func (e *engine) queuesClosedLocked() bool {
	return e.queuesClosed || e.isStopping()
}

// closeQueues ends the changes of the queues, at Stop's first step, and
// returns every producer: those of the queues worked and those of queues
// being removed.
func (e *engine) closeQueues() []*producer {
	e.queuesMu.Lock()
	defer e.queuesMu.Unlock()
	e.queuesClosed = true
	producers := slices.Collect(maps.Values(*e.producers.Load()))
	return slices.AppendSeq(producers, maps.Keys(e.removing))
}

// registryQueues is what the client registry lists of producers: each queue's
// MaxWorkers.
func registryQueues(producers map[string]*producer) map[string]int {
	queues := make(map[string]int, len(producers))
	for name, p := range producers {
		queues[name] = p.config().MaxWorkers
	}
	return queues
}

// retire ends p, the producer of a removed queue, as Stop's steps 1 to 4 end
// every producer: it stops claiming, gives back prefetched jobs, lets running
// handlers finish, and cancels those left at ctx's soft deadline. When ctx
// ends first, p stays in e.removing, so that Stop still waits for it, and the
// error names what still runs.
func (e *engine) retire(ctx context.Context, p *producer) error {
	soft, cancel := softDeadline(ctx, e.cfg.ShutdownReserve)
	defer cancel()
	p.stopClaiming()
	p.stopLoop()
	p.stopWorkers(false) // each worker ends as its handler returns
	// A claim in flight is let finish: its jobs are given back as it returns.
	awaitClosed(ctx, p.loopDone)
	p.releaseBuffered()
	if !p.waitIdle(soft) {
		e.leases.CancelRunningIn(p.queue, ErrShutdown)
	}
	p.waitIdle(ctx)
	if !p.finished() {
		return e.errRetiring(ctx, p)
	}
	p.workers.Wait() // as in Stop: each worker ends once its handler returned
	p.giveUpShare(ctx)
	p.giveUpKeys(ctx)
	e.queuesMu.Lock()
	delete(e.removing, p)
	e.queuesMu.Unlock()
	return nil
}

// errRetiring says what of p, a removed queue's producer, still runs after
// ctx ended.
func (e *engine) errRetiring(ctx context.Context, p *producer) error {
	var left []string
	if !awaitClosed(ctx, p.loopDone) {
		left = append(left, "a claim was in flight (its jobs are given back as it returns)")
	}
	if running := e.leases.RunningIn(p.queue); len(running) > 0 {
		names := make([]string, len(running))
		for i, row := range running {
			names[i] = "job " + strconv.FormatInt(row.ID, 10) + " (" + row.Kind + ")"
		}
		sort.Strings(names)
		left = append(left, "handlers still run, cancelled, and their outcomes are written as they return: "+strings.Join(names, ", "))
	}
	if len(left) == 0 {
		left = append(left, "its last handler was returning as ctx ended")
	}
	return fmt.Errorf("weir: remove queue %q: the queue claims no more, but %s: %w",
		p.queue, strings.Join(left, "; "), context.Cause(ctx))
}

// awaitClosed reports whether done was closed before ctx ended.
func awaitClosed(ctx context.Context, done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
