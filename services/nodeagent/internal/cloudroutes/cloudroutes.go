// Package cloudroutes programs the simulated cloud's routes into this
// host's routing table, as a cloud's network would carry them: every
// cloudsim route (a node's pod CIDR, written by cloudctl's route loop)
// whose target is another instance becomes
//
//	ip route replace <pod CIDR> via <that instance's InternalIP>
//
// marked with the protocol number RouteProtocol, so that the routes this
// package owns are told apart from every other; a marked route the cloud
// no longer lists is deleted. The node's own range is left alone (its pods
// are local). It needs CAP_NET_ADMIN; the node agent runs it with
// --cloud-routes-from.
package cloudroutes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/vishvananda/netlink"

	cloudsimv1 "github.com/kplane/kplane/proto/kplane/cloudsim/v1"
)

// RouteProtocol marks the routes this package writes (rtm_protocol; the
// kernel's own use numbers below 20, routing daemons a few above).
const RouteProtocol = netlink.RouteProtocol(0x6b) // 'k'

// Desired computes the routes this host needs: destination -> gateway,
// for every route whose target is a live instance other than self (by
// instance name, the node's name) with an InternalIP.
func Desired(routes []*cloudsimv1.Route, instances []*cloudsimv1.Instance, self string) map[netip.Prefix]netip.Addr {
	gw := map[string]netip.Addr{}
	for _, in := range instances {
		if in.State == cloudsimv1.InstanceState_INSTANCE_STATE_TERMINATED || in.Name == self {
			continue
		}
		for _, a := range in.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == "InternalIP" {
				gw[in.Id] = ip
				break
			}
		}
	}
	out := map[netip.Prefix]netip.Addr{}
	for _, r := range routes {
		p, err := netip.ParsePrefix(r.DestinationCidr)
		ip, ok := gw[r.TargetInstanceId]
		if err != nil || !ok {
			continue
		}
		out[p.Masked()] = ip
	}
	return out
}

// Syncer keeps the host's marked routes equal to Desired.
type Syncer struct {
	Cloud    cloudsimv1.CloudClient
	Self     string
	Interval time.Duration
	Log      hclog.Logger
}

// Run syncs every Interval until ctx ends; failures are logged and tried
// again at the next tick.
func (s *Syncer) Run(ctx context.Context) {
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		if err := s.SyncOnce(ctx); err != nil && ctx.Err() == nil {
			s.Log.Warn("cloud routes not synced; retrying", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// SyncOnce reads the cloud's routes and instances and makes the host's
// marked routes match them.
func (s *Syncer) SyncOnce(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	routes, err := s.Cloud.ListRoutes(cctx, &cloudsimv1.ListRoutesRequest{})
	if err != nil {
		return fmt.Errorf("cloud: list routes: %w", err)
	}
	instances, err := s.Cloud.ListInstances(cctx, &cloudsimv1.ListInstancesRequest{})
	if err != nil {
		return fmt.Errorf("cloud: list instances: %w", err)
	}
	return Apply(Desired(routes.Routes, instances.Instances, s.Self), s.Log)
}

// Apply replaces the host's marked routes with want.
func Apply(want map[netip.Prefix]netip.Addr, log hclog.Logger) error {
	have, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	var errs []error
	for _, r := range have {
		if r.Dst == nil {
			continue
		}
		dst, ok := netip.AddrFromSlice(r.Dst.IP)
		ones, _ := r.Dst.Mask.Size()
		gw, _ := netip.AddrFromSlice(r.Gw)
		p := netip.PrefixFrom(dst.Unmap(), ones)
		if w, keep := want[p]; ok && keep && w == gw.Unmap() {
			delete(want, p) // already right
			continue
		}
		if err := netlink.RouteDel(&r); err != nil {
			errs = append(errs, fmt.Errorf("delete route %s: %w", p, err))
			continue
		}
		log.Info("cloud route removed", "destination", p.String(), "via", gw.Unmap().String())
	}
	for p, gw := range want {
		r := &netlink.Route{
			Dst:      &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)},
			Gw:       gw.AsSlice(),
			Protocol: RouteProtocol,
		}
		if err := netlink.RouteReplace(r); err != nil {
			errs = append(errs, fmt.Errorf("route %s via %s: %w", p, gw, err))
			continue
		}
		log.Info("cloud route programmed", "destination", p.String(), "via", gw.String())
	}
	return errors.Join(errs...)
}
