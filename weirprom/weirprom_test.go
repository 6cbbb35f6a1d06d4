package weirprom_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/weirq/weir"
	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
	"github.com/weirq/weir/weirotel"
	"github.com/weirq/weir/weirprom"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type pingArgs struct{}

func (pingArgs) Kind() string { return "ping" }

// TestPrometheusNames works a job with weirotel on weirprom's MeterProvider,
// then reads the registry and scrapes it over HTTP: every metric is there
// under its conventional name.
func TestPrometheusNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg := prometheus.NewRegistry()
	mp, err := weirprom.NewMeterProvider(reg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mp.Shutdown(context.Background()) }()
	tel, err := weirotel.New(&weirotel.Config{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}

	schema := dbtest.Schema(t)
	driver, err := weirpgx.New(dbtest.Pool(t, nil), &weirpgx.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weirmigrate.New(driver).Up(ctx, nil); err != nil {
		t.Fatal(err)
	}
	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(func(context.Context, *weir.Job[pingArgs]) error { return nil }))
	client, err := weir.NewClient(driver, &weir.Config{
		Workers:           workers,
		Queues:            map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 1}},
		InsertMiddleware:  []weir.InsertMiddleware{tel.InsertMiddleware()},
		WorkerMiddleware:  []weir.WorkerMiddleware{tel.WorkerMiddleware()},
		Hooks:             []weir.Hook{tel.Hook()},
		FetchPollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := client.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	unregister, err := tel.Observe(client)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unregister() }()
	if _, err := client.Insert(ctx, pingArgs{}, nil); err != nil {
		t.Fatal(err)
	}

	deadline := time.Now().Add(20 * time.Second)
	for total(t, reg, "weir_attempts_total") != 1 || !client.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the attempt to be counted and the client to lead")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := total(t, reg, "weir_jobs_inserted_total"); n != 1 {
		t.Fatalf("weir_jobs_inserted_total = %v, want 1", n)
	}
	if n, err := testutil.GatherAndCount(reg, "weir_queue_jobs"); err != nil || n != 7 {
		t.Fatalf("weir_queue_jobs: %d series (%v), want 7: one per state", n, err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "weir_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}

	// A real scrape, over HTTP on loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		_ = srv.Shutdown(context.Background())
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Error(err)
		}
	}()
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, series := range []string{
		`weir_jobs_inserted_total{messaging_destination_name="default",`,
		`weir_attempts_total{messaging_destination_name="default",`,
		`weir_attempt_duration_seconds_bucket{`,
		`weir_pickup_latency_seconds_bucket{`,
		`weir_handlers_busy{`,
		`weir_queue_jobs{`,
		`weir_queue_oldest_available_age_seconds{`,
		`weir_jobs_rescued_total{`,
		`weir_leader_elections_total{`,
		`weir_stale_writes_total{`,
		`weir_leases_lost_total{`,
		`weir_events_dropped_total{`,
	} {
		if !strings.Contains(string(body), "\n"+series) {
			t.Errorf("the scrape has no %s…", series)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", body)
	}
}

// total sums the counter family name's series in reg.
func total(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

func TestNilRegisterer(t *testing.T) {
	if _, err := weirprom.NewMeterProvider(nil); err == nil || !strings.Contains(err.Error(), "registerer is nil") {
		t.Fatalf("NewMeterProvider(nil): %v", err)
	}
}
