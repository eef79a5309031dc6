// Package backend opens the etcd that the apiserver alone talks to: an
// embedded single-member etcd in a data directory (the default), or an
// external cluster named by its endpoints.
package backend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
)

// Config selects and tunes the etcd backend.
type Config struct {
	// DataDir holds the embedded etcd's files. Ignored with Endpoints.
	DataDir string
	// Endpoints of an external etcd cluster; empty means embedded.
	Endpoints []string
	// UnsafeNoFsync trades durability for speed in the embedded etcd
	// (benchmarks of the apiserver's own overhead may use it; never production).
	UnsafeNoFsync bool
	// MaxRequestBytes is the embedded etcd's request size limit.
	MaxRequestBytes uint
	Logger          hclog.Logger
}

// Backend is an open etcd: Client reaches it; Close releases it.
type Backend struct {
	Client   *clientv3.Client
	embedded *embed.Etcd
	log      hclog.Logger
}

// Open starts the embedded etcd or connects to the external cluster.
func Open(ctx context.Context, cfg Config) (*Backend, error) {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if len(cfg.Endpoints) > 0 {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   cfg.Endpoints,
			DialTimeout: 10 * time.Second,
			Context:     ctx,
		})
		if err != nil {
			return nil, fmt.Errorf("connect to etcd %v: %w", cfg.Endpoints, err)
		}
		log.Info("using external etcd", "endpoints", cfg.Endpoints)
		return &Backend{Client: cli, log: log}, nil
	}
	return openEmbedded(ctx, cfg, log)
}

func openEmbedded(ctx context.Context, cfg Config, log hclog.Logger) (*Backend, error) {
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("embedded etcd: data dir is required")
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: data dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd: create data dir: %w", err)
	}
	// The apiserver reaches the embedded etcd in-process (v3client), but
	// etcd still wants client and peer listeners; bind them to free
	// loopback ports so several apiservers (and tests) can share a host.
	// A port is free when picked and bound a moment later, so another
	// process can take it in between: that start is retried on new ports.
	var e *embed.Etcd
	for attempt := 1; ; attempt++ {
		ec, err := embeddedConfig(cfg, dir)
		if err != nil {
			return nil, err
		}
		e, err = embed.StartEtcd(ec)
		if err == nil {
			break
		}
		if !isAddrInUse(err) || attempt == bindAttempts {
			return nil, fmt.Errorf("start embedded etcd in %s: %w", ec.Dir, err)
		}
		log.Warn("embedded etcd port taken between pick and bind; retrying on new ports", "attempt", attempt, "error", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed while starting: %w", err)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("embedded etcd did not start: %w", ctx.Err())
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("embedded etcd did not become ready within 60s")
	}
	log.Info("embedded etcd started", "data_dir", e.Config().Dir)
	return &Backend{Client: v3client.New(e.Server), embedded: e, log: log}, nil
}

// Close closes the client and, when embedded, stops etcd after its
// in-flight requests are applied, so no write is torn.
func (b *Backend) Close() error {
	err := b.Client.Close()
	if errors.Is(err, context.Canceled) {
		err = nil // the in-process client reports its own cancellation
	}
	if b.embedded != nil {
		b.embedded.Close()
		b.log.Info("embedded etcd stopped")
	}
	return err
}

// bindAttempts is how many sets of free ports the embedded etcd tries.
const bindAttempts = 5

// embeddedConfig is the single-member embedded etcd's configuration, on
// newly picked free loopback ports.
func embeddedConfig(cfg Config, dir string) (*embed.Config, error) {
	clientURL, err := pickURL()
	if err != nil {
		return nil, err
	}
	peerURL, err := pickURL()
	if err != nil {
		return nil, err
	}
	ec := embed.NewConfig()
	ec.Name = "kplane"
	ec.Dir = filepath.Join(dir, "etcd")
	ec.ListenClientUrls = []url.URL{*clientURL}
	ec.AdvertiseClientUrls = []url.URL{*clientURL}
	ec.ListenPeerUrls = []url.URL{*peerURL}
	ec.AdvertisePeerUrls = []url.URL{*peerURL}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.LogLevel = "error"
	ec.LogOutputs = []string{filepath.Join(dir, "etcd.log")}
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	// Progress notifications let the watch cache advance its revision
	// (for bookmarks) even when its kind is quiet.
	ec.WatchProgressNotifyInterval = 5 * time.Second
	if cfg.MaxRequestBytes > 0 {
		ec.MaxRequestBytes = cfg.MaxRequestBytes
	}
	// Compaction is the apiserver's job (--compaction-interval), as in
	// Kubernetes, so that it can tell its watch cache.
	ec.AutoCompactionRetention = "0"
	return ec, nil
}

// isAddrInUse reports whether err is a listener's "address already in
// use" (etcd wraps it in its own text, so the errno is checked and, failing
// that, the message).
func isAddrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

// pickURL picks a listen URL for embedded etcd; tests replace it to hand
// out a taken port.
var pickURL = freeLoopbackURL

func freeLoopbackURL() (*url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pick a free port for embedded etcd: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return nil, fmt.Errorf("pick a free port for embedded etcd: %w", err)
	}
	return url.Parse("http://" + addr)
}
