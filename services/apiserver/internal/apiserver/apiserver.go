// Package apiserver assembles the kplane apiserver: etcd (embedded or
// external), the generic store, one watch cache per kind, the compactor
// and the gRPC server with reflection and health.
package apiserver

import (
	"context"
	"crypto"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	httphealth "github.com/kplane/kplane/pkg/health"
	sa "github.com/kplane/kplane/pkg/serviceaccount"
	"github.com/kplane/kplane/pkg/strategy"

	"github.com/kplane/kplane/services/apiserver/internal/admin"
	"github.com/kplane/kplane/services/apiserver/internal/auth/authn"
	"github.com/kplane/kplane/services/apiserver/internal/auth/authz"
	saauth "github.com/kplane/kplane/services/apiserver/internal/auth/serviceaccount"
	"github.com/kplane/kplane/services/apiserver/internal/backend"
	"github.com/kplane/kplane/services/apiserver/internal/proxy"
	"github.com/kplane/kplane/services/apiserver/internal/rest"
	"github.com/kplane/kplane/services/apiserver/internal/server"
	"github.com/kplane/kplane/services/apiserver/internal/store"
	"github.com/kplane/kplane/services/apiserver/internal/watchcache"
)

// streamWorkers is how many gRPC requests run at once on reused worker
// goroutines: about as many as a busy control plane keeps in flight (a
// few dozen controllers and agents with several requests each). An idle
// worker costs only its stack.
const streamWorkers = 128

// Config is everything the apiserver's flags set.
type Config struct {
	// Listen is the gRPC address (":6443"). Ignored when Listener is set.
	Listen   string
	Listener net.Listener
	// DataDir holds the embedded etcd; EtcdEndpoints selects an external one instead.
	DataDir       string
	EtcdEndpoints []string
	// EtcdCluster makes the embedded etcd one member of a cluster of
	// apiservers (stacked etcd); zero is a single member.
	EtcdCluster backend.Cluster
	// EtcdRestoreFrom restores the embedded etcd from a snapshot file
	// before it starts (the data dir must hold no etcd data).
	EtcdRestoreFrom string
	// CompactionInterval compacts etcd history periodically, keeping one
	// interval of history for reconnecting watchers; 0 disables it.
	CompactionInterval time.Duration
	EventTTL           time.Duration
	// WatchCacheSize is the events each kind's watch cache keeps.
	WatchCacheSize   int
	BookmarkInterval time.Duration
	// MaxRequestBytes caps a gRPC request; MaxObjectBytes caps a stored object.
	MaxRequestBytes int
	MaxObjectBytes  int
	// UnsafeNoFsync disables fsync in the embedded etcd (benchmarks only).
	UnsafeNoFsync bool
	// HealthAddr serves /healthz, /readyz and /metrics over HTTP ("" = off).
	HealthAddr string
	// Profiling serves /debug/pprof/ on HealthAddr too.
	Profiling bool
	// ServiceClusterIPRange is where Services' cluster IPs come from.
	ServiceClusterIPRange netip.Prefix
	// ServiceNodePortRange is where Services' node ports come from.
	ServiceNodePortRange strategy.PortRange
	// AllocationRepairInterval is how often allocation records are
	// reconciled with the Services holding them (also once at start);
	// 0 repairs only at start.
	AllocationRepairInterval time.Duration
	Logger                   hclog.Logger
	// AuthorizationModes is --authorization-mode in order: AlwaysAllow,
	// Node, RBAC. Empty means AlwaysAllow without authenticators and
	// Node,RBAC with them.
	AuthorizationModes []string
	// AuditLogPath, when set, receives a JSON line per write and per
	// denial.
	AuditLogPath string

	// ServiceAccountPublicKeys verify ServiceAccount tokens
	// (--service-account-key-file); set, they turn on the ServiceAccount
	// token authenticator and the pod ServiceAccount existence check.
	ServiceAccountPublicKeys []crypto.PublicKey
	// ServiceAccountSigningKey signs TokenRequest tokens
	// (--service-account-signing-key-file); nil leaves CreateToken
	// Unimplemented. Its public key is also accepted for verification.
	ServiceAccountSigningKey crypto.Signer
	// ServiceAccountIssuer is the iss of tokens issued and accepted.
	ServiceAccountIssuer string
	// ServiceAccountMaxTokenExpiration caps a TokenRequest's lifetime.
	ServiceAccountMaxTokenExpiration time.Duration

	// Version is kplane's version, reported by GET /version as gitVersion.
	Version string

	// TLSCertFile and TLSKeyFile (PEM) serve the main listener over TLS;
	// both or neither.
	TLSCertFile, TLSKeyFile string
	// ClientCAFile (PEM) turns on client-certificate authentication:
	// CN is the user, O the groups. Needs TLS.
	ClientCAFile string
	// TokenAuthFile is a static token file (token,user,uid,"g1,g2").
	TokenAuthFile string
	// AnonymousAuth lets requests without credentials in as
	// system:anonymous once authentication is on. With no authenticator
	// configured every request is system:anonymous regardless.
	AnonymousAuth bool
	// TokenAuthenticators are asked for a bearer token after the static
	// token file, in order (the ServiceAccount token authenticator plugs
	// in here). Any entry turns authentication on.
	TokenAuthenticators []authn.TokenAuthenticator
}

// Defaults are the flag defaults DESIGN.md gives.
func Defaults() Config {
	return Config{
		Listen:             ":6443",
		DataDir:            "./data",
		CompactionInterval: 5 * time.Minute,
		EventTTL:           time.Hour,
		WatchCacheSize:     20000,
		BookmarkInterval:   5 * time.Second,
		MaxRequestBytes:    3 << 20,
		MaxObjectBytes:     store.DefaultMaxObjectBytes,
		HealthAddr:         ":6444",
		Version:            "v1.32.0-kplane",

		ServiceClusterIPRange:    strategy.DefaultServiceClusterIPRange,
		ServiceNodePortRange:     strategy.DefaultServiceNodePortRange,
		AllocationRepairInterval: 3 * time.Minute,

		ServiceAccountIssuer:             sa.DefaultIssuer,
		ServiceAccountMaxTokenExpiration: saauth.DefaultMaxTokenExpiration,
	}
}

// ServiceAccountAuthenticationOn reports whether ServiceAccount tokens
// are verified (a public or signing key is configured).
func (c Config) ServiceAccountAuthenticationOn() bool {
	return len(c.ServiceAccountPublicKeys) > 0 || c.ServiceAccountSigningKey != nil
}

// APIServer is a running apiserver.
type APIServer struct {
	cfg      Config
	log      hclog.Logger
	backend  *backend.Backend
	store    *store.Store
	metrics  *metrics
	caches   map[string]*watchcache.Cache
	grpc     *grpc.Server
	health   *health.Server
	listener net.Listener
	split    splitter
	authn    *authn.Chain
	// httpMux is the root of the HTTP side of the main listener.
	httpMux *http.ServeMux
	httpAPI *http.Server
	proxy   *proxy.Proxy
	httpSrv *httphealth.Server
	// saAuth authenticates ServiceAccount tokens (nil when no key is set).
	saAuth   *saauth.Authenticator
	stopping atomic.Bool
	// authzFeed keeps the authorizers' indexes current (nil in
	// AlwaysAllow mode); audit is the audit log (nil when off).
	authzFeed *authz.Feed
	audit     *authz.AuditLog
	// member follows the embedded etcd member's leader.
	member *memberHealth

	cancel         context.CancelFunc
	shutdown       context.CancelFunc
	httpDone       context.CancelFunc // ends upgraded proxy connections
	wg             sync.WaitGroup
	stopOnce       sync.Once
	compactMu      sync.Mutex
	lastCompaction int64
}

// Start opens etcd, loads the watch caches, creates the system namespaces
// and starts serving. It returns once the server accepts requests.
func Start(ctx context.Context, cfg Config) (*APIServer, error) {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	d := Defaults()
	if cfg.WatchCacheSize <= 0 {
		cfg.WatchCacheSize = d.WatchCacheSize
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = d.MaxRequestBytes
	}
	if cfg.MaxObjectBytes <= 0 {
		cfg.MaxObjectBytes = d.MaxObjectBytes
	}
	if cfg.EventTTL <= 0 {
		cfg.EventTTL = d.EventTTL
	}
	if cfg.Version == "" {
		cfg.Version = d.Version
	}
	if cfg.BookmarkInterval <= 0 {
		cfg.BookmarkInterval = d.BookmarkInterval
	}
	if !cfg.ServiceClusterIPRange.IsValid() {
		cfg.ServiceClusterIPRange = d.ServiceClusterIPRange
	}
	if err := strategy.ValidateServiceClusterIPRange(cfg.ServiceClusterIPRange); err != nil {
		return nil, fmt.Errorf("service cluster IP range: %w", err)
	}
	if cfg.ServiceNodePortRange.Size <= 0 {
		cfg.ServiceNodePortRange = d.ServiceNodePortRange
	}
	// ServiceAccount tokens are checked against the watch caches, which
	// fill before the first request is served.
	caches := map[string]*watchcache.Cache{}
	saAuth, saOpts, err := serviceAccounts(cfg, caches)
	if err != nil {
		return nil, err
	}
	if saAuth != nil {
		cfg.TokenAuthenticators = append(append([]authn.TokenAuthenticator(nil), cfg.TokenAuthenticators...), saAuth)
	}
	tlsCfg, chain, err := authConfig(cfg, log)
	if err != nil {
		return nil, err
	}
	be, err := backend.Open(ctx, backend.Config{
		DataDir:         cfg.DataDir,
		Endpoints:       cfg.EtcdEndpoints,
		Cluster:         cfg.EtcdCluster,
		RestoreFrom:     cfg.EtcdRestoreFrom,
		UnsafeNoFsync:   cfg.UnsafeNoFsync,
		MaxRequestBytes: uint(cfg.MaxRequestBytes) + 512<<10,
		Logger:          log.Named("etcd"),
	})
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	shutdownCtx, shutdown := context.WithCancel(context.Background())
	httpCtx, httpDone := context.WithCancel(context.Background())
	a := &APIServer{
		cfg:     cfg,
		log:     log,
		backend: be,
		authn:   chain,
		saAuth:  saAuth,
		store: store.New(be.Client, store.Options{KV: be.KV, MaxObjectBytes: cfg.MaxObjectBytes, Lifecycle: strategy.Config{
			EventTTL: cfg.EventTTL, ServiceClusterIPRange: cfg.ServiceClusterIPRange, ServiceNodePortRange: cfg.ServiceNodePortRange}, Logger: log.Named("store"),
			Cached: func(k *kplanev1.KindInfo, namespace, name string, rev int64) (*kplanev1.Object, bool) {
				c := caches[k.Name]
				if c == nil {
					return nil, false
				}
				return c.GetAt(kplanev1.MetaKey(namespace, name), rev)
			},
			PriorityClasses: func(atLeast int64) ([]*kplanev1.PriorityClass, bool) {
				return priorityClassesFrom(caches["PriorityClass"], atLeast)
			}}),
		caches:   caches,
		member:   newMemberHealth(),
		cancel:   cancel,
		shutdown: shutdown,
		httpDone: httpDone,
	}
	fail := func(err error) (*APIServer, error) {
		cancel()
		shutdown()
		httpDone()
		a.wg.Wait()
		_ = be.Close()
		return nil, err
	}
	for _, k := range kplanev1.Kinds() {
		c := watchcache.New(watchcache.Config{Kind: k, Client: be.Client, Capacity: cfg.WatchCacheSize, History: int64(cfg.WatchCacheSize), Logger: log.Named("watchcache")})
		a.caches[k.Name] = c
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			c.Run(runCtx)
		}()
	}
	for name, c := range a.caches {
		select {
		case <-c.Ready():
		case <-ctx.Done():
			return fail(fmt.Errorf("waiting for the %s watch cache: %w", name, ctx.Err()))
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := newMetrics(reg)
	if err != nil {
		return fail(fmt.Errorf("register metrics: %w", err))
	}
	a.metrics = m
	if err := a.bootstrap(ctx); err != nil {
		return fail(err)
	}
	if err := a.repairAllocations(ctx); err != nil {
		return fail(fmt.Errorf("repair allocations: %w", err))
	}
	if err := a.ensureBootstrapPolicy(ctx); err != nil {
		return fail(err)
	}
	authorizer, esc, err := a.startAuthorizers(runCtx)
	if err != nil {
		return fail(err)
	}
	if cfg.AuditLogPath != "" {
		if a.audit, err = authz.OpenAuditLog(cfg.AuditLogPath); err != nil {
			return fail(err)
		}
	}

	lis := cfg.Listener
	if lis == nil {
		lis, err = net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fail(fmt.Errorf("listen on %s: %w", cfg.Listen, err))
		}
	}
	a.listener = lis
	var grpcCreds []grpc.ServerOption
	if tlsCfg != nil {
		a.split = newTLSSplitListener(lis, tlsCfg, func(err error) { log.Debug("TLS handshake failed", "error", err) })
		grpcCreds = append(grpcCreds, grpc.Creds(tlsConnCreds{}))
	} else {
		a.split = newSplitListener(lis)
	}
	a.httpMux = http.NewServeMux()
	a.httpMux.HandleFunc("/", notFound)
	saOpts = append(saOpts, server.WithWatchBreak(a.member.watchBreak))
	resources := authz.NewDecorator(server.New(a.store, a.caches, cfg.BookmarkInterval, shutdownCtx, log.Named("server"), saOpts...),
		authz.DecoratorConfig{Authorizer: authorizer, Escalation: esc, Audit: a.audit, Logger: log.Named("authz")})
	a.proxy = proxy.New(a.store, log.Named("proxy"), proxy.WithObserver(func(kind string, code int) {
		m.proxied.WithLabelValues(kind, strconv.Itoa(code)).Inc()
	}), proxy.WithAuthorizer(resources.AuthorizeSubresource))
	a.proxy.Register(a.httpMux)
	// Every request on the HTTP side (REST and the proxy) is authenticated first.
	// gRPC requests on the HTTP server's HTTP/2 connections (TLS only) go
	// to the gRPC server, which authenticates on its own.
	a.httpAPI = newHTTPServer(grpcOverHTTP2(func() http.Handler { return a.grpc }, chain.Middleware(a.httpMux, func(w http.ResponseWriter, msg string) {
		proxy.WriteStatus(w, http.StatusUnauthorized, "Unauthorized", msg)
	})), httpCtx)
	a.grpc = grpc.NewServer(append(grpcCreds,
		grpc.MaxRecvMsgSize(cfg.MaxRequestBytes),
		// Requests run on long-lived workers whose stacks have already
		// grown to what a handler needs, instead of a new goroutine per
		// request that grows its stack by copying (5% of a Create's CPU
		// under load); a request beyond the workers still gets its own.
		grpc.NumStreamWorkers(streamWorkers),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.ChainUnaryInterceptor(m.unary, chain.UnaryInterceptor(), a.logUnary, server.PreEncodedReplies()),
		grpc.ChainStreamInterceptor(m.stream, chain.StreamInterceptor()),
		server.CodecOption(),
	)...)
	// gRPC and REST reach the store only through the authorizing decorator.
	kplanev1.RegisterResourcesServer(a.grpc, resources)
	kplanev1.RegisterAdminServer(a.grpc, admin.New(admin.Config{Client: be.Client, Leader: be.Leader, Authorizer: authorizer, Logger: log.Named("admin")}))
	// The REST side calls the very service the gRPC clients reach, in process.
	rh := rest.New(resources, rest.Version{GitVersion: cfg.Version}, log.Named("rest"))
	rh.Register(a.httpMux)
	rh.RegisterStreams(a.httpMux)
	a.health = health.NewServer()
	healthpb.RegisterHealthServer(a.grpc, a.health)
	reflection.Register(a.grpc)
	a.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	a.health.SetServingStatus(kplanev1.Resources_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)

	if cfg.HealthAddr != "" {
		a.httpSrv, err = httphealth.Start(cfg.HealthAddr, reg, a.ready, log.Named("http"), httphealth.WithProfiling(cfg.Profiling))
		if err != nil {
			_ = lis.Close()
			return fail(err)
		}
	}

	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := a.grpc.Serve(a.split.grpcListener()); err != nil && !errors.Is(err, grpc.ErrServerStopped) && !a.stopping.Load() {
			log.Error("gRPC server failed", "error", err)
		}
	}()
	a.wg.Add(2)
	go func() {
		defer a.wg.Done()
		if err := a.httpAPI.Serve(a.split.httpListener()); err != nil && !errors.Is(err, http.ErrServerClosed) && !a.stopping.Load() {
			log.Error("HTTP server failed", "error", err)
		}
	}()
	go func() {
		defer a.wg.Done()
		if err := a.split.serve(); err != nil && !a.stopping.Load() {
			log.Error("listener failed", "error", err)
		}
	}()
	if be.Embedded() {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.memberLoop(runCtx)
		}()
	}
	if cfg.AllocationRepairInterval > 0 {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.repairLoop(runCtx, cfg.AllocationRepairInterval)
		}()
	}
	if cfg.CompactionInterval > 0 {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.compactLoop(runCtx, cfg.CompactionInterval)
		}()
	}
	log.Info("apiserver serving", "address", lis.Addr().String(), "kinds", len(a.caches),
		"tls", tlsCfg != nil, "authentication", chain.Enabled())
	return a, nil
}

// authConfig loads the TLS certificate and the authenticators the
// configuration names; a bad file fails the start with its flag's name.
func authConfig(cfg Config, log hclog.Logger) (*tls.Config, *authn.Chain, error) {
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return nil, nil, errors.New("--tls-cert-file and --tls-key-file: give both or neither")
	}
	ac := authn.Config{Anonymous: cfg.AnonymousAuth, Logger: log.Named("authn")}
	var tlsCfg *tls.Config
	if cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-cert-file/--tls-key-file: %w", err)
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if cfg.ClientCAFile != "" {
		if tlsCfg == nil {
			return nil, nil, errors.New("--client-ca-file needs TLS (--tls-cert-file and --tls-key-file)")
		}
		pool, err := authn.LoadClientCA(cfg.ClientCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--client-ca-file: %w", err)
		}
		ac.ClientCA = pool
		// Certificates are asked for but checked by the authenticator, not
		// the handshake, so a bad one is a logged Unauthenticated (401)
		// rather than a handshake failure the client cannot explain.
		tlsCfg.ClientAuth = tls.RequestClientCert
	}
	if cfg.TokenAuthFile != "" {
		tf, err := authn.LoadTokenFile(cfg.TokenAuthFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--token-auth-file: %w", err)
		}
		ac.Tokens = append(ac.Tokens, tf)
	}
	ac.Tokens = append(ac.Tokens, cfg.TokenAuthenticators...)
	return tlsCfg, authn.New(ac), nil
}

// serviceAccounts builds the ServiceAccount token authenticator and
// issuer over the watch caches (looked up per request), and the server
// options they need; all nil without a ServiceAccount key.
func serviceAccounts(cfg Config, caches map[string]*watchcache.Cache) (*saauth.Authenticator, []server.Option, error) {
	if !cfg.ServiceAccountAuthenticationOn() {
		return nil, nil, nil
	}
	lookup := func(kind, ns, name string) (*kplanev1.Object, bool) {
		return caches[kind].Get(ns + "/" + name)
	}
	keys := cfg.ServiceAccountPublicKeys
	if cfg.ServiceAccountSigningKey != nil {
		keys = append(append([]crypto.PublicKey(nil), keys...), cfg.ServiceAccountSigningKey.Public())
	}
	v, err := sa.NewVerifier(cfg.ServiceAccountIssuer, keys)
	if err != nil {
		return nil, nil, fmt.Errorf("service account keys: %w", err)
	}
	auth, err := saauth.NewAuthenticator(saauth.AuthenticatorConfig{Verifier: v, Lookup: lookup})
	if err != nil {
		return nil, nil, err
	}
	opts := []server.Option{server.WithServiceAccountAdmission()}
	if cfg.ServiceAccountSigningKey != nil {
		signer, err := sa.NewSigner(cfg.ServiceAccountIssuer, cfg.ServiceAccountSigningKey)
		if err != nil {
			return nil, nil, fmt.Errorf("service account signing key: %w", err)
		}
		iss, err := saauth.NewIssuer(signer, lookup, cfg.ServiceAccountMaxTokenExpiration, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("--service-account-max-token-expiration: %w", err)
		}
		opts = append(opts, server.WithTokenIssuer(iss))
	}
	return auth, opts, nil
}

// ServiceAccountAuthenticator is the ServiceAccount token authenticator
// (an authn.TokenAuthenticator), nil when no service account key is
// configured. The request path's token authenticators include it.
func (a *APIServer) ServiceAccountAuthenticator() *saauth.Authenticator { return a.saAuth }

// notFound answers paths the HTTP side does not serve, as a Status.
func notFound(w http.ResponseWriter, r *http.Request) {
	proxy.WriteStatus(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource: "+r.URL.Path)
}

// ready is /readyz: serving until shutdown begins, while the embedded
// etcd member has a leader.
func (a *APIServer) ready() error {
	if a.stopping.Load() {
		return errors.New("shutting down")
	}
	return a.member.err()
}

// Done is closed when the apiserver's embedded etcd member stopped on its
// own (removed from the cluster, a fatal etcd error); Err says why. The
// apiserver cannot serve without it and should be stopped.
func (a *APIServer) Done() <-chan struct{} { return a.backend.Done() }

// Err is why Done closed.
func (a *APIServer) Err() error { return a.backend.Err() }

// HealthAddr is the address of the HTTP health server ("" when off).
func (a *APIServer) HealthAddr() string {
	if a.httpSrv == nil {
		return ""
	}
	return a.httpSrv.Addr()
}

// Addr is the address the gRPC server listens on.
func (a *APIServer) Addr() net.Addr { return a.listener.Addr() }

// Store exposes the generic store (for in-process tests and benchmarks).
func (a *APIServer) Store() *store.Store { return a.store }

// Stop shuts down gracefully: health turns NOT_SERVING, watches end with
// Unavailable, in-flight requests finish, then etcd closes.
func (a *APIServer) Stop() { a.stop(true) }

// Kill stops at once, breaking every stream and request, the closest an
// in-process server gets to SIGKILL. etcd is still closed cleanly, as a
// crash cannot tear etcd's own writes.
func (a *APIServer) Kill() { a.stop(false) }

func (a *APIServer) stop(graceful bool) {
	a.stopOnce.Do(func() {
		a.stopping.Store(true)
		a.health.Shutdown()
		a.shutdown()
		a.split.close()
		if graceful {
			done := make(chan struct{})
			go func() {
				a.grpc.GracefulStop()
				close(done)
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := a.httpAPI.Shutdown(ctx); err != nil {
				a.log.Warn("graceful HTTP stop timed out; closing remaining connections", "error", err)
				_ = a.httpAPI.Close() // ends what Shutdown left; its error repeats Shutdown's
			}
			select {
			case <-done:
			case <-ctx.Done():
				a.log.Warn("graceful stop timed out; closing remaining connections")
				a.grpc.Stop()
				<-done
			}
			cancel()
		} else {
			_ = a.httpAPI.Close() // abrupt by design; nothing to report
			a.grpc.Stop()
		}
		a.httpDone()
		a.proxy.CloseIdleConnections()
		a.cancel()
		a.wg.Wait()
		if a.audit != nil {
			if err := a.audit.Close(); err != nil {
				a.log.Warn("closing the audit log", "error", err)
			}
		}
		if a.httpSrv != nil {
			a.httpSrv.Stop()
		}
		if err := a.backend.Close(); err != nil {
			a.log.Warn("closing etcd", "error", err)
		}
		a.log.Info("apiserver stopped", "graceful", graceful)
	})
}

// bootstrap creates the namespaces that exist from the first start.
func (a *APIServer) bootstrap(ctx context.Context) error {
	for _, ns := range strategy.SystemNamespaces {
		_, err := a.store.Create(ctx, kplanev1.MustWrap(&kplanev1.Namespace{Metadata: &kplanev1.ObjectMeta{Name: ns}}))
		if err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
	}
	return nil
}

// logUnary logs failed requests whose cause is on the server's side;
// client mistakes (InvalidArgument, NotFound, ...) are the client's to report.
func (a *APIServer) logUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	switch status.Code(err) {
	case codes.Internal, codes.Unavailable, codes.Unknown, codes.DataLoss:
		a.log.Warn("request failed", "method", info.FullMethod, "error", err)
	}
	return resp, err
}

// priorityClassesFrom reads every PriorityClass from c once it is loaded
// and has caught up to atLeast.
func priorityClassesFrom(c *watchcache.Cache, atLeast int64) ([]*kplanev1.PriorityClass, bool) {
	if c == nil {
		return nil, false
	}
	select {
	case <-c.Ready():
	default:
		return nil, false
	}
	objs, rev := c.Snapshot()
	if rev < atLeast {
		return nil, false
	}
	out := make([]*kplanev1.PriorityClass, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.GetPriorityClass())
	}
	return out, true
}
