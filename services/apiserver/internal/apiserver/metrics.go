package apiserver

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// metrics are the apiserver's own Prometheus series: requests by method
// and code, their latency, and the watch streams open per kind.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	watchers *prometheus.GaugeVec
	repairs  *prometheus.CounterVec
	proxied  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplane_apiserver_requests_total",
			Help: "API requests by method and gRPC code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kplane_apiserver_request_duration_seconds",
			Help:    "Latency of unary API requests by method.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"method"}),
		watchers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kplane_apiserver_watchers",
			Help: "Open watch streams by kind.",
		}, []string{"kind"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplane_apiserver_allocation_repairs_total",
			Help: "Allocation records repaired: freed (held by no object), recorded (held but not recorded), conflict (claimed twice, reported only).",
		}, []string{"action"}),
		proxied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplane_apiserver_proxy_requests_total",
			Help: "Requests through the service and pod proxy by target kind (services, pods) and HTTP status.",
		}, []string{"kind", "code"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.watchers, m.repairs, m.proxied} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func methodName(full string) string { return full[strings.LastIndexByte(full, '/')+1:] }

func (m *metrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	method := methodName(info.FullMethod)
	m.latency.WithLabelValues(method).Observe(time.Since(start).Seconds())
	m.requests.WithLabelValues(method, status.Code(err).String()).Inc()
	return resp, err
}

// kindOf is implemented by requests that name a kind (WatchRequest).
type kindOf interface{ GetKind() string }

func (m *metrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	w := &countingStream{ServerStream: ss, m: m}
	err := handler(srv, w)
	if w.kind != "" {
		m.watchers.WithLabelValues(w.kind).Dec()
	}
	m.requests.WithLabelValues(methodName(info.FullMethod), status.Code(err).String()).Inc()
	return err
}

// countingStream notes the kind of a watch when its request arrives.
type countingStream struct {
	grpc.ServerStream
	m    *metrics
	kind string
}

func (s *countingStream) RecvMsg(msg any) error {
	err := s.ServerStream.RecvMsg(msg)
	if k, ok := msg.(kindOf); ok && err == nil && s.kind == "" {
		s.kind = k.GetKind()
		if s.kind == "" {
			s.kind = "unknown"
		}
		s.m.watchers.WithLabelValues(s.kind).Inc()
	}
	return err
}
