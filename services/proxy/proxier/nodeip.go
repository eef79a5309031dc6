package proxier

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/hashicorp/go-hclog"
)

// watchNodeIP returns an error once nodeIP, having been an address of
// this network namespace, is no longer one; it returns nil when ctx ends.
//
// Why: in compose the proxy shares the network namespace of its node's
// container (network_mode: service:nodeagent-N), because the node's pods
// must reach the cluster IPs it listens on. When that container restarts
// it gets a new namespace and the proxy is left in the old one, which
// keeps only its loopback: the proxy still looks healthy but no pod
// reaches it. Exiting lets the restart policy start it again, joined to
// the new namespace. An address that was never there (a proxy that does
// not share a node's namespace) never triggers an exit.
func watchNodeIP(ctx context.Context, log hclog.Logger, nodeIP netip.Addr, every time.Duration, addrs func() ([]net.Addr, error)) error {
	t := time.NewTicker(every)
	defer t.Stop()
	seen := false
	for {
		present, err := hasAddr(nodeIP, addrs)
		switch {
		case err != nil:
			log.Warn("could not list this network namespace's addresses", "error", err)
		case present && !seen:
			seen = true
			log.Info("node IP is an address of this network namespace; the proxy exits if it goes", "node_ip", nodeIP)
		case !present && seen:
			return fmt.Errorf("node IP %s is no longer an address of this network namespace (the node's container restarted?): exiting so that a restart joins the new one", nodeIP)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func hasAddr(ip netip.Addr, addrs func() ([]net.Addr, error)) (bool, error) {
	list, err := addrs()
	if err != nil {
		return false, fmt.Errorf("list addresses: %w", err)
	}
	for _, a := range list {
		var got net.IP
		switch v := a.(type) {
		case *net.IPNet:
			got = v.IP
		case *net.IPAddr:
			got = v.IP
		}
		if p, ok := netip.AddrFromSlice(got); ok && p.Unmap() == ip {
			return true, nil
		}
	}
	return false, nil
}
