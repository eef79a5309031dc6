package workqueue

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PrometheusProvider is a MetricsProvider that exports every queue's
// metrics as Prometheus series labelled with the queue's name:
//
//	kplane_workqueue_depth{name}                     gauge
//	kplane_workqueue_adds_total{name}                counter
//	kplane_workqueue_queue_duration_seconds{name}    histogram
//	kplane_workqueue_work_duration_seconds{name}     histogram
//	kplane_workqueue_retries_total{name}             counter
type PrometheusProvider struct {
	depth        *prometheus.GaugeVec
	adds         *prometheus.CounterVec
	queueLatency *prometheus.HistogramVec
	workDuration *prometheus.HistogramVec
	retries      *prometheus.CounterVec
}

// durationBuckets span 100µs to about 7 minutes, 4x apart: a key normally
// waits and works for milliseconds, but backoff and slow reconciles reach
// minutes.
var durationBuckets = prometheus.ExponentialBuckets(0.0001, 4, 12)

// NewPrometheusProvider creates the collectors and registers them on reg
// (prometheus.DefaultRegisterer when nil). Collectors already registered
// there by an earlier call are reused, so several components of one process
// may each create a provider on the same registry.
func NewPrometheusProvider(reg prometheus.Registerer) (*PrometheusProvider, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	labels := []string{"name"}
	p := &PrometheusProvider{}
	var err error
	if p.depth, err = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kplane_workqueue_depth",
		Help: "Number of keys ready to be processed.",
	}, labels)); err != nil {
		return nil, err
	}
	if p.adds, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kplane_workqueue_adds_total",
		Help: "Number of keys that became pending.",
	}, labels)); err != nil {
		return nil, err
	}
	if p.queueLatency, err = register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kplane_workqueue_queue_duration_seconds",
		Help:    "Time a key waited in the queue before a worker took it.",
		Buckets: durationBuckets,
	}, labels)); err != nil {
		return nil, err
	}
	if p.workDuration, err = register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kplane_workqueue_work_duration_seconds",
		Help:    "Time a worker spent on a key, from Get to Done.",
		Buckets: durationBuckets,
	}, labels)); err != nil {
		return nil, err
	}
	if p.retries, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kplane_workqueue_retries_total",
		Help: "Number of rate-limited requeues.",
	}, labels)); err != nil {
		return nil, err
	}
	return p, nil
}

// register registers c on reg, or returns the equal collector registered
// before.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			if existing, ok := already.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("register workqueue metrics: %w", err)
	}
	return c, nil
}

// NewQueueMetrics returns the Metrics of the queue called name.
func (p *PrometheusProvider) NewQueueMetrics(name string) Metrics {
	return &promQueueMetrics{
		depth:        p.depth.WithLabelValues(name),
		adds:         p.adds.WithLabelValues(name),
		queueLatency: p.queueLatency.WithLabelValues(name),
		workDuration: p.workDuration.WithLabelValues(name),
		retries:      p.retries.WithLabelValues(name),
	}
}

type promQueueMetrics struct {
	depth        prometheus.Gauge
	adds         prometheus.Counter
	queueLatency prometheus.Observer
	workDuration prometheus.Observer
	retries      prometheus.Counter
}

func (m *promQueueMetrics) SetDepth(n int) { m.depth.Set(float64(n)) }
func (m *promQueueMetrics) IncAdds()       { m.adds.Inc() }
func (m *promQueueMetrics) ObserveQueueLatency(d time.Duration) {
	m.queueLatency.Observe(d.Seconds())
}
func (m *promQueueMetrics) ObserveWorkDuration(d time.Duration) {
	m.workDuration.Observe(d.Seconds())
}
func (m *promQueueMetrics) IncRetries() { m.retries.Inc() }
