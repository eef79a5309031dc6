// Command apiserver serves the kplane.v1.Resources gRPC API in front of
// etcd: embedded in --data-dir by default, or an external cluster with
// --etcd-endpoints. It is the only process that talks to etcd.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/kplane/kplane/services/apiserver/internal/apiserver"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "apiserver: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cfg := apiserver.Defaults()
	fs := flag.NewFlagSet("apiserver", flag.ContinueOnError)
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "gRPC listen address")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory of the embedded etcd (unused with --etcd-endpoints)")
	endpoints := fs.String("etcd-endpoints", "", "comma-separated endpoints of an external etcd cluster; empty runs etcd embedded")
	fs.DurationVar(&cfg.CompactionInterval, "compaction-interval", cfg.CompactionInterval, "how often etcd history is compacted (one interval is kept); 0 disables")
	fs.DurationVar(&cfg.EventTTL, "event-ttl", cfg.EventTTL, "how long Event objects live")
	fs.IntVar(&cfg.WatchCacheSize, "watch-cache-size", cfg.WatchCacheSize, "events kept per kind for watchers to resume from and to lag behind")
	fs.DurationVar(&cfg.BookmarkInterval, "bookmark-interval", cfg.BookmarkInterval, "how often idle watchers that allow bookmarks get one")
	fs.IntVar(&cfg.MaxRequestBytes, "max-request-bytes", cfg.MaxRequestBytes, "largest gRPC request accepted")
	fs.IntVar(&cfg.MaxObjectBytes, "max-object-bytes", cfg.MaxObjectBytes, "largest object stored (encoded size)")
	logLevel := fs.String("log-level", "info", "log level: trace, debug, info, warn, error")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *logFormat != "text" && *logFormat != "json" {
		return fmt.Errorf("--log-format: must be text or json, got %q", *logFormat)
	}
	level := hclog.LevelFromString(*logLevel)
	if level == hclog.NoLevel {
		return fmt.Errorf("--log-level: unknown level %q", *logLevel)
	}
	if *endpoints != "" {
		cfg.EtcdEndpoints = strings.Split(*endpoints, ",")
	}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "apiserver", Level: level, JSONFormat: *logFormat == "json", Output: os.Stderr})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	api, err := apiserver.Start(ctx, cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	cfg.Logger.Info("signal received; shutting down")
	api.Stop()
	return nil
}
