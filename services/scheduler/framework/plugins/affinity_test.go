package plugins

import (
	"context"
	"fmt"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
)

func labelled(lbls ...string) func(*kplanev1.Pod) {
	return func(p *kplanev1.Pod) {
		p.Metadata.Labels = map[string]string{}
		for i := 0; i+1 < len(lbls); i += 2 {
			p.Metadata.Labels[lbls[i]] = lbls[i+1]
		}
	}
}

func nodeLabels(lbls ...string) func(*kplanev1.Node) {
	return func(n *kplanev1.Node) {
		for i := 0; i+1 < len(lbls); i += 2 {
			n.Metadata.Labels[lbls[i]] = lbls[i+1]
		}
	}
}

func term(key, app string) *kplanev1.PodAffinityTerm {
	return &kplanev1.PodAffinityTerm{TopologyKey: key, LabelSelector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": app}}}
}

func antiAffinity(terms ...*kplanev1.PodAffinityTerm) func(*kplanev1.Pod) {
	return func(p *kplanev1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &kplanev1.Affinity{}
		}
		p.Spec.Affinity.PodAntiAffinity = &kplanev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms}
	}
}

func affinity(terms ...*kplanev1.PodAffinityTerm) func(*kplanev1.Pod) {
	return func(p *kplanev1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &kplanev1.Affinity{}
		}
		p.Spec.Affinity.PodAffinity = &kplanev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms}
	}
}

// cluster is three nodes: a and b in zone-1, c in zone-2 (d, when asked
// for, has no zone label).
type cluster struct {
	t     *testing.T
	nodes []*framework.NodeInfo
}

func newCluster(t *testing.T, placed map[string][]*kplanev1.Pod, withD bool) *cluster {
	zones := map[string]string{"a": "zone-1", "b": "zone-1", "c": "zone-2"}
	names := []string{"a", "b", "c"}
	if withD {
		names = append(names, "d")
	}
	c := &cluster{t: t}
	for _, n := range names {
		mods := []func(*kplanev1.Node){nodeLabels("kubernetes.io/hostname", n)}
		if z, ok := zones[n]; ok {
			mods = append(mods, nodeLabels("topology.kubernetes.io/zone", z))
		}
		c.nodes = append(c.nodes, nodeInfo(t, nodeObj(n, mods...), placed[n]...))
	}
	return c
}

// feasible runs pl's PreFilter and Filter on every node and returns the
// names that pass and the reason of the first rejected.
func (c *cluster) feasible(pl framework.Plugin, p *kplanev1.Pod) (string, string) {
	ctx, state := context.Background(), framework.NewCycleState()
	state.SetNodes(c.nodes)
	pi := info(c.t, p)
	if pf, ok := pl.(framework.PreFilterPlugin); ok {
		if st := pf.PreFilter(ctx, state, pi); st.Code() == framework.Skip {
			return "abcd"[:len(c.nodes)], ""
		}
	}
	var ok, why string
	for _, n := range c.nodes {
		st := pl.(framework.FilterPlugin).Filter(ctx, state, pi, n)
		if st.IsSuccess() {
			ok += n.Name
		} else if why == "" {
			why = st.Message()
		}
	}
	return ok, why
}

// scores runs PreScore, Score and NormalizeScore on every node.
func (c *cluster) scores(pl framework.ScorePlugin, p *kplanev1.Pod) map[string]int64 {
	ctx, state := context.Background(), framework.NewCycleState()
	state.SetNodes(c.nodes)
	pi := info(c.t, p)
	out := map[string]int64{}
	if ps, ok := pl.(framework.PreScorePlugin); ok {
		if st := ps.PreScore(ctx, state, pi, c.nodes); st.Code() == framework.Skip {
			return out
		}
	}
	list := framework.NodeScoreList{}
	for _, n := range c.nodes {
		s, _ := pl.Score(ctx, state, pi, n)
		list = append(list, framework.NodeScore{Name: n.Name, Score: s})
	}
	if ext := pl.ScoreExtensions(); ext != nil {
		ext.NormalizeScore(ctx, state, pi, list)
	}
	for _, s := range list {
		out[s.Name] = s.Score
	}
	return out
}

func TestInterPodAffinityFilter(t *testing.T) {
	web := func(name string, mods ...func(*kplanev1.Pod)) *kplanev1.Pod {
		return pod(name, append([]func(*kplanev1.Pod){labelled("app", "web")}, mods...)...)
	}
	db := func(name string) *kplanev1.Pod { return pod(name, labelled("app", "db")) }
	otherNS := func(p *kplanev1.Pod) { p.Metadata.Namespace = "other" }
	for _, tc := range []struct {
		name   string
		placed map[string][]*kplanev1.Pod
		pod    *kplanev1.Pod
		want   string
		why    string
	}{
		{"no rules", map[string][]*kplanev1.Pod{"a": {web("w0")}}, web("w1"), "abc", ""},
		{"anti-affinity by hostname", map[string][]*kplanev1.Pod{"a": {web("w0")}}, web("w1", antiAffinity(term("kubernetes.io/hostname", "web"))), "bc", ReasonAntiAffinityRulesNotMatch},
		{"anti-affinity by zone", map[string][]*kplanev1.Pod{"a": {web("w0")}}, web("w1", antiAffinity(term("topology.kubernetes.io/zone", "web"))), "c", ReasonAntiAffinityRulesNotMatch},
		{"anti-affinity ignores other namespaces", map[string][]*kplanev1.Pod{"a": {web("w0", otherNS)}}, web("w1", antiAffinity(term("kubernetes.io/hostname", "web"))), "abc", ""},
		{"existing pod's anti-affinity is symmetric", map[string][]*kplanev1.Pod{"c": {db("d0")}, "a": {pod("x", labelled("app", "x"), antiAffinity(term("topology.kubernetes.io/zone", "web")))}}, web("w1"), "c", ReasonExistingAntiAffinityNotMatch},
		{"affinity to a zone", map[string][]*kplanev1.Pod{"c": {db("d0")}}, web("w1", affinity(term("topology.kubernetes.io/zone", "db"))), "c", ReasonAffinityRulesNotMatch},
		{"affinity to a node", map[string][]*kplanev1.Pod{"b": {db("d0")}}, web("w1", affinity(term("kubernetes.io/hostname", "db"))), "b", ReasonAffinityRulesNotMatch},
		{"affinity with no match anywhere", nil, web("w1", affinity(term("kubernetes.io/hostname", "db"))), "", ReasonAffinityRulesNotMatch},
		{"first pod of a self-affine group goes anywhere", nil, web("w1", affinity(term("topology.kubernetes.io/zone", "web"))), "abc", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := newCluster(t, tc.placed, false).feasible(NewInterPodAffinity(nil), tc.pod)
			if ok != tc.want || why != tc.why {
				t.Fatalf("feasible %q (%q), want %q (%q)", ok, why, tc.want, tc.why)
			}
		})
	}
}

// Any label is a topology: racks here, a label Kubernetes gives no
// meaning to.
func TestInterPodAffinityAnyTopologyKey(t *testing.T) {
	const rackKey = "example.com/rack"
	racks := map[string]string{"a": "r1", "b": "r1", "c": "r2"}
	mk := func(placed map[string][]*kplanev1.Pod) *cluster {
		c := &cluster{t: t}
		for _, n := range []string{"a", "b", "c"} {
			c.nodes = append(c.nodes, nodeInfo(t, nodeObj(n, nodeLabels("kubernetes.io/hostname", n, rackKey, racks[n])), placed[n]...))
		}
		return c
	}
	for _, tc := range []struct {
		name   string
		placed map[string][]*kplanev1.Pod
		pod    *kplanev1.Pod
		want   string
	}{
		{"anti-affinity by rack", map[string][]*kplanev1.Pod{"a": {pod("w0", labelled("app", "web"))}}, pod("w1", labelled("app", "web"), antiAffinity(term(rackKey, "web"))), "c"},
		{"affinity by rack", map[string][]*kplanev1.Pod{"b": {pod("d0", labelled("app", "db"))}}, pod("w1", labelled("app", "web"), affinity(term(rackKey, "db"))), "ab"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if ok, _ := mk(tc.placed).feasible(NewInterPodAffinity(nil), tc.pod); ok != tc.want {
				t.Fatalf("feasible %q, want %q", ok, tc.want)
			}
		})
	}
}

func TestInterPodAffinityScore(t *testing.T) {
	pref := func(anti bool, w int32, key, app string) func(*kplanev1.Pod) {
		return func(p *kplanev1.Pod) {
			wt := []*kplanev1.WeightedPodAffinityTerm{{Weight: w, PodAffinityTerm: term(key, app)}}
			p.Spec.Affinity = &kplanev1.Affinity{}
			if anti {
				p.Spec.Affinity.PodAntiAffinity = &kplanev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: wt}
			} else {
				p.Spec.Affinity.PodAffinity = &kplanev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: wt}
			}
		}
	}
	placed := map[string][]*kplanev1.Pod{"a": {pod("c1", labelled("app", "cache"))}}
	c := newCluster(t, placed, false)
	got := c.scores(NewInterPodAffinity(nil), pod("p", pref(false, 10, "kubernetes.io/hostname", "cache")))
	if got["a"] != 100 || got["b"] != 0 || got["c"] != 0 {
		t.Errorf("preferred affinity: %v", got)
	}
	got = c.scores(NewInterPodAffinity(nil), pod("p", pref(true, 10, "topology.kubernetes.io/zone", "cache")))
	if got["a"] != 0 || got["b"] != 0 || got["c"] != 100 {
		t.Errorf("preferred anti-affinity by zone: %v", got)
	}
	// Symmetry: a placed pod that prefers "web" pods near it draws them.
	c = newCluster(t, map[string][]*kplanev1.Pod{"b": {pod("x", pref(false, 5, "kubernetes.io/hostname", "web"))}}, false)
	got = c.scores(NewInterPodAffinity(nil), pod("w", labelled("app", "web")))
	if got["b"] != 100 || got["a"] != 0 {
		t.Errorf("existing pod's preferred affinity: %v", got)
	}
	if got := c.scores(NewInterPodAffinity(nil), pod("plain")); len(got) != 0 {
		t.Errorf("nothing to weigh should skip: %v", got)
	}
}

func TestPodTopologySpread(t *testing.T) {
	spread := func(key, when string, skew int32, mods ...func(*kplanev1.TopologySpreadConstraint)) func(*kplanev1.Pod) {
		return func(p *kplanev1.Pod) {
			c := &kplanev1.TopologySpreadConstraint{MaxSkew: skew, TopologyKey: key, WhenUnsatisfiable: when,
				LabelSelector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}
			for _, m := range mods {
				m(c)
			}
			p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, c)
		}
	}
	web := func(i int) *kplanev1.Pod { return pod(fmt.Sprint("w", i), labelled("app", "web")) }
	zone := "topology.kubernetes.io/zone"
	minDomains := func(n int32) func(*kplanev1.TopologySpreadConstraint) {
		return func(c *kplanev1.TopologySpreadConstraint) { c.MinDomains = &n }
	}
	for _, tc := range []struct {
		name   string
		placed map[string][]*kplanev1.Pod
		withD  bool
		pod    *kplanev1.Pod
		want   string
		why    string
	}{
		{"empty cluster", nil, false, pod("p", labelled("app", "web"), spread(zone, DoNotSchedule, 1)), "abc", ""},
		{"zone-1 ahead by one", map[string][]*kplanev1.Pod{"a": {web(0)}}, false, pod("p", labelled("app", "web"), spread(zone, DoNotSchedule, 1)), "c", ReasonTopologySpread},
		{"balanced", map[string][]*kplanev1.Pod{"a": {web(0)}, "c": {web(1)}}, false, pod("p", labelled("app", "web"), spread(zone, DoNotSchedule, 1)), "abc", ""},
		{"maxSkew 2 allows", map[string][]*kplanev1.Pod{"a": {web(0)}}, false, pod("p", labelled("app", "web"), spread(zone, DoNotSchedule, 2)), "abc", ""},
		{"node without the key", nil, true, pod("p", labelled("app", "web"), spread(zone, DoNotSchedule, 1)), "abc", ReasonTopologySpreadMissingLabel},
		{"by hostname", map[string][]*kplanev1.Pod{"a": {web(0)}, "b": {web(1)}}, false, pod("p", labelled("app", "web"), spread("kubernetes.io/hostname", DoNotSchedule, 1)), "c", ReasonTopologySpread},
		{"minDomains 3 with 2 zones: min is 0", map[string][]*kplanev1.Pod{"a": {web(0)}, "c": {web(1)}}, false,
			pod("p", labelled("app", "web"), spread(zone, DoNotSchedule, 1, func(c *kplanev1.TopologySpreadConstraint) { c.MinDomains = new(int32(3)) })), "", ReasonTopologySpread},
		{"minDomains 2 with 2 zones: the real minimum", map[string][]*kplanev1.Pod{"a": {web(0)}, "c": {web(1)}}, false,
			pod("p", labelled("app", "web"), spread(zone, DoNotSchedule, 1, minDomains(2))), "abc", ""},
		{"minDomains 3 with 2 zones, maxSkew 2", map[string][]*kplanev1.Pod{"a": {web(0)}, "c": {web(1)}}, false,
			pod("p", labelled("app", "web"), spread(zone, DoNotSchedule, 2, minDomains(3))), "abc", ""},
		{"minDomains 3 with 2 zones, maxSkew 2, zone-1 full", map[string][]*kplanev1.Pod{"a": {web(0)}, "b": {web(2)}, "c": {web(1)}}, false,
			pod("p", labelled("app", "web"), spread(zone, DoNotSchedule, 2, minDomains(3))), "c", ReasonTopologySpread},
		{"other apps do not count", map[string][]*kplanev1.Pod{"a": {pod("x", labelled("app", "db")), pod("y", labelled("app", "db"))}}, false, pod("p", labelled("app", "web"), spread(zone, DoNotSchedule, 1)), "abc", ""},
		{"ScheduleAnyway never filters", map[string][]*kplanev1.Pod{"a": {web(0), web(1)}}, false, pod("p", labelled("app", "web"), spread(zone, ScheduleAnyway, 1)), "abc", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := newCluster(t, tc.placed, tc.withD).feasible(PodTopologySpread{}, tc.pod)
			if ok != tc.want || why != tc.why {
				t.Fatalf("feasible %q (%q), want %q (%q)", ok, why, tc.want, tc.why)
			}
		})
	}
	// Node inclusion: with nodeAffinityPolicy Honor (default), zone-2
	// excluded by the pod's nodeSelector does not count as an empty
	// domain, so zone-1 may grow; with Ignore it holds zone-1 back.
	placed := map[string][]*kplanev1.Pod{"a": {web(0)}}
	sel := func(p *kplanev1.Pod) { p.Spec.NodeSelector = map[string]string{zone: "zone-1"} }
	if ok, _ := newCluster(t, placed, false).feasible(PodTopologySpread{}, pod("p", labelled("app", "web"), sel, spread(zone, DoNotSchedule, 1))); ok != "abc" {
		t.Errorf("Honor: feasible %q, want abc (the NodeAffinity filter removes c)", ok)
	}
	ignore := func(c *kplanev1.TopologySpreadConstraint) { c.NodeAffinityPolicy = PolicyIgnore }
	if ok, _ := newCluster(t, placed, false).feasible(PodTopologySpread{}, pod("p", labelled("app", "web"), sel, spread(zone, DoNotSchedule, 1, ignore))); ok != "c" {
		t.Errorf("Ignore: feasible %q, want c", ok)
	}
	// nodeTaintsPolicy: Ignore (the default) counts zone-2 behind a taint
	// the pod does not tolerate as an empty domain, holding zone-1 back;
	// Honor leaves it out, so zone-1 may grow (TaintToleration removes c).
	tainted := &cluster{t: t}
	for _, n := range []string{"a", "b", "c"} {
		node := nodeObj(n, nodeLabels("kubernetes.io/hostname", n, zone, map[string]string{"a": "zone-1", "b": "zone-1", "c": "zone-2"}[n]))
		if n == "c" {
			node.Spec.Taints = []*kplanev1.Taint{{Key: "dedicated", Value: "gpu", Effect: kplanev1.TaintEffectNoSchedule}}
		}
		tainted.nodes = append(tainted.nodes, nodeInfo(t, node, placed[n]...))
	}
	if ok, _ := tainted.feasible(PodTopologySpread{}, pod("p", labelled("app", "web"), spread(zone, DoNotSchedule, 1))); ok != "c" {
		t.Errorf("nodeTaintsPolicy Ignore: feasible %q, want c", ok)
	}
	honorTaints := func(c *kplanev1.TopologySpreadConstraint) { c.NodeTaintsPolicy = PolicyHonor }
	if ok, _ := tainted.feasible(PodTopologySpread{}, pod("p", labelled("app", "web"), spread(zone, DoNotSchedule, 1, honorTaints))); ok != "abc" {
		t.Errorf("nodeTaintsPolicy Honor: feasible %q, want abc", ok)
	}
	// ScheduleAnyway scores: the emptier zone best, a node without the key worst.
	got := newCluster(t, map[string][]*kplanev1.Pod{"a": {web(0), web(1)}}, true).scores(PodTopologySpread{}, pod("p", labelled("app", "web"), spread(zone, ScheduleAnyway, 1)))
	if got["c"] != 100 || got["a"] != 0 || got["b"] != 0 || got["d"] != 0 {
		t.Errorf("ScheduleAnyway scores %v", got)
	}
}

func TestNodeAffinity(t *testing.T) {
	req := func(op string, vals ...string) func(*kplanev1.Pod) {
		return func(p *kplanev1.Pod) {
			p.Spec.Affinity = &kplanev1.Affinity{NodeAffinity: &kplanev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &kplanev1.NodeSelector{
				NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{{MatchExpressions: []*kplanev1.NodeSelectorRequirement{{Key: "topology.kubernetes.io/zone", Operator: op, Values: vals}}}},
			}}}
		}
	}
	// terms sets the required terms: each one a matchFields requirement on
	// metadata.name, plus a zone expression when zone is not empty.
	type term struct {
		op, zone string
		names    []string
	}
	terms := func(ts ...term) func(*kplanev1.Pod) {
		return func(p *kplanev1.Pod) {
			sel := &kplanev1.NodeSelector{}
			for _, tt := range ts {
				nt := &kplanev1.NodeSelectorTerm{MatchFields: []*kplanev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: tt.op, Values: tt.names}}}
				if tt.zone != "" {
					nt.MatchExpressions = []*kplanev1.NodeSelectorRequirement{{Key: "topology.kubernetes.io/zone", Operator: "In", Values: []string{tt.zone}}}
				}
				sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, nt)
			}
			p.Spec.Affinity = &kplanev1.Affinity{NodeAffinity: &kplanev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: sel}}
		}
	}
	c := newCluster(t, nil, true)
	for _, tc := range []struct {
		name string
		pod  *kplanev1.Pod
		want string
	}{
		{"matchFields In", pod("p", terms(term{op: "In", names: []string{"b"}})), "b"},
		{"matchFields In several", pod("p", terms(term{op: "In", names: []string{"a", "d", "gone"}})), "ad"},
		{"matchFields NotIn", pod("p", terms(term{op: "NotIn", names: []string{"b"}})), "acd"},
		{"matchFields and expressions AND within a term", pod("p", terms(term{op: "In", zone: "zone-2", names: []string{"b"}})), ""},
		{"matchFields terms OR", pod("p", terms(term{op: "In", names: []string{"a"}}, term{op: "In", names: []string{"c"}})), "ac"},
		{"In", pod("p", req("In", "zone-2")), "c"},
		{"NotIn", pod("p", req("NotIn", "zone-2")), "abd"},
		{"Exists", pod("p", req("Exists")), "abc"},
		{"DoesNotExist", pod("p", req("DoesNotExist")), "d"},
		{"nodeSelector and affinity both apply", pod("p", req("In", "zone-1"), func(p *kplanev1.Pod) { p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "b"} }), "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if ok, _ := c.feasible(NodeAffinity{}, tc.pod); ok != tc.want {
				t.Fatalf("feasible %q, want %q", ok, tc.want)
			}
		})
	}
	prefer := pod("p", func(p *kplanev1.Pod) {
		p.Spec.Affinity = &kplanev1.Affinity{NodeAffinity: &kplanev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []*kplanev1.PreferredSchedulingTerm{
			{Weight: 10, Preference: &kplanev1.NodeSelectorTerm{MatchExpressions: []*kplanev1.NodeSelectorRequirement{{Key: "topology.kubernetes.io/zone", Operator: "In", Values: []string{"zone-1"}}}}},
			{Weight: 30, Preference: &kplanev1.NodeSelectorTerm{MatchExpressions: []*kplanev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: "In", Values: []string{"c"}}}}},
		}}}
	})
	got := c.scores(NodeAffinity{}, prefer)
	if got["c"] != 100 || got["a"] != 33 || got["b"] != 33 || got["d"] != 0 {
		t.Errorf("preferred scores %v", got)
	}
}

// Preemption recounts pods across nodes for each simulation: a pod kept
// out only by a lower-priority pod's presence (its own anti-affinity)
// can preempt that pod, and not a more important one.
func TestPreemptionForAntiAffinity(t *testing.T) {
	fwk := defaultProfile(t)
	low := pod("low-web", labelled("app", "web"))
	low.Spec.Priority = 1
	peer := pod("peer-web", labelled("app", "web"))
	peer.Spec.Priority = 100
	c := newCluster(t, map[string][]*kplanev1.Pod{"a": {low}, "b": {peer}}, false)
	c.nodes = c.nodes[:2] // a and b only
	high := pod("high", labelled("app", "web"), antiAffinity(term("kubernetes.io/hostname", "web")))
	high.Spec.Priority = 100
	hi := info(t, high)
	ctx, state := context.Background(), framework.NewCycleState()
	if _, _, err := fwk.SelectNode(ctx, state, hi, c.nodes); err == nil {
		t.Fatal("the pod fits without preemption")
	}
	state.SetNodes(c.nodes)
	fwk.UseFilters(state)
	pre := &DefaultPreemption{}
	if cand := pre.victimsOn(ctx, state, hi, c.nodes[0], c.nodes, true, nil); cand == nil || len(cand.victims) != 1 || cand.victims[0].Key != "default/low-web" {
		t.Fatalf("node a: victims %+v, want low-web", cand)
	}
	if cand := pre.victimsOn(ctx, state, hi, c.nodes[1], c.nodes, true, nil); cand != nil {
		t.Fatalf("node b: victims %+v, want none (peer-web is as important)", cand)
	}
}
