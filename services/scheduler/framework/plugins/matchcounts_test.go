package plugins

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/labels"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// The kept counts always equal a fresh count, through random pod adds
// and removals on nodes and on clones of them (preemption's simulations),
// which must not disturb the counts of the nodes they were cloned from.
func TestMatchCountsFollowNodeChanges(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	m := newMatchCounts()
	sels := []labels.Selector{
		labels.SelectorFromSet(map[string]string{"app": "web"}),
		labels.SelectorFromSet(map[string]string{"app": "db"}),
		labels.Everything(),
		labels.Nothing(),
	}
	nodes := make([]*framework.NodeInfo, 5)
	for i := range nodes {
		nodes[i] = core.NewNodeInfo(core.NodeState{Name: fmt.Sprintf("n%d", i)})
	}
	uids := make([][]string, len(nodes))
	for step := range 2000 {
		i := rnd.IntN(len(nodes))
		n := nodes[i]
		switch op := rnd.IntN(10); {
		case op < 5 || len(uids[i]) == 0:
			p := pod(fmt.Sprintf("p%d", step), labelled("app", []string{"web", "db", "cache"}[rnd.IntN(3)]))
			if rnd.IntN(4) == 0 {
				p.Metadata.Namespace = "other"
			}
			if rnd.IntN(8) == 0 {
				p.Metadata.DeletionTimestamp = timestamppb.Now()
			}
			info, err := framework.NewPodInfo(p)
			if err != nil {
				t.Fatal(err)
			}
			n.AddPod(info)
			uids[i] = append(uids[i], info.UID)
		case op < 8:
			k := rnd.IntN(len(uids[i]))
			n.RemovePod(uids[i][k])
			uids[i] = append(uids[i][:k], uids[i][k+1:]...)
		default:
			// A simulation on a clone: the original keeps its pods.
			c := n.Clone()
			c.RemovePod(uids[i][0])
			for _, s := range sels {
				if got, want := countPass(m, selectorKey("default", s), "default", s, c), countOn("default", s, c); got != want {
					t.Fatalf("step %d: clone of %s, selector %q: kept count %d, fresh %d", step, n.Name, s.String(), got, want)
				}
			}
		}
		for _, nn := range nodes {
			for _, s := range sels {
				for _, ns := range []string{"default", "other"} {
					if got, want := countPass(m, selectorKey(ns, s), ns, s, nn), countOn(ns, s, nn); got != want {
						t.Fatalf("step %d: %s, namespace %s, selector %q: kept count %d, fresh %d", step, nn.Name, ns, s.String(), got, want)
					}
				}
			}
		}
	}
	var nilCounts *matchCounts
	web := labels.SelectorFromSet(map[string]string{"app": "web"})
	if got, want := countPass(nilCounts, selectorKey("default", web), "default", web, nodes[0]), countOn("default", web, nodes[0]); got != want {
		t.Fatalf("nil counts: %d, want %d", got, want)
	}
}

// countPass counts n in a pass of its own, as count does for a node.
func countPass(m *matchCounts, key, ns string, sel labels.Selector, n *framework.NodeInfo) int64 {
	c := m.begin()
	defer c.end()
	return c.count(key, ns, sel, n)
}
