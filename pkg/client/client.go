// Package client dials the kplane apiserver and offers typed, generic helpers
// over its one generic gRPC service, kplane.v1.Resources.
//
// A Client embeds the generated kplanev1.ResourcesClient, so every raw RPC
// (c.Create(ctx, &kplanev1.CreateRequest{...})) is available; For[T] (and the
// per-kind shorthands such as Pods) wrap it so callers never switch on the
// Object oneof by hand.
//
// Connection behaviour:
//   - the connection is created lazily and re-established by gRPC with capped
//     exponential backoff and jitter whenever it breaks;
//   - keepalive pings detect dead peers (half-open TCP connections) while
//     streams such as Watch are open;
//   - unary calls whose context carries no deadline get Options.CallTimeout;
//     streams (Watch) never get one, since they are meant to stay open;
//   - a bearer token (Options.Token or Options.TokenFile) is sent as
//     "authorization: Bearer <token>" metadata on every call. A token file is
//     re-read whenever its size or modification time changes, so a rotated
//     token is picked up without a restart;
//   - Options.TLSCA switches the transport to TLS verified against that CA;
//     Options.ClientCertFile/ClientKeyFile add a client certificate.
//     Without TLS a token is only sent to loopback (or unix socket) addresses,
//     unless Options.AllowInsecureToken says otherwise, because a bearer token
//     over plaintext to another host can be sniffed.
package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Defaults applied by Dial to zero Options fields.
const (
	DefaultAddress       = "127.0.0.1:6443"
	DefaultDialTimeout   = 5 * time.Second
	DefaultCallTimeout   = 30 * time.Second
	DefaultKeepaliveTime = 30 * time.Second
	// DefaultMaxRecvMsgSize raises gRPC's 4 MiB default so that a large List
	// page does not fail.
	DefaultMaxRecvMsgSize = 64 << 20
)

// Options configure a connection to the apiserver.
type Options struct {
	// Address is the apiserver's host:port (default 127.0.0.1:6443). Any gRPC
	// target is accepted too, e.g. "unix:///run/kplane.sock". A
	// comma-separated list of host:port names several apiservers (HA):
	// calls go round-robin to those connected and SERVING.
	Address string
	// TokenFile holds a bearer token; it is re-read when it changes.
	TokenFile string
	// Token is a static bearer token. Setting both Token and TokenFile is an error.
	Token string
	// TLSCA is a PEM file of CA certificates; when set the connection uses TLS
	// and verifies the server against them.
	TLSCA string
	// TLSCAData is PEM CA certificates given inline (a kubeconfig's
	// certificate-authority-data); it is used like TLSCA, which it joins.
	TLSCAData []byte
	// ClientCertFile and ClientKeyFile (PEM) are the client certificate
	// the connection presents, authenticating as its CN (user) and O
	// (groups). They need TLS (TLSCA).
	ClientCertFile, ClientKeyFile string
	// ClientCertData and ClientKeyData are the same given inline; they
	// take the place of the files.
	ClientCertData, ClientKeyData []byte
	// TLSServerName overrides the name checked in the server certificate
	// (default: the host part of Address).
	TLSServerName string
	// AllowInsecureToken permits sending a token without TLS to a
	// non-loopback address. Use only on a trusted network.
	AllowInsecureToken bool
	// DialTimeout bounds each connection attempt (default 5s).
	DialTimeout time.Duration
	// CallTimeout is the deadline given to unary calls whose context has none
	// (default 30s; negative disables). Watch streams never get it.
	CallTimeout time.Duration
	// KeepaliveTime is the interval of keepalive pings while streams are open
	// (default 30s; negative disables). The server's keepalive enforcement
	// policy must allow it.
	KeepaliveTime time.Duration
	// Block makes Dial wait until the connection is ready, or until ctx ends.
	Block bool
	// Logger receives connection and credential logs (default: a null logger).
	Logger hclog.Logger
	// UserAgent is prepended to gRPC's user agent, e.g. "replicactl/1.0".
	UserAgent string
}

// AddFlags registers the connection flags every kplane binary shares
// (DESIGN "Every service binary"): --apiserver, --token-file, --tls-ca,
// --client-cert-file and --client-key-file.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	if o.Address == "" {
		o.Address = DefaultAddress
	}
	fs.StringVar(&o.Address, "apiserver", o.Address, "apiserver address (host:port), or a comma-separated list of them (HA: calls spread over the healthy ones)")
	fs.StringVar(&o.TokenFile, "token-file", o.TokenFile, "file holding the bearer token sent to the apiserver (re-read when it changes)")
	fs.StringVar(&o.TLSCA, "tls-ca", o.TLSCA, "PEM CA bundle; when set the apiserver connection uses TLS verified against it")
	fs.StringVar(&o.ClientCertFile, "client-cert-file", o.ClientCertFile, "PEM client certificate presented to the apiserver (needs --tls-ca and --client-key-file)")
	fs.StringVar(&o.ClientKeyFile, "client-key-file", o.ClientKeyFile, "PEM private key of --client-cert-file")
}

func (o Options) withDefaults() Options {
	if o.Address == "" {
		o.Address = DefaultAddress
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.KeepaliveTime == 0 {
		o.KeepaliveTime = DefaultKeepaliveTime
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return o
}

// Client is a connection to the apiserver. It embeds the generated raw
// client; For[T] gives typed access. A Client is safe for concurrent use.
type Client struct {
	kplanev1.ResourcesClient

	conn *grpc.ClientConn
	opts Options
	log  hclog.Logger
}

// Dial validates opts and creates a connection to the apiserver. The
// connection is established in the background (and re-established after
// failures) unless opts.Block is set, in which case Dial waits for it until
// ctx ends. Configuration errors (unreadable files, a token over plaintext to
// a remote host) are reported here rather than on the first call.
func Dial(ctx context.Context, opts Options) (*Client, error) {
	opts = opts.withDefaults()
	log := opts.Logger.Named("client")

	dialOpts := []grpc.DialOption{
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  250 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   10 * time.Second,
			},
			MinConnectTimeout: opts.DialTimeout,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(DefaultMaxRecvMsgSize)),
	}
	if opts.KeepaliveTime > 0 {
		dialOpts = append(dialOpts, grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:    opts.KeepaliveTime,
			Timeout: 10 * time.Second,
			// Pinging idle connections would trip the server's default
			// enforcement policy; without streams there is nothing to keep alive.
			PermitWithoutStream: false,
		}))
	}
	if opts.UserAgent != "" {
		dialOpts = append(dialOpts, grpc.WithUserAgent(opts.UserAgent))
	}
	if opts.CallTimeout > 0 {
		dialOpts = append(dialOpts, grpc.WithUnaryInterceptor(callTimeoutInterceptor(opts.CallTimeout)))
	}

	secure := opts.TLSCA != "" || len(opts.TLSCAData) > 0
	hasCert := opts.ClientCertFile != "" || opts.ClientKeyFile != "" || len(opts.ClientCertData) > 0 || len(opts.ClientKeyData) > 0
	if hasCert && !secure {
		return nil, errors.New("client: a client certificate needs TLS: set the CA (--tls-ca) too")
	}
	if secure {
		tc, err := loadTLS(opts)
		if err != nil {
			return nil, err
		}
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(tc))
	} else {
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}

	if opts.Token != "" && opts.TokenFile != "" {
		return nil, errors.New("client: set either a token or a token file, not both")
	}
	if opts.Token != "" || opts.TokenFile != "" {
		if !secure && !opts.AllowInsecureToken && !allLocal(opts.Address) {
			return nil, fmt.Errorf("client: refusing to send a bearer token without TLS to non-loopback address %q (set --tls-ca)", opts.Address)
		}
		var creds *tokenCredentials
		if opts.TokenFile != "" {
			var err error
			creds, err = newFileToken(opts.TokenFile, secure, log)
			if err != nil {
				return nil, err
			}
		} else {
			creds = newStaticToken(opts.Token, secure)
		}
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(creds))
	}

	target := opts.Address
	if addrs := Addresses(opts.Address); len(addrs) > 1 {
		var extra []grpc.DialOption
		var err error
		if target, extra, err = balancedTarget(addrs); err != nil {
			return nil, err
		}
		dialOpts = append(dialOpts, extra...)
	}
	conn, err := grpc.NewClient(target, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", opts.Address, err)
	}
	c := &Client{ResourcesClient: kplanev1.NewResourcesClient(conn), conn: conn, opts: opts, log: log}
	if opts.Block {
		if err := c.waitReady(ctx); err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	log.Debug("apiserver client created", "address", opts.Address, "tls", secure, "token", opts.Token != "" || opts.TokenFile != "", "client-cert", hasCert)
	return c, nil
}

// waitReady blocks until the connection is Ready or ctx ends.
func (c *Client) waitReady(ctx context.Context) error {
	c.conn.Connect()
	for {
		s := c.conn.GetState()
		if s == connectivity.Ready {
			return nil
		}
		if s == connectivity.Shutdown {
			return fmt.Errorf("client: connection to %s shut down", c.opts.Address)
		}
		if !c.conn.WaitForStateChange(ctx, s) {
			return fmt.Errorf("client: waiting for %s (last state %s): %w", c.opts.Address, s, ctx.Err())
		}
	}
}

// Conn returns the underlying gRPC connection, e.g. for health checks.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Address returns the target the client dials.
func (c *Client) Address() string { return c.opts.Address }

// Logger returns the client's logger.
func (c *Client) Logger() hclog.Logger { return c.log }

// Close closes the connection; in-flight calls fail with Canceled.
func (c *Client) Close() error {
	if err := c.conn.Close(); err != nil {
		return fmt.Errorf("client: close: %w", err)
	}
	return nil
}

// callTimeoutInterceptor gives unary calls without a deadline a default one,
// so a hung apiserver cannot block a controller forever.
func callTimeoutInterceptor(d time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

func loadTLS(o Options) (credentials.TransportCredentials, error) {
	cfg, err := TLSConfig(o)
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}

// TLSConfig is the client TLS configuration o describes: the CA the
// server is verified against and the client certificate, if any. It is
// exported for clients of the apiserver's HTTP side on the same port.
func TLSConfig(o Options) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if o.TLSCA != "" {
		pem, err := os.ReadFile(o.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("client: read TLS CA: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client: TLS CA %s holds no PEM certificate", o.TLSCA)
		}
	}
	if len(o.TLSCAData) > 0 && !pool.AppendCertsFromPEM(o.TLSCAData) {
		return nil, errors.New("client: inline TLS CA data holds no PEM certificate")
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: o.TLSServerName, MinVersion: tls.VersionTLS12}
	certPEM, keyPEM := o.ClientCertData, o.ClientKeyData
	if o.ClientCertFile != "" && len(certPEM) == 0 {
		b, err := os.ReadFile(o.ClientCertFile)
		if err != nil {
			return nil, fmt.Errorf("client: read client certificate: %w", err)
		}
		certPEM = b
	}
	if o.ClientKeyFile != "" && len(keyPEM) == 0 {
		b, err := os.ReadFile(o.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("client: read client key: %w", err)
		}
		keyPEM = b
	}
	switch {
	case len(certPEM) > 0 && len(keyPEM) > 0:
		kp, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("client: client certificate and key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	case len(certPEM) > 0:
		return nil, errors.New("client: a client certificate needs its key (--client-key-file)")
	case len(keyPEM) > 0:
		return nil, errors.New("client: a client key needs its certificate (--client-cert-file)")
	}
	return cfg, nil
}

// allLocal reports whether every target of a (comma-separated) address
// stays on this machine.
func allLocal(address string) bool {
	addrs := Addresses(address)
	if len(addrs) == 0 {
		return isLocalTarget(address)
	}
	for _, a := range addrs {
		if !isLocalTarget(a) {
			return false
		}
	}
	return true
}

// isLocalTarget reports whether a gRPC target stays on this machine:
// a unix socket, "localhost" or a loopback IP.
func isLocalTarget(target string) bool {
	if strings.HasPrefix(target, "unix:") || strings.HasPrefix(target, "unix-abstract:") {
		return true
	}
	// Strip a resolver scheme such as "dns:///" or "passthrough:///".
	if i := strings.Index(target, ":///"); i >= 0 {
		target = target[i+4:]
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		host = target
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
