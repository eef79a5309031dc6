package apiserver

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/soheilhy/cmux"
)

// The main listener (--listen) carries two protocols, split per
// connection by github.com/soheilhy/cmux: a connection that opens with
// the HTTP/2 client preface goes to the grpc.Server, which then serves it
// natively (grpc.Server.Serve, no per-request translation); one that
// starts with an HTTP/1 method goes to one http.Server whose root
// http.ServeMux holds the HTTP side of the API: the service and pod
// proxy now, Kubernetes' REST API later. Anything else is closed.
// Matching reads only the first bytes (the 24-byte preface at most) and
// writes nothing; after the hand-over the connection is read directly.
//
// Why not by content-type: telling gRPC from other HTTP/2 needs the first
// request's headers, which gRPC clients send only after the server's
// SETTINGS; a matcher that answers them leaves the client's SETTINGS ACK
// in the bytes handed on, which Go's HTTP/2 server rejects as a protocol
// error. Cleartext HTTP/2 without gRPC (h2c) therefore reaches the gRPC
// server, which answers 415; Kubernetes' clients speak HTTP/1.1 without
// TLS, and HTTP/2 with TLS is negotiated by ALPN after the handshake,
// where the REST front end can route by content-type.

// matchTimeout bounds how long a new connection may take to send its
// first bytes (every client sends them at once).
const matchTimeout = 5 * time.Second

// splitListener splits lis into a gRPC and an HTTP listener.
type splitListener struct {
	mux  cmux.CMux
	grpc net.Listener
	http net.Listener
}

func newSplitListener(lis net.Listener) *splitListener {
	m := cmux.New(lis)
	// A connection that sends nothing is dropped after matchTimeout, so
	// it can hold neither a goroutine nor shutdown for long.
	m.SetReadTimeout(matchTimeout)
	g := m.Match(cmux.HTTP2())
	// HTTP/1 by its method; anything else is closed once matching gives up.
	h := m.Match(cmux.HTTP1Fast(http.MethodPatch))
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

// newHTTPServer is the HTTP side of the main listener. Its requests'
// contexts derive from base, whose cancellation ends what the server no
// longer tracks: connections upgraded through the proxy (websockets).
func newHTTPServer(h http.Handler, base context.Context) *http.Server {
	return &http.Server{
		Handler:           h,
		BaseContext:       func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute,
	}
}
