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

// count returns how many pods on n in namespace ns, not being deleted,
// sel matches; key is selectorKey(ns, sel). A nil matchCounts counts
// afresh every time.
func (m *matchCounts) count(key, ns string, sel labels.Selector, n *framework.NodeInfo) int64 {
	if m == nil {
		return countOn(ns, sel, n)
	}
	gen := n.Generation()
	m.mu.Lock()
	byNode := m.bySel[key]
	if byNode == nil {
		if len(m.bySel) >= maxCountedSelectors {
			clear(m.bySel)
		}
		byNode = map[string]nodeCount{}
		m.bySel[key] = byNode
	}
	if c, ok := byNode[n.Name]; ok && c.gen == gen {
		m.mu.Unlock()
		return c.n
	}
	m.mu.Unlock()
	cnt := countOn(ns, sel, n)
	m.mu.Lock()
	byNode[n.Name] = nodeCount{gen: gen, n: cnt}
	m.mu.Unlock()
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
