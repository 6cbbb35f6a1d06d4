package weir_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
)

// The exactness test's child client reports each handler's start and end to
// the parent over its stdout, and waits for the parent's acknowledgement on
// its stdin before the handler runs and before it returns: the parent's count
// of running handlers covers each child handler from before it starts to
// after it ends, never less.
const (
	limitChildEnv = "WEIR_TEST_LIMIT_CHILD"
	exactLimit    = 10
	exactQueue    = "limited"
)

// limitConfig is the exactness test's client: 100 workers on the limited
// queue, and a lease short enough that a killed client's jobs are rescued
// within the test.
func limitConfig(id string, work probeFunc) *weir.Config {
	cfg := fastConfig(probeWorkers(work), map[string]weir.QueueConfig{exactQueue: {MaxWorkers: 100, GlobalLimit: exactLimit}})
	cfg.ID = id
	cfg.LeaseDuration, cfg.HeartbeatInterval, cfg.RescueInterval = time.Second, 200*time.Millisecond, 200*time.Millisecond
	return cfg
}

// startOwnPool starts a client with cfg on b's schema through a pool of its
// own, as another process's client would connect, and stops it at cleanup.
func (b *bundle) startOwnPool(t *testing.T, cfg *weir.Config) *weir.Client {
	t.Helper()
	return b.startOwnPoolTuned(t, cfg, nil)
}

// startOwnPoolTuned is startOwnPool, calling tune (if not nil) on the client
// before Start.
func (b *bundle) startOwnPoolTuned(t *testing.T, cfg *weir.Config, tune func(*weir.Client)) *weir.Client {
	t.Helper()
	driver, err := weirpgx.New(dbtest.PoolAt(t, dbtest.URL(), nil), &weirpgx.Config{Schema: b.schema})
	if err != nil {
		t.Fatal(err)
	}
	return (&bundle{driver: driver}).startTuned(t, cfg, tune)
}

// limitChildMain is the child client of TestGlobalLimitExact: it works the
// limited queue until it is killed.
func limitChildMain() int {
	ctx := context.Background()
	_, driver, err := childDriver()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var (
		mu      sync.Mutex
		waiting []chan struct{} // acknowledgements awaited, in the order asked
	)
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			mu.Lock()
			ack := waiting[0]
			waiting = waiting[1:]
			mu.Unlock()
			close(ack)
		}
	}()
	report := func(line string) {
		ack := make(chan struct{})
		mu.Lock()
		waiting = append(waiting, ack)
		fmt.Fprintln(os.Stdout, line)
		mu.Unlock()
		<-ack
	}
	c, err := weir.NewClient(driver, limitConfig("child", func(ctx context.Context, job *weir.Job[probeArgs]) error {
		report("+")
		defer report("-")
		time.Sleep(2 * time.Millisecond) // the job's work
		return nil
	}))
	if err == nil {
		err = c.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	select {} // until SIGKILL
}

// TestGlobalLimitExact: four clients of 100 workers each on a queue limited to
// 10 never run more than 10 handlers at once, counted by the handlers
// themselves at every start, also while one client, a separate process, is
// SIGKILLed while it runs jobs and the others rescue them; and the limit is
// reached, so the test could fail.
func TestGlobalLimitExact(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const jobs = 3000
	params := make([]weir.InsertManyParams, jobs)
	for i := range params {
		params[i] = weir.InsertManyParams{Args: probeArgs{Name: "x"}, InsertOpts: &weir.InsertOpts{Queue: exactQueue}}
	}
	if _, err := b.client.InsertMany(testCtx(t), params); err != nil {
		t.Fatal(err)
	}

	var (
		running, highest, starts atomic.Int64
		childRunning             atomic.Int64 // the child's share of running
	)
	start := func() {
		n := running.Add(1)
		starts.Add(1)
		for h := highest.Load(); n > h && !highest.CompareAndSwap(h, n); h = highest.Load() {
		}
	}

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), limitChildEnv+"=1", childURLEnv+"="+b.pool.Config().ConnConfig.ConnString(),
		childSchemaEnv+"="+b.schema)
	child.Stderr = os.Stderr
	toChild, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	fromChild, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	// Once killNext is set, the child is killed at its next handler's start,
	// before the start is acknowledged: it dies holding that job's lease.
	var killNext atomic.Bool
	childDone := make(chan struct{})
	go func() {
		defer close(childDone)
		lines := bufio.NewScanner(fromChild)
		for lines.Scan() {
			if lines.Text() == "+" {
				childRunning.Add(1)
				start()
				if killNext.Load() {
					if err := child.Process.Signal(syscall.SIGKILL); err != nil {
						t.Error(err)
					}
					return
				}
			} else {
				childRunning.Add(-1)
				running.Add(-1)
			}
			if _, err := io.WriteString(toChild, "ok\n"); err != nil {
				return
			}
		}
	}()

	var clients []*weir.Client
	for i := range 3 {
		clients = append(clients, b.startOwnPool(t, limitConfig(fmt.Sprintf("parent-%d", i), func(ctx context.Context, job *weir.Job[probeArgs]) error {
			start()
			defer running.Add(-1)
			time.Sleep(2 * time.Millisecond) // the job's work
			return nil
		})))
	}

	// Kill the child while it runs a job, once a tenth of them are done.
	waitFor(t, time.Minute, "a tenth of the jobs to complete", func() bool {
		return b.count(t, "state = 'completed'") >= jobs/10
	})
	killNext.Store(true)
	select {
	case <-childDone:
	case <-time.After(time.Minute):
		t.Fatal("the child started no job within a minute")
	}
	_ = child.Wait()
	// Its handlers died with it, before their leases expired: the slots they
	// held are the database's until the rescue.
	running.Add(-childRunning.Swap(0))

	waitFor(t, 2*time.Minute, "every job to complete", func() bool { return b.count(t, "state = 'completed'") == jobs })
	var rescued int64
	for _, c := range clients {
		rescued += c.Stats().Rescued
	}
	t.Logf("%d handler starts, at most %d at once; %d jobs rescued from the killed client", starts.Load(), highest.Load(), rescued)
	if h := highest.Load(); h > exactLimit {
		t.Fatalf("%d handlers ran at once under a global limit of %d", h, exactLimit)
	} else if h < exactLimit {
		t.Fatalf("at most %d handlers ran at once: the limit of %d was never reached, so this run proves nothing", h, exactLimit)
	}
	if rescued == 0 {
		t.Fatal("no job of the killed client was rescued")
	}
}

// TestQueueSetGlobalLimit: Start stores the limits the client declares; the
// operator's call changes and removes them; a limit out of range or a bad
// queue name is refused as invalid, naming it, and changes nothing.
func TestQueueSetGlobalLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := b.start(t, fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }),
		map[string]weir.QueueConfig{"declared": {MaxWorkers: 5, GlobalLimit: 4}}))
	limitOf := func(name string) int {
		t.Helper()
		if q := listedQueue(t, c, name); q != nil {
			return q.GlobalLimit
		}
		return -1
	}
	if got := limitOf("declared"); got != 4 {
		t.Fatalf("declared queue's limit after Start: %d, want 4", got)
	}
	if err := c.QueueSetGlobalLimit(testCtx(t), "declared", 2); err != nil {
		t.Fatal(err)
	}
	if got := limitOf("declared"); got != 2 {
		t.Fatalf("limit after QueueSetGlobalLimit: %d, want 2", got)
	}
	for _, bad := range []struct {
		name  string
		limit int
		field string
	}{
		{"declared", -1, "limit"},
		{"declared", 1_000_001, "limit"},
		{"", 3, "name"},
		{"bad name!", 3, "name"},
	} {
		err := c.QueueSetGlobalLimit(testCtx(t), bad.name, bad.limit)
		if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != bad.field {
			t.Errorf("limit %d of queue %q: %v, want an *InvalidError about %s", bad.limit, bad.name, err, bad.field)
		}
	}
	if got := limitOf("declared"); got != 2 {
		t.Fatalf("limit after refused changes: %d, want 2", got)
	}
	if err := c.QueueSetGlobalLimit(testCtx(t), "declared", 0); err != nil {
		t.Fatal(err)
	}
	if got := limitOf("declared"); got != -1 {
		t.Fatalf("a queue without jobs or limit is still listed (limit %d)", got)
	}
}

// TestRateLimitClients: four clients on a queue limited to a rate start its
// jobs no faster than the rate allows: in every interval of W by the claims'
// times (attempted_at, the database's clock), at most W·rate + the burst. The
// per-second counts are printed. With WEIR_RATE_ACCURACY=1 it runs the
// accuracy measurement instead: 50 a second for 30 s.
func TestRateLimitClients(t *testing.T) {
	t.Parallel()
	rate, jobs := weir.RateLimit{Limit: 100, Period: time.Second}, 300
	if os.Getenv("WEIR_RATE_ACCURACY") != "" {
		rate, jobs = weir.RateLimit{Limit: 50, Period: time.Second}, 1500
	}
	b := setup(t, nil)
	params := make([]weir.InsertManyParams, jobs)
	for i := range params {
		params[i] = weir.InsertManyParams{Args: probeArgs{Name: "x"}, InsertOpts: &weir.InsertOpts{Queue: "rated"}}
	}
	if _, err := b.client.InsertMany(testCtx(t), params); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		cfg := fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }),
			map[string]weir.QueueConfig{"rated": {MaxWorkers: 20, RateLimit: rate}})
		cfg.ID = fmt.Sprintf("rated-%d", i)
		b.startOwnPool(t, cfg)
	}
	waitFor(t, 2*time.Minute, "every job to complete", func() bool { return b.count(t, "state = 'completed'") == jobs })

	rows, err := b.pool.Query(testCtx(t), "SELECT attempted_at FROM "+b.schema+".weir_job ORDER BY attempted_at")
	if err != nil {
		t.Fatal(err)
	}
	var at []time.Time
	for rows.Next() {
		var a time.Time
		if err := rows.Scan(&a); err != nil {
			t.Fatal(err)
		}
		at = append(at, a)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	tick := rate.Period / time.Duration(rate.Limit)
	burst := weirdriver.RateBurst(rate.Limit, rate.Period)
	for _, w := range []time.Duration{50 * time.Millisecond, 500 * time.Millisecond, time.Second} {
		most := 0
		for i := range at {
			j := i
			for j < len(at) && at[j].Sub(at[i]) < w {
				j++
			}
			most = max(most, j-i)
		}
		if bound := int(w/tick) + burst; most > bound {
			t.Errorf("%d starts within %s under %s: the bound is %d", most, w, rate, bound)
		}
	}
	// Starts per whole second of the run, for the record.
	var perSecond []int
	for i := 0; i < len(at); {
		j := i
		for j < len(at) && at[j].Sub(at[0]) < time.Duration(len(perSecond)+1)*time.Second {
			j++
		}
		perSecond = append(perSecond, j-i)
		i = j
	}
	t.Logf("%d jobs under %s in %s; starts per second: %v", jobs, rate, at[len(at)-1].Sub(at[0]).Round(time.Millisecond), perSecond)
}

// TestQueueSetRateLimit: Start stores the rate limit the client declares; the
// operator's call changes and removes it; a limit or period out of range, or a
// bad queue name, is refused as invalid, naming it, and changes nothing.
func TestQueueSetRateLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := b.start(t, fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }),
		map[string]weir.QueueConfig{"declared": {MaxWorkers: 5, RateLimit: weir.RateLimit{Limit: 10, Period: time.Second}}}))
	rateOf := func() weir.RateLimit {
		t.Helper()
		if q := listedQueue(t, c, "declared"); q != nil {
			return weir.RateLimit{Limit: q.RateLimit, Period: q.RatePeriod}
		}
		return weir.RateLimit{Limit: -1}
	}
	if got := rateOf(); got != (weir.RateLimit{Limit: 10, Period: time.Second}) {
		t.Fatalf("declared rate after Start: %v", got)
	}
	set := weir.RateLimit{Limit: 600, Period: time.Minute}
	if err := c.QueueSetRateLimit(testCtx(t), "declared", set); err != nil {
		t.Fatal(err)
	}
	if got := rateOf(); got != set || got.String() != "600/1m" {
		t.Fatalf("rate after QueueSetRateLimit: %v", got)
	}
	for _, bad := range []struct {
		name  string
		limit weir.RateLimit
		field string
	}{
		{"declared", weir.RateLimit{Limit: 0, Period: time.Second}, "limit"},
		{"declared", weir.RateLimit{Limit: -1, Period: time.Second}, "limit"},
		{"declared", weir.RateLimit{Limit: 1_000_001, Period: time.Second}, "limit"},
		{"declared", weir.RateLimit{Limit: 5}, "limit"},
		{"declared", weir.RateLimit{Limit: 5, Period: 25 * time.Hour}, "limit"},
		{"declared", weir.RateLimit{Limit: 5, Period: time.Millisecond + time.Nanosecond}, "limit"},
		{"bad name!", weir.RateLimit{Limit: 5, Period: time.Second}, "name"},
	} {
		err := c.QueueSetRateLimit(testCtx(t), bad.name, bad.limit)
		if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != bad.field {
			t.Errorf("rate %v of queue %q: %v, want an *InvalidError about %s", bad.limit, bad.name, err, bad.field)
		}
	}
	if got := rateOf(); got != set {
		t.Fatalf("rate after refused changes: %v", got)
	}
	if err := c.QueueSetRateLimit(testCtx(t), "declared", weir.RateLimit{}); err != nil {
		t.Fatal(err)
	}
	if got := rateOf(); got.Limit != -1 {
		t.Fatalf("a queue without jobs or limits is still listed (rate %v)", got)
	}
}

// listedQueue returns queue name as c's QueueList lists it, or nil when it
// is not listed.
func listedQueue(t *testing.T, c *weir.Client, name string) *weir.QueueStats {
	t.Helper()
	queues, err := c.QueueList(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queues {
		if q.Name == name {
			return q
		}
	}
	return nil
}
