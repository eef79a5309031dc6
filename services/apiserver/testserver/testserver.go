// Package testserver runs a real kplane apiserver in-process for tests:
// embedded etcd in a temporary directory, gRPC on a random loopback
// port. It is the integration tier of DESIGN.md's tests, used by every
// module that needs an apiserver.
package testserver

import (
	"context"
	"crypto"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/strategy"

	"github.com/kplane/kplane/services/apiserver/internal/apiserver"
)

// Option adjusts the apiserver configuration.
type Option func(*apiserver.Config)

// WithCompactionInterval turns on periodic compaction (off by default in tests).
func WithCompactionInterval(d time.Duration) Option {
	return func(c *apiserver.Config) { c.CompactionInterval = d }
}

// WithEventTTL sets how long Events live.
func WithEventTTL(d time.Duration) Option { return func(c *apiserver.Config) { c.EventTTL = d } }

// WithWatchCacheSize sets the events each kind's watch cache keeps.
func WithWatchCacheSize(n int) Option { return func(c *apiserver.Config) { c.WatchCacheSize = n } }

// WithBookmarkInterval sets how often idle watchers get bookmarks.
func WithBookmarkInterval(d time.Duration) Option {
	return func(c *apiserver.Config) { c.BookmarkInterval = d }
}

// WithMaxObjectBytes sets the stored-object size limit.
func WithMaxObjectBytes(n int) Option { return func(c *apiserver.Config) { c.MaxObjectBytes = n } }

// WithServiceClusterIPRange sets the range Services' cluster IPs come from.
func WithServiceClusterIPRange(p netip.Prefix) Option {
	return func(c *apiserver.Config) { c.ServiceClusterIPRange = p }
}

// WithServiceNodePortRange sets the range Services' node ports come from.
func WithServiceNodePortRange(r strategy.PortRange) Option {
	return func(c *apiserver.Config) { c.ServiceNodePortRange = r }
}

// WithAllocationRepairInterval sets how often allocation records are
// repaired (tests turn the periodic repair off by default).
func WithAllocationRepairInterval(d time.Duration) Option {
	return func(c *apiserver.Config) { c.AllocationRepairInterval = d }
}

// WithDataDir uses dir instead of a fresh temporary directory.
func WithDataDir(dir string) Option { return func(c *apiserver.Config) { c.DataDir = dir } }

// WithFsync keeps etcd's fsync on (tests turn it off for speed by default).
func WithFsync() Option { return func(c *apiserver.Config) { c.UnsafeNoFsync = false } }

// WithAuthorization runs the apiserver with these --authorization-mode
// values (AlwaysAllow, Node, RBAC) and, when auditPath is set, an audit
// log there.
func WithAuthorization(auditPath string, modes ...string) Option {
	return func(c *apiserver.Config) { c.AuthorizationModes, c.AuditLogPath = modes, auditPath }
}

// WithServiceAccountKeys turns on ServiceAccount tokens: signing signs
// TokenRequests (nil leaves them off) and, with verify, checks tokens.
func WithServiceAccountKeys(signing crypto.Signer, verify ...crypto.PublicKey) Option {
	return func(c *apiserver.Config) {
		c.ServiceAccountSigningKey = signing
		c.ServiceAccountPublicKeys = verify
	}
}

// WithLogger logs the apiserver through l (silent by default).
func WithLogger(l hclog.Logger) Option { return func(c *apiserver.Config) { c.Logger = l } }

// WithTLS serves the main listener over TLS with the PEM files given
// (Conn and Client then do not work: tests dial with their own TLS).
func WithTLS(certFile, keyFile string) Option {
	return func(c *apiserver.Config) { c.TLSCertFile, c.TLSKeyFile = certFile, keyFile }
}

// WithClientCA turns on client-certificate authentication (needs WithTLS).
func WithClientCA(file string) Option { return func(c *apiserver.Config) { c.ClientCAFile = file } }

// WithTokenAuthFile turns on the static token file authenticator.
func WithTokenAuthFile(file string) Option {
	return func(c *apiserver.Config) { c.TokenAuthFile = file }
}

// WithAnonymousAuth lets requests without credentials in once
// authentication is on.
func WithAnonymousAuth(on bool) Option { return func(c *apiserver.Config) { c.AnonymousAuth = on } }

// Server is a running in-process apiserver.
type Server struct {
	cfg  apiserver.Config
	addr string

	mu   sync.Mutex
	api  *apiserver.APIServer
	conn *grpc.ClientConn
}

// Start starts an apiserver and stops it when the test ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := prepare(t, opts...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testserver: listen: %v", err)
	}
	s.addr = lis.Addr().String()
	s.start(t, lis)
	return s
}

// New configures an apiserver without starting it (StartErr starts it);
// it is stopped when the test ends.
func New(t testing.TB, opts ...Option) *Server { return prepare(t, opts...) }

// StartErr starts a server from New on a new loopback port.
func (s *Server) StartErr() error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	s.addr = lis.Addr().String()
	return s.startErr(lis)
}

// prepare is the configuration of a server, stopped when the test ends.
func prepare(t testing.TB, opts ...Option) *Server {
	t.Helper()
	cfg := apiserver.Defaults()
	cfg.DataDir = t.TempDir()
	cfg.CompactionInterval = 0
	cfg.BookmarkInterval = time.Second
	cfg.UnsafeNoFsync = true
	cfg.HealthAddr = "127.0.0.1:0"
	cfg.AllocationRepairInterval = 0
	for _, o := range opts {
		o(&cfg)
	}
	s := &Server{cfg: cfg}
	t.Cleanup(func() {
		s.mu.Lock()
		conn := s.conn
		s.conn = nil
		s.mu.Unlock()
		if conn != nil {
			_ = conn.Close()
		}
		s.Stop()
	})
	return s
}

func (s *Server) start(t testing.TB, lis net.Listener) {
	t.Helper()
	if err := s.startErr(lis); err != nil {
		t.Fatalf("testserver: start apiserver: %v", err)
	}
}

// startErr starts the apiserver on lis (closed on failure).
func (s *Server) startErr(lis net.Listener) error {
	cfg := s.cfg
	cfg.Listener = lis
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	api, err := apiserver.Start(ctx, cfg)
	if err != nil {
		_ = lis.Close()
		return err
	}
	s.mu.Lock()
	s.api = api
	s.mu.Unlock()
	return nil
}

// Addr is the apiserver's address, stable across restarts.
func (s *Server) Addr() string { return s.addr }

// DataDir is the embedded etcd's directory.
func (s *Server) DataDir() string { return s.cfg.DataDir }

// API is the running apiserver (nil while stopped).
func (s *Server) API() *apiserver.APIServer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.api
}

// Stop stops the apiserver gracefully; it is a no-op when stopped.
func (s *Server) Stop() { s.halt(true) }

// Kill stops the apiserver abruptly: open streams and requests break.
func (s *Server) Kill() { s.halt(false) }

func (s *Server) halt(graceful bool) {
	s.mu.Lock()
	api := s.api
	s.api = nil
	s.mu.Unlock()
	if api == nil {
		return
	}
	if graceful {
		api.Stop()
	} else {
		api.Kill()
	}
}

// Restart starts the apiserver again on the same data directory and
// address, stopping it first if it runs.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.RestartErr(); err != nil {
		t.Fatalf("testserver: %v", err)
	}
}

// RestartErr is Restart returning its error (for starts expected to
// fail, and from goroutines other than the test's).
func (s *Server) RestartErr() error {
	s.Stop()
	var lis net.Listener
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		lis, err = net.Listen("tcp", s.addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the port is released asynchronously
	}
	if err != nil {
		return fmt.Errorf("listen again on %s: %w", s.addr, err)
	}
	return s.startErr(lis)
}

// Compact compacts etcd history up to the current revision.
func (s *Server) Compact(ctx context.Context) (int64, error) {
	api := s.API()
	if api == nil {
		return 0, context.Canceled
	}
	return api.Compact(ctx)
}

// Conn is a shared plain gRPC connection to the apiserver for test
// set-up; it reconnects across restarts.
func (s *Server) Conn() *grpc.ClientConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			panic("testserver: dial: " + err.Error()) // only a malformed address fails here
		}
		s.conn = conn
	}
	return s.conn
}

// Client is a Resources client over Conn.
func (s *Server) Client() kplanev1.ResourcesClient { return kplanev1.NewResourcesClient(s.Conn()) }

// WithServiceAccountTokensOpen turns ServiceAccount tokens on (as
// WithServiceAccountKeys) for a plaintext server whose callers carry no
// credentials: the keys turn authentication on, so such callers come in
// as system:anonymous (--anonymous-auth) under AlwaysAllow. For tests of
// issuing and checking tokens, not of authorization; a bad token is
// still Unauthenticated.
func WithServiceAccountTokensOpen(signing crypto.Signer, verify ...crypto.PublicKey) Option {
	return func(c *apiserver.Config) {
		WithServiceAccountKeys(signing, verify...)(c)
		c.AnonymousAuth = true
		c.AuthorizationModes = []string{"AlwaysAllow"}
	}
}
