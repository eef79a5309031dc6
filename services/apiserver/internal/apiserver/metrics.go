package apiserver

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// metrics are the apiserver's own Prometheus series: requests by method
// and code, their latency, and the watch streams open per kind.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	watchers *prometheus.GaugeVec
	repairs  *prometheus.CounterVec
	proxied  *prometheus.CounterVec
	// sent counts the protobuf bytes of responses and watch events by
	// method and kind: what the clients' caches cost the apiserver
	// (docs/architecture.md, "One process or many").
	sent *prometheus.CounterVec
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
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplane_apiserver_sent_bytes_total",
			Help: "Protobuf bytes of gRPC responses and watch events sent, by method and kind (the encoded message size, before gRPC framing and TLS).",
		}, []string{"method", "kind"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.watchers, m.repairs, m.proxied, m.sent} {
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
	if err == nil {
		size := -1
		switch r := resp.(type) {
		case wireSized: // a List's reply in the watch cache's wire form
			size = r.WireSize()
		case proto.Message:
			size = proto.Size(r)
		}
		if size >= 0 {
			m.sent.WithLabelValues(method, requestKind(req)).Add(float64(size))
		}
	}
	m.latency.WithLabelValues(method).Observe(time.Since(start).Seconds())
	m.requests.WithLabelValues(method, status.Code(err).String()).Inc()
	return resp, err
}

// kindOf is implemented by requests that name a kind (WatchRequest).
type kindOf interface{ GetKind() string }

func (m *metrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	w := &countingStream{ServerStream: ss, m: m, method: methodName(info.FullMethod)}
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
	m      *metrics
	method string
	kind   string
	sent   prometheus.Counter // of method and kind, once the request named the kind
}

// wireSized is a message sent in pre-encoded form.
type wireSized interface{ WireSize() int }

func requestKind(req any) string {
	if k, ok := req.(kindOf); ok {
		return k.GetKind()
	}
	return ""
}

// SendMsg counts the bytes of each message sent (a watch's events).
func (s *countingStream) SendMsg(msg any) error {
	err := s.ServerStream.SendMsg(msg)
	if err != nil {
		return err
	}
	size := -1
	switch m := msg.(type) {
	case wireSized: // a watch event encoded once for every watcher
		size = m.WireSize()
	case proto.Message:
		size = proto.Size(m)
	}
	if size >= 0 {
		if s.sent == nil {
			s.sent = s.m.sent.WithLabelValues(s.method, s.kind)
		}
		s.sent.Add(float64(size))
	}
	return nil
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
