package daemonset

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func pod(name, node, hash string, ready bool) *kplanev1.Pod {
	p := &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: name, CreationTimestamp: timestamppb.New(t0.Add(-time.Hour)),
		Labels: map[string]string{kplanev1.LabelControllerRevisionHash: hash}},
		Spec: &kplanev1.PodSpec{NodeName: node}, Status: &kplanev1.PodStatus{Phase: kplanev1.PodPending}}
	if ready {
		p.Status = &kplanev1.PodStatus{Phase: kplanev1.PodRunning, Conditions: []*kplanev1.Condition{
			{Type: kplanev1.PodReady, Status: kplanev1.ConditionTrue, LastTransitionTime: timestamppb.New(t0.Add(-time.Hour))}}}
	}
	return p
}

func node(name string, pods ...*kplanev1.Pod) NodeState {
	return NodeState{Name: name, ShouldRun: true, ShouldContinue: true, Pods: pods}
}

func podNames(ps []*kplanev1.Pod) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Metadata.Name)
	}
	return out
}

func TestFits(t *testing.T) {
	spec := &kplanev1.PodSpec{NodeSelector: map[string]string{"role": "w"}}
	n := func(lbl string, taints ...*kplanev1.Taint) *kplanev1.Node {
		return &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Labels: map[string]string{"role": lbl}}, Spec: &kplanev1.NodeSpec{Taints: taints}}
	}
	taint := func(key, effect string) *kplanev1.Taint { return &kplanev1.Taint{Key: key, Effect: effect} }
	for _, c := range []struct {
		name      string
		node      *kplanev1.Node
		run, cont bool
	}{
		{"matches", n("w"), true, true},
		{"selector", n("x"), false, false},
		{"NoSchedule", n("w", taint("gpu", "NoSchedule")), false, true},
		{"NoExecute", n("w", taint("gpu", "NoExecute")), false, false},
		{"PreferNoSchedule", n("w", taint("gpu", "PreferNoSchedule")), true, true},
		{"cordoned", n("w", taint(kplanev1.TaintNodeUnschedulable, "NoSchedule")), true, true},
		{"not ready", n("w", taint(kplanev1.TaintNodeNotReady, "NoExecute")), true, true},
		{"unreachable", n("w", taint(kplanev1.TaintNodeUnreachable, "NoExecute")), true, true},
	} {
		if run, cont := Fits(spec, c.node); run != c.run || cont != c.cont {
			t.Errorf("%s: Fits = %v, %v; want %v, %v", c.name, run, cont, c.run, c.cont)
		}
	}
	tolerant := &kplanev1.PodSpec{Tolerations: []*kplanev1.Toleration{{Key: "gpu", Operator: "Exists"}}}
	if run, cont := Fits(tolerant, n("", taint("gpu", "NoExecute"))); !run || !cont {
		t.Error("a tolerated taint does not matter")
	}
}

func TestDecideCreateDeleteDuplicates(t *testing.T) {
	b := Bounds{MaxUnavailable: 1}
	gone := NodeState{Name: "gone", Pods: []*kplanev1.Pod{pod("g", "gone", "h1", true)}}
	tainted := NodeState{Name: "t", ShouldContinue: true, Pods: []*kplanev1.Pod{pod("t", "t", "h1", true)}}
	taintedEmpty := NodeState{Name: "te", ShouldContinue: true}
	term := pod("x", "n3", "h1", true)
	term.Metadata.DeletionTimestamp = timestamppb.New(t0)
	dupNewer := pod("d2", "n4", "h1", true)
	dupNewer.Metadata.CreationTimestamp = timestamppb.New(t0)
	failed := pod("f", "n5", "h1", false)
	failed.Status.Phase = kplanev1.PodFailed
	p := Decide(b, []NodeState{node("n1"), node("n2", pod("a", "n2", "h1", true)), gone, tainted, taintedEmpty,
		node("n3", term), node("n4", dupNewer, pod("d1", "n4", "h1", true)), node("n5", failed)}, "h1", t0)
	if len(p.Create) != 1 || p.Create[0] != "n1" {
		t.Errorf("create %v, want [n1] (n3 waits for its terminating pod, n5 for its failed one to go)", p.Create)
	}
	want := map[string]bool{"g": true, "d2": true, "f": true}
	if len(p.Delete) != len(want) {
		t.Errorf("delete %v", podNames(p.Delete))
	}
	for _, d := range p.Delete {
		if !want[d.Metadata.Name] {
			t.Errorf("deleted %s", d.Metadata.Name)
		}
	}
}

func TestDecideRolling(t *testing.T) {
	nodes := []NodeState{node("n1", pod("a", "n1", "old", true)), node("n2", pod("b", "n2", "old", true)), node("n3", pod("c", "n3", "old", true))}
	if p := Decide(Bounds{MaxUnavailable: 1}, nodes, "new", t0); len(p.Delete) != 1 || len(p.Create) != 0 {
		t.Errorf("maxUnavailable 1: delete %v create %v", podNames(p.Delete), p.Create)
	}
	// One node already without a pod: nothing more may go.
	short := append([]NodeState{node("n0")}, nodes...)
	if p := Decide(Bounds{MaxUnavailable: 1}, short, "new", t0); len(p.Delete) != 0 || len(p.Create) != 1 {
		t.Errorf("budget used: delete %v create %v", podNames(p.Delete), p.Create)
	}
	// An unavailable old pod always goes.
	sick := []NodeState{node("n1", pod("a", "n1", "old", false)), node("n2", pod("b", "n2", "old", true))}
	if p := Decide(Bounds{MaxUnavailable: 1}, sick, "new", t0); len(p.Delete) != 1 || p.Delete[0].Metadata.Name != "a" {
		t.Errorf("unavailable old pod: %v", podNames(p.Delete))
	}
	// Surge: new pods beside old ones on maxSurge nodes; the old goes once the new is available.
	if p := Decide(Bounds{MaxSurge: 2}, nodes, "new", t0); len(p.Create) != 2 || len(p.Delete) != 0 {
		t.Errorf("surge 2: create %v delete %v", p.Create, podNames(p.Delete))
	}
	pair := []NodeState{node("n1", pod("a", "n1", "old", true), pod("a2", "n1", "new", false)), node("n2", pod("b", "n2", "old", true))}
	if p := Decide(Bounds{MaxSurge: 1}, pair, "new", t0); len(p.Create) != 0 || len(p.Delete) != 0 {
		t.Errorf("surge in flight: create %v delete %v", p.Create, podNames(p.Delete))
	}
	pair[0].Pods[1] = pod("a2", "n1", "new", true)
	if p := Decide(Bounds{MaxSurge: 1}, pair, "new", t0); len(p.Delete) != 1 || p.Delete[0].Metadata.Name != "a" || len(p.Create) != 1 {
		t.Errorf("surge done on n1: delete %v create %v", podNames(p.Delete), p.Create)
	}
	if p := Decide(Bounds{OnDelete: true}, nodes, "new", t0); len(p.Delete) != 0 {
		t.Errorf("OnDelete: %v", podNames(p.Delete))
	}
}

func TestBoundsAndStatus(t *testing.T) {
	ds := &kplanev1.DaemonSet{Metadata: &kplanev1.ObjectMeta{Generation: 3}, Spec: &kplanev1.DaemonSetSpec{UpdateStrategy: &kplanev1.DaemonSetUpdateStrategy{
		Type: "RollingUpdate", RollingUpdate: &kplanev1.RollingUpdateDaemonSet{MaxUnavailable: kplanev1.IntOrStringFromString("10%"), MaxSurge: kplanev1.IntOrStringFromInt32(0)}}}}
	if b, err := BoundsOf(ds, 15); err != nil || b.MaxUnavailable != 2 {
		t.Fatalf("10%% of 15 rounds up to 2: %+v %v", b, err)
	}
	nodes := []NodeState{node("n1", pod("a", "n1", "new", true)), node("n2", pod("b", "n2", "old", false)), node("n3"),
		{Name: "n4", ShouldContinue: true, Pods: []*kplanev1.Pod{pod("d", "n4", "new", true)}}}
	st := Status(ds, Bounds{}, nodes, "new", nil, t0)
	if st.DesiredNumberScheduled != 3 || st.CurrentNumberScheduled != 2 || st.NumberReady != 1 || st.NumberAvailable != 1 ||
		st.NumberUnavailable != 2 || st.UpdatedNumberScheduled != 1 || st.NumberMisscheduled != 1 || st.ObservedGeneration != 3 {
		t.Fatalf("status: %v", st)
	}
}

func nameTerm(node string) *kplanev1.NodeSelectorRequirement {
	return &kplanev1.NodeSelectorRequirement{Key: "metadata.name", Operator: "In", Values: []string{node}}
}

func TestFitsNodeAffinity(t *testing.T) {
	zone := func(z string) *kplanev1.NodeSelectorTerm {
		return &kplanev1.NodeSelectorTerm{MatchExpressions: []*kplanev1.NodeSelectorRequirement{{Key: "zone", Operator: "In", Values: []string{z}}}}
	}
	spec := &kplanev1.PodSpec{Affinity: &kplanev1.Affinity{NodeAffinity: &kplanev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &kplanev1.NodeSelector{
		NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{zone("a"), {MatchFields: []*kplanev1.NodeSelectorRequirement{nameTerm("special")}}}}}}}
	n := func(name, z string) *kplanev1.Node {
		return &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: name, Labels: map[string]string{"zone": z}}}
	}
	for _, c := range []struct {
		node *kplanev1.Node
		want bool
	}{{n("n1", "a"), true}, {n("n2", "b"), false}, {n("special", "b"), true}} {
		if run, cont := Fits(spec, c.node); run != c.want || cont != c.want {
			t.Errorf("%s: Fits = %v, %v; want %v", c.node.Metadata.Name, run, cont, c.want)
		}
	}
}

// NewPod leaves the pod unbound for the scheduler, narrowed to its node
// by matchFields; the template's required terms still apply, ANDed with
// the name, and a metadata.name requirement it had is replaced.
func TestNewPodNodeAffinity(t *testing.T) {
	ds := &kplanev1.DaemonSet{Metadata: &kplanev1.ObjectMeta{Name: "logs", Namespace: "default", Generation: 2}}
	plain := NewPod(ds, &kplanev1.PodTemplateSpec{Spec: &kplanev1.PodSpec{}}, "h1", "node-1")
	want := &kplanev1.NodeSelector{NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{{MatchFields: []*kplanev1.NodeSelectorRequirement{nameTerm("node-1")}}}}
	if plain.Spec.NodeName != "" || !proto.Equal(plain.Spec.Affinity.GetNodeAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution(), want) {
		t.Fatalf("plain template: nodeName %q affinity %v", plain.Spec.NodeName, plain.Spec.Affinity)
	}
	if TargetNode(plain) != "node-1" {
		t.Errorf("TargetNode = %q", TargetNode(plain))
	}

	ssd := &kplanev1.NodeSelectorRequirement{Key: "disk", Operator: "In", Values: []string{"ssd"}}
	pref := []*kplanev1.PreferredSchedulingTerm{{Weight: 5, Preference: &kplanev1.NodeSelectorTerm{MatchExpressions: []*kplanev1.NodeSelectorRequirement{ssd}}}}
	tmpl := &kplanev1.PodTemplateSpec{Spec: &kplanev1.PodSpec{Affinity: &kplanev1.Affinity{NodeAffinity: &kplanev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &kplanev1.NodeSelector{NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{
			{MatchExpressions: []*kplanev1.NodeSelectorRequirement{ssd}},
			{MatchFields: []*kplanev1.NodeSelectorRequirement{nameTerm("node-9")}},
		}},
		PreferredDuringSchedulingIgnoredDuringExecution: pref,
	}}}}
	p := NewPod(ds, tmpl, "h1", "node-2")
	want = &kplanev1.NodeSelector{NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{
		{MatchExpressions: []*kplanev1.NodeSelectorRequirement{ssd}, MatchFields: []*kplanev1.NodeSelectorRequirement{nameTerm("node-2")}},
		{MatchFields: []*kplanev1.NodeSelectorRequirement{nameTerm("node-2")}},
	}}
	na := p.Spec.Affinity.GetNodeAffinity()
	if !proto.Equal(na.GetRequiredDuringSchedulingIgnoredDuringExecution(), want) || len(na.GetPreferredDuringSchedulingIgnoredDuringExecution()) != 1 {
		t.Fatalf("template terms: %v", na)
	}
	if TargetNode(p) != "node-2" {
		t.Errorf("TargetNode = %q", TargetNode(p))
	}
	if got := tmpl.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[1].MatchFields[0].Values[0]; got != "node-9" {
		t.Errorf("the template was changed: %q", got)
	}
	bound := pod("b", "node-3", "h1", true)
	if TargetNode(bound) != "node-3" || TargetNode(&kplanev1.Pod{}) != "" {
		t.Error("TargetNode of a bound pod is its node, of a pod naming none empty")
	}
}
