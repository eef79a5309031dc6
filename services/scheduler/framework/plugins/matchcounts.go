package plugins

import (
	"sync"

	"github.com/kplane/kplane/pkg/labels"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// maxCountedSelectors bounds how many (namespace, selector) pairs
// matchCounts remembers; past it, it starts over.
const maxCountedSelectors = 512

// matchCounts remembers, per (namespace, selector) and node, how many of
// the node's pods match, with the node's generation: PodTopologySpread
// counts matching pods on every node for every pod it places, and
// without this each count walks every pod in the cluster, so placing N
// pods cost O(N²). With it, only the nodes whose pods changed since the
// last count (one or two per placement) are walked again.
type matchCounts struct {
	mu    sync.Mutex
	bySel map[string]map[string]nodeCount // selector key -> node name -> count
}

type nodeCount struct {
	gen uint64
	n   int64
}

func newMatchCounts() *matchCounts { return &matchCounts{bySel: map[string]map[string]nodeCount{}} }

// begin starts a counting pass: the counter holds m's lock until end,
// so a pass over every node takes it once. A nil matchCounts gives a
// counter that counts afresh every time.
func (m *matchCounts) begin() counter {
	if m != nil {
		m.mu.Lock()
	}
	return counter{m: m}
}

// counter counts matching pods during one pass of a matchCounts.
type counter struct{ m *matchCounts }

// end releases the pass's lock.
func (c counter) end() {
	if c.m != nil {
		c.m.mu.Unlock()
	}
}

// count returns how many pods on n in namespace ns, not being deleted,
// sel matches; key is selectorKey(ns, sel).
func (c counter) count(key, ns string, sel labels.Selector, n *framework.NodeInfo) int64 {
	m := c.m
	if m == nil {
		return countOn(ns, sel, n)
	}
	gen := n.Generation()
	byNode := m.bySel[key]
	if byNode == nil {
		if len(m.bySel) >= maxCountedSelectors {
			clear(m.bySel)
		}
		byNode = map[string]nodeCount{}
		m.bySel[key] = byNode
	}
	if nc, ok := byNode[n.Name]; ok && nc.gen == gen {
		return nc.n
	}
	cnt := countOn(ns, sel, n)
	byNode[n.Name] = nodeCount{gen: gen, n: cnt}
	return cnt
}

// selectorKey names a namespace and selector; Everything and Nothing
// both print as "", so the kind is part of the key.
func selectorKey(ns string, sel labels.Selector) string {
	switch s := sel.String(); {
	case sel.Empty():
		return ns + "\x00*"
	case s == "":
		return ns + "\x00!"
	default:
		return ns + "\x00=" + s
	}
}

func countOn(ns string, sel labels.Selector, n *framework.NodeInfo) int64 {
	var cnt int64
	n.Pods(func(e *framework.PodInfo) bool {
		if e.Namespace == ns && e.Pod.GetMetadata().GetDeletionTimestamp() == nil && sel.Matches(e.Labels) {
			cnt++
		}
		return true
	})
	return cnt
}
