package apiserver

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/soheilhy/cmux"
	"google.golang.org/grpc/credentials"
)

// The main listener (--listen) carries two protocols. Without TLS they
// are split per connection by github.com/soheilhy/cmux: a connection
// that opens with the HTTP/2 client preface goes to the grpc.Server,
// which then serves it natively (grpc.Server.Serve, no per-request
// translation); one that starts with an HTTP/1 method goes to one
// http.Server whose root http.ServeMux holds the HTTP side of the API
// (Kubernetes' REST API, the service and pod proxy). Anything else is
// closed. Matching reads only the first bytes (the 24-byte preface at
// most) and writes nothing; after the hand-over the connection is read
// directly.
//
// Why not by content-type: telling gRPC from other HTTP/2 needs the first
// request's headers, which gRPC clients send only after the server's
// SETTINGS; a matcher that answers them leaves the client's SETTINGS ACK
// in the bytes handed on, which Go's HTTP/2 server rejects as a protocol
// error. Cleartext HTTP/2 without gRPC (h2c) therefore reaches the gRPC
// server, which answers 415.
//
// With TLS (--tls-cert-file) the split is ALPN's, decided during the
// handshake (tlsSplitListener): a client that offers only "h2" (grpc-go,
// grpcurl: gRPC clients offer nothing else) is given h2 and goes to the
// grpc.Server, served natively; one that offers "h2" and "http/1.1"
// (kubectl, client-go, curl, browsers) is given h2 and goes to the HTTP
// server, which speaks HTTP/2 to it (Go's net/http does for a *tls.Conn
// that negotiated h2), as Kubernetes' apiserver does; one that offers
// only "http/1.1" or no ALPN at all (client-go's SPDY and websocket
// dialers for exec and port-forward, whose upgrades need HTTP/1.1) goes
// to the HTTP server over HTTP/1.1. A gRPC request that arrives on an
// HTTP/2 connection of the HTTP server (content-type application/grpc:
// a gRPC client that offered http/1.1 too) is handed to
// grpc.Server.ServeHTTP (grpcOverHTTP2), so both kinds of client work
// whatever they offer. Plaintext stays split by the first bytes above:
// HTTP/1.1 is REST, HTTP/2 is gRPC.

// matchTimeout bounds how long a new connection may take to send its
// first bytes (every client sends them at once).
const matchTimeout = 5 * time.Second

// splitter splits the main listener into a gRPC and an HTTP listener.
type splitter interface {
	grpcListener() net.Listener
	httpListener() net.Listener
	// serve runs the split until the root listener closes.
	serve() error
	// close stops accepting connections; open ones are their servers' to end.
	close()
}

// splitListener splits lis into a gRPC and an HTTP listener by the first bytes.
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

func (s *splitListener) grpcListener() net.Listener { return s.grpc }
func (s *splitListener) httpListener() net.Listener { return s.http }

func (s *splitListener) serve() error {
	err := s.mux.Serve()
	if err == nil || errors.Is(err, net.ErrClosed) || errors.Is(err, cmux.ErrListenerClosed) || errors.Is(err, cmux.ErrServerClosed) {
		return nil
	}
	return err
}

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

// ALPN protocol names.
const (
	protoHTTP1 = "http/1.1"
	protoH2    = "h2"
)

// alpnConfig returns base with GetConfigForClient choosing the protocol
// from what the client offers (see the comment at the top); toGRPC, when
// set, learns whether the connection belongs to the gRPC server.
func alpnConfig(base *tls.Config, toGRPC *bool) *tls.Config {
	cfg := base.Clone()
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		h2 := slices.Contains(hello.SupportedProtos, protoH2)
		h1 := slices.Contains(hello.SupportedProtos, protoHTTP1)
		switch {
		case h2:
			c.NextProtos = []string{protoH2}
		case h1:
			c.NextProtos = []string{protoHTTP1}
		default:
			c.NextProtos = nil
		}
		if toGRPC != nil {
			*toGRPC = h2 && !h1
		}
		return c, nil
	}
	return cfg
}

// grpcOverHTTP2 sends gRPC requests that reached the HTTP server over
// HTTP/2 to grpcServer's ServeHTTP (it authenticates them itself, by the
// connection's certificates or the request's token) and everything else
// to next.
func grpcOverHTTP2(grpcServer func() http.Handler, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			grpcServer().ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// tlsSplitListener accepts TLS connections, completes each handshake in
// its own goroutine (bounded by matchTimeout, so a silent client holds
// nothing for long) and hands the connection to the gRPC listener when
// the client offered only h2, to the HTTP listener otherwise.
type tlsSplitListener struct {
	root  net.Listener
	cfg   *tls.Config
	grpc  *chanListener
	http  *chanListener
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
	onErr func(error)
}

func newTLSSplitListener(lis net.Listener, cfg *tls.Config, onErr func(error)) *tlsSplitListener {
	s := &tlsSplitListener{root: lis, cfg: cfg, done: make(chan struct{}), onErr: onErr}
	s.grpc = newChanListener(lis.Addr(), s.done)
	s.http = newChanListener(lis.Addr(), s.done)
	return s
}

func (s *tlsSplitListener) grpcListener() net.Listener { return s.grpc }
func (s *tlsSplitListener) httpListener() net.Listener { return s.http }

func (s *tlsSplitListener) serve() error {
	defer s.wg.Wait()
	for {
		conn, err := s.root.Accept()
		if err != nil {
			select {
			case <-s.done:
				return nil
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handshake(conn)
		}()
	}
}

func (s *tlsSplitListener) handshake(raw net.Conn) {
	var toGRPC bool
	conn := tls.Server(raw, alpnConfig(s.cfg, &toGRPC))
	ctx, cancel := context.WithTimeout(context.Background(), matchTimeout)
	defer cancel()
	go func() {
		// Shutting down aborts handshakes in progress.
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := conn.HandshakeContext(ctx); err != nil {
		_ = conn.Close() // the client failed the handshake; nothing to report to it
		if s.onErr != nil && !s.closed() {
			s.onErr(err)
		}
		return
	}
	target := s.http
	if toGRPC {
		target = s.grpc
	}
	select {
	case target.conns <- conn:
	case <-target.closed:
		_ = conn.Close() // its server is gone
	case <-s.done:
		_ = conn.Close()
	}
}

func (s *tlsSplitListener) closed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *tlsSplitListener) close() {
	s.once.Do(func() {
		close(s.done)
		_ = s.root.Close() // an error means it already was
	})
}

// chanListener is a net.Listener fed by tlsSplitListener. Closing it
// ends its server's Accept only; the root closes with
// tlsSplitListener.close (done).
type chanListener struct {
	addr   net.Addr
	conns  chan net.Conn
	done   <-chan struct{}
	closed chan struct{}
	once   sync.Once
}

func newChanListener(addr net.Addr, done <-chan struct{}) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: done, closed: make(chan struct{})}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close ends Accept; servers call it when they stop.
func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// tlsConnCreds are the gRPC server's transport credentials when the
// listener has already completed the TLS handshake: they only expose the
// connection's TLS state (the client's certificates) to the server, as
// credentials.NewTLS would after doing the handshake itself.
type tlsConnCreds struct{}

func (tlsConnCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("tlsConnCreds: server side only")
}

func (tlsConnCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return nil, nil, errors.New("tlsConnCreds: connection is not TLS")
	}
	return c, credentials.TLSInfo{State: tc.ConnectionState(), CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (tlsConnCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (t tlsConnCreds) Clone() credentials.TransportCredentials { return t }

func (tlsConnCreds) OverrideServerName(string) error { return nil }
