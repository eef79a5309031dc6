package plugins

import (
	"context"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// defaultProfile is the default profile over the in-tree plugins, with
// no apiserver behind it (VolumeBinding has no claims to look at).
func defaultProfile(t interface{ Fatal(...any) }) *framework.Framework {
	cfg, err := framework.ParseConfig([]byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"))
	if err != nil {
		t.Fatal(err)
	}
	profiles, err := framework.NewProfiles(cfg, NewInTreeRegistry(), DefaultPlugins(), nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	return profiles[framework.DefaultSchedulerName]
}

var (
	zoneKey = "topology.kubernetes.io/zone"
	apps    = []string{"web", "db", "cache"}
)

// genPod draws a pod with random requests, app label, priority and
// required rules: a nodeSelector on the zone, node affinity, pod
// anti-affinity or affinity by hostname or zone, a DoNotSchedule zone
// spread.
func genPod(t *rapid.T, i int) *kplanev1.Pod {
	app := rapid.SampledFrom(apps).Draw(t, "app")
	p := pod(fmt.Sprintf("p%d", i), labelled("app", app), requests(fmt.Sprintf("%dm", rapid.IntRange(100, 1500).Draw(t, "cpu")), ""))
	p.Spec.Priority = int32(rapid.IntRange(0, 3).Draw(t, "prio"))
	key := rapid.SampledFrom([]string{kplanev1.LabelHostname, zoneKey}).Draw(t, "key")
	other := rapid.SampledFrom(apps).Draw(t, "other")
	switch rapid.IntRange(0, 5).Draw(t, "rule") {
	case 1:
		p.Spec.NodeSelector = map[string]string{zoneKey: rapid.SampledFrom([]string{"z0", "z1"}).Draw(t, "zone")}
	case 2:
		antiAffinity(term(key, other))(p)
	case 3:
		affinity(term(key, other))(p)
	case 4:
		p.Spec.TopologySpreadConstraints = []*kplanev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: zoneKey, WhenUnsatisfiable: DoNotSchedule,
			LabelSelector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
	case 5:
		p.Spec.Affinity = &kplanev1.Affinity{NodeAffinity: &kplanev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &kplanev1.NodeSelector{
			NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{{MatchExpressions: []*kplanev1.NodeSelectorRequirement{{Key: kplanev1.LabelHostname, Operator: "NotIn", Values: []string{"n0"}}}}}}}}
	}
	return p
}

// TestPropertyRequiredRulesHold places random pods on random nodes with
// the default profile, one decision at a time as the scheduler does, and
// checks every bound pod against every required rule and the nodes'
// capacity; then preempts for a random pod (of random priority, now and
// then with preemptionPolicy Never) and checks that DefaultPreemption's
// chosen victims, and those it would take on any node, are all of lower
// priority and make the pod fit once gone, that PostFilter nominates the
// chosen node and starts one eviction, and that a pod with
// preemptionPolicy Never preempts nothing.
func TestPropertyRequiredRulesHold(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		fwk := defaultProfile(t)
		ctx := context.Background()
		var nodes []*framework.NodeInfo
		nNodes := rapid.IntRange(1, 6).Draw(t, "nodes")
		for i := range nNodes {
			n := nodeObj(fmt.Sprintf("n%d", i), func(n *kplanev1.Node) {
				n.Metadata.Labels[kplanev1.LabelHostname] = n.Metadata.Name
				n.Metadata.Labels[zoneKey] = fmt.Sprintf("z%d", i%2)
				n.Status.Allocatable["cpu"] = "2"
			})
			ni, err := framework.NewNodeInfo(n)
			if err != nil {
				t.Fatal(err)
			}
			nodes = append(nodes, ni)
		}
		bound := map[string][]*framework.PodInfo{}
		for i := range rapid.IntRange(1, 25).Draw(t, "pods") {
			pi, err := framework.NewPodInfo(genPod(t, i))
			if err != nil {
				t.Fatal(err)
			}
			state := framework.NewCycleState()
			if st := fwk.RunPreFilterPlugins(ctx, state, pi); !st.IsSuccess() {
				continue
			}
			best, _, err := fwk.SelectNode(ctx, state, pi, nodes)
			if err != nil {
				continue
			}
			checkSpread(t, nodes, bound, pi, best)
			for _, n := range nodes {
				if n.Name == best.Name {
					n.AddPod(pi)
				}
			}
			bound[best.Name] = append(bound[best.Name], pi)
		}
		check(t, nodes, bound)

		// Preemption: a pod of random priority on the now busy cluster.
		high, err := framework.NewPodInfo(genPod(t, 100))
		if err != nil {
			t.Fatal(err)
		}
		high.Pod.Spec.Priority = int32(rapid.IntRange(0, 4).Draw(t, "preemptor"))
		never := rapid.IntRange(0, 4).Draw(t, "never") == 0
		if never {
			high.Pod.Spec.PreemptionPolicy = new(kplanev1.PreemptNever)
		}
		state := framework.NewCycleState()
		if !fwk.RunPreFilterPlugins(ctx, state, high).IsSuccess() {
			return
		}
		_, filtered, err := fwk.SelectNode(ctx, state, high, nodes)
		if err == nil {
			return // fits without preemption
		}
		h := &goHandle{}
		pre := NewDefaultPreemption(h)
		state.SetNodes(nodes)
		fwk.UseFilters(state)

		// What PostFilter settles on: victims only of lower priority,
		// the pod nominated where they are, one eviction started; and
		// nothing at all for preemptionPolicy Never.
		best, _ := pre.selectCandidate(ctx, state, high, nodes, filtered)
		for _, v := range best.victimList() {
			if v.Pod.GetSpec().GetPriority() >= high.Pod.GetSpec().GetPriority() {
				t.Fatalf("chosen victim %s of priority %d for a pod of priority %d", v.Key, v.Pod.GetSpec().GetPriority(), high.Pod.GetSpec().GetPriority())
			}
		}
		res, st := pre.PostFilter(ctx, state, high, nodes, filtered)
		switch {
		case never:
			if res != nil || st.IsSuccess() || len(h.started) != 0 {
				t.Fatalf("preemptionPolicy Never: PostFilter = %+v, %v, %d evictions started", res, st, len(h.started))
			}
		case best == nil:
			if st.IsSuccess() || res == nil || res.NominatedNodeName != "" || len(h.started) != 0 {
				t.Fatalf("no candidate: PostFilter = %+v, %v, %d evictions started", res, st, len(h.started))
			}
		default:
			if !st.IsSuccess() || res == nil || res.NominatedNodeName != best.node || len(h.started) != 1 {
				t.Fatalf("candidate %s: PostFilter = %+v, %v, %d evictions started", best.node, res, st, len(h.started))
			}
		}
		aware := true // the pods drawn may have any rule: always recount
		for _, n := range nodes {
			c := pre.victimsOn(ctx, state, high, n, nodes, aware, nil)
			if c == nil {
				continue
			}
			sim := n.Clone()
			for _, v := range c.victims {
				if v.Pod.GetSpec().GetPriority() >= high.Pod.GetSpec().GetPriority() {
					t.Fatalf("victim %s of priority %d for a pod of priority %d", v.Key, v.Pod.GetSpec().GetPriority(), high.Pod.GetSpec().GetPriority())
				}
				sim.RemovePod(v.UID)
			}
			view := make([]*framework.NodeInfo, len(nodes))
			for i, m := range nodes {
				view[i] = m
				if m.Name == n.Name {
					view[i] = sim
				}
			}
			fork := state.Fork()
			fork.SetNodes(view)
			if st := fork.RunFilterPlugins(ctx, high, sim); !st.IsSuccess() {
				t.Fatalf("pod does not fit %s after evicting %d victims: %s", n.Name, len(c.victims), st.Message())
			}
		}
	})
}

func (c *candidate) victimList() []*framework.PodInfo {
	if c == nil {
		return nil
	}
	return c.victims
}

// checkSpread checks a DoNotSchedule constraint at the moment its pod is
// placed (later pods without one may skew the domains legally): the
// chosen zone's count of matching pods, plus this one, exceeds the
// emptiest zone's by at most maxSkew. Every node is eligible here (no
// taints, no node affinity on spread pods), so every zone counts.
func checkSpread(t *rapid.T, nodes []*framework.NodeInfo, bound map[string][]*framework.PodInfo, p *framework.PodInfo, on *framework.NodeInfo) {
	for _, c := range p.Pod.GetSpec().GetTopologySpreadConstraints() {
		if c.GetWhenUnsatisfiable() != DoNotSchedule {
			continue
		}
		counts := map[string]int{}
		for _, n := range nodes {
			zone := n.Labels[c.GetTopologyKey()]
			counts[zone] += 0
			for _, q := range bound[n.Name] {
				if q.Pod.GetMetadata().GetLabels()["app"] == c.GetLabelSelector().GetMatchLabels()["app"] {
					counts[zone]++
				}
			}
		}
		least := -1
		for _, n := range counts {
			if least < 0 || n < least {
				least = n
			}
		}
		if skew := counts[on.Labels[c.GetTopologyKey()]] + 1 - least; skew > int(c.GetMaxSkew()) {
			t.Fatalf("%s on %s makes skew %d over %s (counts %v), above maxSkew %d", p.Key, on.Name, skew, c.GetTopologyKey(), counts, c.GetMaxSkew())
		}
	}
}

func check(t *rapid.T, nodes []*framework.NodeInfo, bound map[string][]*framework.PodInfo) {
	byName := map[string]*framework.NodeInfo{}
	for _, n := range nodes {
		byName[n.Name] = n
		if n.Requested.MilliCPU > n.Allocatable.MilliCPU {
			t.Fatalf("node %s over-committed: %d > %d", n.Name, n.Requested.MilliCPU, n.Allocatable.MilliCPU)
		}
	}
	domain := func(node, key string) string { return byName[node].Labels[key] }
	all := func(yield func(string, *framework.PodInfo) bool) {
		for node, ps := range bound {
			for _, p := range ps {
				if !yield(node, p) {
					return
				}
			}
		}
	}
	for node, p := range all {
		if !RequiredNodeAffinityMatches(p.Pod, node, byName[node].Labels) {
			t.Fatalf("%s on %s breaks its nodeSelector/node affinity", p.Key, node)
		}
		for _, term := range p.RequiredAntiAffinity {
			for node2, q := range all {
				if q.UID != p.UID && domain(node, term.TopologyKey) == domain(node2, term.TopologyKey) && term.Matches(q, nil) {
					t.Fatalf("%s on %s and %s on %s share %s despite anti-affinity", p.Key, node, q.Key, node2, term.TopologyKey)
				}
			}
		}
		for _, term := range p.RequiredAffinity {
			ok := term.Matches(p, nil) // the first of a self-affine group
			for node2, q := range all {
				if q.UID != p.UID && domain(node, term.TopologyKey) == domain(node2, term.TopologyKey) && term.Matches(q, nil) {
					ok = true
				}
			}
			if !ok {
				t.Fatalf("%s on %s has no pod its affinity selects in its %s", p.Key, node, term.TopologyKey)
			}
		}
	}
}
