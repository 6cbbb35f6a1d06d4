// Package weirprom serves weirotel's metrics to Prometheus. It makes an
// OpenTelemetry MeterProvider whose instruments a prometheus.Registerer
// collects, through OpenTelemetry's Prometheus exporter: each metric is defined
// once, in weirotel, whether it is exported over OTLP, scraped by Prometheus,
// or both. See docs/observability.md.
//
//	reg := prometheus.NewRegistry()
//	mp, err := weirprom.NewMeterProvider(reg)
//	tel, err := weirotel.New(&weirotel.Config{MeterProvider: mp})
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
package weirprom

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// NewMeterProvider returns a MeterProvider whose metrics reg serves under
// Prometheus's conventional names: dots become underscores, the unit is a
// suffix and counters end in _total (weir.attempt.duration, in seconds, is
// weir_attempt_duration_seconds; weir.jobs.inserted is
// weir_jobs_inserted_total). opts are the SDK's own, such as a resource; the
// caller shuts the provider down when it is done.
func NewMeterProvider(reg prometheus.Registerer, opts ...sdkmetric.Option) (*sdkmetric.MeterProvider, error) {
	if reg == nil {
		return nil, errors.New("weirprom: the registerer is nil")
	}
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg),
		// Stated, not left to the exporter's default, which may change.
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		return nil, fmt.Errorf("weirprom: %w", err)
	}
	return sdkmetric.NewMeterProvider(append([]sdkmetric.Option{sdkmetric.WithReader(exporter)}, opts...)...), nil
}
