package scheduler

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of a scheduling attempt (the "result" label).
const (
	resultScheduled     = "scheduled"
	resultUnschedulable = "unschedulable"
	resultError         = "error"
)

// metrics are the scheduler's series on the service's /metrics:
//
//	kplane_scheduler_schedule_attempts_total{result}
//	kplane_scheduler_scheduling_algorithm_duration_seconds
//	kplane_scheduler_e2e_scheduling_duration_seconds
//	kplane_scheduler_binding_duration_seconds{result}
//	kplane_scheduler_pending_pods{queue}
//	kplane_scheduler_assumed_pods
//	kplane_scheduler_events_dropped_total
type metrics struct {
	attempts      *prometheus.CounterVec
	algorithm     prometheus.Histogram
	e2e           prometheus.Histogram
	binding       *prometheus.HistogramVec
	eventsDropped prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, s *Scheduler) (*metrics, error) {
	m := &metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplane_scheduler_schedule_attempts_total",
			Help: "Scheduling attempts by result: scheduled, unschedulable (no node fits) or error.",
		}, []string{"result"}),
		algorithm: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kplane_scheduler_scheduling_algorithm_duration_seconds",
			Help:    "Time to filter and score the nodes for one pod.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10),
		}),
		e2e: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kplane_scheduler_e2e_scheduling_duration_seconds",
			Help:    "Time from a pod first waiting for a node to its binding being written, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}),
		binding: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kplane_scheduler_binding_duration_seconds",
			Help:    "Time to write one binding (spec.nodeName) through the apiserver, by result: ok, conflict, gone or error.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"result"}),
		eventsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kplane_scheduler_events_dropped_total",
			Help: "Events not written because the event writers were too far behind (events are advice).",
		}),
	}
	collectors := []prometheus.Collector{m.attempts, m.algorithm, m.e2e, m.binding, m.eventsDropped,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "kplane_scheduler_pending_pods",
			Help:        "Pods waiting for a node: active (queued or backing off) or unschedulable (waiting for the cluster to change).",
			ConstLabels: prometheus.Labels{"queue": "active"},
		}, func() float64 { a, _ := s.pendingCounts(); return float64(a) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "kplane_scheduler_pending_pods",
			Help:        "Pods waiting for a node: active (queued or backing off) or unschedulable (waiting for the cluster to change).",
			ConstLabels: prometheus.Labels{"queue": "unschedulable"},
		}, func() float64 { _, u := s.pendingCounts(); return float64(u) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kplane_scheduler_assumed_pods",
			Help: "Pods placed by the scheduler whose binding is not yet seen through the watch.",
		}, func() float64 { _, _, a := s.cache.Counts(); return float64(a) }),
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("scheduler: register metrics: %w", err)
		}
	}
	return m, nil
}
