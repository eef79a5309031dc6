package app

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// reconcileMetrics are the per-controller reconcile series:
//
//	kplane_controller_reconciles_total{controller}
//	kplane_controller_reconcile_errors_total{controller}
//	kplane_controller_reconcile_duration_seconds{controller}
//	kplane_controller_reconcile_panics_total{controller}
type reconcileMetrics struct {
	total    *prometheus.CounterVec
	errors   *prometheus.CounterVec
	panics   *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newReconcileMetrics(reg prometheus.Registerer) (*reconcileMetrics, error) {
	m := &reconcileMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplane_controller_reconciles_total",
			Help: "Reconcile calls, successful or not.",
		}, []string{"controller"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplane_controller_reconcile_errors_total",
			Help: "Reconcile calls that failed and were requeued with backoff.",
		}, []string{"controller"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplane_controller_reconcile_panics_total",
			Help: "Reconcile calls that panicked; the panic was recovered, logged with its stack, and the key requeued with backoff.",
		}, []string{"controller"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kplane_controller_reconcile_duration_seconds",
			Help:    "Time spent in one reconcile call.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"controller"}),
	}
	for _, c := range []prometheus.Collector{m.total, m.errors, m.panics, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("app: register reconcile metrics: %w", err)
		}
	}
	return m, nil
}

// observe records one reconcile; a RequeueAfter is not an error.
func (m *reconcileMetrics) observe(controller string, d time.Duration, err error) {
	m.total.WithLabelValues(controller).Inc()
	m.duration.WithLabelValues(controller).Observe(d.Seconds())
	if err != nil && !IsRequeue(err) {
		m.errors.WithLabelValues(controller).Inc()
	}
}
