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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/logutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Config selects and tunes the etcd backend.
type Config struct {
	// DataDir holds the embedded etcd's files. Ignored with Endpoints.
	DataDir string
	// Endpoints of an external etcd cluster; empty means embedded.
	Endpoints []string
	// Cluster makes the embedded etcd a member of a multi-member cluster;
	// zero is a single member.
	Cluster Cluster
	// RestoreFrom is an etcd snapshot file (kpctl admin etcd snapshot
	// save) the embedded member is restored from before it starts. The
	// data dir must hold no etcd data yet.
	RestoreFrom string
	// UnsafeNoFsync trades durability for speed in the embedded etcd
	// (benchmarks of the apiserver's own overhead may use it; never production).
	UnsafeNoFsync bool
	// MaxRequestBytes is the embedded etcd's request size limit.
	MaxRequestBytes uint
	Logger          hclog.Logger
}

// Backend is an open etcd: Client reaches it; Close releases it.
type Backend struct {
	Client *clientv3.Client
	// KV is the embedded etcd's KV API in process (the one Client wraps),
	// for callers that send etcd's requests as they are; nil for an
	// external cluster, whose Client has a connection to call it on.
	KV       pb.KVClient
	embedded *embed.Etcd
	dir      string
	log      hclog.Logger
	// removed is set when etcd reports this member removed from its
	// cluster (its log says so; see removalHook).
	removed *atomic.Bool
	// done is closed when the embedded etcd stops on its own; stopErr
	// says why. closing marks a stop asked for by Close.
	done    chan struct{}
	stopErr error
	closing chan struct{}
	once    sync.Once
}

// Open starts the embedded etcd or connects to the external cluster.
func Open(ctx context.Context, cfg Config) (*Backend, error) {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if err := cfg.Cluster.Validate(len(cfg.Endpoints) > 0); err != nil {
		return nil, err
	}
	if len(cfg.Endpoints) > 0 {
		if cfg.RestoreFrom != "" {
			return nil, errors.New("--etcd-restore-from restores the embedded etcd; with --etcd-endpoints restore the external cluster with etcdutl snapshot restore")
		}
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   cfg.Endpoints,
			DialTimeout: 10 * time.Second,
			Context:     ctx,
		})
		if err != nil {
			return nil, fmt.Errorf("connect to etcd %v: %w", cfg.Endpoints, err)
		}
		log.Info("using external etcd", "endpoints", cfg.Endpoints)
		return &Backend{Client: cli, log: log, done: make(chan struct{}), closing: make(chan struct{})}, nil
	}
	return openEmbedded(ctx, cfg, log)
}

// removedMarker is the file a data dir gets once its member was removed
// from the cluster: etcd would otherwise start on it again, and only a
// reachable peer would tell it (too late, or never when partitioned).
const removedMarker = "etcd-member-removed"

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
	if b, err := os.ReadFile(filepath.Join(dir, removedMarker)); err == nil {
		return nil, fmt.Errorf("data dir %s belongs to an etcd member that was removed from its cluster (%s): a removed member cannot rejoin; "+
			"to join again as a new member, add it (kpctl admin etcd member add) and start with an empty --data-dir", dir, strings.TrimSpace(string(b)))
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("embedded etcd: read %s: %w", removedMarker, err)
	}
	removed := &atomic.Bool{}
	zl, err := zapLogger(filepath.Join(dir, "etcd.log"), removed)
	if err != nil {
		return nil, err
	}
	if cfg.RestoreFrom != "" {
		if err := restore(cfg, dir, zl, log); err != nil {
			return nil, err
		}
	}
	// The apiserver reaches the embedded etcd in-process (v3client), but
	// etcd still wants client and peer listeners; without cluster flags
	// they bind to free loopback ports so several apiservers (and tests)
	// can share a host. A port is free when picked and bound a moment
	// later, so another process can take it in between: that start is
	// retried on new ports. Ports given by flags are not retried.
	var e *embed.Etcd
	for attempt := 1; ; attempt++ {
		ec, err := embeddedConfig(cfg, dir)
		if err != nil {
			return nil, err
		}
		ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zl)
		e, err = embed.StartEtcd(ec)
		if err == nil {
			break
		}
		if !isAddrInUse(err) || attempt == bindAttempts || (cfg.Cluster.Enabled() && len(cfg.Cluster.ListenClientURLs) > 0) {
			return nil, fmt.Errorf("start embedded etcd in %s: %w", ec.Dir, err)
		}
		log.Warn("embedded etcd port taken between pick and bind; retrying on new ports", "attempt", attempt, "error", err)
	}
	b := &Backend{embedded: e, dir: dir, log: log, removed: removed, done: make(chan struct{}), closing: make(chan struct{})}
	// A single member is ready at once; a cluster member waits for a
	// quorum of its peers, which may start later, so it waits as long as
	// its caller does.
	var limit <-chan time.Time
	if !cfg.Cluster.Enabled() {
		limit = time.After(60 * time.Second)
	}
	progress := time.NewTicker(10 * time.Second)
	defer progress.Stop()
	for ready := false; !ready; {
		select {
		case <-e.Server.ReadyNotify():
			ready = true
		case <-e.Server.StopNotify():
			err := b.stoppedErr()
			e.Close()
			return nil, fmt.Errorf("embedded etcd stopped while starting: %w", err)
		case err := <-e.Err():
			e.Close()
			return nil, fmt.Errorf("embedded etcd failed while starting: %w", err)
		case <-ctx.Done():
			e.Close()
			return nil, fmt.Errorf("embedded etcd did not start: %w", ctx.Err())
		case <-progress.C:
			log.Info("embedded etcd waiting for a quorum of its cluster", "name", e.Config().Name, "initial_cluster", e.Config().InitialCluster)
		case <-limit:
			e.Server.Stop()
			e.Close()
			return nil, fmt.Errorf("embedded etcd did not become ready within 60s")
		}
	}
	b.Client = v3client.New(e.Server)
	b.KV = adapter.KvServerToKvClient(v3rpc.NewQuotaKVServer(e.Server))
	go b.monitor()
	log.Info("embedded etcd started", "data_dir", e.Config().Dir, "name", e.Config().Name, "member", e.Server.MemberID().String())
	return b, nil
}

// restore writes the snapshot into the data dir as a new cluster's
// member (etcd's own snapshot restore), keeping every key's revision.
func restore(cfg Config, dir string, zl *zap.Logger, log hclog.Logger) error {
	etcdDir := filepath.Join(dir, "etcd")
	if _, err := os.Stat(filepath.Join(etcdDir, "member")); err == nil {
		return fmt.Errorf("--etcd-restore-from: %s already holds etcd data; restore needs a data dir without it (the snapshot would replace it)", etcdDir)
	}
	if _, err := os.Stat(cfg.RestoreFrom); err != nil {
		return fmt.Errorf("--etcd-restore-from: %w", err)
	}
	name, initial, peers := "kplane", "", []string(nil)
	if cfg.Cluster.Enabled() {
		name, initial, peers = cfg.Cluster.Name, cfg.Cluster.InitialCluster, cfg.Cluster.AdvertisePeerURLs
	} else {
		// A single member's peer URL is never dialled; any will do.
		peers = []string{"http://127.0.0.1:2380"}
		initial = name + "=" + peers[0]
	}
	// Restore writes into a fresh directory and renames it into place,
	// so a failed restore leaves nothing half-written behind.
	tmp := etcdDir + ".restoring"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("--etcd-restore-from: clear %s: %w", tmp, err)
	}
	err := snapshot.NewV3(zl).Restore(snapshot.RestoreConfig{
		SnapshotPath:        cfg.RestoreFrom,
		Name:                name,
		OutputDataDir:       tmp,
		PeerURLs:            peers,
		InitialCluster:      initial,
		InitialClusterToken: clusterToken(cfg.Cluster),
	})
	if err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("--etcd-restore-from %s: %w", cfg.RestoreFrom, err)
	}
	if err := os.RemoveAll(etcdDir); err != nil {
		return fmt.Errorf("--etcd-restore-from: clear %s: %w", etcdDir, err)
	}
	if err := os.Rename(tmp, etcdDir); err != nil {
		return fmt.Errorf("--etcd-restore-from: %w", err)
	}
	log.Info("etcd restored from snapshot", "snapshot", cfg.RestoreFrom, "data_dir", etcdDir, "name", name)
	return nil
}

func clusterToken(c Cluster) string {
	if c.Token == "" {
		return "kplane"
	}
	return c.Token
}

// zapLogger is etcd's logger: warnings and errors into file, and a hook
// that notices etcd saying this member was removed from its cluster
// (etcd reports it only in its log before stopping).
func zapLogger(file string, removed *atomic.Bool) (*zap.Logger, error) {
	zc := logutil.DefaultZapLoggerConfig
	zc.Level = zap.NewAtomicLevelAt(zap.WarnLevel)
	zc.OutputPaths = []string{file}
	zc.ErrorOutputPaths = []string{file}
	zc.Sampling = nil // the removal line must never be sampled away
	lg, err := zc.Build(zap.Hooks(func(e zapcore.Entry) error {
		if strings.Contains(e.Message, "data-dir used by this member must be removed") ||
			strings.Contains(e.Message, "the member has been permanently removed") {
			removed.Store(true)
		}
		return nil
	}))
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: logger: %w", err)
	}
	return lg, nil
}

// stoppedErr explains a stop of the embedded etcd nobody asked for, and
// marks the data dir when the member was removed so it cannot rejoin.
func (b *Backend) stoppedErr() error {
	s := b.embedded.Server
	id := s.MemberID()
	if b.removed.Load() || !s.IsMemberExist(id) {
		note := fmt.Sprintf("member %s (%s) removed, noticed at %s", id, b.embedded.Config().Name, time.Now().UTC().Format(time.RFC3339))
		if err := os.WriteFile(filepath.Join(b.dir, removedMarker), []byte(note+"\n"), 0o600); err != nil {
			b.log.Error("could not mark the removed member's data dir", "error", err)
		}
		return fmt.Errorf("etcd member %s was removed from the cluster; this data dir cannot rejoin", id)
	}
	return fmt.Errorf("etcd member %s stopped (see %s)", id, filepath.Join(b.dir, "etcd.log"))
}

// monitor notices the embedded etcd stopping on its own (removed from
// the cluster, a fatal error) so the apiserver can stop too.
func (b *Backend) monitor() {
	select {
	case <-b.closing:
		return
	case <-b.embedded.Server.StopNotify():
		b.stopErr = b.stoppedErr()
	case err, ok := <-b.embedded.Err():
		if !ok {
			return
		}
		b.stopErr = fmt.Errorf("embedded etcd failed: %w", err)
	}
	select {
	case <-b.closing:
		return
	default:
	}
	b.log.Error("embedded etcd stopped", "error", b.stopErr)
	close(b.done)
}

// Done is closed when the embedded etcd stops without Close; Err then
// says why. It never closes for an external cluster.
func (b *Backend) Done() <-chan struct{} { return b.done }

// Err is why the embedded etcd stopped (after Done is closed).
func (b *Backend) Err() error {
	select {
	case <-b.done:
		return b.stopErr
	default:
		return nil
	}
}

// Embedded reports whether this backend runs an embedded etcd member.
func (b *Backend) Embedded() bool { return b.embedded != nil }

// MemberID is the embedded member's ID (0 for an external cluster).
func (b *Backend) MemberID() uint64 {
	if b.embedded == nil {
		return 0
	}
	return uint64(b.embedded.Server.MemberID())
}

// HasLeader reports whether the embedded member knows a Raft leader:
// without one it can serve neither writes nor linearizable reads. An
// external cluster is the etcd client's business: always true.
func (b *Backend) HasLeader() bool {
	if b.embedded == nil {
		return true
	}
	return b.embedded.Server.Leader() != 0
}

// Close closes the client and, when embedded, stops etcd after its
// in-flight requests are applied, so no write is torn.
func (b *Backend) Close() error {
	b.once.Do(func() { close(b.closing) })
	var err error
	if b.Client != nil {
		err = b.Client.Close()
	}
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

// embeddedConfig is the embedded etcd's configuration: a single member on
// newly picked free loopback ports, or the member cfg.Cluster describes.
func embeddedConfig(cfg Config, dir string) (*embed.Config, error) {
	ec := embed.NewConfig()
	ec.Name = "kplane"
	ec.Dir = filepath.Join(dir, "etcd")
	if c := cfg.Cluster; c.Enabled() {
		var err error
		ec.Name = c.Name
		ec.InitialCluster = c.InitialCluster
		ec.ClusterState = c.State
		ec.InitialClusterToken = clusterToken(c)
		if ec.ListenPeerUrls, err = parseURLs(c.ListenPeerURLs); err != nil {
			return nil, fmt.Errorf("--etcd-listen-peer: %w", err)
		}
		if ec.AdvertisePeerUrls, err = parseURLs(c.AdvertisePeerURLs); err != nil {
			return nil, fmt.Errorf("--etcd-advertise-peer: %w", err)
		}
		if len(c.ListenClientURLs) > 0 {
			if ec.ListenClientUrls, err = parseURLs(c.ListenClientURLs); err != nil {
				return nil, fmt.Errorf("--etcd-listen-client: %w", err)
			}
			if ec.AdvertiseClientUrls, err = parseURLs(c.AdvertiseClientURLs); err != nil {
				return nil, fmt.Errorf("--etcd-advertise-client: %w", err)
			}
		} else {
			clientURL, err := pickURL()
			if err != nil {
				return nil, err
			}
			ec.ListenClientUrls = []url.URL{*clientURL}
			ec.AdvertiseClientUrls = []url.URL{*clientURL}
		}
	} else {
		clientURL, err := pickURL()
		if err != nil {
			return nil, err
		}
		peerURL, err := pickURL()
		if err != nil {
			return nil, err
		}
		ec.ListenClientUrls = []url.URL{*clientURL}
		ec.AdvertiseClientUrls = []url.URL{*clientURL}
		ec.ListenPeerUrls = []url.URL{*peerURL}
		ec.AdvertisePeerUrls = []url.URL{*peerURL}
		ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	}
	ec.LogLevel = "warn"
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

// Leader is the Raft leader's member ID as this apiserver's etcd sees it
// (0 when it knows none).
func (b *Backend) Leader(ctx context.Context) (uint64, error) {
	if b.embedded != nil {
		return uint64(b.embedded.Server.Leader()), nil
	}
	var last error
	for _, ep := range b.Client.Endpoints() {
		st, err := b.Client.Status(ctx, ep)
		if err == nil {
			return st.Leader, nil
		}
		last = err
	}
	return 0, fmt.Errorf("etcd status: %w", last)
}
