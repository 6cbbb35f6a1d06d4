package weirotel_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirq/weir"
	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
	"github.com/weirq/weir/weirotel"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// store is a migrated schema of its own.
type store struct {
	driver *weirpgx.Driver
	schema string
}

func newStore(t *testing.T) *store {
	t.Helper()
	schema := dbtest.Schema(t)
	driver, err := weirpgx.New(dbtest.Pool(t, nil), &weirpgx.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(driver).Up(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	return &store{driver: driver, schema: schema}
}

// process is what one process would have: its own providers and Telemetry.
type process struct {
	tel    *weirotel.Telemetry
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
}

func newProcess(t *testing.T, asChild bool, opts ...sdktrace.TracerProviderOption) *process {
	t.Helper()
	p := &process{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithSpanProcessor(p.spans))...)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(p.reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	var err error
	p.tel, err = weirotel.New(&weirotel.Config{TracerProvider: tp, MeterProvider: mp, AttemptAsChild: asChild})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// config is a client's config with p's middleware and hook, and intervals
// short enough for tests.
func (p *process) config(workers *weir.Workers, queues map[string]weir.QueueConfig) *weir.Config {
	return &weir.Config{
		Workers:           workers,
		Queues:            queues,
		InsertMiddleware:  []weir.InsertMiddleware{p.tel.InsertMiddleware()},
		WorkerMiddleware:  []weir.WorkerMiddleware{p.tel.WorkerMiddleware()},
		Hooks:             []weir.Hook{p.tel.Hook()},
		HeartbeatInterval: 100 * time.Millisecond,
		LeaseDuration:     time.Second,
		RescueInterval:    100 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		RetryPolicy:       retryNow{},
	}
}

// collect reads p's metrics.
func (p *process) collect(t *testing.T) *metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := p.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return &rm
}

// ended returns p's ended spans of the given kind.
func (p *process) ended(kind trace.SpanKind) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range p.spans.Ended() {
		if s.SpanKind() == kind {
			out = append(out, s)
		}
	}
	return out
}

type retryNow struct{}

func (retryNow) NextRetry(*weir.JobRow) time.Time { return time.Now() }

type taskArgs struct {
	Do string `json:"do"`
}

func (taskArgs) Kind() string { return "task" }

// taskWorkers do what each job's args say: "ok" completes, "fail" fails,
// "snooze" snoozes its first run and completes the next, "panic" panics,
// "wait" waits for its context to end.
func taskWorkers() *weir.Workers {
	var snoozed atomic.Bool
	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(func(ctx context.Context, job *weir.Job[taskArgs]) error {
		switch job.Args.Do {
		case "fail":
			return errors.New("it failed")
		case "snooze":
			if snoozed.CompareAndSwap(false, true) {
				return weir.JobSnooze(0)
			}
		case "panic":
			panic("it panicked")
		case "wait":
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}))
	return workers
}

func start(t *testing.T, s *store, cfg *weir.Config) *weir.Client {
	t.Helper()
	c, err := weir.NewClient(s.driver, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c
}

func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var defaultQueue = map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 5}}

func attrs(kv []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, a := range kv {
		m[a.Key] = a.Value
	}
	return m
}

// TestInsertSpanReplaced checks that an insert span says whether a unique
// insert found a job and whether it replaced it.
func TestInsertSpanReplaced(t *testing.T) {
	s := newStore(t)
	p := newProcess(t, false)
	client, err := weir.NewClient(s.driver, p.config(nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Hour)
	for _, mode := range []weir.UniqueConflict{weir.UniqueSkip, weir.UniqueSkip, weir.UniqueReplace} {
		if _, err := client.Insert(ctx(t), taskArgs{Do: "ok"}, &weir.InsertOpts{ScheduledAt: at,
			Unique: weir.UniqueOpts{ByArgs: true, OnConflict: mode}}); err != nil {
			t.Fatal(err)
		}
	}
	spans := p.ended(trace.SpanKindProducer)
	if len(spans) != 3 {
		t.Fatalf("%d insert spans, want 3", len(spans))
	}
	for i, want := range [][2]bool{{false, false}, {true, false}, {true, true}} {
		a := attrs(spans[i].Attributes())
		if a["weir.job.duplicate"].AsBool() != want[0] || a["weir.job.replaced"].AsBool() != want[1] {
			t.Errorf("insert %d: %v, want duplicate=%v replaced=%v", i, spans[i].Attributes(), want[0], want[1])
		}
	}
}

// TestTraceAcrossProcesses inserts a job in one process and works it in
// another, each with its own TracerProvider: the attempt's span links to the
// insert span and, with AttemptAsChild, is its child in the same trace.
func TestTraceAcrossProcesses(t *testing.T) {
	for _, asChild := range []bool{false, true} {
		t.Run(map[bool]string{false: "linked", true: "child"}[asChild], func(t *testing.T) {
			s := newStore(t)
			producer, consumer := newProcess(t, asChild), newProcess(t, asChild)
			inserter, err := weir.NewClient(s.driver, producer.config(nil, nil))
			if err != nil {
				t.Fatal(err)
			}
			res, err := inserter.Insert(ctx(t), taskArgs{Do: "ok"}, &weir.InsertOpts{Metadata: json.RawMessage(`{"tenant": "acme", "note": "<b>&"}`)})
			if err != nil {
				t.Fatal(err)
			}

			inserts := producer.ended(trace.SpanKindProducer)
			if len(inserts) != 1 {
				t.Fatalf("%d insert spans, want 1", len(inserts))
			}
			ins := inserts[0]
			a := attrs(ins.Attributes())
			if ins.Name() != "insert default" || a["messaging.system"].AsString() != "weir" ||
				a["messaging.operation.type"].AsString() != "send" || a["messaging.operation.name"].AsString() != "insert" ||
				a["messaging.destination.name"].AsString() != "default" || a["weir.job.kind"].AsString() != "task" ||
				a["messaging.message.id"].AsString() != jsonID(res.Job.ID) || a["weir.job.duplicate"].AsBool() {
				t.Fatalf("insert span %q: %v", ins.Name(), ins.Attributes())
			}

			// The metadata keeps the caller's keys, and carries the context.
			var meta map[string]json.RawMessage
			if err := json.Unmarshal(res.Job.Metadata, &meta); err != nil {
				t.Fatal(err)
			}
			// W3C Trace Context alone is carried as the traceparent string.
			traceparent := `"00-` + ins.SpanContext().TraceID().String() + "-" + ins.SpanContext().SpanID().String() + `-01"`
			if string(meta["tenant"]) != `"acme"` || string(meta["note"]) != `"<b>&"` || string(meta[weirotel.MetadataKey]) != traceparent {
				t.Fatalf("metadata %s, want the caller's keys and %s", res.Job.Metadata, traceparent)
			}

			start(t, s, consumer.config(taskWorkers(), defaultQueue))
			waitFor(t, "the attempt's span", func() bool { return len(consumer.ended(trace.SpanKindConsumer)) == 1 })
			att := consumer.ended(trace.SpanKindConsumer)[0]
			a = attrs(att.Attributes())
			if att.Name() != "process default" || a["messaging.operation.type"].AsString() != "process" ||
				a["messaging.message.id"].AsString() != jsonID(res.Job.ID) || a["weir.job.attempt"].AsInt64() != 1 ||
				a["weir.job.priority"].AsInt64() != 2 || a["weir.lease_token"].AsInt64() < 1 ||
				a["weir.attempt.result"].AsString() != "completed" || att.Status().Code == codes.Error {
				t.Fatalf("attempt span %q: %v, status %v", att.Name(), att.Attributes(), att.Status())
			}
			if len(att.Links()) != 1 || att.Links()[0].SpanContext.SpanID() != ins.SpanContext().SpanID() ||
				att.Links()[0].SpanContext.TraceID() != ins.SpanContext().TraceID() {
				t.Fatalf("attempt span links %v, want the insert span %v", att.Links(), ins.SpanContext())
			}
			sameTrace := att.SpanContext().TraceID() == ins.SpanContext().TraceID()
			if asChild && (!sameTrace || att.Parent().SpanID() != ins.SpanContext().SpanID()) {
				t.Fatalf("attempt span's parent %v, want the insert span %v", att.Parent(), ins.SpanContext())
			}
			if !asChild && (sameTrace || att.Parent().IsValid()) {
				t.Fatalf("attempt span in trace %s with parent %v, want a trace of its own", att.SpanContext().TraceID(), att.Parent())
			}
		})
	}
}

func jsonID(id int64) string { return strconv.FormatInt(id, 10) }

// TestUnsampledInsert: a job inserted under a span that is not sampled carries
// no trace context, since a link to it would lead nowhere, unless its attempts
// are to be the insert span's children: then it carries the decision, and the
// attempt, sampled by its parent, is not recorded either.
func TestUnsampledInsert(t *testing.T) {
	for _, asChild := range []bool{false, true} {
		t.Run(map[bool]string{false: "linked", true: "child"}[asChild], func(t *testing.T) {
			s := newStore(t)
			producer := newProcess(t, asChild, sdktrace.WithSampler(sdktrace.NeverSample()))
			consumer := newProcess(t, asChild)
			inserter, err := weir.NewClient(s.driver, producer.config(nil, nil))
			if err != nil {
				t.Fatal(err)
			}
			res, err := inserter.Insert(ctx(t), taskArgs{Do: "ok"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var meta map[string]json.RawMessage
			if err := json.Unmarshal(res.Job.Metadata, &meta); err != nil {
				t.Fatal(err)
			}
			carried, ok := meta[weirotel.MetadataKey]
			if ok != asChild || (asChild && !strings.HasSuffix(string(carried), `-00"`)) {
				t.Fatalf("metadata %s of a job inserted under an unsampled span (child: %t)", res.Job.Metadata, asChild)
			}

			c := start(t, s, consumer.config(taskWorkers(), defaultQueue))
			waitFor(t, "the attempt", func() bool { return c.Stats().Finalized == 1 })
			spans := consumer.ended(trace.SpanKindConsumer)
			if asChild && len(spans) != 0 {
				t.Fatalf("the attempt of an unsampled insert was recorded: %v", spans[0])
			}
			if !asChild && (len(spans) != 1 || len(spans[0].Links()) != 0 || spans[0].Parent().IsValid()) {
				t.Fatalf("attempt spans %v, want one root without links", spans)
			}
		})
	}
}

// TestSQLInsertedJob works a job inserted by SQL, with no trace context: its
// attempt still gets a span, with no link, as a root.
func TestSQLInsertedJob(t *testing.T) {
	s := newStore(t)
	p := newProcess(t, true)
	pool := dbtest.Pool(t, nil)
	if _, err := pool.Exec(ctx(t), `SELECT id FROM `+s.schema+`.weir_enqueue('task', '{"do": "ok"}', metadata => '{"weirotel": "not a carrier"}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx(t), `SELECT id FROM `+s.schema+`.weir_enqueue('task', '{"do": "ok"}')`); err != nil {
		t.Fatal(err)
	}
	start(t, s, p.config(taskWorkers(), defaultQueue))
	waitFor(t, "the attempts' spans", func() bool { return len(p.ended(trace.SpanKindConsumer)) == 2 })
	for _, span := range p.ended(trace.SpanKindConsumer) {
		if len(span.Links()) != 0 || span.Parent().IsValid() {
			t.Fatalf("span of a job inserted by SQL: links %v, parent %v", span.Links(), span.Parent())
		}
	}
}

// TestAttemptInterrupted: an attempt whose context ended says why.
func TestAttemptInterrupted(t *testing.T) {
	s := newStore(t)
	p := newProcess(t, false)
	cfg := p.config(taskWorkers(), defaultQueue)
	cfg.JobTimeout = 50 * time.Millisecond
	c := start(t, s, cfg)
	if _, err := c.Insert(ctx(t), taskArgs{Do: "wait"}, &weir.InsertOpts{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the attempt's span", func() bool { return len(p.ended(trace.SpanKindConsumer)) == 1 })
	span := p.ended(trace.SpanKindConsumer)[0]
	a := attrs(span.Attributes())
	if a["weir.attempt.interrupted"].AsString() != weir.ErrJobTimeout.Error() || a["weir.attempt.result"].AsString() != "failed" ||
		span.Status().Code != codes.Error {
		t.Fatalf("timed-out attempt's span: %v, status %v", span.Attributes(), span.Status())
	}
}

// TestHandlersBusy: weir.handlers.busy reads the handlers running at the
// collection, by queue and kind, and falls back to 0 when they return.
func TestHandlersBusy(t *testing.T) {
	s := newStore(t)
	p := newProcess(t, false)
	c := start(t, s, p.config(taskWorkers(), defaultQueue))
	var ids []int64
	for range 2 {
		r, err := c.Insert(ctx(t), taskArgs{Do: "wait"}, &weir.InsertOpts{MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.Job.ID)
	}
	task := map[string]string{"messaging.destination.name": "default", "weir.job.kind": "task"}
	waitFor(t, "two handlers busy", func() bool { return sum(p.collect(t), "weir.handlers.busy", task) == 2 })
	for _, id := range ids {
		if _, err := c.JobCancel(ctx(t), id); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "no handler busy", func() bool {
		n, ok := find(p.collect(t), "weir.handlers.busy", task)
		return ok && n == 0
	})
}

// TestInsertBatchAndRefusal: one span for a batch, and a metadata that is not
// an object is left for the client to refuse, with its error on the span.
func TestInsertBatchAndRefusal(t *testing.T) {
	s := newStore(t)
	p := newProcess(t, false)
	c, err := weir.NewClient(s.driver, p.config(nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	results, err := c.InsertMany(ctx(t), []weir.InsertManyParams{
		{Args: taskArgs{Do: "ok"}},
		{Args: taskArgs{Do: "ok"}, InsertOpts: &weir.InsertOpts{Queue: "other"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	spans := p.ended(trace.SpanKindProducer)
	if len(spans) != 1 || spans[0].Name() != "insert" || attrs(spans[0].Attributes())["messaging.batch.message_count"].AsInt64() != 2 {
		t.Fatalf("spans of a batch of 2 in two queues: %d, first %v", len(spans), spans[0])
	}
	for _, r := range results {
		if !strings.Contains(string(r.Job.Metadata), spans[0].SpanContext().SpanID().String()) {
			t.Fatalf("metadata %s does not carry the insert span", r.Job.Metadata)
		}
	}

	_, err = c.Insert(ctx(t), taskArgs{Do: "ok"}, &weir.InsertOpts{Metadata: json.RawMessage(`[1]`)})
	var invalid *weir.InvalidError
	if !errors.As(err, &invalid) {
		t.Fatalf("metadata [1]: err %v, want the client's *InvalidError", err)
	}
	spans = p.ended(trace.SpanKindProducer)
	if last := spans[len(spans)-1]; last.Status().Code != codes.Error || len(last.Events()) == 0 {
		t.Fatalf("refused insert's span: status %v, events %v", last.Status(), last.Events())
	}
	if n := sum(p.collect(t), "weir.jobs.inserted", nil); n != 2 {
		t.Fatalf("weir.jobs.inserted = %d, want 2", n)
	}
}

// TestMetrics works a completed job, a failing one (retried, then discarded),
// a snoozed one and a panicking one, and reads every metric.
func TestMetrics(t *testing.T) {
	s := newStore(t)
	p := newProcess(t, false)
	c := start(t, s, p.config(taskWorkers(), defaultQueue))
	unregister, err := p.tel.Observe(c)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unregister(); err != nil {
			t.Error(err)
		}
	}()
	for _, do := range []string{"ok", "fail", "snooze", "panic"} {
		opts := &weir.InsertOpts{Tags: []string{do}, MaxAttempts: 2}
		if do == "panic" {
			opts.MaxAttempts = 1
		}
		if _, err := c.Insert(ctx(t), taskArgs{Do: do}, opts); err != nil {
			t.Fatal(err)
		}
	}

	want := map[string]int64{"completed": 2, "retried": 1, "snoozed": 1, "discarded": 2}
	var rm *metricdata.ResourceMetrics
	waitFor(t, "every attempt counted", func() bool {
		rm = p.collect(t)
		for outcome, n := range want {
			if sum(rm, "weir.attempts", map[string]string{"weir.job.outcome": outcome}) != n {
				return false
			}
		}
		return true
	})
	if n := sum(rm, "weir.jobs.inserted", map[string]string{"messaging.destination.name": "default", "weir.job.kind": "task"}); n != 4 {
		t.Errorf("weir.jobs.inserted = %d, want 4", n)
	}
	for outcome, n := range want {
		if got := histCount(rm, "weir.attempt.duration", map[string]string{"weir.job.outcome": outcome}); got != uint64(n) {
			t.Errorf("weir.attempt.duration count for %s = %d, want %d", outcome, got, n)
		}
	}
	if got := histCount(rm, "weir.pickup.latency", nil); got != 6 {
		t.Errorf("weir.pickup.latency count = %d, want 6 (one per attempt)", got)
	}
	if busy, ok := find(rm, "weir.handlers.busy", nil); !ok || busy != 0 {
		t.Errorf("weir.handlers.busy = %d (reported: %v), want 0", busy, ok)
	}
	if n := sum(rm, "weir.leader.elections", nil); n < 1 {
		t.Errorf("weir.leader.elections = %d, want at least 1", n)
	}
	for _, name := range []string{"weir.jobs.rescued", "weir.stale_writes", "weir.leases.lost", "weir.events.dropped"} {
		if _, ok := find(rm, name, nil); !ok {
			t.Errorf("%s not reported", name)
		}
	}
	if n := sum(rm, "weir.queue.jobs", map[string]string{"messaging.destination.name": "default", "weir.job.state": "completed"}); n != 2 {
		t.Errorf("weir.queue.jobs{completed} = %d, want 2", n)
	}
	if n := sum(rm, "weir.queue.jobs", map[string]string{"messaging.destination.name": "default", "weir.job.state": "available"}); n != 0 {
		t.Errorf("weir.queue.jobs{available} = %d, want 0 (reported as a zero)", n)
	}

	// The spans say what each handler returned; the panic's is an error.
	results := map[string]int{}
	for _, span := range p.ended(trace.SpanKindConsumer) {
		a := attrs(span.Attributes())
		result := a["weir.attempt.result"].AsString()
		results[result]++
		failed := result == "failed" || result == "panicked"
		if failed != (span.Status().Code == codes.Error) {
			t.Errorf("%s attempt's span status %v", result, span.Status())
		}
		if result == "panicked" && (a["error.type"].AsString() != "panic" || len(span.Events()) == 0 ||
			!strings.Contains(span.Status().Description, "it panicked")) {
			t.Errorf("panicked attempt's span: %v, events %v", span.Attributes(), span.Events())
		}
	}
	if results["completed"] != 2 || results["failed"] != 2 || results["snoozed"] != 1 || results["panicked"] != 1 {
		t.Errorf("attempt spans by result: %v", results)
	}
}

// TestQueueGaugesOnlyOnLeader: of two clients on one database, only the
// leader's Telemetry reads the queues.
func TestQueueGaugesOnlyOnLeader(t *testing.T) {
	s := newStore(t)
	first, second := newProcess(t, false), newProcess(t, false)
	// Elections every 2 s, terms of 6 s: on a loaded machine a renewal of the
	// default test interval may fail, and the leader change in between.
	steady := func(cfg *weir.Config) *weir.Config {
		cfg.RescueInterval = 2 * time.Second
		return cfg
	}
	a := start(t, s, steady(first.config(taskWorkers(), defaultQueue)))
	waitFor(t, "the first client to lead", a.IsLeader)
	b := start(t, s, steady(second.config(taskWorkers(), defaultQueue)))
	for p, c := range map[*process]*weir.Client{first: a, second: b} {
		unregister, err := p.tel.Observe(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unregister() })
	}
	// Due a minute ago: its age is above zero without waiting.
	if _, err := a.Insert(ctx(t), taskArgs{Do: "ok"}, &weir.InsertOpts{Queue: "unworked", ScheduledAt: time.Now().Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}

	if b.IsLeader() {
		t.Fatal("both clients lead")
	}
	leader := first.collect(t)
	if n := sum(leader, "weir.queue.jobs", map[string]string{"messaging.destination.name": "unworked", "weir.job.state": "available"}); n != 1 {
		t.Fatalf("leader's weir.queue.jobs{unworked, available} = %d, want 1", n)
	}
	if age := gaugeFloat(leader, "weir.queue.oldest_available.age", map[string]string{"messaging.destination.name": "unworked"}); age <= 0 {
		t.Fatalf("leader's weir.queue.oldest_available.age = %v, want above 0", age)
	}
	follower := second.collect(t)
	for _, name := range []string{"weir.queue.jobs", "weir.queue.oldest_available.age"} {
		if m, ok := metricNamed(follower, name); ok && dataPoints(m) > 0 {
			t.Fatalf("the follower reported %s", name)
		}
	}
	if _, ok := find(follower, "weir.leader.elections", nil); !ok {
		t.Fatal("the follower did not report its counters")
	}
}

// TestObserve checks Observe's refusals and that unregistering ends it.
func TestObserve(t *testing.T) {
	s := newStore(t)
	p := newProcess(t, false)
	c, err := weir.NewClient(s.driver, p.config(nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.tel.Observe(nil); err == nil || !strings.Contains(err.Error(), "client is nil") {
		t.Fatalf("Observe(nil): %v", err)
	}
	unregister, err := p.tel.Observe(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.tel.Observe(c); err == nil || !strings.Contains(err.Error(), "observes a client already") {
		t.Fatalf("second Observe: %v", err)
	}
	if _, ok := find(p.collect(t), "weir.leader.elections", nil); !ok {
		t.Fatal("counters not reported while observed")
	}
	if err := unregister(); err != nil {
		t.Fatal(err)
	}
	if err := unregister(); err != nil {
		t.Fatalf("second unregister: %v", err)
	}
	if m, ok := metricNamed(p.collect(t), "weir.leader.elections"); ok && dataPoints(m) > 0 {
		t.Fatal("counters reported after unregister")
	}
	again, err := p.tel.Observe(c)
	if err != nil {
		t.Fatalf("Observe after unregister: %v", err)
	}
	_ = again()
}

// Reading collected metrics.

func metricNamed(rm *metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

func dataPoints(m metricdata.Metrics) int {
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		return len(d.DataPoints)
	case metricdata.Gauge[int64]:
		return len(d.DataPoints)
	case metricdata.Gauge[float64]:
		return len(d.DataPoints)
	case metricdata.Histogram[float64]:
		return len(d.DataPoints)
	}
	return 0
}

func matches(set attribute.Set, want map[string]string) bool {
	for k, v := range want {
		if got, ok := set.Value(attribute.Key(k)); !ok || got.AsString() != v {
			return false
		}
	}
	return true
}

// find sums the int64 points of name whose attributes include want, and says
// whether there was any.
func find(rm *metricdata.ResourceMetrics, name string, want map[string]string) (int64, bool) {
	m, ok := metricNamed(rm, name)
	if !ok {
		return 0, false
	}
	var points []metricdata.DataPoint[int64]
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		points = d.DataPoints
	case metricdata.Gauge[int64]:
		points = d.DataPoints
	}
	var n int64
	found := false
	for _, dp := range points {
		if matches(dp.Attributes, want) {
			n += dp.Value
			found = true
		}
	}
	return n, found
}

func sum(rm *metricdata.ResourceMetrics, name string, want map[string]string) int64 {
	n, _ := find(rm, name, want)
	return n
}

func gaugeFloat(rm *metricdata.ResourceMetrics, name string, want map[string]string) float64 {
	m, _ := metricNamed(rm, name)
	g, _ := m.Data.(metricdata.Gauge[float64])
	for _, dp := range g.DataPoints {
		if matches(dp.Attributes, want) {
			return dp.Value
		}
	}
	return -1
}

func histCount(rm *metricdata.ResourceMetrics, name string, want map[string]string) uint64 {
	m, _ := metricNamed(rm, name)
	h, _ := m.Data.(metricdata.Histogram[float64])
	var n uint64
	for _, dp := range h.DataPoints {
		if matches(dp.Attributes, want) {
			n += dp.Count
		}
	}
	return n
}
