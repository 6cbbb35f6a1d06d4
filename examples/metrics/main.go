// Command metrics serves weir's metrics to Prometheus. It works a stream of
// demo jobs (of varied length, one in ten failing) on PostgreSQL with
// weirotel's middleware, hook and observer on a weirprom MeterProvider, and
// serves /metrics on loopback until interrupted. The database comes from
// WEIR_DATABASE_URL (default: the local server), the schema is weir_metrics.
// examples/grafana has a Prometheus scrape config and a dashboard for it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirmigrate"
	"github.com/weirq/weir/weirotel"
	"github.com/weirq/weir/weirprom"
)

// Demo is a job that takes Millis milliseconds and fails if Fail is set.
type Demo struct {
	Millis int  `json:"millis"`
	Fail   bool `json:"fail,omitempty"`
}

func (Demo) Kind() string { return "demo" }

func work(ctx context.Context, job *weir.Job[Demo]) error {
	select {
	case <-time.After(time.Duration(job.Args.Millis) * time.Millisecond):
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if job.Args.Fail {
		return errors.New("demo failure")
	}
	return nil
}

// options are what main reads from its flags and environment.
type options struct {
	url, schema, addr string
	// ready is told the address /metrics is served on.
	ready func(addr string)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9464", "the loopback address to serve /metrics on")
	flag.Parse()
	url := os.Getenv("WEIR_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, options{url: url, schema: "weir_metrics", addr: *addr, ready: func(addr string) {
		fmt.Printf("serving http://%s/metrics; Ctrl-C stops\n", addr)
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

// run works demo jobs and serves their metrics until ctx ends.
func run(ctx context.Context, o options) error {
	pool, err := pgxpool.New(ctx, o.url)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver, err := weirpgx.New(pool, &weirpgx.Config{Schema: o.schema})
	if err != nil {
		return err
	}
	if _, err := weirmigrate.New(driver).Up(ctx, nil); err != nil {
		return err
	}

	// The metrics: weirotel's instruments on a MeterProvider that the
	// registry collects.
	reg := prometheus.NewRegistry()
	mp, err := weirprom.NewMeterProvider(reg)
	if err != nil {
		return err
	}
	defer func() { _ = mp.Shutdown(context.Background()) }()
	tel, err := weirotel.New(&weirotel.Config{MeterProvider: mp})
	if err != nil {
		return err
	}

	workers := weir.NewWorkers()
	weir.AddWorker(workers, weir.WorkFunc(work))
	client, err := weir.NewClient(driver, &weir.Config{
		Workers:          workers,
		Queues:           map[string]weir.QueueConfig{weir.DefaultQueue: {MaxWorkers: 10}},
		InsertMiddleware: []weir.InsertMiddleware{tel.InsertMiddleware()},
		WorkerMiddleware: []weir.WorkerMiddleware{tel.WorkerMiddleware()},
		Hooks:            []weir.Hook{tel.Hook()},
	})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	}()
	unregister, err := tel.Observe(client)
	if err != nil {
		return err
	}
	defer func() { _ = unregister() }()

	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutCtx)
		<-served
	}()
	o.ready(ln.Addr().String())

	// About 20 jobs a second until ctx ends.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		job := Demo{Millis: rand.IntN(300), Fail: rand.IntN(10) == 0}
		if _, err := client.Insert(ctx, job, &weir.InsertOpts{MaxAttempts: 3}); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}
