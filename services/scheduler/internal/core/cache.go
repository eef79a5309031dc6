package core

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// DefaultAssumeTTL is how long an assumed pod whose binding was written
// waits for the watch to show it before the cache drops it: long enough
// for any healthy watch, short enough that a binding lost on the way does
// not hold its resources for long.
const DefaultAssumeTTL = 30 * time.Second

// ErrAlreadyAssigned is returned by Assume for a pod the cache already
// accounts for.
var ErrAlreadyAssigned = errors.New("pod is already assigned in the scheduler cache")

// podState is one pod the cache accounts for.
type podState struct {
	info *PodInfo
	node string
	// assumed: placed by this scheduler and not yet seen bound through
	// the watch. Once the binding is written (bindingDone), deadline says
	// when to give up waiting for the watch.
	assumed     bool
	bindingDone bool
	deadline    time.Time
}

// Cache is the scheduler's view of the cluster: every node and every pod
// assigned to one, bound (seen through the watch) or assumed (placed by
// this scheduler, binding in flight or not yet seen back), so that the
// next decision already counts what the previous ones gave away. It is
// safe for concurrent use.
type Cache struct {
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	rnd   *rand.Rand
	nodes map[string]*NodeInfo
	// order lists the known nodes in the order they appeared, so that a
	// seeded cache decides reproducibly.
	order []*NodeInfo
	pods  map[string]*podState // by uid
	// nominations: node preemption nominated, by pod uid.
	nominations map[string]string
	// scratch space reused by Schedule (it runs under mu).
	feasible []*NodeInfo
	// counts follow the pods PodTopologySpread counts (see
	// SpreadCountsOf); every change to nodes and pods updates them.
	counts *SpreadCounts
}

// NewCache returns an empty cache whose assumed pods expire ttl after
// their binding was written (DefaultAssumeTTL when ttl <= 0). now is the
// clock (time.Now when nil); seed seeds the tie-breaking.
func NewCache(ttl time.Duration, now func() time.Time, seed uint64) *Cache {
	if ttl <= 0 {
		ttl = DefaultAssumeTTL
	}
	if now == nil {
		now = time.Now
	}
	c := &Cache{
		ttl: ttl, now: now,
		rnd:         rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		nodes:       map[string]*NodeInfo{},
		pods:        map[string]*podState{},
		nominations: map[string]string{},
	}
	c.counts = newSpreadCounts(c)
	return c
}

// newNodeLocked adds a node the cache holds by name (not known yet).
func (c *Cache) newNodeLocked(name string) *NodeInfo {
	n := newNodeInfo(name)
	n.cache = c
	c.nodes[name] = n
	return n
}

// SetNode adds or updates a node. It reports whether anything that
// scheduling reads changed (a heartbeat that only moves timestamps does
// not), i.e. whether pods that did not fit may fit now.
func (c *Cache) SetNode(node *kplanev1.Node) bool {
	st := NewNodeState(node)
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[st.Name]
	if n == nil {
		n = c.newNodeLocked(st.Name)
	}
	changed := !n.Known || !n.NodeState.equal(st)
	// The spread counts' domains follow the known nodes' labels.
	relabelled := !n.Known || !labelsEqual(n.Labels, st.Labels)
	if relabelled && n.Known {
		c.counts.nodeLeft(n)
	}
	if !n.Known {
		c.order = append(c.order, n)
	}
	n.NodeState, n.Known = st, true
	if relabelled {
		c.counts.nodeJoined(n)
	}
	return changed
}

// RemoveNode forgets a node. Pods still bound to it stay accounted (under
// an unknown node that is never a candidate) until they are deleted, so a
// node that comes back under the same name is not over-committed.
func (c *Cache) RemoveNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[name]
	if n == nil || !n.Known {
		return
	}
	c.counts.nodeLeft(n)
	n.Known = false
	c.order = slices.DeleteFunc(c.order, func(o *NodeInfo) bool { return o == n })
	if len(n.pods) == 0 {
		delete(c.nodes, name)
	}
}

// SyncPod applies the state of a pod seen through the watch. An assigned,
// unfinished pod is accounted on its node (confirming it when it was
// assumed); a finished one is dropped. An unassigned pod changes nothing:
// if it is assumed, the watch has simply not caught up with the binding.
// It reports whether resources were freed.
func (c *Cache) SyncPod(pod *kplanev1.Pod) (freed bool) {
	uid := pod.GetMetadata().GetUid()
	node := pod.GetSpec().GetNodeName()
	if node == "" {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.pods[uid]
	if Terminal(pod) {
		if st != nil {
			c.removeLocked(uid)
			return true
		}
		return false
	}
	if st != nil && !st.assumed && st.node == node && labelsEqual(st.info.Labels, pod.GetMetadata().GetLabels()) {
		// Already counted; requests, owners and affinity of a bound pod
		// do not change (its labels may, which other pods' affinity and
		// spreading read: then it is counted afresh below).
		// The PodInfo is shared with snapshots: replace, never modify it.
		marked := (st.info.Pod.GetMetadata().GetDeletionTimestamp() == nil) != (pod.GetMetadata().GetDeletionTimestamp() == nil)
		old := st.info
		info := *st.info
		info.Pod = pod
		st.info = &info
		if n := c.nodes[node]; n != nil {
			if marked {
				// Counts of a node's pods skip pods being deleted; a
				// status write changes nothing they read.
				n.touch()
				c.counts.podRemoved(n, old)
				c.counts.podAdded(n, &info)
			}
			n.pods[uid] = &info
			if _, ok := n.withAffinity[uid]; ok {
				n.withAffinity[uid] = &info
			}
		}
		return false
	}
	// Invalid quantities were rejected by the apiserver; if one slipped
	// through the pod counts with what did parse.
	info, _ := NewPodInfo(pod)
	if st != nil {
		c.removeLocked(uid)
	}
	c.addLocked(info, node, false)
	return false
}

// RemovePod forgets a deleted pod, bound or assumed. It reports whether
// resources were freed.
func (c *Cache) RemovePod(pod *kplanev1.Pod) (freed bool) {
	uid := pod.GetMetadata().GetUid()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unnominateLocked(uid)
	if _, ok := c.pods[uid]; !ok {
		return false
	}
	c.removeLocked(uid)
	return true
}

// Assume accounts pod on node before its binding is written, so the next
// decisions see the resources as taken.
func (c *Cache) Assume(pod *PodInfo, node string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.assumeLocked(pod, node)
}

func (c *Cache) assumeLocked(pod *PodInfo, node string) error {
	if _, ok := c.pods[pod.UID]; ok {
		return fmt.Errorf("assume %s on %s: %w", pod.Key, node, ErrAlreadyAssigned)
	}
	c.addLocked(pod, node, true)
	return nil
}

// FinishBinding starts the expiry clock of an assumed pod whose binding
// was written: if the watch does not show it bound within the TTL, the
// cache drops it.
func (c *Cache) FinishBinding(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.pods[uid]; st != nil && st.assumed {
		st.bindingDone = true
		st.deadline = c.now().Add(c.ttl)
	}
}

// Forget drops an assumed pod whose binding failed. It reports whether it
// did (false when the pod was not assumed, e.g. already confirmed).
func (c *Cache) Forget(uid string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.pods[uid]; st != nil && st.assumed {
		c.removeLocked(uid)
		return true
	}
	return false
}

// IsAssumed reports whether the pod is assumed (placed, not yet confirmed).
func (c *Cache) IsAssumed(uid string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.pods[uid]
	return st != nil && st.assumed
}

// Expire drops the assumed pods whose binding was written more than the
// TTL ago without the watch confirming it, and returns them.
func (c *Cache) Expire() []*PodInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	var out []*PodInfo
	for uid, st := range c.pods {
		if st.assumed && st.bindingDone && now.After(st.deadline) {
			out = append(out, st.info)
			c.removeLocked(uid)
		}
	}
	return out
}

// Counts returns the number of known nodes, and of bound and assumed pods.
func (c *Cache) Counts() (nodes, bound, assumed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.pods {
		if st.assumed {
			assumed++
		} else {
			bound++
		}
	}
	return len(c.order), bound, assumed
}

// NodeSummary is a read-only view of one node's accounting.
type NodeSummary struct {
	Known       bool
	Allocatable Resources
	Requested   Resources
	Pods        int
}

// Summary returns every node's accounting, by name.
func (c *Cache) Summary() map[string]NodeSummary {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]NodeSummary, len(c.nodes))
	for name, n := range c.nodes {
		out[name] = NodeSummary{Known: n.Known, Allocatable: n.Allocatable, Requested: n.Requested, Pods: len(n.pods)}
	}
	return out
}

// Schedule picks a node for pod and assumes it there, in one step under
// the cache's lock, so no two decisions can give away the same room.
// decide gets the known nodes (in the order they appeared) and returns
// the chosen one, or an error (a *FitError when none fits). The nodes
// must not be kept after decide returns.
func (c *Cache) Schedule(pod *PodInfo, decide func(nodes []*NodeInfo) (*NodeInfo, error)) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	best, err := decide(c.order)
	if err != nil {
		return "", err
	}
	if err := c.assumeLocked(pod, best.Name); err != nil {
		return "", err
	}
	return best.Name, nil
}

// ScheduleDefault is Schedule with the built-in filters and scores
// (RunFilters, Prioritize), for the property tests of the rules.
func (c *Cache) ScheduleDefault(pod *PodInfo) (string, error) {
	return c.Schedule(pod, func(nodes []*NodeInfo) (*NodeInfo, error) {
		c.feasible = c.feasible[:0]
		var fit *FitError
		for _, n := range nodes {
			reasons := RunFilters(pod, n)
			if len(reasons) == 0 {
				c.feasible = append(c.feasible, n)
				continue
			}
			if fit == nil {
				fit = &FitError{Reasons: map[string]int{}}
			}
			for _, r := range reasons {
				fit.Reasons[r]++
			}
		}
		if len(c.feasible) == 0 {
			if fit == nil {
				fit = &FitError{Reasons: map[string]int{}}
			}
			fit.NumNodes = len(nodes)
			return nil, fit
		}
		best := c.feasible[0]
		if len(c.feasible) > 1 {
			best = c.feasible[SelectHost(Prioritize(pod, c.feasible), c.rnd)]
		}
		return best, nil
	})
}

func (c *Cache) addLocked(pod *PodInfo, node string, assumed bool) {
	c.unnominateLocked(pod.UID)
	n := c.nodes[node]
	if n == nil {
		n = c.newNodeLocked(node) // bound to a node not seen (yet): not a candidate
	}
	n.addPod(pod)
	c.counts.podAdded(n, pod)
	c.pods[pod.UID] = &podState{info: pod, node: node, assumed: assumed}
}

func (c *Cache) removeLocked(uid string) {
	st := c.pods[uid]
	delete(c.pods, uid)
	if n := c.nodes[st.node]; n != nil {
		c.counts.podRemoved(n, st.info)
		n.removePod(uid)
		if !n.Known && len(n.pods) == 0 {
			delete(c.nodes, st.node)
		}
	}
}

func labelsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Snapshot returns a copy of every known node (in the order Schedule sees
// them) that the caller may read and change without the cache's lock:
// what PostFilter plugins simulate on.
func (c *Cache) Snapshot() []*NodeInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*NodeInfo, len(c.order))
	for i, n := range c.order {
		out[i] = n.Clone()
	}
	return out
}

// Nominate records that preemption made room for pod on node: until the
// pod is bound or gone (or nominated elsewhere), pods of no higher
// priority are decided as if it were there.
func (c *Cache) Nominate(pod *PodInfo, node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unnominateLocked(pod.UID)
	n := c.nodes[node]
	if n == nil || !n.Known {
		return
	}
	n.nominated[pod.UID] = pod
	c.nominations[pod.UID] = node
}

// NominatedNode returns the node pod uid is nominated to ("" for none).
func (c *Cache) NominatedNode(uid string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nominations[uid]
}

// UnnominateBelow forgets the nominations to node of pods whose priority
// is below prio (other than uid) and returns those pods: a more important
// preemptor took the room made for them.
func (c *Cache) UnnominateBelow(node, uid string, prio int32) []*PodInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[node]
	if n == nil {
		return nil
	}
	var out []*PodInfo
	for id, p := range n.nominated {
		if id != uid && p.Pod.GetSpec().GetPriority() < prio {
			out = append(out, p)
		}
	}
	for _, p := range out {
		c.unnominateLocked(p.UID)
	}
	return out
}

// Unnominate forgets pod uid's nomination.
func (c *Cache) Unnominate(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unnominateLocked(uid)
}

func (c *Cache) unnominateLocked(uid string) {
	node, ok := c.nominations[uid]
	if !ok {
		return
	}
	delete(c.nominations, uid)
	if n := c.nodes[node]; n != nil {
		delete(n.nominated, uid)
	}
}
