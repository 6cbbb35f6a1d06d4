package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirtype"
)

// metricsTimeout bounds the reads of one scrape, so that a database that does
// not answer delays a scrape, not blocks it.
const metricsTimeout = 5 * time.Second

// serveMetrics is what weir serve reports at /metrics. Its client runs no
// jobs, so it reports what it reads, not what it does: the queues' depth by
// state (the dashboard's counts, QueueListEstimated), the oldest available
// job's age, the maintenance leader, whether the database answered, and its
// own HTTP requests. Nothing of a job's args, metadata, output or errors.
// Labels are named as weirotel's metrics name them in Prometheus.
type serveMetrics struct {
	client *weir.Client
	logger *slog.Logger

	queueJobs, oldestAge, leader, termLeft, up *prometheus.Desc
}

func newServeMetrics(client *weir.Client, logger *slog.Logger) *serveMetrics {
	return &serveMetrics{
		client: client, logger: logger,
		queueJobs: prometheus.NewDesc("weir_serve_queue_jobs",
			"Jobs by queue and state, as the dashboard counts them: the final states (completed, cancelled, discarded) of a large PostgreSQL table are estimates.",
			[]string{"messaging_destination_name", "weir_job_state"}, nil),
		oldestAge: prometheus.NewDesc("weir_serve_queue_oldest_available_age_seconds",
			"How long the queue's oldest available job has waited for a worker; 0 when none waits.",
			[]string{"messaging_destination_name"}, nil),
		leader: prometheus.NewDesc("weir_serve_leader",
			"1 for the client that leads maintenance; no series while nobody leads.",
			[]string{"leader_id"}, nil),
		termLeft: prometheus.NewDesc("weir_serve_leader_term_remaining_seconds",
			"How long the maintenance leader's term has left; 0 while nobody leads.", nil, nil),
		up: prometheus.NewDesc("weir_serve_database_up",
			"1 when this scrape's reads of the database succeeded, 0 when one failed (the server's log says why).", nil, nil),
	}
}

func (m *serveMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.queueJobs, m.oldestAge, m.leader, m.termLeft, m.up} {
		ch <- d
	}
}

func (m *serveMetrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), metricsTimeout)
	defer cancel()
	up := 1.0
	queues, err := m.client.QueueListEstimated(ctx)
	if err != nil {
		m.logger.Warn("weir serve: metrics: reading the queues", "error", err)
		up = 0
	}
	now := time.Now()
	for _, q := range queues {
		for _, s := range weirtype.JobStates() {
			ch <- prometheus.MustNewConstMetric(m.queueJobs, prometheus.GaugeValue, float64(q.Counts[s]), q.Name, string(s))
		}
		var age float64
		if !q.OldestAvailableAt.IsZero() {
			age = max(now.Sub(q.OldestAvailableAt).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(m.oldestAge, prometheus.GaugeValue, age, q.Name)
	}
	leader, err := m.client.Leader(ctx)
	switch {
	case err != nil:
		m.logger.Warn("weir serve: metrics: reading the leader", "error", err)
		up = 0
	case leader == nil:
		ch <- prometheus.MustNewConstMetric(m.termLeft, prometheus.GaugeValue, 0)
	default:
		ch <- prometheus.MustNewConstMetric(m.leader, prometheus.GaugeValue, 1, leader.ID)
		ch <- prometheus.MustNewConstMetric(m.termLeft, prometheus.GaugeValue, max(time.Until(leader.ExpiresAt).Seconds(), 0))
	}
	ch <- prometheus.MustNewConstMetric(m.up, prometheus.GaugeValue, up)
}

// newMetrics returns /metrics's handler, and count, which wraps the
// dashboard so that its requests are counted.
func newMetrics(client *weir.Client, logger *slog.Logger) (metrics http.Handler, count func(http.Handler) http.Handler) {
	reg := prometheus.NewRegistry()
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "weir_serve_http_requests_total",
		Help: "HTTP requests to the dashboard and its API (and /metrics when it sits behind their authentication), by status code and method.",
	}, []string{"code", "method"})
	reg.MustRegister(newServeMetrics(client, logger), requests,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	})
	return metrics, func(h http.Handler) http.Handler { return promhttp.InstrumentHandlerCounter(requests, h) }
}
