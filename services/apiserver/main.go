// Command apiserver serves the kplane.v1.Resources gRPC API in front of
// etcd: embedded in --data-dir by default, or an external cluster with
// --etcd-endpoints. It is the only process that talks to etcd.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kplane/kplane/pkg/health"
	"github.com/kplane/kplane/pkg/logging"
	"github.com/kplane/kplane/pkg/serviceaccount"
	"github.com/kplane/kplane/pkg/strategy"
	"github.com/kplane/kplane/services/apiserver/internal/apiserver"
	"github.com/kplane/kplane/services/apiserver/internal/auth/authz"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintf(os.Stderr, "apiserver: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	api, err := apiserver.Start(ctx, cfg)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		cfg.Logger.Info("signal received; shutting down")
	case <-api.Done():
		api.Stop()
		return fmt.Errorf("stopping: %w", api.Err())
	}
	api.Stop()
	return nil
}

// parseFlags turns the command line into the apiserver's configuration.
func parseFlags(args []string) (apiserver.Config, error) {
	cfg := apiserver.Defaults()
	fs := flag.NewFlagSet("apiserver", flag.ContinueOnError)
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "gRPC listen address")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory of the embedded etcd (unused with --etcd-endpoints)")
	endpoints := fs.String("etcd-endpoints", "", "comma-separated endpoints of an external etcd cluster; empty runs etcd embedded")
	fs.StringVar(&cfg.EtcdCluster.Name, "etcd-name", "", "name of the embedded etcd member when apiservers form an etcd cluster (stacked etcd); empty with no other --etcd-* flag: a single member")
	fs.StringVar(&cfg.EtcdCluster.InitialCluster, "etcd-initial-cluster", "", "every member of the embedded etcd cluster as name=peerURL, comma-separated (this member's --etcd-name included)")
	fs.StringVar(&cfg.EtcdCluster.State, "etcd-initial-cluster-state", "", "new (bootstrap the cluster with --etcd-initial-cluster) or existing (join after kpctl admin etcd member add); default new")
	fs.StringVar(&cfg.EtcdCluster.Token, "etcd-initial-cluster-token", "", "token that tells etcd clusters apart on one network (default kplane)")
	listenPeer := fs.String("etcd-listen-peer", "", "comma-separated URLs the embedded member accepts its peers on (default: --etcd-advertise-peer)")
	advertisePeer := fs.String("etcd-advertise-peer", "", "comma-separated URLs peers reach this member on (default: its entries in --etcd-initial-cluster)")
	listenClient := fs.String("etcd-listen-client", "", "comma-separated URLs serving the embedded member's etcd client API to tools such as etcdctl (default: a free loopback port)")
	advertiseClient := fs.String("etcd-advertise-client", "", "comma-separated client URLs announced to the cluster (default: --etcd-listen-client)")
	fs.StringVar(&cfg.EtcdRestoreFrom, "etcd-restore-from", "", "etcd snapshot file (kpctl admin etcd snapshot save) restored into an empty --data-dir before the embedded etcd starts; every object keeps its resourceVersion")
	fs.DurationVar(&cfg.CompactionInterval, "compaction-interval", cfg.CompactionInterval, "how often etcd history is compacted (one interval is kept); 0 disables")
	fs.DurationVar(&cfg.EventTTL, "event-ttl", cfg.EventTTL, "how long Event objects live")
	fs.IntVar(&cfg.WatchCacheSize, "watch-cache-size", cfg.WatchCacheSize, "events kept per kind for watchers to resume from and to lag behind")
	fs.DurationVar(&cfg.BookmarkInterval, "bookmark-interval", cfg.BookmarkInterval, "how often idle watchers that allow bookmarks get one")
	fs.IntVar(&cfg.MaxRequestBytes, "max-request-bytes", cfg.MaxRequestBytes, "largest gRPC request accepted")
	fs.IntVar(&cfg.MaxObjectBytes, "max-object-bytes", cfg.MaxObjectBytes, "largest object stored (encoded size)")
	fs.StringVar(&cfg.HealthAddr, "health-addr", cfg.HealthAddr, "address of the HTTP server for /healthz, /readyz and /metrics (empty disables it)")
	ipRange := fs.String("service-cluster-ip-range", cfg.ServiceClusterIPRange.String(), "CIDR that Services' cluster IPs are allocated from (IPv4; must not overlap the pod network)")
	portRange := fs.String("service-node-port-range", cfg.ServiceNodePortRange.String(), "port range (FIRST-LAST, both included) that Services' node ports are allocated from")
	fs.DurationVar(&cfg.AllocationRepairInterval, "allocation-repair-interval", cfg.AllocationRepairInterval, "how often cluster IP and node port records are reconciled with the Services (also at start); 0 only at start")
	authzModes := fs.String("authorization-mode", "", "comma list of authorizers asked in order: AlwaysAllow, Node, RBAC (empty: AlwaysAllow without authenticators, Node,RBAC with them)")
	fs.StringVar(&cfg.AuditLogPath, "audit-log-path", "", "file that receives a JSON line per write and per denied request (empty: no audit log)")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert-file", "", "PEM certificate (chain) of the main listener; with --tls-key-file serves gRPC and REST over TLS")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.StringVar(&cfg.ClientCAFile, "client-ca-file", "", "PEM CA bundle; client certificates it signed authenticate as CN (user) and O (groups); needs TLS")
	fs.StringVar(&cfg.TokenAuthFile, "token-auth-file", "", "static bearer tokens, CSV lines token,user,uid,\"group1,group2\"")
	fs.BoolVar(&cfg.AnonymousAuth, "anonymous-auth", false, "once an authenticator is configured, let requests without credentials in as system:anonymous (without any authenticator every request is anonymous)")
	saKeyFiles := fs.String("service-account-key-file", "", "comma-separated PEM files of public keys (PKIX; ECDSA P-256 or Ed25519) that verify ServiceAccount tokens; turns on ServiceAccount token authentication")
	saSigningKey := fs.String("service-account-signing-key-file", "", "PEM PKCS#8 private key (ECDSA P-256 or Ed25519) that signs TokenRequest tokens; empty leaves TokenRequest off")
	fs.StringVar(&cfg.ServiceAccountIssuer, "service-account-issuer", cfg.ServiceAccountIssuer, "iss claim of ServiceAccount tokens issued and accepted")
	fs.DurationVar(&cfg.ServiceAccountMaxTokenExpiration, "service-account-max-token-expiration", cfg.ServiceAccountMaxTokenExpiration, "longest lifetime of a TokenRequest token (at least 10m); longer requests are capped")
	var profiling health.Profiling
	profiling.AddFlag(fs)
	var logOpts logging.Options
	logOpts.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := logOpts.Validate(); err != nil {
		return cfg, err
	}
	prefix, err := netip.ParsePrefix(*ipRange)
	if err != nil {
		return cfg, fmt.Errorf("--service-cluster-ip-range: %w", err)
	}
	if err := strategy.ValidateServiceClusterIPRange(prefix); err != nil {
		return cfg, fmt.Errorf("--service-cluster-ip-range: %w", err)
	}
	cfg.ServiceClusterIPRange = prefix
	if cfg.ServiceNodePortRange, err = strategy.ParsePortRange(*portRange); err != nil {
		return cfg, fmt.Errorf("--service-node-port-range: %w", err)
	}
	if *authzModes != "" {
		if cfg.AuthorizationModes, err = authz.ParseModes(*authzModes); err != nil {
			return cfg, fmt.Errorf("--authorization-mode: %w", err)
		}
	}
	if *endpoints != "" {
		cfg.EtcdEndpoints = strings.Split(*endpoints, ",")
	}
	cfg.EtcdCluster.ListenPeerURLs = splitList(*listenPeer)
	cfg.EtcdCluster.AdvertisePeerURLs = splitList(*advertisePeer)
	cfg.EtcdCluster.ListenClientURLs = splitList(*listenClient)
	cfg.EtcdCluster.AdvertiseClientURLs = splitList(*advertiseClient)
	if err := cfg.EtcdCluster.Validate(len(cfg.EtcdEndpoints) > 0); err != nil {
		return cfg, err
	}
	if cfg.EtcdRestoreFrom != "" && len(cfg.EtcdEndpoints) > 0 {
		return cfg, errors.New("--etcd-restore-from restores the embedded etcd; with --etcd-endpoints restore the external cluster with etcdutl snapshot restore")
	}
	if *saKeyFiles != "" {
		if cfg.ServiceAccountPublicKeys, err = serviceaccount.LoadPublicKeysFiles(strings.Split(*saKeyFiles, ",")...); err != nil {
			return cfg, fmt.Errorf("--service-account-key-file: %w", err)
		}
	}
	if *saSigningKey != "" {
		if cfg.ServiceAccountSigningKey, err = serviceaccount.LoadPrivateKeyFile(*saSigningKey); err != nil {
			return cfg, fmt.Errorf("--service-account-signing-key-file: %w", err)
		}
	}
	if cfg.ServiceAccountMaxTokenExpiration < 10*time.Minute {
		return cfg, fmt.Errorf("--service-account-max-token-expiration: %s is below the minimum 10m", cfg.ServiceAccountMaxTokenExpiration)
	}
	if cfg.ServiceAccountIssuer == "" {
		return cfg, errors.New("--service-account-issuer: must not be empty")
	}
	cfg.Profiling = profiling.Enabled(cfg.HealthAddr)
	cfg.Logger = logOpts.New("apiserver", os.Stderr)
	return cfg, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
