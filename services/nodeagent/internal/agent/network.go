package agent

import (
	"fmt"
	"net/netip"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/nodeagent/internal/ipam"
	"github.com/kplane/kplane/services/nodeagent/internal/podnet"
)

// nodeRange is one node's pod network: the addresses of its podCIDR held
// by its pods, and where they are programmed.
type nodeRange struct {
	cidr netip.Prefix
	ips  *ipam.Allocator
	net  *podnet.Programmer
}

// rangeOf returns node's range, nil until its pod CIDR is known.
func (a *Agent) rangeOf(node string) *nodeRange {
	a.netMu.Lock()
	defer a.netMu.Unlock()
	return a.ranges[node]
}

// nodeSeen opens a node's range once the Node carries its spec.podCIDR
// (ipamctl sets it once, shortly after registration). Pods waiting for it
// are queued. With --pod-cidr the override is opened instead (openOverride).
func (a *Agent) nodeSeen(n *kplanev1.Node) {
	name, cidr := n.GetMetadata().GetName(), n.GetSpec().GetPodCidr()
	if !a.nodes[name] || cidr == "" {
		return
	}
	if !a.pods.HasSynced() {
		// Run opens the range once the Pod cache has synced, so that the
		// pods' reported IPs are reserved before any new one is handed out.
		return
	}
	a.rangeMu.Lock()
	defer a.rangeMu.Unlock()
	cur := a.rangeOf(name)
	if a.cfg.PodCIDR != "" {
		if cidr != a.cfg.PodCIDR && !a.overrideWarned.Swap(true) {
			a.log.Warn("--pod-cidr overrides the Node's spec.podCIDR", "node", name, "pod_cidr", a.cfg.PodCIDR, "node_pod_cidr", cidr)
		}
		return
	}
	if cur != nil && cur.cidr.String() == cidr {
		return
	}
	if cur != nil {
		// The Node was deleted and registered again with another range:
		// the old one may belong to another node by now.
		a.log.Warn("node's pod CIDR changed; addresses of the old range are dropped", "node", name, "from", cur.cidr, "to", cidr)
		if _, err := cur.net.Sweep(cur.cidr, func(netip.Addr) bool { return false }); err != nil {
			a.log.Warn("could not remove the old range's pod addresses", "node", name, "error", err)
		}
	}
	if err := a.openRange(name, cidr); err != nil {
		a.log.Error("cannot use the node's pod CIDR", "node", name, "pod_cidr", cidr, "error", err)
	}
}

// openOverride opens the --pod-cidr range. Like a Node's range it opens
// only once the Pod cache has synced, so the IPs pods report are reserved
// before a new pod is given one.
func (a *Agent) openOverride() {
	a.rangeMu.Lock()
	defer a.rangeMu.Unlock()
	if err := a.openRange(a.cfg.NodeName, a.cfg.PodCIDR); err != nil {
		a.log.Error("cannot use --pod-cidr", "node", a.cfg.NodeName, "pod_cidr", a.cfg.PodCIDR, "error", err)
	}
}

// openRange starts allocating node's pod IPs from cidr. Addresses pods
// already hold (pod.json of the exec runtime, or the podIP reported in
// their status) are reserved first, so pods keep their IPs across an agent
// restart; programmed addresses no pod holds are removed.
func (a *Agent) openRange(node, cidr string) error {
	ips, err := ipam.New(cidr)
	if err != nil {
		return err
	}
	mode := a.cfg.PodAddressIface
	if a.exec == nil {
		mode = podnet.ModeNone // fake pods have no processes to reach
	}
	nodeIP, _ := netip.ParseAddr(a.cfg.NodeIP) // validated
	prog, err := podnet.New(mode, nodeIP, ips.Prefix())
	if err != nil {
		return err
	}
	r := &nodeRange{cidr: ips.Prefix(), ips: ips, net: prog}
	if a.exec != nil {
		for uid, ip := range a.exec.PodIPs() {
			addr, err := netip.ParseAddr(ip)
			if err == nil {
				err = ips.Reserve(uid, addr)
			}
			if err != nil {
				a.log.Warn("pod IP from a previous run is not in the node's range; a new one is allocated", "uid", uid, "pod_ip", ip, "error", err)
			}
		}
	}
	a.reserveReported(node, r)
	removed, err := prog.Sweep(r.cidr, func(ip netip.Addr) bool { _, held := ips.Holder(ip); return held })
	if err != nil {
		return err
	}
	a.netMu.Lock()
	a.ranges[node] = r
	a.netMu.Unlock()
	a.log.Info("node pod CIDR in use", "node", node, "pod_cidr", r.cidr, "interface", prog.Interface(),
		"kept_pod_ips", ips.InUse(), "stale_addresses_removed", len(removed))
	select {
	case a.netReady <- struct{}{}: // report Ready without waiting for the next heartbeat
	default:
	}
	objs, _ := a.pods.Store().ByIndex(informer.PodNodeNameIndex, node)
	for _, o := range objs {
		a.c.Enqueue(o.Key())
	}
	return nil
}

// reserveReported reserves the podIP each cached pod of node reports, when
// it is in the range and free: after a restart of the fake runtime (which
// keeps nothing on disk) pods keep their addresses. The pod is tracked so
// that its address is released even if it is deleted before its first sync.
func (a *Agent) reserveReported(node string, r *nodeRange) {
	objs, _ := a.pods.Store().ByIndex(informer.PodNodeNameIndex, node)
	for _, o := range objs {
		p := o.GetPod()
		if apiutil.IsPodTerminal(p) {
			continue // finished: its address was given back (syncPod)
		}
		uid := p.GetMetadata().GetUid()
		ip, err := netip.ParseAddr(p.GetStatus().GetPodIp())
		if err != nil || !r.cidr.Contains(ip) {
			continue
		}
		if _, ok := r.ips.Lookup(uid); ok {
			continue
		}
		if _, held := r.ips.Holder(ip); held {
			continue
		}
		if r.ips.Reserve(uid, ip) == nil {
			a.track(o.Key(), uid)
		}
	}
}

// podIP returns the pod's address, allocating one on first use, and makes
// sure it is programmed.
func (a *Agent) podIP(pod *kplanev1.Pod) (netip.Addr, error) {
	node, uid := pod.GetSpec().GetNodeName(), pod.GetMetadata().GetUid()
	r := a.rangeOf(node)
	if r == nil {
		return netip.Addr{}, errNoPodCIDR
	}
	ip, err := r.ips.Allocate(uid)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("allocate pod IP from %s: %w", r.cidr, err)
	}
	if err := r.net.Add(ip); err != nil {
		return netip.Addr{}, err
	}
	return ip, nil
}

// releaseIP frees the address held by uid, wherever it is, and takes it
// off the interface.
func (a *Agent) releaseIP(uid string) {
	a.netMu.Lock()
	ranges := make([]*nodeRange, 0, len(a.ranges))
	for _, r := range a.ranges {
		ranges = append(ranges, r)
	}
	a.netMu.Unlock()
	for _, r := range ranges {
		ip, ok := r.ips.Lookup(uid)
		if !ok {
			continue
		}
		if err := r.net.Remove(ip); err != nil {
			a.log.Warn("could not remove a pod address", "uid", uid, "pod_ip", ip, "error", err)
		}
		r.ips.Release(uid)
	}
}

// networkNotReady is why node cannot run pods yet ("" when it can).
func (a *Agent) networkNotReady(node string) string {
	if a.rangeOf(node) != nil {
		return ""
	}
	return "network not ready: waiting for the Node's spec.podCIDR (assigned by ipamctl)"
}
