package leaderelection

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// PrometheusMetrics exports leadership as
//
//	kplane_leader_is_leader{name}                       gauge, 1 while leading
//	kplane_leader_transitions_total{name,transition}    counter
type PrometheusMetrics struct {
	isLeader    *prometheus.GaugeVec
	transitions *prometheus.CounterVec
}

// NewPrometheusMetrics creates the collectors and registers them on reg
// (prometheus.DefaultRegisterer when nil), reusing them when an earlier
// call registered them there already.
func NewPrometheusMetrics(reg prometheus.Registerer) (*PrometheusMetrics, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	m := &PrometheusMetrics{}
	var err error
	if m.isLeader, err = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kplane_leader_is_leader",
		Help: "1 while this process holds the leader lease of the election, 0 otherwise.",
	}, []string{"name"})); err != nil {
		return nil, err
	}
	if m.transitions, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kplane_leader_transitions_total",
		Help: "Changes of this process's leadership (acquired, lost, released, stopped).",
	}, []string{"name", "transition"})); err != nil {
		return nil, err
	}
	return m, nil
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			if existing, ok := already.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("register leader election metrics: %w", err)
	}
	return c, nil
}

// SetLeading implements Metrics.
func (m *PrometheusMetrics) SetLeading(name string, leading bool) {
	v := 0.0
	if leading {
		v = 1
	}
	m.isLeader.WithLabelValues(name).Set(v)
}

// Transition implements Metrics.
func (m *PrometheusMetrics) Transition(name, transition string) {
	m.transitions.WithLabelValues(name, transition).Inc()
}
