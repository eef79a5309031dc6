package proxier

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// PortPlan is what this node does for one port of a Service: accept on
// Listen, forward to Endpoints. Plans are pure data, computed from the
// Service and its Endpoints by Plan, so that the decisions are tested
// without sockets.
type PortPlan struct {
	// Protocol is kplanev1.ProtocolTCP or kplanev1.ProtocolUDP.
	Protocol string
	// Name is the service port's name as Kubernetes writes it,
	// "namespace/name:port" ("namespace/name" for an unnamed port); it
	// labels the metrics.
	Name string
	// Listen are the addresses to accept on: clusterIP:port for every
	// cluster IP, and nodeIP:nodePort (":nodePort" for every address of
	// the node) for a NodePort service.
	Listen []string
	// Endpoints are the ready backends, "ip:port", sorted, without
	// duplicates.
	Endpoints []string
	// AffinityTimeout is how long a client IP sticks to its endpoint; 0
	// means no affinity (round robin per connection).
	AffinityTimeout time.Duration
}

// Plan returns the ports this node proxies for svc given its Endpoints
// (ep may be nil: no endpoints yet), accepting nodePorts on nodeIP (the
// zero Addr: every address). ignored names the ports left out and why
// (SCTP is not proxied). A Service without a cluster IP (headless,
// ExternalName, not allocated yet) has no plans.
func Plan(svc *kplanev1.Service, ep *kplanev1.Endpoints, nodeIP netip.Addr) (plans []PortPlan, ignored []string) {
	spec := svc.GetSpec()
	if spec == nil || spec.GetType() == kplanev1.ServiceTypeExternalName {
		return nil, nil
	}
	ips := clusterIPs(spec)
	if len(ips) == 0 {
		return nil, nil
	}
	var affinity time.Duration
	if spec.GetSessionAffinity() == kplanev1.ServiceAffinityClientIP {
		affinity = kplanev1.DefaultClientIPServiceAffinitySeconds * time.Second
	}
	nodePorts := spec.GetType() == kplanev1.ServiceTypeNodePort || spec.GetType() == kplanev1.ServiceTypeLoadBalancer
	base := svc.GetMetadata().GetNamespace() + "/" + svc.GetMetadata().GetName()
	for _, sp := range spec.GetPorts() {
		name := base
		if sp.GetName() != "" {
			name += ":" + sp.GetName()
		}
		proto := protocolOf(sp.GetProtocol())
		if proto != kplanev1.ProtocolTCP && proto != kplanev1.ProtocolUDP {
			ignored = append(ignored, fmt.Sprintf("%s (%s): only TCP and UDP are proxied", name, proto))
			continue
		}
		if sp.GetPort() <= 0 || sp.GetPort() > 65535 {
			ignored = append(ignored, fmt.Sprintf("%s: port %d out of range", name, sp.GetPort()))
			continue
		}
		p := PortPlan{Protocol: proto, Name: name, AffinityTimeout: affinity, Endpoints: endpointsFor(ep, sp.GetName(), proto)}
		for _, ip := range ips {
			p.Listen = append(p.Listen, netip.AddrPortFrom(ip, uint16(sp.GetPort())).String())
		}
		if np := sp.GetNodePort(); nodePorts && np > 0 && np <= 65535 {
			host := ""
			if nodeIP.IsValid() {
				host = nodeIP.String()
			}
			p.Listen = append(p.Listen, net.JoinHostPort(host, strconv.Itoa(int(np))))
		}
		plans = append(plans, p)
	}
	return plans, ignored
}

// clusterIPs are the service's cluster IPs (clusterIPs, else clusterIP),
// without "None", empty or unparsable entries, in order, once each.
func clusterIPs(spec *kplanev1.ServiceSpec) []netip.Addr {
	raw := spec.GetClusterIps()
	if len(raw) == 0 && spec.GetClusterIp() != "" {
		raw = []string{spec.GetClusterIp()}
	}
	var out []netip.Addr
	for _, s := range raw {
		if s == "" || s == kplanev1.ClusterIPNone {
			continue
		}
		ip, err := netip.ParseAddr(s)
		if err != nil || slices.Contains(out, ip.Unmap()) {
			continue
		}
		out = append(out, ip.Unmap())
	}
	return out
}

// protocolOf defaults an empty protocol to TCP, as the apiserver does.
func protocolOf(p string) string {
	if p == "" {
		return kplanev1.ProtocolTCP
	}
	return p
}

// endpointsFor lists the ready addresses of ep that serve the service
// port named portName: in every subset, the port of the same name and
// protocol (the unnamed one for an unnamed service port). Not-ready
// addresses are never used: endpointsctl already counts them as ready
// when the Service publishes not-ready addresses.
func endpointsFor(ep *kplanev1.Endpoints, portName, proto string) []string {
	var out []string
	for _, ss := range ep.GetSubsets() {
		port := int32(0)
		for _, p := range ss.GetPorts() {
			if p.GetName() == portName && protocolOf(p.GetProtocol()) == proto {
				port = p.GetPort()
				break
			}
		}
		if port <= 0 || port > 65535 {
			continue
		}
		for _, a := range ss.GetAddresses() {
			ip, err := netip.ParseAddr(a.GetIp())
			if err != nil {
				continue
			}
			out = append(out, netip.AddrPortFrom(ip.Unmap(), uint16(port)).String())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
