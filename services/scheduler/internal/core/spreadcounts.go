package core

import (
	"slices"

	"github.com/kplane/kplane/pkg/labels"
)

// MaxCountedSelectors bounds how many (namespace, selector) pairs a
// cache's SpreadCounts follow; past it, the one used least recently is
// dropped (and counted afresh if it is asked for again).
const MaxCountedSelectors = 512

// maxDomainSets bounds how many per-domain totals (topology key and the
// keys an eligible node must carry) each selector keeps: the system
// defaults use two.
const maxDomainSets = 4

// SpreadCounts keeps, for each (namespace, selector) that PodTopologySpread
// asked about, how many of each node's pods it matches (pods in the
// namespace, not being deleted) and per-domain totals of those counts
// over the known nodes, and updates them as the cache adds, removes,
// confirms, marks or forgets pods and as nodes come, go or change their
// labels: so a scheduling cycle reads its counts instead of walking
// every node (and every pod of each node that changed).
//
// It is part of the cache's state and guarded by the cache's lock: every
// update happens in the same critical section as the change to the
// nodes, and it is read only through SpreadCountsOf during Schedule's
// decide, so what a cycle reads is exactly the nodes it decides on.
type SpreadCounts struct {
	c     *Cache
	bySel map[string]*SelectorCounts
	// byNS: the followed selectors per namespace, which a pod's change
	// is matched against.
	byNS map[string]*nsSelectors
	// clock orders uses, for dropping the least recently used.
	clock uint64
}

// nsSelectors are the followed selectors of one namespace: those that
// require a label to have one value, by that label (a pod's change is
// matched only against the selectors of its own labels' values), and the
// rest.
type nsSelectors struct {
	byLabel map[[2]string][]*SelectorCounts
	rest    []*SelectorCounts
}

// SelectorCounts are the counts of one (namespace, selector).
type SelectorCounts struct {
	x   *SpreadCounts
	key string
	ns  string
	sel labels.Selector
	// label is the key and value sel requires, when it requires one
	// (filed under it in nsSelectors.byLabel).
	label   [2]string
	byLabel bool
	// perNode: matching pods by node name, every node the cache holds
	// (known or not); absent means 0.
	perNode map[string]int64
	domains []*domainCounts
	used    uint64
}

// domainCounts are the totals over the known nodes that carry every key
// of need (the eligible nodes), by the node's value of key.
type domainCounts struct {
	key  string
	need []string
	// pods: matching pods per domain; a domain is present (possibly 0)
	// while it has an eligible node, as nodes counts them.
	pods  map[string]int64
	nodes map[string]int
	used  uint64
}

func newSpreadCounts(c *Cache) *SpreadCounts {
	return &SpreadCounts{c: c, bySel: map[string]*SelectorCounts{}, byNS: map[string]*nsSelectors{}}
}

// SpreadCountsOf returns the counts of the cache whose known nodes nodes
// are, exactly as Schedule hands them to decide, and nil for any other
// list (a Snapshot, clones, nodes made with NewNodeInfo, part of the
// list). Call it, and use what it returns, only inside decide: the
// cache's lock guards both.
func SpreadCountsOf(nodes []*NodeInfo) *SpreadCounts {
	if len(nodes) == 0 || nodes[0].cache == nil {
		return nil
	}
	c := nodes[0].cache
	if len(c.order) != len(nodes) || &c.order[0] != &nodes[0] {
		return nil
	}
	return c.counts
}

// Selector returns the counts of pods in ns that sel matches, counting
// them once if they were not followed yet; key names (ns, sel) (equal
// keys must mean equal selectors).
func (x *SpreadCounts) Selector(key, ns string, sel labels.Selector) *SelectorCounts {
	x.clock++
	if s := x.bySel[key]; s != nil {
		s.used = x.clock
		return s
	}
	if len(x.bySel) >= MaxCountedSelectors {
		x.drop()
	}
	s := &SelectorCounts{x: x, key: key, ns: ns, sel: sel, perNode: map[string]int64{}, used: x.clock}
	for name, n := range x.c.nodes {
		var cnt int64
		for _, p := range n.pods {
			if counted(p, ns, sel) {
				cnt++
			}
		}
		if cnt != 0 {
			s.perNode[name] = cnt
		}
	}
	x.bySel[key] = s
	reqs, ok := labels.Requirements(sel)
	if !ok {
		return s // Nothing: no pod ever matches
	}
	for _, r := range reqs {
		if (r.Operator == labels.Equals || r.Operator == labels.In) && len(r.Values) == 1 {
			s.label, s.byLabel = [2]string{r.Key, r.Values[0]}, true
			break
		}
	}
	in := x.byNS[ns]
	if in == nil {
		in = &nsSelectors{byLabel: map[[2]string][]*SelectorCounts{}}
		x.byNS[ns] = in
	}
	if s.byLabel {
		in.byLabel[s.label] = append(in.byLabel[s.label], s)
	} else {
		in.rest = append(in.rest, s)
	}
	return s
}

// drop forgets the selector used least recently.
func (x *SpreadCounts) drop() {
	var old *SelectorCounts
	for _, s := range x.bySel {
		if old == nil || s.used < old.used {
			old = s
		}
	}
	delete(x.bySel, old.key)
	in := x.byNS[old.ns]
	if in == nil {
		return // Nothing, never filed
	}
	is := func(s *SelectorCounts) bool { return s == old }
	if old.byLabel {
		if in.byLabel[old.label] = slices.DeleteFunc(in.byLabel[old.label], is); len(in.byLabel[old.label]) == 0 {
			delete(in.byLabel, old.label)
		}
	} else {
		in.rest = slices.DeleteFunc(in.rest, is)
	}
	if len(in.byLabel) == 0 && len(in.rest) == 0 {
		delete(x.byNS, old.ns)
	}
}

// Node returns how many of n's pods the selector matches.
func (s *SelectorCounts) Node(n *NodeInfo) int64 { return s.perNode[n.Name] }

// Domains returns the matching pods per domain (n.Labels[key]) over the
// known nodes that carry key and every key of also: every such domain is
// present, possibly with 0. The map is the cache's own, kept up to date:
// read it only, and only inside decide (the next change to the cache
// changes it); clone it to keep it.
func (s *SelectorCounts) Domains(key string, also []string) map[string]int64 {
	x := s.x
	// Looked up without building the key set: this runs for every pod
	// scheduled with a spread constraint.
	for _, d := range s.domains {
		if d.key == key && d.needsExactly(key, also) {
			d.used = x.clock
			return d.pods
		}
	}
	need := append([]string{key}, also...)
	slices.Sort(need)
	need = slices.Compact(need)
	if len(s.domains) >= maxDomainSets {
		i := 0
		for j, d := range s.domains {
			if d.used < s.domains[i].used {
				i = j
			}
		}
		s.domains = slices.Delete(s.domains, i, i+1)
	}
	d := &domainCounts{key: key, need: need, pods: map[string]int64{}, nodes: map[string]int{}, used: x.clock}
	for _, n := range x.c.order {
		if v, ok := d.domainOf(n); ok {
			d.add(v, 1, s.perNode[n.Name])
		}
	}
	s.domains = append(s.domains, d)
	return d.pods
}

// needsExactly reports whether d.need (sorted, without repeats) is the
// set of key and also.
func (d *domainCounts) needsExactly(key string, also []string) bool {
	if _, ok := slices.BinarySearch(d.need, key); !ok {
		return false
	}
	for _, k := range also {
		if _, ok := slices.BinarySearch(d.need, k); !ok {
			return false
		}
	}
	for _, k := range d.need {
		if k != key && !slices.Contains(also, k) {
			return false
		}
	}
	return true
}

// domainOf returns n's domain when n is eligible (it carries every key
// of need); n must be known.
func (d *domainCounts) domainOf(n *NodeInfo) (string, bool) {
	for _, k := range d.need {
		if _, ok := n.Labels[k]; !ok {
			return "", false
		}
	}
	return n.Labels[d.key], true
}

// add moves domain v's eligible nodes by nodes and its pods by pods.
func (d *domainCounts) add(v string, nodes int, pods int64) {
	n := d.nodes[v] + nodes
	if n <= 0 {
		delete(d.nodes, v)
		delete(d.pods, v)
		return
	}
	d.nodes[v] = n
	d.pods[v] += pods
}

// counted reports whether p counts for a selector of namespace ns, as
// PodTopologySpread counts: in ns, not being deleted, matched by sel.
func counted(p *PodInfo, ns string, sel labels.Selector) bool {
	return p.Namespace == ns && p.Pod.GetMetadata().GetDeletionTimestamp() == nil && sel.Matches(p.Labels)
}

// podAdded accounts p, now on n (known or not).
func (x *SpreadCounts) podAdded(n *NodeInfo, p *PodInfo) { x.podDelta(n, p, 1) }

// podRemoved takes p, as it was accounted, off n.
func (x *SpreadCounts) podRemoved(n *NodeInfo, p *PodInfo) { x.podDelta(n, p, -1) }

func (x *SpreadCounts) podDelta(n *NodeInfo, p *PodInfo, delta int64) {
	in := x.byNS[p.Namespace]
	if in == nil || p.Pod.GetMetadata().GetDeletionTimestamp() != nil {
		return
	}
	for k, v := range p.Labels {
		for _, s := range in.byLabel[[2]string{k, v}] {
			s.podDelta(n, p, delta)
		}
	}
	for _, s := range in.rest {
		s.podDelta(n, p, delta)
	}
}

// podDelta moves the counts by delta for p on n when the selector
// matches it.
func (s *SelectorCounts) podDelta(n *NodeInfo, p *PodInfo, delta int64) {
	if !s.sel.Matches(p.Labels) {
		return
	}
	if c := s.perNode[n.Name] + delta; c == 0 {
		delete(s.perNode, n.Name)
	} else {
		s.perNode[n.Name] = c
	}
	if !n.Known {
		return
	}
	for _, d := range s.domains {
		if v, ok := d.domainOf(n); ok {
			d.pods[v] += delta
		}
	}
}

// nodeLeft takes known node n, with its current labels, out of every
// domain total (before it is forgotten or relabelled).
func (x *SpreadCounts) nodeLeft(n *NodeInfo) { x.nodeDelta(n, -1) }

// nodeJoined puts known node n, with its current labels, into every
// domain total.
func (x *SpreadCounts) nodeJoined(n *NodeInfo) { x.nodeDelta(n, 1) }

func (x *SpreadCounts) nodeDelta(n *NodeInfo, sign int) {
	for _, s := range x.bySel {
		cnt := s.perNode[n.Name]
		for _, d := range s.domains {
			if v, ok := d.domainOf(n); ok {
				d.add(v, sign, int64(sign)*cnt)
			}
		}
	}
}
