package informer

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the informers' Prometheus counters, labelled by kind. One
// Metrics value is shared by all informers of a process.
type Metrics struct {
	// WatchRestarts counts watches re-opened from the last seen revision
	// after a broken stream.
	WatchRestarts *prometheus.CounterVec
	// Relists counts full lists after the first one (compaction, errors).
	Relists *prometheus.CounterVec
	// Events counts watch events received, by kind and type.
	Events *prometheus.CounterVec
}

// NewMetrics creates the informer metrics and registers them with reg (nil
// = not registered). Registering twice on the same registry returns the
// already registered collectors, so several factories may share a registry.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		WatchRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kplane", Subsystem: "informer", Name: "watch_restarts_total",
			Help: "Watch streams re-opened from the last seen resourceVersion after a break.",
		}, []string{"kind"}),
		Relists: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kplane", Subsystem: "informer", Name: "relists_total",
			Help: "Full lists after the initial one (compacted history, list errors).",
		}, []string{"kind"}),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kplane", Subsystem: "informer", Name: "events_total",
			Help: "Watch events received, by kind and event type.",
		}, []string{"kind", "type"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.WatchRestarts, err = register(reg, m.WatchRestarts); err != nil {
		return nil, err
	}
	if m.Relists, err = register(reg, m.Relists); err != nil {
		return nil, err
	}
	if m.Events, err = register(reg, m.Events); err != nil {
		return nil, err
	}
	return m, nil
}

func register(reg prometheus.Registerer, c *prometheus.CounterVec) (*prometheus.CounterVec, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing, nil
			}
		}
		return nil, fmt.Errorf("informer: register metrics: %w", err)
	}
	return c, nil
}
