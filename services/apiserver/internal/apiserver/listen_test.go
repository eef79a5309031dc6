package apiserver

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kplane/kplane/pkg/pki"
)

// TestTLSSplitRoutesByALPN: over real sockets, a client offering only h2
// reaches the gRPC side; one offering h2 and http/1.1 the HTTP side with
// h2 negotiated, one offering http/1.1 or no ALPN the HTTP side with
// http/1.1 or nothing negotiated; a failed handshake and a
// silent client reach neither, and closing ends everything.
func TestTLSSplitRoutesByALPN(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	if _, err := pki.Generate(dir, pki.Options{Controllers: []string{}}); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, pki.APIServerCert), filepath.Join(dir, pki.APIServerKey))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	handshakeErrs := make(chan error, 16)
	s := newTLSSplitListener(lis, &tls.Config{Certificates: []tls.Certificate{cert}}, func(err error) { handshakeErrs <- err })
	done := make(chan error, 1)
	go func() { done <- s.serve() }()

	accept := func(l net.Listener) *tls.Conn {
		t.Helper()
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() {
			c, err := l.Accept()
			ch <- res{c, err}
		}()
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatal(r.err)
			}
			return r.c.(*tls.Conn)
		case <-time.After(30 * time.Second):
			t.Fatal("no connection arrived")
			return nil
		}
	}
	for _, c := range []struct {
		offer []string
		grpc  bool
		want  string
	}{
		{[]string{"h2"}, true, "h2"},
		{[]string{"h2", "http/1.1"}, false, "h2"},
		{[]string{"http/1.1"}, false, "http/1.1"},
		{nil, false, ""},
	} {
		conn, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: c.offer})
		if err != nil {
			t.Fatalf("%v: %v", c.offer, err)
		}
		if got := conn.ConnectionState().NegotiatedProtocol; got != c.want {
			t.Errorf("%v: client negotiated %q, want %q", c.offer, got, c.want)
		}
		side := s.httpListener()
		if c.grpc {
			side = s.grpcListener()
		}
		srv := accept(side)
		if got := srv.ConnectionState().NegotiatedProtocol; got != c.want {
			t.Errorf("%v: server side negotiated %q", c.offer, got)
		}
		_ = srv.Close()
		_ = conn.Close()
	}
	// A client that does not trust the server fails its handshake: the
	// server reports it and hands nothing on.
	if _, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{RootCAs: x509.NewCertPool(), NextProtos: []string{"h2"}}); err == nil {
		t.Fatal("handshake with an untrusted certificate succeeded")
	}
	select {
	case err := <-handshakeErrs:
		if err == nil {
			t.Fatal("a nil handshake error was reported")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the failed handshake was not reported")
	}
	// A client that never sends its hello is in a handshake when the
	// listener closes; closing does not wait for its timeout.
	silent, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = silent.Close() }()
	s.close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(matchTimeout / 2):
		t.Fatal("serve did not end on close while a handshake was pending")
	}
	if _, err := s.grpcListener().Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept after close: %v", err)
	}
}
