package weir_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirq/weir"
)

// queueOpts inserts a probe job into queue.
func queueOpts(queue string) *weir.InsertOpts { return &weir.InsertOpts{Queue: queue} }

// storedLimits returns queue's global and rate limit as the database holds
// them (0 when it has no row).
func storedLimits(t *testing.T, c *weir.Client, queue string) (global, rate int) {
	t.Helper()
	if q := listedQueue(t, c, queue); q != nil {
		return q.GlobalLimit, q.RateLimit
	}
	return 0, 0
}

// registryQueues returns the queues, with their MaxWorkers, that c's row in
// the client registry lists.
func registryQueues(t testing.TB, c *weir.Client) map[string]int {
	t.Helper()
	for _, row := range listClients(t, c) {
		if row.ID == c.ID() {
			queues := map[string]int{}
			for _, q := range row.Queues {
				queues[q.Name] = q.MaxWorkers
			}
			return queues
		}
	}
	return nil
}

// waitRegistryQueues waits until c's registry row lists want.
func waitRegistryQueues(t testing.TB, c *weir.Client, want map[string]int) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("the registry to list %v", want), func() bool {
		return maps.Equal(registryQueues(t, c), want)
	})
}

// waitState waits until job id is in state.
func (b *bundle) waitState(t testing.TB, id int64, state weir.JobState) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("job %d to be %s", id, state), func() bool { return b.job(t, id).State == state })
}

// insertHeld inserts n probe jobs into queue, whose handler holds its first
// job on g and whose prefetch takes the others, and waits until they are all
// claimed. It returns their ids and the running job's.
func (b *bundle) insertHeld(t testing.TB, g *gate, n int, queue string) (ids []int64, running int64) {
	t.Helper()
	for range n {
		ids = append(ids, b.insertProbe(t, "p", queueOpts(queue)))
	}
	running = g.expectStarted(t)
	waitFor(t, 10*time.Second, fmt.Sprintf("%d jobs claimed", n), func() bool { return b.count(t, "state = 'running'") == n })
	return ids, running
}

// TestQueuesAddStarted adds a queue to a running client: it claims at once,
// its declared limits are stored, List and the client registry show it.
func TestQueuesAddStarted(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cfg := fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }),
		map[string]weir.QueueConfig{"first": {MaxWorkers: 2}})
	cfg.FetchPollInterval = time.Hour // the added queue claims at once, not at a poll
	c := b.start(t, cfg)
	waitRegistryQueues(t, c, map[string]int{"first": 2})
	waiting := b.insertProbe(t, "inserted before the queue existed", queueOpts("added"))

	rate := weir.RateLimit{Limit: 1000, Period: time.Second}
	if err := c.Queues().Add(testCtx(t), "added", weir.QueueConfig{MaxWorkers: 3, GlobalLimit: 7, RateLimit: rate}); err != nil {
		t.Fatal(err)
	}
	b.waitState(t, waiting, weir.JobStateCompleted)
	b.waitState(t, b.insertProbe(t, "inserted after", queueOpts("added")), weir.JobStateCompleted)
	if global, perPeriod := storedLimits(t, c, "added"); global != 7 || perPeriod != 1000 {
		t.Errorf("stored limits of the added queue: global %d, rate %d; want 7 and 1000", global, perPeriod)
	}
	want := map[string]weir.QueueConfig{
		"first": {MaxWorkers: 2, Prefetch: -1}, // the default, MaxWorkers/4, is none
		"added": {MaxWorkers: 3, Prefetch: -1, GlobalLimit: 7, RateLimit: rate},
	}
	if got := c.Queues().List(); !maps.Equal(got, want) {
		t.Errorf("List: %v, want %v", got, want)
	}
	waitRegistryQueues(t, c, map[string]int{"first": 2, "added": 3})
}

// TestQueuesBeforeStart changes the queues of a client not started: Start
// works the queues as they are then.
func TestQueuesBeforeStart(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cfg := fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }),
		map[string]weir.QueueConfig{"gone": {MaxWorkers: 1}, "kept": {MaxWorkers: 1}})
	c, err := weir.NewClient(b.driver, cfg)
	if err != nil {
		t.Fatal(err)
	}
	qs := c.Queues()
	if err := qs.Add(testCtx(t), "added", weir.QueueConfig{MaxWorkers: 4, GlobalLimit: 3}); err != nil {
		t.Fatal(err)
	}
	if err := qs.Remove(testCtx(t), "gone"); err != nil {
		t.Fatal(err)
	}
	if err := qs.Update(testCtx(t), "kept", weir.QueueConfig{MaxWorkers: 8, Prefetch: 5}); err != nil {
		t.Fatal(err)
	}
	if global, _ := storedLimits(t, c, "added"); global != 0 {
		t.Errorf("Add before Start stored the global limit %d; Start stores it", global)
	}
	want := map[string]weir.QueueConfig{"added": {MaxWorkers: 4, Prefetch: 1, GlobalLimit: 3}, "kept": {MaxWorkers: 8, Prefetch: 5}}
	if got := qs.List(); !maps.Equal(got, want) {
		t.Fatalf("List before Start: %v, want %v", got, want)
	}
	if cfg.Queues["gone"].MaxWorkers != 1 || len(cfg.Queues) != 2 {
		t.Errorf("the caller's Config.Queues changed: %v", cfg.Queues)
	}
	gone := b.insertProbe(t, "removed before Start", queueOpts("gone"))
	added := b.insertProbe(t, "added before Start", queueOpts("added"))
	if err := c.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	if global, _ := storedLimits(t, c, "added"); global != 3 {
		t.Errorf("global limit after Start: %d, want 3", global)
	}
	b.waitState(t, added, weir.JobStateCompleted)
	waitRegistryQueues(t, c, map[string]int{"added": 4, "kept": 8})
	if j := b.job(t, gone); j.State != weir.JobStateAvailable {
		t.Errorf("the job of the queue removed before Start is %s", j.State)
	}

	// A client whose every queue was removed before Start only inserts.
	empty, err := weir.NewClient(b.driver, fastConfig(cfg.Workers, map[string]weir.QueueConfig{"only": {MaxWorkers: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := empty.Queues().Remove(testCtx(t), "only"); err != nil {
		t.Fatal(err)
	}
	if err := empty.Start(testCtx(t)); !errors.Is(err, weir.ErrInvalid) {
		t.Errorf("Start without queues: %v, want ErrInvalid", err)
	}
}

// TestQueuesRefused checks that each bad call, on a client before and after
// Start, says what is wrong and changes nothing; and that after Stop every
// call is refused with ErrStopped.
func TestQueuesRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	full := map[string]weir.QueueConfig{"q": {MaxWorkers: 1, GlobalLimit: 2}}
	for i := range 999 {
		full[fmt.Sprintf("filler-%d", i)] = weir.QueueConfig{MaxWorkers: 1}
	}
	cfg := fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }), full)
	cfg.FetchPollInterval = time.Hour // a thousand queues polling would load the database for nothing
	idle, err := weir.NewClient(b.driver, cfg)
	if err != nil {
		t.Fatal(err)
	}
	started := b.start(t, cfg)
	good := weir.QueueConfig{MaxWorkers: 1, GlobalLimit: 9}
	cases := []struct {
		what, field string
		call        func(*weir.QueueSet) error
	}{
		{"add an empty name", "name", func(s *weir.QueueSet) error { return s.Add(testCtx(t), "", good) }},
		{"add a name with a space", "name", func(s *weir.QueueSet) error { return s.Add(testCtx(t), "a b", good) }},
		{"add a name of 256 bytes", "name", func(s *weir.QueueSet) error { return s.Add(testCtx(t), strings.Repeat("n", 256), good) }},
		{"add a queue that exists", "name", func(s *weir.QueueSet) error { return s.Add(testCtx(t), "q", good) }},
		{"add a 1,001st queue", "Config.Queues", func(s *weir.QueueSet) error { return s.Add(testCtx(t), "new", good) }},
		{"add MaxWorkers 0", "QueueConfig.MaxWorkers", func(s *weir.QueueSet) error {
			return s.Add(testCtx(t), "new", weir.QueueConfig{GlobalLimit: 9})
		}},
		{"add MaxWorkers 10,001", "QueueConfig.MaxWorkers", func(s *weir.QueueSet) error {
			return s.Add(testCtx(t), "new", weir.QueueConfig{MaxWorkers: 10_001})
		}},
		{"add Prefetch -2", "QueueConfig.Prefetch", func(s *weir.QueueSet) error {
			return s.Add(testCtx(t), "new", weir.QueueConfig{MaxWorkers: 1, Prefetch: -2})
		}},
		{"add GlobalLimit -1", "QueueConfig.GlobalLimit", func(s *weir.QueueSet) error {
			return s.Add(testCtx(t), "new", weir.QueueConfig{MaxWorkers: 1, GlobalLimit: -1})
		}},
		{"add a rate period of 0", "QueueConfig.RateLimit", func(s *weir.QueueSet) error {
			return s.Add(testCtx(t), "new", weir.QueueConfig{MaxWorkers: 1, RateLimit: weir.RateLimit{Limit: 5}})
		}},
		{"update a queue it does not work", "name", func(s *weir.QueueSet) error { return s.Update(testCtx(t), "unknown", good) }},
		{"update with a bad name", "name", func(s *weir.QueueSet) error { return s.Update(testCtx(t), "a b", good) }},
		{"update MaxWorkers 0", "QueueConfig.MaxWorkers", func(s *weir.QueueSet) error {
			return s.Update(testCtx(t), "q", weir.QueueConfig{GlobalLimit: 9})
		}},
		{"update GlobalLimit 1,000,001", "QueueConfig.GlobalLimit", func(s *weir.QueueSet) error {
			return s.Update(testCtx(t), "q", weir.QueueConfig{MaxWorkers: 1, GlobalLimit: 1_000_001})
		}},
		{"remove a queue it does not work", "name", func(s *weir.QueueSet) error { return s.Remove(testCtx(t), "unknown") }},
		{"remove a bad name", "name", func(s *weir.QueueSet) error { return s.Remove(testCtx(t), "") }},
	}
	for _, c := range []struct {
		name   string
		client *weir.Client
	}{{"before Start", idle}, {"started", started}} {
		before := c.client.Queues().List()
		for _, tc := range cases {
			err := tc.call(c.client.Queues())
			if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != tc.field || !errors.Is(err, weir.ErrInvalid) {
				t.Errorf("%s: %s: %v, want an *InvalidError about %s", c.name, tc.what, err, tc.field)
			}
		}
		if got := c.client.Queues().List(); !maps.Equal(got, before) {
			t.Errorf("%s: the refused calls changed the queues", c.name)
		}
	}
	// Nothing reached the database: the refused calls declared a global
	// limit of 9 for "q" and "new".
	for _, queue := range []string{"q", "new"} {
		if global, _ := storedLimits(t, started, queue); global == 9 {
			t.Errorf("a refused call stored queue %q's global limit", queue)
		}
	}
	if global, _ := storedLimits(t, started, "q"); global != 2 {
		t.Errorf("queue q's global limit is %d, want 2 (Start's)", global)
	}

	before := started.Queues().List()
	if err := started.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for what, call := range map[string]func(*weir.QueueSet) error{
		"add":    func(s *weir.QueueSet) error { return s.Add(testCtx(t), "late", good) },
		"update": func(s *weir.QueueSet) error { return s.Update(testCtx(t), "q", weir.QueueConfig{MaxWorkers: 5}) },
		"remove": func(s *weir.QueueSet) error { return s.Remove(testCtx(t), "q") },
	} {
		if err := call(started.Queues()); !errors.Is(err, weir.ErrStopped) || !strings.Contains(err.Error(), "stopping or stopped") {
			t.Errorf("%s after Stop: %v, want ErrStopped", what, err)
		}
	}
	if got := started.Queues().List(); !maps.Equal(got, before) {
		t.Error("calls after Stop changed the queues")
	}
}

// counter counts the handlers running at once and records, for each start,
// how many ran with it.
type counter struct {
	running atomic.Int64
	mu      sync.Mutex
	atStart []int64
}

func (c *counter) start() {
	n := c.running.Add(1)
	c.mu.Lock()
	c.atStart = append(c.atStart, n)
	c.mu.Unlock()
}

func (c *counter) end() { c.running.Add(-1) }

// starts returns how many ran with each start, in order.
func (c *counter) starts() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int64(nil), c.atStart...)
}

// TestQueuesUpdateMaxWorkers raises a queue's MaxWorkers, which starts
// prefetched jobs at once, and lowers it, which stops no handler but starts no
// job until fewer than it run.
func TestQueuesUpdateMaxWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var n counter
	started := make(chan int64, 10)
	var releases sync.Map // job id → chan struct{}, closed to let its handler return
	release := func(id int64) chan struct{} {
		ch, _ := releases.LoadOrStore(id, make(chan struct{}))
		return ch.(chan struct{})
	}
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		n.start()
		defer n.end()
		started <- job.ID
		<-release(job.ID)
		return nil
	}), map[string]weir.QueueConfig{"q": {MaxWorkers: 1, Prefetch: 5}})
	c := b.start(t, cfg)
	for range 6 {
		b.insertProbe(t, "p", queueOpts("q"))
	}
	next := func() int64 {
		t.Helper()
		select {
		case id := <-started:
			return id
		case <-time.After(30 * time.Second):
			t.Fatal("a handler did not start")
			return 0
		}
	}
	running := []int64{next()}
	waitFor(t, 10*time.Second, "six jobs claimed", func() bool { return b.count(t, "state = 'running'") == 6 })
	if err := c.Queues().Update(testCtx(t), "q", weir.QueueConfig{MaxWorkers: 3, Prefetch: 5}); err != nil {
		t.Fatal(err)
	}
	running = append(running, next(), next())
	if got := n.running.Load(); got != 3 {
		t.Fatalf("%d handlers run after MaxWorkers became 3", got)
	}
	waitRegistryQueues(t, c, map[string]int{"q": 3})

	if err := c.Queues().Update(testCtx(t), "q", weir.QueueConfig{MaxWorkers: 1, Prefetch: 5}); err != nil {
		t.Fatal(err)
	}
	if got := n.running.Load(); got != 3 {
		t.Fatalf("lowering MaxWorkers left %d handlers running, want the 3 that ran", got)
	}
	// Let the handlers return one at a time, each only once the outcome of
	// the one before was written: a job that a freed slot would start starts
	// first, on the worker that freed it, in microseconds.
	for range 6 {
		if len(running) == 0 {
			running = append(running, next())
		}
		id := running[0]
		running = running[1:]
		close(release(id))
		b.waitState(t, id, weir.JobStateCompleted)
		for len(started) > 0 {
			running = append(running, <-started)
		}
	}
	starts := n.starts()
	if len(starts) != 6 {
		t.Fatalf("%d starts, want 6", len(starts))
	}
	for i, with := range starts[3:] {
		if with != 1 {
			t.Errorf("start %d, after MaxWorkers became 1, ran with %d handlers", i+4, with)
		}
	}
	waitRegistryQueues(t, c, map[string]int{"q": 1})
}

// TestQueuesUpdateLimits stores a global or rate limit that an Update
// changes, and leaves one it does not change, which an operator may have
// set since.
func TestQueuesUpdateLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := b.start(t, fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }),
		map[string]weir.QueueConfig{"q": {MaxWorkers: 2}}))
	qs := c.Queues()
	rate := weir.RateLimit{Limit: 50, Period: time.Second}
	if err := qs.Update(testCtx(t), "q", weir.QueueConfig{MaxWorkers: 2, GlobalLimit: 5, RateLimit: rate}); err != nil {
		t.Fatal(err)
	}
	if global, perPeriod := storedLimits(t, c, "q"); global != 5 || perPeriod != 50 {
		t.Fatalf("after Update: global %d, rate %d; want 5 and 50", global, perPeriod)
	}
	if err := c.QueueSetGlobalLimit(testCtx(t), "q", 7); err != nil {
		t.Fatal(err)
	}
	if err := qs.Update(testCtx(t), "q", weir.QueueConfig{MaxWorkers: 4, GlobalLimit: 5, RateLimit: rate}); err != nil {
		t.Fatal(err)
	}
	if global, _ := storedLimits(t, c, "q"); global != 7 {
		t.Errorf("an Update that kept the declared limit replaced the operator's: %d, want 7", global)
	}
	if err := qs.Update(testCtx(t), "q", weir.QueueConfig{MaxWorkers: 4, GlobalLimit: 6}); err != nil {
		t.Fatal(err)
	}
	if global, perPeriod := storedLimits(t, c, "q"); global != 6 || perPeriod != 50 {
		t.Errorf("after a new limit: global %d, rate %d; want 6 and 50 (a zero RateLimit leaves the stored one)", global, perPeriod)
	}
}

// TestQueuesRemove removes a queue whose handler runs and whose jobs are
// prefetched: the prefetched jobs go back without spending an attempt, Remove
// waits for the handler, whose outcome is written, and the queue claims no
// more; another queue works on.
func TestQueuesRemove(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	g := newGate()
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		if job.Queue == "q" {
			g.started <- job.ID
			<-g.ch
		}
		return nil
	}), map[string]weir.QueueConfig{"q": {MaxWorkers: 1, Prefetch: 3}, "other": {MaxWorkers: 1}})
	// A producer left polling would claim the job inserted after Remove
	// while the other queue's job runs.
	cfg.FetchPollInterval = 10 * time.Millisecond
	c := b.start(t, cfg)
	ids, running := b.insertHeld(t, g, 4, "q")

	removed := make(chan error, 1)
	go func() { removed <- c.Queues().Remove(testCtx(t), "q") }()
	waitFor(t, 10*time.Second, "the prefetched jobs given back", func() bool { return b.count(t, "state = 'available'") == 3 })
	select {
	case err := <-removed:
		t.Fatalf("Remove returned while the handler ran: %v", err)
	default:
	}
	if _, ok := c.Queues().List()["q"]; ok {
		t.Error("List shows the queue being removed")
	}
	g.open()
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	b.waitState(t, running, weir.JobStateCompleted)
	for _, id := range ids {
		if id == running {
			continue
		}
		if j := b.job(t, id); j.State != weir.JobStateAvailable || j.Attempt != 0 || j.ReleaseCount != 0 {
			t.Errorf("prefetched job %d: state %s attempt %d releases %d", id, j.State, j.Attempt, j.ReleaseCount)
		}
	}
	if s := c.Stats(); s.Released != 3 {
		t.Errorf("released %d, want 3", s.Released)
	}
	waitRegistryQueues(t, c, map[string]int{"other": 1})

	// A job inserted now is never claimed: the insert wakes no producer of
	// q, while the same batch wakes other's, whose job runs.
	res, err := c.InsertMany(testCtx(t), []weir.InsertManyParams{
		{Args: probeArgs{Name: "after"}, InsertOpts: queueOpts("q")},
		{Args: probeArgs{Name: "after"}, InsertOpts: queueOpts("other")},
	})
	if err != nil {
		t.Fatal(err)
	}
	b.waitState(t, res[1].Job.ID, weir.JobStateCompleted)
	if j := b.job(t, res[0].Job.ID); j.State != weir.JobStateAvailable || j.AttemptedBy != "" {
		t.Errorf("a job inserted after Remove is %s, attempted by %q", j.State, j.AttemptedBy)
	}
	if err := c.Queues().Remove(testCtx(t), "q"); !errors.Is(err, weir.ErrInvalid) {
		t.Errorf("removing it again: %v, want ErrInvalid", err)
	}
	// The last queue may go too; then the client claims nothing.
	if err := c.Queues().Remove(testCtx(t), "other"); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestQueuesRemoveExpires removes a queue whose ctx ends first: the handler
// that returns when cancelled has its job released, the one that ignores its
// context is named, runs on, keeps the name from being added again, and Stop
// still waits for it and writes its outcome.
func TestQueuesRemoveExpires(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	stubborn := newGate()
	causes := make(chan error, 2)
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		stubborn.started <- job.ID
		<-ctx.Done()
		causes <- context.Cause(ctx)
		if job.Args.Name == "polite" {
			return ctx.Err()
		}
		<-stubborn.ch
		return nil
	}), map[string]weir.QueueConfig{"q": {MaxWorkers: 2, Prefetch: -1}})
	c := b.start(t, cfg)
	defer stubborn.open()
	polite := b.insertProbe(t, "polite", queueOpts("q"))
	ignoring := b.insertProbe(t, "stubborn", queueOpts("q"))
	stubborn.expectStarted(t)
	stubborn.expectStarted(t)

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := c.Queues().Remove(ctx, "q")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), fmt.Sprintf("job %d (probe)", ignoring)) ||
		strings.Contains(err.Error(), fmt.Sprintf("job %d (", polite)) {
		t.Fatalf("Remove: %v; want DeadlineExceeded naming job %d only", err, ignoring)
	}
	for range 2 {
		if cause := <-causes; !errors.Is(cause, weir.ErrShutdown) {
			t.Errorf("a handler was cancelled with %v, want ErrShutdown", cause)
		}
	}
	b.waitState(t, polite, weir.JobStateAvailable)
	if j := b.job(t, polite); j.Attempt != 0 || j.ReleaseCount != 1 || len(j.Errors) != 0 {
		t.Errorf("the released job: attempt %d, releases %d, errors %v", j.Attempt, j.ReleaseCount, j.Errors)
	}
	if j := b.job(t, ignoring); j.State != weir.JobStateRunning {
		t.Errorf("the job whose handler runs on is %s", j.State)
	}
	if err := c.Queues().Add(testCtx(t), "q", weir.QueueConfig{MaxWorkers: 1}); !errors.Is(err, weir.ErrInvalid) ||
		!strings.Contains(err.Error(), "still being removed") {
		t.Errorf("adding it back while its handler runs: %v, want ErrInvalid", err)
	}
	if _, ok := c.Queues().List()["q"]; ok {
		t.Error("List shows the removed queue")
	}

	// Stop waits for the handler of the removed queue, and writes its outcome.
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(testCtx(t)) }()
	waitFor(t, 10*time.Second, "Stop to begin", func() bool {
		return errors.Is(c.Queues().Add(testCtx(t), "probe", weir.QueueConfig{MaxWorkers: 1}), weir.ErrStopped)
	})
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned while a removed queue's handler ran: %v", err)
	default:
	}
	stubborn.open()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if j := b.job(t, ignoring); j.State != weir.JobStateCompleted {
		t.Errorf("after Stop, the removed queue's job is %s", j.State)
	}
}

// TestQueuesRemoveThenAdd adds a removed queue back once its handler
// returned late: the outcome of the handler was written (the job does not run
// again) and the queue works again.
func TestQueuesRemoveThenAdd(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	g := newGate()
	var runs sync.Map // job id → runs
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		n, _ := runs.LoadOrStore(job.ID, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		if job.Args.Name == "slow" {
			g.started <- job.ID
			<-g.ch // ignores its context
		}
		return nil
	}), map[string]weir.QueueConfig{"q": {MaxWorkers: 1}})
	c := b.start(t, cfg)
	slow := b.insertProbe(t, "slow", queueOpts("q"))
	g.expectStarted(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no wait at all: the handler is cancelled and named at once
	if err := c.Queues().Remove(ctx, "q"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Remove: %v, want Canceled", err)
	}
	g.open()
	b.waitState(t, slow, weir.JobStateCompleted)
	waitFor(t, 10*time.Second, "the name to be free", func() bool {
		err := c.Queues().Add(testCtx(t), "q", weir.QueueConfig{MaxWorkers: 2})
		if err != nil && !strings.Contains(err.Error(), "still being removed") {
			t.Fatal(err)
		}
		return err == nil
	})
	next := b.insertProbe(t, "next", queueOpts("q"))
	b.waitState(t, next, weir.JobStateCompleted)
	if err := c.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if n, _ := runs.Load(slow); n.(*atomic.Int64).Load() != 1 {
		t.Errorf("the removed queue's job ran %d times", n.(*atomic.Int64).Load())
	}
}

// TestQueuesStopCoversAdded stops a client whose queue was added at run
// time: Stop gives back its prefetched jobs and waits for its handler, as
// for a queue configured at NewClient.
func TestQueuesStopCoversAdded(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	g := newGate()
	cfg := fastConfig(probeWorkers(func(ctx context.Context, job *weir.Job[probeArgs]) error {
		g.started <- job.ID
		<-g.ch
		return nil
	}), map[string]weir.QueueConfig{"first": {MaxWorkers: 1}})
	c := b.start(t, cfg)
	if err := c.Queues().Add(testCtx(t), "added", weir.QueueConfig{MaxWorkers: 1, Prefetch: 2}); err != nil {
		t.Fatal(err)
	}
	ids, running := b.insertHeld(t, g, 3, "added")
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(testCtx(t)) }()
	waitFor(t, 10*time.Second, "the prefetched jobs given back", func() bool { return b.count(t, "state = 'available'") == 2 })
	g.open()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if j := b.job(t, running); j.State != weir.JobStateCompleted {
		t.Errorf("the running job is %s after Stop", j.State)
	}
	for _, id := range ids {
		if j := b.job(t, id); id != running && (j.State != weir.JobStateAvailable || j.Attempt != 0) {
			t.Errorf("prefetched job %d: %s, attempt %d", id, j.State, j.Attempt)
		}
	}
}

// TestQueuesChangeDuringStop adds, resizes and removes queues from several
// goroutines while jobs run and Stop runs (under -race): each call either
// takes effect or is refused, Stop returns nil, and goleak (TestMain) finds
// no goroutine left.
func TestQueuesChangeDuringStop(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cfg := fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }),
		map[string]weir.QueueConfig{"base": {MaxWorkers: 2}})
	c := b.start(t, cfg)
	for i := range 40 {
		b.insertProbe(t, "p", queueOpts(fmt.Sprintf("q%d", i%4)))
	}
	var wg sync.WaitGroup
	stopping := make(chan struct{}, 4)
	for worker := range 4 {
		name := fmt.Sprintf("q%d", worker)
		wg.Go(func() {
			for i := 0; ; i++ {
				qs := c.Queues()
				errs := []error{
					qs.Add(context.Background(), name, weir.QueueConfig{MaxWorkers: 1 + i%3}),
					qs.Update(context.Background(), name, weir.QueueConfig{MaxWorkers: 1 + (i+1)%3}),
					qs.Update(context.Background(), "base", weir.QueueConfig{MaxWorkers: 1 + (i+worker)%3}),
					qs.Remove(context.Background(), name),
				}
				stopped := false
				for _, err := range errs {
					switch {
					case err == nil:
					case errors.Is(err, weir.ErrStopped):
						stopped = true
					default:
						t.Errorf("%s: %v", name, err)
						return
					}
				}
				if stopped {
					return
				}
				if i == 5 {
					stopping <- struct{}{}
				}
			}
		})
	}
	for range 4 {
		select {
		case <-stopping: // this goroutine has changed its queue a few times
		case <-time.After(30 * time.Second):
			t.Fatal("a goroutine did not change its queue six times")
		}
	}
	if err := c.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := c.Queues().Add(testCtx(t), "late", weir.QueueConfig{MaxWorkers: 1}); !errors.Is(err, weir.ErrStopped) {
		t.Errorf("Add after Stop: %v", err)
	}
}
