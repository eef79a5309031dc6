package proxier

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the proxy's series, labelled by service port
// ("namespace/name:port"); for a UDP port a "connection" is a session
// (one client address to one endpoint) and a refusal a dropped datagram:
//
//	kplane_proxy_connections_accepted_total{service}
//	kplane_proxy_connections_refused_total{service}   no endpoint took it
//	kplane_proxy_dial_errors_total{service}           failed dials to endpoints
//	kplane_proxy_active_connections{service}
//	kplane_proxy_endpoints{service}                   ready endpoints
//	kplane_proxy_listeners
//	kplane_proxy_listen_errors_total
//
// A service port's series are deleted when it goes away.
type metrics struct {
	accepted   *prometheus.CounterVec
	refused    *prometheus.CounterVec
	dialErrors *prometheus.CounterVec
	active     *prometheus.GaugeVec
	endpoints  *prometheus.GaugeVec
	listeners  prometheus.Gauge
	listenErrs prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	label := []string{"service"}
	m := &metrics{
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplane_proxy_connections_accepted_total",
			Help: "Connections accepted on a service port's addresses.",
		}, label),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplane_proxy_connections_refused_total",
			Help: "Accepted connections reset because no endpoint was ready or every dial failed.",
		}, label),
		dialErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplane_proxy_dial_errors_total",
			Help: "Dials to a service port's endpoints that failed (the connection then tries another endpoint).",
		}, label),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kplane_proxy_active_connections",
			Help: "Connections being forwarded to an endpoint.",
		}, label),
		endpoints: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kplane_proxy_endpoints",
			Help: "Ready endpoints of a service port.",
		}, label),
		listeners: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kplane_proxy_listeners",
			Help: "Addresses the proxy accepts connections on.",
		}),
		listenErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kplane_proxy_listen_errors_total",
			Help: "Failed attempts to listen on a service address (retried with backoff).",
		}),
	}
	for _, c := range []prometheus.Collector{m.accepted, m.refused, m.dialErrors, m.active, m.endpoints, m.listeners, m.listenErrs} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("proxy: register metrics: %w", err)
		}
	}
	return m, nil
}

// portMetrics are one service port's series.
type portMetrics struct {
	accepted, refused, dialErrors prometheus.Counter
	active, endpoints             prometheus.Gauge
}

func (m *metrics) forPort(name string) portMetrics {
	return portMetrics{
		accepted:   m.accepted.WithLabelValues(name),
		refused:    m.refused.WithLabelValues(name),
		dialErrors: m.dialErrors.WithLabelValues(name),
		active:     m.active.WithLabelValues(name),
		endpoints:  m.endpoints.WithLabelValues(name),
	}
}

// deletePort drops a removed port's series. Connections still open keep
// their (now unregistered) gauge handle, so a service recreated under the
// same name starts from zero and is never decremented by them.
func (m *metrics) deletePort(name string) {
	m.accepted.DeleteLabelValues(name)
	m.refused.DeleteLabelValues(name)
	m.dialErrors.DeleteLabelValues(name)
	m.active.DeleteLabelValues(name)
	m.endpoints.DeleteLabelValues(name)
}
