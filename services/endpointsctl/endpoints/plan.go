package endpoints

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/labels"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

const (
	// AnnotationLastChangeTriggerTime is when the newest change behind an
	// Endpoints write happened (Kubernetes' annotation). Its presence also
	// marks an Endpoints object as written by endpointsctl, so one whose
	// Service is gone may be deleted (a user's never carries it).
	AnnotationLastChangeTriggerTime = "endpoints.kubernetes.io/last-change-trigger-time"
	// LabelHeadless marks the Endpoints of a headless Service, as
	// Kubernetes labels them.
	LabelHeadless = "service.kubernetes.io/headless"
	// ClusterIPNone is a headless Service's clusterIP.
	ClusterIPNone = "None"
)

// Managed reports whether endpointsctl keeps svc's Endpoints: only a
// Service with a selector has them written for it; without one they are
// the user's.
func Managed(svc *kplanev1.Service) bool {
	return len(svc.GetSpec().GetSelector()) > 0
}

// Selects reports whether svc (with a selector) picks pod: same namespace
// and the selector's labels all present.
func Selects(svc *kplanev1.Service, pod *kplanev1.Pod) bool {
	if !Managed(svc) || svc.GetMetadata().GetNamespace() != pod.GetMetadata().GetNamespace() {
		return false
	}
	return labels.SelectorFromSet(svc.GetSpec().GetSelector()).Matches(pod.GetMetadata().GetLabels())
}

// inEndpoints reports whether pod is listed at all: it has an address, is
// not finished, and is not being deleted (unless the Service publishes
// addresses that are not ready, which keeps terminating pods too, as
// Kubernetes does).
func inEndpoints(svc *kplanev1.Service, pod *kplanev1.Pod) bool {
	switch {
	case pod.GetStatus().GetPodIp() == "":
		return false
	case apiutil.IsPodTerminal(pod):
		return false
	case pod.GetMetadata().GetDeletionTimestamp() != nil && !svc.GetSpec().GetPublishNotReadyAddresses():
		return false
	}
	return true
}

// address is one pod's entry in the Endpoints.
func address(svc *kplanev1.Service, pod *kplanev1.Pod) *kplanev1.EndpointAddress {
	m := pod.GetMetadata()
	a := &kplanev1.EndpointAddress{
		Ip:       pod.GetStatus().GetPodIp(),
		NodeName: pod.GetSpec().GetNodeName(),
		TargetRef: &kplanev1.ObjectReference{
			Kind: "Pod", Namespace: m.GetNamespace(), Name: m.GetName(), Uid: m.GetUid(),
		},
	}
	// A pod with a hostname in a subdomain named after the Service gets a
	// DNS name under it.
	if h := pod.GetSpec().GetHostname(); h != "" && pod.GetSpec().GetSubdomain() == svc.GetMetadata().GetName() {
		a.Hostname = h
	}
	return a
}

// entry is one address with the ports it serves, ready or not.
type entry struct {
	addr  *kplanev1.EndpointAddress
	ready bool
	ports []*kplanev1.EndpointPort
}

// Subsets computes the subsets of svc's Endpoints from the pods it
// selects (pods it does not select are ignored): every listed pod's
// address, ready ones in addresses and the others in notReadyAddresses
// (all in addresses when the Service publishes addresses that are not
// ready), with the ports resolved per pod from each targetPort. A pod
// lacking a named target port is left out of that port. Pods with the
// same resolved ports share a subset; the result is normalised
// (Normalize).
func Subsets(svc *kplanev1.Service, pods []*kplanev1.Pod) []*kplanev1.EndpointSubset {
	var entries []entry
	tolerate := svc.GetSpec().GetPublishNotReadyAddresses()
	for _, pod := range pods {
		if !Selects(svc, pod) || !inEndpoints(svc, pod) {
			continue
		}
		e := entry{addr: address(svc, pod), ready: tolerate || apiutil.IsPodReady(pod)}
		for _, sp := range svc.GetSpec().GetPorts() {
			protocol := cmp.Or(sp.GetProtocol(), kplanev1.ProtocolTCP)
			target := sp.GetTargetPort()
			if target == nil {
				target = kplanev1.IntOrStringFromInt32(sp.GetPort())
			}
			num, ok := apiutil.PodPort(pod, target, protocol)
			if !ok || num == 0 {
				continue
			}
			e.ports = append(e.ports, &kplanev1.EndpointPort{Name: sp.GetName(), Port: num, Protocol: protocol})
		}
		// A pod that serves none of the ports is listed only when the
		// Service has no ports at all (headless, addresses for DNS).
		if len(e.ports) == 0 && len(svc.GetSpec().GetPorts()) > 0 {
			continue
		}
		entries = append(entries, e)
	}
	return pack(entries)
}

// Normalize repacks subsets into the canonical form Subsets returns:
// each address with the union of its ports, addresses sharing a port set
// in one subset, addresses sorted by IP and pod uid, ports by name, port
// and protocol, subsets by their ports. Two lists with the same content
// normalise to equal messages.
func Normalize(subsets []*kplanev1.EndpointSubset) []*kplanev1.EndpointSubset {
	var entries []entry
	for _, s := range subsets {
		for _, a := range s.GetAddresses() {
			entries = append(entries, entry{addr: a, ready: true, ports: s.GetPorts()})
		}
		for _, a := range s.GetNotReadyAddresses() {
			entries = append(entries, entry{addr: a, ready: false, ports: s.GetPorts()})
		}
	}
	return pack(entries)
}

// SubsetsEqual reports whether a and b list the same addresses and ports,
// whatever their order.
func SubsetsEqual(a, b []*kplanev1.EndpointSubset) bool {
	na, nb := Normalize(a), Normalize(b)
	return slices.EqualFunc(na, nb, func(x, y *kplanev1.EndpointSubset) bool { return proto.Equal(x, y) })
}

func addrKey(a *kplanev1.EndpointAddress, ready bool) string {
	r := a.GetTargetRef()
	return strings.Join([]string{strconv.FormatBool(ready), a.GetIp(), a.GetHostname(), a.GetNodeName(),
		r.GetKind(), r.GetNamespace(), r.GetName(), r.GetUid()}, "\x00")
}

func portKey(p *kplanev1.EndpointPort) string {
	return p.GetName() + "\x00" + strconv.Itoa(int(p.GetPort())) + "\x00" + p.GetProtocol()
}

func comparePorts(a, b *kplanev1.EndpointPort) int {
	return cmp.Or(cmp.Compare(a.GetName(), b.GetName()), cmp.Compare(a.GetPort(), b.GetPort()), cmp.Compare(a.GetProtocol(), b.GetProtocol()))
}

// compareAddrs orders by IP, then pod uid, then everything else (only
// for addresses equal in both, which a sort seldom meets).
func compareAddrs(a, b *kplanev1.EndpointAddress) int {
	if c := cmp.Compare(a.GetIp(), b.GetIp()); c != 0 {
		return c
	}
	if c := cmp.Compare(a.GetTargetRef().GetUid(), b.GetTargetRef().GetUid()); c != 0 {
		return c
	}
	return cmp.Compare(addrKey(a, true), addrKey(b, true))
}

func pack(entries []entry) []*kplanev1.EndpointSubset {
	type merged struct {
		entry
		ports map[string]*kplanev1.EndpointPort
	}
	byAddr := map[string]*merged{}
	var order []string
	for _, e := range entries {
		k := addrKey(e.addr, e.ready)
		m, ok := byAddr[k]
		if !ok {
			m = &merged{entry: e, ports: map[string]*kplanev1.EndpointPort{}}
			byAddr[k] = m
			order = append(order, k)
		}
		for _, p := range e.ports {
			m.ports[portKey(p)] = p
		}
	}
	bySet := map[string]*kplanev1.EndpointSubset{}
	for _, k := range order {
		m := byAddr[k]
		ports := slices.SortedFunc(maps.Values(m.ports), comparePorts)
		keys := make([]string, len(ports))
		for i, p := range ports {
			keys[i] = portKey(p)
		}
		set := strings.Join(keys, "\x01")
		s, ok := bySet[set]
		if !ok {
			s = &kplanev1.EndpointSubset{}
			for _, p := range ports {
				s.Ports = append(s.Ports, proto.Clone(p).(*kplanev1.EndpointPort))
			}
			bySet[set] = s
		}
		a := proto.Clone(m.addr).(*kplanev1.EndpointAddress)
		if m.ready {
			s.Addresses = append(s.Addresses, a)
		} else {
			s.NotReadyAddresses = append(s.NotReadyAddresses, a)
		}
	}
	out := make([]*kplanev1.EndpointSubset, 0, len(bySet))
	for _, set := range slices.Sorted(maps.Keys(bySet)) {
		s := bySet[set]
		slices.SortFunc(s.Addresses, compareAddrs)
		slices.SortFunc(s.NotReadyAddresses, compareAddrs)
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Labels are the labels of svc's Endpoints: the Service's own, plus
// LabelHeadless on a headless Service's, as Kubernetes writes them.
func Labels(svc *kplanev1.Service) map[string]string {
	out := maps.Clone(svc.GetMetadata().GetLabels())
	if out == nil {
		out = map[string]string{}
	}
	delete(out, LabelHeadless)
	if svc.GetSpec().GetClusterIp() == ClusterIPNone {
		out[LabelHeadless] = ""
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Desired is the Endpoints svc should have given pods; trigger stamps
// the last-change-trigger-time annotation.
func Desired(svc *kplanev1.Service, pods []*kplanev1.Pod, trigger time.Time) *kplanev1.Endpoints {
	m := svc.GetMetadata()
	return &kplanev1.Endpoints{
		Metadata: &kplanev1.ObjectMeta{
			Namespace:   m.GetNamespace(),
			Name:        m.GetName(),
			Labels:      Labels(svc),
			Annotations: map[string]string{AnnotationLastChangeTriggerTime: trigger.UTC().Format(time.RFC3339Nano)},
		},
		Subsets: Subsets(svc, pods),
	}
}

// NeedsUpdate reports whether cur differs from want (as Desired returns
// it) in what endpointsctl owns: the subsets (compared semantically) and the labels. The trigger
// annotation alone is no change.
func NeedsUpdate(cur, want *kplanev1.Endpoints) bool {
	if !maps.Equal(cur.GetMetadata().GetLabels(), want.GetMetadata().GetLabels()) {
		return true
	}
	if _, ok := cur.GetMetadata().GetAnnotations()[AnnotationLastChangeTriggerTime]; !ok {
		return true // claim it: marks it ours for the cleanup of leftovers
	}
	// want comes from Subsets, canonical already: normalise cur only.
	got := Normalize(cur.GetSubsets())
	return !slices.EqualFunc(got, want.GetSubsets(), func(x, y *kplanev1.EndpointSubset) bool { return proto.Equal(x, y) })
}

// Apply returns a copy of cur with want's subsets, labels and trigger
// annotation; other metadata (the user's annotations, ...) stays.
func Apply(cur, want *kplanev1.Endpoints) *kplanev1.Endpoints {
	next := proto.Clone(cur).(*kplanev1.Endpoints)
	next.Subsets = want.GetSubsets()
	next.Metadata.Labels = want.GetMetadata().GetLabels()
	if next.Metadata.Annotations == nil {
		next.Metadata.Annotations = map[string]string{}
	}
	next.Metadata.Annotations[AnnotationLastChangeTriggerTime] = want.GetMetadata().GetAnnotations()[AnnotationLastChangeTriggerTime]
	return next
}

// ReadyTransitions returns, by pod uid, the Ready lastTransitionTime of
// the pods svc selects that have one: when their readiness last changed
// (for the latency histogram).
func ReadyTransitions(svc *kplanev1.Service, pods []*kplanev1.Pod) map[string]time.Time {
	out := map[string]time.Time{}
	for _, pod := range pods {
		if !Selects(svc, pod) {
			continue
		}
		c := apiutil.FindCondition(pod.GetStatus().GetConditions(), kplanev1.PodReady)
		if c.GetLastTransitionTime() == nil {
			continue
		}
		out[pod.GetMetadata().GetUid()] = c.GetLastTransitionTime().AsTime()
	}
	return out
}

// IsReady reports whether pod's Ready condition is True.
func IsReady(pod *kplanev1.Pod) bool { return apiutil.IsPodReady(pod) }
