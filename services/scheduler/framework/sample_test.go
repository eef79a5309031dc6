package framework_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/framework/plugins"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// counter is a Filter plugin that counts the nodes it is asked about and
// rejects the nodes named in reject.
type counter struct {
	seen   map[string]int
	reject map[string]bool
}

func (counter) Name() string { return "Counter" }
func (c counter) Filter(_ context.Context, _ *framework.CycleState, _ *framework.PodInfo, n *framework.NodeInfo) *framework.Status {
	c.seen[n.Name]++
	if c.reject[n.Name] {
		return framework.NewStatus(framework.Unschedulable, "rejected by the counter")
	}
	return nil
}

func sampleProfile(t *testing.T, c counter, pct string) *framework.Framework {
	t.Helper()
	registry := plugins.NewInTreeRegistry()
	if err := registry.Merge(framework.Registry{"Counter": func(json.RawMessage, framework.Handle) (framework.Plugin, error) { return c, nil }}); err != nil {
		t.Fatal(err)
	}
	doc := head + pct + "profiles:\n- plugins:\n    multiPoint:\n      enabled:\n      - name: Counter\n"
	profiles, err := build2(registry, doc)
	if err != nil {
		t.Fatal(err)
	}
	return profiles[framework.DefaultSchedulerName]
}

func sampleNodes(n int) []*framework.NodeInfo {
	out := make([]*framework.NodeInfo, n)
	for i := range out {
		out[i] = core.NewNodeInfo(core.NodeState{Name: fmt.Sprintf("n-%04d", i), Ready: true,
			Allocatable: core.Resources{MilliCPU: 4000, Memory: 8 << 30, Pods: 110}})
	}
	return out
}

// percentageOfNodesToScore: on 1,000 nodes a cycle filters until it has
// 42% of them feasible (adaptive: 50% - 1000/125), the next cycle starts
// where it stopped, so every node is looked at in turn; 100 looks at
// every node; a pod that fits nowhere is still checked against all.
func TestPercentageOfNodesToScore(t *testing.T) {
	pod, err := framework.NewPodInfo(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: "p", Namespace: "default", Uid: "u"},
		Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "x"}}}})
	if err != nil {
		t.Fatal(err)
	}
	nodes := sampleNodes(1000)
	ctx := context.Background()
	for _, tc := range []struct {
		pct       string
		perCycle  int
		rejectAll bool
	}{
		{"", 420, false},
		{"percentageOfNodesToScore: 0\n", 420, false},
		{"percentageOfNodesToScore: 10\n", 100, false},
		{"percentageOfNodesToScore: 100\n", 1000, false},
		{"", 1000, true},
	} {
		c := counter{seen: map[string]int{}, reject: map[string]bool{}}
		if tc.rejectAll {
			for _, n := range nodes {
				c.reject[n.Name] = true
			}
		}
		f := sampleProfile(t, c, tc.pct)
		for cycle := range 3 {
			before := len(c.seen)
			sum := 0
			for _, v := range c.seen {
				sum += v
			}
			node, _, err := f.SelectNode(ctx, framework.NewCycleState(), pod, nodes)
			if tc.rejectAll {
				if err == nil || node != nil {
					t.Fatalf("%q: a pod that fits nowhere was placed on %v", tc.pct, node)
				}
			} else if err != nil {
				t.Fatalf("%q: %v", tc.pct, err)
			}
			after := 0
			for _, v := range c.seen {
				after += v
			}
			if got := after - sum; got != tc.perCycle {
				t.Fatalf("%q cycle %d: filtered %d nodes, want %d", tc.pct, cycle, got, tc.perCycle)
			}
			if tc.perCycle < len(nodes) && len(c.seen) != min(before+tc.perCycle, len(nodes)) {
				t.Fatalf("%q cycle %d: %d distinct nodes looked at, want the next %d in turn", tc.pct, cycle, len(c.seen), tc.perCycle)
			}
		}
	}
	// Below 100 nodes every node is looked at.
	c := counter{seen: map[string]int{}, reject: map[string]bool{}}
	f := sampleProfile(t, c, "percentageOfNodesToScore: 5\n")
	if _, _, err := f.SelectNode(ctx, framework.NewCycleState(), pod, sampleNodes(80)); err != nil {
		t.Fatal(err)
	}
	if len(c.seen) != 80 {
		t.Fatalf("80 nodes: %d looked at, want all", len(c.seen))
	}
	if _, err := framework.ParseConfig([]byte(head + "percentageOfNodesToScore: 101\n")); err == nil {
		t.Fatal("percentageOfNodesToScore 101 should be refused")
	}
}
