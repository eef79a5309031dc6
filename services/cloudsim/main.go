// Command cloudsim is kplane's simulated cloud provider: `cloudsim serve`
// runs a gRPC API (reflection on) for instances, routes and TCP load
// balancers that really forward to healthy backends, with its state in a
// file; `cloudsim instance|route|lb ...` administer a running sim. The
// cloud controller manager, cloudctl, is its client.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kplane/kplane/services/cloudsim/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cloudsim: %v\n", err)
		if errors.Is(err, cli.ErrUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
