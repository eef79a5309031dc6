package cloudcontroller_test

import (
	"context"
	netipPkg "net/netip"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/cloudctl/cloudcontroller"
)

func netip(s string) netipPkg.Prefix { return netipPkg.MustParsePrefix(s) }

// appRun runs cloudctl with args against nothing: flag errors come first.
func appRun(args []string) error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return app.Run(ctx, cloudcontroller.NewService(), append([]string{"--health-addr", ""}, args...))
}
