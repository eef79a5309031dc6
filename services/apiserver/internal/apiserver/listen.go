package apiserver

import (
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/soheilhy/cmux"
)

// The main listener (--listen) carries two protocols, split per
// connection by github.com/soheilhy/cmux: an HTTP/2 connection whose
// first request has content-type application/grpc* goes to the
// grpc.Server, which then serves it natively (grpc.Server.Serve, no
// per-request translation); every other connection (HTTP/1.x, or HTTP/2
// without gRPC) goes to one http.Server whose root http.ServeMux holds
// the HTTP side of the API: the service and pod proxy now, Kubernetes'
// REST API later. Matching reads only a connection's first bytes; after
// the hand-over the connection is read directly.

// splitListener splits lis into a gRPC and an HTTP listener.
type splitListener struct {
	mux  cmux.CMux
	grpc net.Listener
	http net.Listener
}

func newSplitListener(lis net.Listener) *splitListener {
	m := cmux.New(lis)
	// gRPC clients wait for the server's SETTINGS before they send their
	// first request, so the matcher answers them while it looks.
	g := m.MatchWithWriters(cmux.HTTP2MatchHeaderFieldPrefixSendSettings("content-type", "application/grpc"))
	h := m.Match(cmux.Any())
	return &splitListener{mux: m, grpc: g, http: h}
}

// serve runs the split until the root listener closes.
func (s *splitListener) serve() error {
	err := s.mux.Serve()
	if err == nil || errors.Is(err, net.ErrClosed) || errors.Is(err, cmux.ErrListenerClosed) || errors.Is(err, cmux.ErrServerClosed) {
		return nil
	}
	return err
}

// close stops accepting connections; open ones are their servers' to end.
func (s *splitListener) close() {
	_ = s.grpc.Close() // closes the root listener; an error means it already was
	s.mux.Close()
}

// newHTTPServer is the HTTP side of the main listener: HTTP/1.1 and
// HTTP/2 without TLS (prior knowledge), as Kubernetes' clients speak it.
func newHTTPServer(h http.Handler) *http.Server {
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h,
		Protocols:         &protos,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute,
	}
}
