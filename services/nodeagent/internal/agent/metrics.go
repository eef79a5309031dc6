package agent

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the node agent's Prometheus metrics, served on /metrics.
type metrics struct {
	podsRunning       prometheus.Gauge
	containerStarts   prometheus.Counter
	containerRestarts prometheus.Counter
	statusWrites      *prometheus.CounterVec
	heartbeats        *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		podsRunning: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeagent_pods_running", Help: "Pods with at least one running container.",
		}),
		containerStarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeagent_container_starts_total", Help: "Container runs started (first runs and restarts).",
		}),
		containerRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeagent_container_restarts_total", Help: "Container runs started after an earlier run of the same container exited.",
		}),
		statusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeagent_pod_status_writes_total", Help: "Pod status updates sent to the apiserver, by result.",
		}, []string{"result"}),
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeagent_heartbeats_total", Help: "Node lease renewals, by result.",
		}, []string{"result"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.podsRunning, m.containerStarts, m.containerRestarts, m.statusWrites, m.heartbeats} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				continue
			}
			return nil, fmt.Errorf("register nodeagent metrics: %w", err)
		}
	}
	return m, nil
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}
