package weir_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver"
)

// keyGauge counts the handlers running per key and keeps the most seen at
// once for each.
type keyGauge struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	done    map[string]int
}

func newKeyGauge() *keyGauge {
	return &keyGauge{running: map[string]int{}, most: map[string]int{}, done: map[string]int{}}
}

func (g *keyGauge) enter(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running[key]++
	g.most[key] = max(g.most[key], g.running[key])
}

func (g *keyGauge) leave(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running[key]--
	g.done[key]++
}

func (g *keyGauge) snapshot() (most, done map[string]int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	most, done = map[string]int{}, map[string]int{}
	for k, v := range g.most {
		most[k] = v
	}
	for k, v := range g.done {
		done[k] = v
	}
	return most, done
}

// TestKeyLimitClients: three clients of 20 workers on a queue limited to 2
// running jobs per customer (args.name) work a backlog of 300 jobs of one
// customer inserted ahead of 30 jobs each of 5 others. Every handler counts
// itself in and out of its customer's counter: no customer ever has more
// than 2 running at once, and 2 is reached; the other customers' jobs are
// not held back by the backlog ahead of them: they all finish while most of
// it still waits.
func TestKeyLimitClients(t *testing.T) {
	t.Parallel()
	const limit, hot, others, each = 2, 300, 5, 30
	b := setup(t, nil)
	var params []weir.InsertManyParams
	add := func(name string, n int) {
		for range n {
			params = append(params, weir.InsertManyParams{Args: probeArgs{Name: name}, InsertOpts: &weir.InsertOpts{Queue: "keyed"}})
		}
	}
	add("hot", hot)
	for i := range others {
		add(fmt.Sprintf("c%d", i), each)
	}
	if _, err := b.client.InsertMany(testCtx(t), params); err != nil {
		t.Fatal(err)
	}

	gauge := newKeyGauge()
	othersDone := make(chan int, 1) // the hot jobs done when the others were
	var otherCount sync.Mutex
	left := others * each
	work := func(ctx context.Context, job *weir.Job[probeArgs]) error {
		gauge.enter(job.Args.Name)
		// A job's work: the hot customer's is slower, so that its backlog
		// lasts while the others run.
		pause := time.Millisecond
		if job.Args.Name == "hot" {
			pause = 5 * time.Millisecond
		}
		time.Sleep(pause)
		gauge.leave(job.Args.Name)
		if job.Args.Name != "hot" {
			otherCount.Lock()
			if left--; left == 0 {
				_, done := gauge.snapshot()
				othersDone <- done["hot"]
			}
			otherCount.Unlock()
		}
		return nil
	}
	for i := range 3 {
		cfg := fastConfig(probeWorkers(work), map[string]weir.QueueConfig{
			"keyed": {MaxWorkers: 20, KeyLimit: weir.KeyLimit{Key: "args.name", Limit: limit}},
		})
		cfg.ID = fmt.Sprintf("keyed-%d", i)
		b.startOwnPool(t, cfg)
	}
	var hotDone int
	select {
	case hotDone = <-othersDone:
	case <-time.After(2 * time.Minute):
		t.Fatal("the other customers' jobs did not all run")
	}
	if hotDone > hot/2 {
		t.Errorf("the other customers' jobs finished after %d of the hot customer's %d: its backlog held them back", hotDone, hot)
	}
	waitFor(t, 2*time.Minute, "every job to complete", func() bool { return b.count(t, "state = 'completed'") == hot+others*each })
	most, _ := gauge.snapshot()
	for key, n := range most {
		if n > limit {
			t.Errorf("customer %s had %d jobs running at once under a limit of %d", key, n, limit)
		}
	}
	if most["hot"] != limit {
		t.Errorf("the hot customer ran at most %d at once, never its limit of %d", most["hot"], limit)
	}
	t.Logf("most running at once per customer: %v; the others finished after %d of %d hot jobs", most, hotDone, hot)
}

// TestQueueSetKeyLimit: a declared key limit is stored at Start;
// QueueSetKeyLimit changes and removes it; bad input is refused as invalid,
// names the field, and changes nothing.
func TestQueueSetKeyLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	declared := weir.KeyLimit{Key: "args.customer_id", Limit: 3}
	c := b.start(t, fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }),
		map[string]weir.QueueConfig{"declared": {MaxWorkers: 5, KeyLimit: declared}}))
	keyOf := func() weir.KeyLimit {
		t.Helper()
		if q := listedQueue(t, c, "declared"); q != nil {
			return weir.QueueKeyLimit(q)
		}
		return weir.KeyLimit{Limit: -1}
	}
	if got := keyOf(); got != declared {
		t.Fatalf("declared key limit after Start: %v", got)
	}
	set := weir.KeyLimit{Key: "metadata.tenant.id", Limit: 1, Rate: weir.RateLimit{Limit: 600, Period: time.Minute}}
	if err := c.QueueSetKeyLimit(testCtx(t), "declared", set); err != nil {
		t.Fatal(err)
	}
	if got := keyOf(); got != set || got.String() != "metadata.tenant.id:1,600/1m" {
		t.Fatalf("key limit after QueueSetKeyLimit: %v", got)
	}
	for _, bad := range []struct {
		name  string
		limit weir.KeyLimit
		field string
	}{
		{"declared", weir.KeyLimit{Key: "args.a", Limit: 0}, "limit"},
		{"declared", weir.KeyLimit{Key: "args.a", Limit: -1}, "limit"},
		{"declared", weir.KeyLimit{Key: "args.a", Limit: 1_000_001}, "limit"},
		{"declared", weir.KeyLimit{Limit: 2}, "limit"},
		{"declared", weir.KeyLimit{Key: "customer_id", Limit: 2}, "limit"},
		{"declared", weir.KeyLimit{Key: "args.a<b>", Limit: 2}, "limit"},
		{"declared", weir.KeyLimit{Key: "args.a", Rate: weir.RateLimit{Limit: 0, Period: time.Second}}, "limit"},
		{"declared", weir.KeyLimit{Key: "args.a", Rate: weir.RateLimit{Limit: 5, Period: 25 * time.Hour}}, "limit"},
		{"bad name!", weir.KeyLimit{Key: "args.a", Limit: 2}, "name"},
	} {
		err := c.QueueSetKeyLimit(testCtx(t), bad.name, bad.limit)
		if e, ok := errors.AsType[*weir.InvalidError](err); !ok || e.Field != bad.field {
			t.Errorf("key limit %v of queue %q: %v, want an *InvalidError about %s", bad.limit, bad.name, err, bad.field)
		}
	}
	if got := keyOf(); got != set {
		t.Fatalf("key limit after refused changes: %v", got)
	}
	if err := c.QueueSetKeyLimit(testCtx(t), "declared", weir.KeyLimit{}); err != nil {
		t.Fatal(err)
	}
	if got := keyOf(); got.Limit != -1 {
		t.Fatalf("a queue without jobs or limits is still listed (key limit %v)", got)
	}
}

// TestParseKeyLimit: the form weir queues and the dashboard take.
func TestParseKeyLimit(t *testing.T) {
	for in, want := range map[string]weir.KeyLimit{
		"none":                   {},
		"args.customer_id:2":     {Key: "args.customer_id", Limit: 2},
		"metadata.tenant.id:100": {Key: "metadata.tenant.id", Limit: 100},
		"args.customer_id:10/1s": {Key: "args.customer_id", Rate: weir.RateLimit{Limit: 10, Period: time.Second}},
		"args.c:2,600/1m":        {Key: "args.c", Limit: 2, Rate: weir.RateLimit{Limit: 600, Period: time.Minute}},
	} {
		if got, err := weir.ParseKeyLimit(in); err != nil || got != want || got.String() != in {
			t.Errorf("ParseKeyLimit(%q) = %v (%s), %v; want %v", in, got, got, err, want)
		}
	}
	for _, in := range []string{"", "2", "args.a", "args.a:", "args.a:0", "args.a:1000001", "args.a:x", "tenant:2", "args.:2", "args.a.b.c.d.e.f.g.h.i:2",
		"args.a:2,", "args.a:2,x/1s", "args.a:0/1s", "args.a:2/0s", "args.a:,10/1s", "args.a:10/1s,2"} {
		if got, err := weir.ParseKeyLimit(in); err == nil {
			t.Errorf("ParseKeyLimit(%q) = %v, no error", in, got)
		}
	}
}

// TestKeyRateLimitClients: three clients on a queue limited to 20 starts a
// second per customer work 40 jobs of each of two customers; by the jobs'
// attempted_at, no customer ever had more than W/T + burst starts within an
// interval of W, while the two customers ran side by side.
func TestKeyRateLimitClients(t *testing.T) {
	t.Parallel()
	const each = 40
	rate := weir.RateLimit{Limit: 20, Period: time.Second}
	b := setup(t, nil)
	var params []weir.InsertManyParams
	for _, name := range []string{"a", "b"} {
		for range each {
			params = append(params, weir.InsertManyParams{Args: probeArgs{Name: name}, InsertOpts: &weir.InsertOpts{Queue: "key-rated"}})
		}
	}
	if _, err := b.client.InsertMany(testCtx(t), params); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		cfg := fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }),
			map[string]weir.QueueConfig{"key-rated": {MaxWorkers: 10, KeyLimit: weir.KeyLimit{Key: "args.name", Rate: rate}}})
		cfg.ID = fmt.Sprintf("key-rated-%d", i)
		b.startOwnPool(t, cfg)
	}
	waitFor(t, time.Minute, "every job to complete", func() bool { return b.count(t, "state = 'completed'") == 2*each })

	tick := rate.Period / time.Duration(rate.Limit)
	burst := weirdriver.RateBurst(rate.Limit, rate.Period)
	var spans []string
	for _, name := range []string{"a", "b"} {
		var at []time.Time
		rows, err := b.pool.Query(testCtx(t), "SELECT attempted_at FROM "+b.schema+".weir_job WHERE args->>'name' = $1 ORDER BY attempted_at", name)
		if err != nil {
			t.Fatal(err)
		}
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
		for _, w := range []time.Duration{200 * time.Millisecond, time.Second} {
			most := 0
			for i := range at {
				j := i
				for j < len(at) && at[j].Sub(at[i]) < w {
					j++
				}
				most = max(most, j-i)
			}
			if bound := int(w/tick) + burst; most > bound {
				t.Errorf("customer %s: %d starts within %s under %s a customer: the bound is %d", name, most, w, rate, bound)
			}
		}
		spans = append(spans, fmt.Sprintf("%s from %s to %s", name, at[0].Format("05.000"), at[len(at)-1].Format("05.000")))
	}
	t.Logf("%d jobs of each customer under %s a customer: %v", each, rate, spans)
}

// TestKeySharesMove: the buckets of a queue's keys move between clients
// while they work. Client A starts alone and holds every bucket, its
// handlers held at a gate, one job of each of 8 keys; B and C join, and A
// lets two thirds of the buckets go (giving back the buffered jobs of those):
// B and C take the free ones, but not those of the 8 keys whose jobs still
// run in A, and work the other keys. Then the gate opens, A stops mid-drain
// and gives the rest up, which B and C take. Through every move no key has
// more than its limit of 1 running at once, every job completes once, and
// none spends an attempt it did not run (jobs given back keep theirs). With
// a bucket taken while a job of its keys runs, a key runs twice at once.
func TestKeySharesMove(t *testing.T) {
	t.Parallel()
	const keys, each = 40, 25
	b := setup(t, nil)
	var params []weir.InsertManyParams
	for i := range keys * each {
		params = append(params, weir.InsertManyParams{Args: probeArgs{Name: fmt.Sprintf("k%d", i%keys)}, InsertOpts: &weir.InsertOpts{Queue: "moving"}})
	}
	if _, err := b.client.InsertMany(testCtx(t), params); err != nil {
		t.Fatal(err)
	}
	gauge := newKeyGauge()
	gate := make(chan struct{})
	work := func(ctx context.Context, job *weir.Job[probeArgs]) error {
		gauge.enter(job.Args.Name)
		defer gauge.leave(job.Args.Name)
		if job.AttemptedBy == "move-a" {
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}
		select { // a job's work, cut short at shutdown
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	}
	held := func(holder string) int {
		var n int
		if err := b.pool.QueryRow(testCtx(t), "SELECT count(*) FROM "+b.schema+".weir_key_share WHERE queue = 'moving' AND holder = $1 AND expires_at > now()", holder).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	start := func(id string) *weir.Client {
		cfg := fastConfig(probeWorkers(work), map[string]weir.QueueConfig{
			"moving": {MaxWorkers: 8, KeyLimit: weir.KeyLimit{Key: "args.name", Limit: 1}},
		})
		cfg.ID = id
		return b.startOwnPool(t, cfg)
	}
	a := start("move-a")
	waitFor(t, time.Minute, "a to hold every bucket and run 8 jobs", func() bool {
		return held("move-a") == weirdriver.KeyBuckets && b.count(t, "state = 'running' AND attempted_by = 'move-a'") >= 8
	})
	start("move-b")
	start("move-c")
	waitFor(t, time.Minute, "b and c to work the keys a let go", func() bool {
		return held("move-a") <= 22 && held("move-b") > 0 && held("move-c") > 0 &&
			b.count(t, "state = 'completed' AND attempted_by IN ('move-b', 'move-c')") >= 200
	})
	close(gate)
	if err := a.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if n := held("move-a"); n != 0 {
		t.Errorf("a holds %d buckets after Stop, want none", n)
	}
	waitFor(t, time.Minute, "b and c to hold every bucket", func() bool {
		return held("move-b")+held("move-c") == weirdriver.KeyBuckets
	})
	waitFor(t, 2*time.Minute, "every job to complete", func() bool { return b.count(t, "state = 'completed'") == keys*each })
	if n := b.count(t, "attempt <> 1"); n != 0 {
		t.Errorf("%d jobs spent more than the attempt that ran them", n)
	}
	most, done := gauge.snapshot()
	for key, n := range most {
		if n > 1 {
			t.Errorf("key %s had %d jobs running at once under a limit of 1", key, n)
		}
		if done[key] != each {
			t.Errorf("key %s ran %d times, want %d", key, done[key], each)
		}
	}
	if len(most) != keys {
		t.Errorf("%d keys ran, want %d", len(most), keys)
	}
}

// heldBuckets counts the live buckets of queue's keys that holder holds.
func heldBuckets(t *testing.T, b *bundle, queue, holder string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(testCtx(t), "SELECT count(*) FROM "+b.schema+".weir_key_share WHERE queue = $1 AND holder = $2 AND expires_at > now()",
		queue, holder).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKeySharesByMaxWorkers: two clients of a queue limited per key, of 100
// and 4 handlers, hold 61 and 3 of its buckets (weirdriver.KeyPart), not 32
// each: each stores its MaxWorkers as what it wants.
func TestKeySharesByMaxWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	held := func(holder string) int { return heldBuckets(t, b, "parted", holder) }
	start := func(id string, workers int) {
		cfg := fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }), map[string]weir.QueueConfig{
			"parted": {MaxWorkers: workers, KeyLimit: weir.KeyLimit{Key: "args.name", Limit: 1}},
		})
		cfg.ID = id
		b.startOwnPool(t, cfg)
	}
	start("parted-big", 100)
	start("parted-small", 4)
	waitFor(t, time.Minute, "the big client to hold 61 buckets and the small one 3", func() bool {
		return held("parted-big") == 61 && held("parted-small") == 3
	})
}

// TestKeySharesSettleTogether checks that clients starting together divide
// the buckets within a few renewals at the fast pace (keyGrow), not at the
// steady one: the first to ask takes all 64, and learns of the other at its
// next renewal. The steady pace is 10 s here; both come to hold 32 within 3
// s. Without the fast renewals after a client's first answer, the first held
// all 64 until its renewal 10 s later.
func TestKeySharesSettleTogether(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	held := func(holder string) int { return heldBuckets(t, b, "settle", holder) }
	for _, id := range []string{"settle-a", "settle-b"} {
		cfg := fastConfig(probeWorkers(func(context.Context, *weir.Job[probeArgs]) error { return nil }), map[string]weir.QueueConfig{
			"settle": {MaxWorkers: 10, KeyLimit: weir.KeyLimit{Key: "args.name", Limit: 1}},
		})
		cfg.ID, cfg.LeaseDuration, cfg.HeartbeatInterval = id, time.Minute, time.Second
		b.startOwnPoolTuned(t, cfg, func(c *weir.Client) { weir.SetShareInterval(c, 10*time.Second) })
	}
	waitFor(t, 3*time.Second, "each client to hold 32 buckets", func() bool {
		return held("settle-a") == 32 && held("settle-b") == 32
	})
}
