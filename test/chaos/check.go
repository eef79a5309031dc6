package main

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// snapshot is what the invariants are checked against.
type snapshot struct {
	sets    []*kplanev1.ReplicaSet
	deploys []*kplanev1.Deployment
	jobs    []*kplanev1.Job
	pods    []*kplanev1.Pod // in the workload's namespace
	allPods []*kplanev1.Pod // in every namespace (pod IPs are cluster-wide)
	nodes   []*kplanev1.Node
	leases  map[string]*kplanev1.Lease // kplane-system, by name
	secrets []*kplanev1.Secret
	// services and endpoints in the workload's namespace, by name.
	services  []*kplanev1.Service
	endpoints map[string]*kplanev1.Endpoints
	// volumes of the workload (by label) and claims in its namespace.
	volumes []*kplanev1.PersistentVolume
	claims  []*kplanev1.PersistentVolumeClaim
}

func list(ctx context.Context, api kplanev1.ResourcesClient, kind, ns string) ([]*kplanev1.Object, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := api.List(cctx, &kplanev1.ListRequest{Kind: kind, Namespace: ns})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", kind, err)
	}
	return resp.GetItems(), nil
}

func takeSnapshot(ctx context.Context, api kplanev1.ResourcesClient, ns string) (*snapshot, error) {
	s := &snapshot{leases: map[string]*kplanev1.Lease{}, endpoints: map[string]*kplanev1.Endpoints{}}
	items, err := list(ctx, api, "ReplicaSet", ns)
	if err != nil {
		return nil, err
	}
	for _, o := range items {
		s.sets = append(s.sets, o.GetReplicaSet())
	}
	if items, err = list(ctx, api, "Deployment", ns); err != nil {
		return nil, err
	}
	for _, o := range items {
		s.deploys = append(s.deploys, o.GetDeployment())
	}
	if items, err = list(ctx, api, "Job", ns); err != nil {
		return nil, err
	}
	for _, o := range items {
		s.jobs = append(s.jobs, o.GetJob())
	}
	if items, err = list(ctx, api, "Pod", ns); err != nil {
		return nil, err
	}
	for _, o := range items {
		s.pods = append(s.pods, o.GetPod())
	}
	if items, err = list(ctx, api, "Pod", ""); err != nil {
		return nil, err
	}
	for _, o := range items {
		s.allPods = append(s.allPods, o.GetPod())
	}
	if items, err = list(ctx, api, "Node", ""); err != nil {
		return nil, err
	}
	for _, o := range items {
		s.nodes = append(s.nodes, o.GetNode())
	}
	if items, err = list(ctx, api, "Lease", "kplane-system"); err != nil {
		return nil, err
	}
	for _, o := range items {
		s.leases[o.Meta().GetName()] = o.GetLease()
	}
	if items, err = list(ctx, api, "Secret", ns); err != nil {
		return nil, err
	}
	for _, o := range items {
		s.secrets = append(s.secrets, o.GetSecret())
	}
	if items, err = list(ctx, api, "Service", ns); err != nil {
		return nil, err
	}
	for _, o := range items {
		s.services = append(s.services, o.GetService())
	}
	if items, err = list(ctx, api, "Endpoints", ns); err != nil {
		return nil, err
	}
	for _, o := range items {
		s.endpoints[o.Meta().GetName()] = o.GetEndpoints()
	}
	if err := takeStorage(ctx, api, ns, s); err != nil {
		return nil, err
	}
	return s, nil
}

// checkInvariants returns every violation in the snapshot: the
// ReplicaSets' pods, orphans, nodes, controller leases and the ledger.
// live tells whether a lease holder identity is a running process of the
// controller.
func checkInvariants(s *snapshot, ns string, controllers []string, live func(controller, identity string) bool, l *ledger) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	nodes := map[string]bool{}
	for _, n := range s.nodes {
		nodes[n.GetMetadata().GetName()] = true
		ready := false
		for _, c := range n.GetStatus().GetConditions() {
			if c.GetType() == "Ready" && c.GetStatus() == "True" {
				ready = true
			}
		}
		if !ready {
			add("node %s is not Ready", n.GetMetadata().GetName())
		}
	}

	owned := map[string][]*kplanev1.Pod{} // by controller uid
	sets := map[string]*kplanev1.ReplicaSet{}
	for _, rs := range s.sets {
		sets[rs.GetMetadata().GetUid()] = rs
	}
	jobs := map[string]bool{}
	for _, j := range s.jobs {
		jobs[j.GetMetadata().GetUid()] = true
	}
	for _, p := range s.pods {
		m := p.GetMetadata()
		if m.GetDeletionTimestamp() != nil {
			add("pod %s is still terminating (deleted at %s)", m.GetName(), m.GetDeletionTimestamp().AsTime().Format(time.RFC3339))
			continue
		}
		var ctrl *kplanev1.OwnerReference
		for _, r := range m.GetOwnerReferences() {
			if r.GetController() {
				ctrl = r
			}
		}
		switch {
		case ctrl == nil:
			add("orphan pod %s: no controller owner", m.GetName())
			continue
		case ctrl.GetKind() == "Job" && jobs[ctrl.GetUid()]:
			continue // checkJobs
		case sets[ctrl.GetUid()] == nil:
			add("orphan pod %s: its owner %s %s (uid %s) is gone", m.GetName(), ctrl.GetKind(), ctrl.GetName(), ctrl.GetUid())
			continue
		}
		owned[ctrl.GetUid()] = append(owned[ctrl.GetUid()], p)
		if n := p.GetSpec().GetNodeName(); n != "" && !nodes[n] {
			add("pod %s is bound to node %s, which does not exist", m.GetName(), n)
		}
	}
	for _, rs := range s.sets {
		m := rs.GetMetadata()
		if m.GetDeletionTimestamp() != nil {
			add("replicaset %s is still terminating", m.GetName())
			continue
		}
		want := rs.GetSpec().GetReplicas()
		pods := owned[m.GetUid()]
		running := 0
		var notRunning []string
		for _, p := range pods {
			if p.GetStatus().GetPhase() == "Running" {
				running++
			} else {
				notRunning = append(notRunning, fmt.Sprintf("%s (%s on %q)", p.GetMetadata().GetName(), p.GetStatus().GetPhase(), p.GetSpec().GetNodeName()))
			}
		}
		if int32(len(pods)) > want {
			add("replicaset %s has %d pods for %d replicas (duplicates)", m.GetName(), len(pods), want)
		} else if int32(running) != want {
			add("replicaset %s has %d of %d replicas Running; not running: %v", m.GetName(), running, want, notRunning)
		}
		if got := rs.GetStatus().GetReplicas(); got != want {
			add("replicaset %s status.replicas is %d, spec.replicas %d", m.GetName(), got, want)
		}
	}

	for _, c := range controllers {
		for _, name := range leaseNames(c) {
			lease := s.leases[name]
			holder := lease.GetSpec().GetHolderIdentity()
			switch {
			case lease == nil:
				add("lease kplane-system/%s does not exist", name)
			case holder == "":
				add("lease kplane-system/%s has no holder", name)
			case !live(c, holder):
				add("lease kplane-system/%s is held by %s, which is not a running %s", name, holder, c)
			}
		}
	}

	actual := map[string]state{}
	for _, rs := range s.sets {
		m := rs.GetMetadata()
		actual[ledgerKey("ReplicaSet", ns, m.GetName())] = state{exists: true, uid: m.GetUid(), replicas: rs.GetSpec().GetReplicas()}
	}
	for _, p := range s.pods {
		m := p.GetMetadata()
		actual[ledgerKey("Pod", ns, m.GetName())] = state{exists: true, uid: m.GetUid(), replicas: -1}
	}
	for _, sec := range s.secrets {
		m := sec.GetMetadata()
		actual[ledgerKey("Secret", ns, m.GetName())] = state{exists: true, uid: m.GetUid(), replicas: -1, data: string(sec.GetData()["payload"])}
	}
	out = append(out, l.Verify(actual)...)
	out = append(out, checkJobs(s.jobs, s.pods)...)
	out = append(out, checkPodIPs(s.allPods, s.nodes)...)
	out = append(out, checkEndpoints(s.services, s.endpoints, s.pods)...)
	if len(s.volumes) > 0 {
		out = append(out, checkStorage(s.volumes, s.claims)...)
	}
	sort.Strings(out)
	return out
}

// checkPodIPs: every Running pod has an IP, inside its node's podCIDR, and
// no two Running pods share one, in any namespace.
func checkPodIPs(pods []*kplanev1.Pod, nodes []*kplanev1.Node) []string {
	var out []string
	cidrs := map[string]netip.Prefix{}
	for _, n := range nodes {
		if p, err := netip.ParsePrefix(n.GetSpec().GetPodCidr()); err == nil {
			cidrs[n.GetMetadata().GetName()] = p
		}
	}
	holder := map[netip.Addr]string{}
	for _, p := range pods {
		if p.GetStatus().GetPhase() != "Running" || p.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		name := p.GetMetadata().GetNamespace() + "/" + p.GetMetadata().GetName()
		node := p.GetSpec().GetNodeName()
		ip, err := netip.ParseAddr(p.GetStatus().GetPodIp())
		if err != nil {
			out = append(out, fmt.Sprintf("running pod %s has no valid podIP (%q)", name, p.GetStatus().GetPodIp()))
			continue
		}
		if cidr, ok := cidrs[node]; !ok || !cidr.Contains(ip) {
			out = append(out, fmt.Sprintf("running pod %s has IP %s, outside its node %s's podCIDR %q", name, ip, node, cidrs[node]))
		}
		if other, dup := holder[ip]; dup {
			out = append(out, fmt.Sprintf("running pods %s and %s share IP %s", other, name, ip))
		}
		holder[ip] = name
	}
	return out
}

// checkEndpoints: every Service with a selector has Endpoints whose ready
// addresses are exactly the IPs of its selected pods that are Ready, and
// whose not-ready addresses are those of the others (pods with an IP, not
// finished, not being deleted). It recomputes this from the pods alone,
// not with endpointsctl's code.
func checkEndpoints(services []*kplanev1.Service, endpoints map[string]*kplanev1.Endpoints, pods []*kplanev1.Pod) []string {
	var out []string
	for _, svc := range services {
		sel := svc.GetSpec().GetSelector()
		if len(sel) == 0 {
			continue
		}
		name := svc.GetMetadata().GetName()
		var wantReady, wantNotReady []string
		for _, p := range pods {
			if !selects(sel, p.GetMetadata().GetLabels()) || p.GetStatus().GetPodIp() == "" ||
				p.GetMetadata().GetDeletionTimestamp() != nil ||
				p.GetStatus().GetPhase() == "Succeeded" || p.GetStatus().GetPhase() == "Failed" {
				continue
			}
			ready := false
			for _, c := range p.GetStatus().GetConditions() {
				if c.GetType() == "Ready" && c.GetStatus() == "True" {
					ready = true
				}
			}
			if ready || svc.GetSpec().GetPublishNotReadyAddresses() {
				wantReady = append(wantReady, p.GetStatus().GetPodIp())
			} else {
				wantNotReady = append(wantNotReady, p.GetStatus().GetPodIp())
			}
		}
		ep, ok := endpoints[name]
		if !ok {
			out = append(out, fmt.Sprintf("service %s has no Endpoints", name))
			continue
		}
		var gotReady, gotNotReady []string
		for _, ss := range ep.GetSubsets() {
			for _, a := range ss.GetAddresses() {
				gotReady = append(gotReady, a.GetIp())
			}
			for _, a := range ss.GetNotReadyAddresses() {
				gotNotReady = append(gotNotReady, a.GetIp())
			}
		}
		for _, l := range [][]string{wantReady, wantNotReady, gotReady, gotNotReady} {
			sort.Strings(l)
		}
		if fmt.Sprint(gotReady) != fmt.Sprint(wantReady) || fmt.Sprint(gotNotReady) != fmt.Sprint(wantNotReady) {
			out = append(out, fmt.Sprintf("service %s: Endpoints list ready %v, not ready %v; its pods say ready %v, not ready %v",
				name, gotReady, gotNotReady, wantReady, wantNotReady))
		}
	}
	return out
}

func selects(sel, labels map[string]string) bool {
	for k, v := range sel {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
