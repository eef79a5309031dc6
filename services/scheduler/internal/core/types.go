// Package core is the scheduler's algorithm and its cache: what each node
// offers and has been given (including pods bound but not yet seen back
// through the watch), the filters that decide whether a pod fits a node,
// the scores that rank the nodes that fit, and the failure message
// kubectl users know ("0/3 nodes are available: ..."). It does no I/O, so
// every rule is tested directly and the property tests drive the very code
// the scheduler runs.
package core

import (
	"fmt"
	"sync/atomic"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/quantity"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Resource names and well-known values, as in Kubernetes.
const (
	ResourceCPU    = "cpu"
	ResourceMemory = "memory"
	ResourcePods   = "pods"
)

// Requests that scoring assumes for a container that asks for nothing, so
// that pods without requests still spread instead of piling onto the node
// that looks emptiest (Kubernetes uses the same values). Filters never use
// them: a pod without requests fits wherever a pod slot is free.
const (
	DefaultMilliCPURequest = 100
	DefaultMemoryRequest   = 200 * 1024 * 1024
)

// Resources is an amount of the resources the scheduler accounts for.
type Resources struct {
	MilliCPU int64
	Memory   int64
	Pods     int64
}

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	return Resources{MilliCPU: r.MilliCPU + o.MilliCPU, Memory: r.Memory + o.Memory, Pods: r.Pods + o.Pods}
}

// Sub returns r - o.
func (r Resources) Sub(o Resources) Resources {
	return Resources{MilliCPU: r.MilliCPU - o.MilliCPU, Memory: r.Memory - o.Memory, Pods: r.Pods - o.Pods}
}

// PodInfo is what the scheduler needs to know about a pod, parsed once.
type PodInfo struct {
	// Key is "namespace/name", UID the pod's uid (the cache's identity of
	// a pod, so a pod recreated under the same name is a different pod).
	Key string
	UID string
	// NodeName is spec.nodeName ("" while unscheduled).
	NodeName string
	// Requests is what the pod asks for: the sum of its containers'
	// requests (or the largest init container's, when that is more), and
	// one pod slot.
	Requests Resources
	// NonZero is Requests with DefaultMilliCPURequest and
	// DefaultMemoryRequest for containers that ask for nothing; used only
	// by scores.
	NonZero Resources
	// NodeSelector and Tolerations from the spec.
	NodeSelector map[string]string
	Tolerations  []*kplanev1.Toleration
	// Namespace and Labels of the pod, for (anti-)affinity and spreading.
	Namespace string
	Labels    map[string]string
	// Pod (anti-)affinity terms, parsed (affinity.go).
	RequiredAffinity, RequiredAntiAffinity   []AffinityTerm
	PreferredAffinity, PreferredAntiAffinity []AffinityTerm
	// OwnerUID is the uid of the pod's controlling owner ("" if none):
	// pods of one owner are spread across nodes.
	OwnerUID string
	// Volumes are the pod's claims as the volume binding filter sees them
	// (nil for a pod without claims); the scheduler fills it in.
	Volumes *PodVolumes
	// Pod is the object the info was made from. Never modify it: it is
	// shared with the informer cache.
	Pod *kplanev1.Pod
}

// NewPodInfo parses pod. It fails only on a request that is not a valid
// quantity, which the apiserver's validation already rules out.
func NewPodInfo(pod *kplanev1.Pod) (*PodInfo, error) {
	meta := pod.GetMetadata()
	req, nonZero, err := PodRequests(pod.GetSpec())
	info := &PodInfo{
		Key:          meta.GetNamespace() + "/" + meta.GetName(),
		UID:          meta.GetUid(),
		NodeName:     pod.GetSpec().GetNodeName(),
		Requests:     req,
		NonZero:      nonZero,
		NodeSelector: pod.GetSpec().GetNodeSelector(),
		Tolerations:  pod.GetSpec().GetTolerations(),
		Namespace:    meta.GetNamespace(),
		Labels:       meta.GetLabels(),
		Pod:          pod,
	}
	for _, ref := range meta.GetOwnerReferences() {
		if ref.GetController() {
			info.OwnerUID = ref.GetUid()
			break
		}
	}
	if err != nil {
		return info, fmt.Errorf("pod %s: %w", info.Key, err)
	}
	if a := pod.GetSpec().GetAffinity(); a != nil {
		if err := info.parseAffinity(a); err != nil {
			return info, fmt.Errorf("pod %s: %w", info.Key, err)
		}
	}
	return info, nil
}

// PodRequests returns what a pod spec asks for (see PodInfo.Requests) and
// the same with scoring defaults for containers without requests. A pod
// always takes one pod slot.
func PodRequests(spec *kplanev1.PodSpec) (req, nonZero Resources, err error) {
	for _, c := range spec.GetContainers() {
		r, nz, err := containerRequests(c)
		if err != nil {
			return Resources{}, Resources{}, err
		}
		req, nonZero = req.Add(r), nonZero.Add(nz)
	}
	// Init containers run one at a time before the others, so the pod
	// needs the largest of them or the sum of the rest, whichever is more.
	for _, c := range spec.GetInitContainers() {
		r, nz, err := containerRequests(c)
		if err != nil {
			return Resources{}, Resources{}, err
		}
		req.MilliCPU, req.Memory = max(req.MilliCPU, r.MilliCPU), max(req.Memory, r.Memory)
		nonZero.MilliCPU, nonZero.Memory = max(nonZero.MilliCPU, nz.MilliCPU), max(nonZero.Memory, nz.Memory)
	}
	req.Pods, nonZero.Pods = 1, 1
	return req, nonZero, nil
}

func containerRequests(c *kplanev1.Container) (req, nonZero Resources, err error) {
	requests := c.GetResources().GetRequests()
	if s, ok := requests[ResourceCPU]; ok {
		q, err := quantity.Parse(s)
		if err != nil {
			return req, nonZero, fmt.Errorf("container %q: cpu request: %w", c.GetName(), err)
		}
		req.MilliCPU = q.MilliValue()
	}
	if s, ok := requests[ResourceMemory]; ok {
		q, err := quantity.Parse(s)
		if err != nil {
			return req, nonZero, fmt.Errorf("container %q: memory request: %w", c.GetName(), err)
		}
		req.Memory = q.Value()
	}
	nonZero = req
	if _, ok := requests[ResourceCPU]; !ok {
		nonZero.MilliCPU = DefaultMilliCPURequest
	}
	if _, ok := requests[ResourceMemory]; !ok {
		nonZero.Memory = DefaultMemoryRequest
	}
	return req, nonZero, nil
}

// ResponsibleFor reports whether this scheduler places pod: it names the
// default scheduler (or none).
func ResponsibleFor(pod *kplanev1.Pod) bool {
	n := pod.GetSpec().GetSchedulerName()
	return n == "" || n == kplanev1.DefaultSchedulerName
}

// Terminal reports whether pod has finished: it no longer uses its node's
// resources.
func Terminal(pod *kplanev1.Pod) bool {
	return apiutil.IsPodTerminal(pod)
}

// Unassigned reports whether pod waits for a node: none yet, not being
// deleted, not finished.
func Unassigned(pod *kplanev1.Pod) bool {
	return pod.GetSpec().GetNodeName() == "" && pod.GetMetadata().GetDeletionTimestamp() == nil && !Terminal(pod)
}

// NeedsScheduling reports whether pod waits for the default scheduler.
func NeedsScheduling(pod *kplanev1.Pod) bool {
	return Unassigned(pod) && ResponsibleFor(pod)
}

// NodeState is what the filters and scores read about a node itself,
// parsed from the Node object.
type NodeState struct {
	Name string
	// Allocatable from status.allocatable (status.capacity for a resource
	// the node does not list as allocatable). A node that reports no pod
	// count can take no pod, as in Kubernetes.
	Allocatable   Resources
	Ready         bool
	Unschedulable bool
	Taints        []*kplanev1.Taint
	Labels        map[string]string
}

// NewNodeState parses node. Quantities the apiserver accepted but that do
// not parse count as zero (the node then takes nothing of that resource).
func NewNodeState(node *kplanev1.Node) NodeState {
	st := NodeState{
		Name:          node.GetMetadata().GetName(),
		Unschedulable: node.GetSpec().GetUnschedulable(),
		Taints:        node.GetSpec().GetTaints(),
		Labels:        node.GetMetadata().GetLabels(),
	}
	alloc, capacity := node.GetStatus().GetAllocatable(), node.GetStatus().GetCapacity()
	get := func(name string) (quantity.Quantity, bool) {
		s, ok := alloc[name]
		if !ok {
			s, ok = capacity[name]
		}
		if !ok {
			return quantity.Quantity{}, false
		}
		q, err := quantity.Parse(s)
		return q, err == nil
	}
	if q, ok := get(ResourceCPU); ok {
		st.Allocatable.MilliCPU = q.MilliValue()
	}
	if q, ok := get(ResourceMemory); ok {
		st.Allocatable.Memory = q.Value()
	}
	if q, ok := get(ResourcePods); ok {
		st.Allocatable.Pods = q.Value()
	}
	st.Ready = apiutil.IsNodeReady(node)
	return st
}

// equal reports whether two states schedule alike, so that a heartbeat
// (which changes only timestamps) is not a reason to retry pending pods.
func (s NodeState) equal(o NodeState) bool {
	if s.Name != o.Name || s.Allocatable != o.Allocatable || s.Ready != o.Ready ||
		s.Unschedulable != o.Unschedulable || len(s.Taints) != len(o.Taints) || len(s.Labels) != len(o.Labels) {
		return false
	}
	for i, t := range s.Taints {
		u := o.Taints[i]
		if t.GetKey() != u.GetKey() || t.GetValue() != u.GetValue() || t.GetEffect() != u.GetEffect() {
			return false
		}
	}
	for k, v := range s.Labels {
		if w, ok := o.Labels[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// NodeInfo is a node as the scheduler sees it: its state and what it has
// been assigned. State is nil-equivalent (Known false) while pods name a
// node the cache has not seen (or no longer has).
type NodeInfo struct {
	NodeState
	// Known is false for a node that pods are bound to but that does not
	// exist (yet, or any more): it is never a candidate.
	Known bool
	// Requested is the sum of the assigned pods' requests.
	Requested Resources
	// NonZeroRequested is the same with scoring defaults.
	NonZeroRequested Resources
	// owners counts the assigned pods per controlling owner uid.
	owners map[string]int
	// pods are the assigned pods by uid.
	pods map[string]*PodInfo
	// withAffinity are the assigned pods that have pod (anti-)affinity
	// terms, by uid.
	withAffinity map[string]*PodInfo
	// nominated are pods preemption made room for here, not yet bound,
	// by uid: pods of lower priority must not take that room.
	nominated map[string]*PodInfo
	// gen changes whenever the assigned pods (or one of their objects)
	// change; see Generation.
	gen uint64
	// cache is the cache that holds this node (nil for clones and nodes
	// made by NewNodeInfo); see SpreadCountsOf.
	cache *Cache
}

// nodeGenerations hands out generations: one counter for every node and
// clone, so two NodeInfos with the same generation hold the same pods.
var nodeGenerations atomic.Uint64

// Generation identifies the node's assigned pods as they are: it is
// unique to this set of pods (across every node and clone), so a
// per-node figure computed from the pods' labels, namespaces and
// deletion marks (e.g. how many match a selector) can be kept and reused
// while the generation stays. It changes when a pod is added or removed
// (a label change re-adds it) or starts being deleted, not when a pod's
// status is written.
func (n *NodeInfo) Generation() uint64 { return n.gen }

// touch gives the node a new generation after its pods changed.
func (n *NodeInfo) touch() { n.gen = nodeGenerations.Add(1) }

// NominatedPods calls fn for each pod nominated to the node (by
// preemption) and not yet bound.
func (n *NodeInfo) NominatedPods(fn func(*PodInfo)) {
	for _, p := range n.nominated {
		fn(p)
	}
}

// NumNominated returns how many pods are nominated to the node.
func (n *NodeInfo) NumNominated() int { return len(n.nominated) }

func newNodeInfo(name string) *NodeInfo {
	return &NodeInfo{NodeState: NodeState{Name: name}, owners: map[string]int{}, pods: map[string]*PodInfo{}, withAffinity: map[string]*PodInfo{}, nominated: map[string]*PodInfo{},
		gen: nodeGenerations.Add(1)}
}

// NewNodeInfo returns a node with the given state and pods assigned, for
// tests and tools that evaluate filters and scores without a cache.
func NewNodeInfo(st NodeState, pods ...*PodInfo) *NodeInfo {
	n := newNodeInfo(st.Name)
	n.NodeState, n.Known = st, true
	for _, p := range pods {
		n.addPod(p)
	}
	return n
}

// OwnerCount returns how many assigned pods have the controlling owner uid.
func (n *NodeInfo) OwnerCount(uid string) int { return n.owners[uid] }

// NumPods returns the number of assigned pods.
func (n *NodeInfo) NumPods() int { return len(n.pods) }

func (n *NodeInfo) addPod(p *PodInfo) {
	n.touch()
	n.pods[p.UID] = p
	if p.HasPodAffinity() {
		n.withAffinity[p.UID] = p
	}
	n.Requested = n.Requested.Add(p.Requests)
	n.NonZeroRequested = n.NonZeroRequested.Add(p.NonZero)
	if p.OwnerUID != "" {
		n.owners[p.OwnerUID]++
	}
}

func (n *NodeInfo) removePod(uid string) {
	p, ok := n.pods[uid]
	if !ok {
		return
	}
	n.touch()
	delete(n.pods, uid)
	delete(n.withAffinity, uid)
	n.Requested = n.Requested.Sub(p.Requests)
	n.NonZeroRequested = n.NonZeroRequested.Sub(p.NonZero)
	if p.OwnerUID != "" {
		if n.owners[p.OwnerUID]--; n.owners[p.OwnerUID] <= 0 {
			delete(n.owners, p.OwnerUID)
		}
	}
}

// Pods calls fn for each pod assigned to the node (bound or assumed), in
// no particular order, until fn returns false.
func (n *NodeInfo) Pods(fn func(*PodInfo) bool) {
	for _, p := range n.pods {
		if !fn(p) {
			return
		}
	}
}

// PodsWithAffinity calls fn for each assigned pod that has pod
// (anti-)affinity terms, until fn returns false.
func (n *NodeInfo) PodsWithAffinity(fn func(*PodInfo) bool) {
	for _, p := range n.withAffinity {
		if !fn(p) {
			return
		}
	}
}

// NumPodsWithAffinity returns how many assigned pods have pod
// (anti-)affinity terms.
func (n *NodeInfo) NumPodsWithAffinity() int { return len(n.withAffinity) }

// Clone returns a copy of the node whose assigned pods can be changed
// (AddPod, RemovePod) without touching n: for simulations such as
// preemption's. The node's state and the pods themselves are shared.
func (n *NodeInfo) Clone() *NodeInfo {
	c := &NodeInfo{NodeState: n.NodeState, Known: n.Known, Requested: n.Requested, NonZeroRequested: n.NonZeroRequested, gen: n.gen,
		owners: make(map[string]int, len(n.owners)), pods: make(map[string]*PodInfo, len(n.pods)),
		withAffinity: make(map[string]*PodInfo, len(n.withAffinity)), nominated: make(map[string]*PodInfo, len(n.nominated))}
	for k, v := range n.nominated {
		c.nominated[k] = v
	}
	for k, v := range n.owners {
		c.owners[k] = v
	}
	for k, v := range n.pods {
		c.pods[k] = v
	}
	for k, v := range n.withAffinity {
		c.withAffinity[k] = v
	}
	return c
}

// AddPod accounts p on a cloned node.
func (n *NodeInfo) AddPod(p *PodInfo) { n.addPod(p) }

// RemovePod drops the pod with uid from a cloned node.
func (n *NodeInfo) RemovePod(uid string) { n.removePod(uid) }
