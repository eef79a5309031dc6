package nodelifecycle

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are nodectl's own series:
//
//	kplane_nodectl_nodes{ready="True|False|Unknown|None"}  nodes by Ready condition
//	kplane_nodectl_evictions_total                          pods evicted from NoExecute-tainted nodes
//	kplane_nodectl_deleted_node_pods_total                  pods deleted because their node was deleted
//	kplane_nodectl_evictions_halted                         1 while evictions stop for too many unready nodes
type metrics struct {
	nodes           *prometheus.GaugeVec
	evictions       prometheus.Counter
	deletedNodePods prometheus.Counter
	halted          prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kplane_nodectl_nodes",
			Help: "Nodes by the status of their Ready condition (None: no Ready condition yet).",
		}, []string{"ready"}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kplane_nodectl_evictions_total",
			Help: "Pods force-deleted from nodes tainted NoExecute after their eviction timeout.",
		}),
		deletedNodePods: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kplane_nodectl_deleted_node_pods_total",
			Help: "Pods deleted because their Node object was deleted.",
		}),
		halted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kplane_nodectl_evictions_halted",
			Help: "1 while evictions are stopped because more than --unhealthy-zone-threshold of the nodes are unready.",
		}),
	}
	for _, c := range []prometheus.Collector{m.nodes, m.evictions, m.deletedNodePods, m.halted} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("nodectl: register metrics: %w", err)
		}
	}
	return m, nil
}
