package plugins

import (
	"context"
	"encoding/json"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
)

func pod(name string, mods ...func(*kplanev1.Pod)) *kplanev1.Pod {
	p := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default", Uid: "uid-" + name},
		Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox", Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{}}}}},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

func requests(cpu, mem string) func(*kplanev1.Pod) {
	return func(p *kplanev1.Pod) {
		if cpu != "" {
			p.Spec.Containers[0].Resources.Requests["cpu"] = cpu
		}
		if mem != "" {
			p.Spec.Containers[0].Resources.Requests["memory"] = mem
		}
	}
}

func withHostPort(port int32, proto string) func(*kplanev1.Pod) {
	return func(p *kplanev1.Pod) {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, &kplanev1.ContainerPort{ContainerPort: 80, HostPort: port, Protocol: proto})
	}
}

func nodeObj(name string, mods ...func(*kplanev1.Node)) *kplanev1.Node {
	alloc := map[string]string{"cpu": "4", "memory": "8Gi", "pods": "110"}
	n := &kplanev1.Node{
		Metadata: &kplanev1.ObjectMeta{Name: name, Labels: map[string]string{}},
		Spec:     &kplanev1.NodeSpec{},
		Status: &kplanev1.NodeStatus{Allocatable: alloc, Capacity: alloc,
			Conditions: []*kplanev1.Condition{{Type: "Ready", Status: "True"}}},
	}
	for _, m := range mods {
		m(n)
	}
	return n
}

func info(t *testing.T, p *kplanev1.Pod) *framework.PodInfo {
	t.Helper()
	i, err := framework.NewPodInfo(p)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func nodeInfo(t *testing.T, n *kplanev1.Node, pods ...*kplanev1.Pod) *framework.NodeInfo {
	t.Helper()
	for _, p := range pods {
		p.Spec.NodeName = n.Metadata.Name
	}
	ni, err := framework.NewNodeInfo(n, pods...)
	if err != nil {
		t.Fatal(err)
	}
	return ni
}

// runFilter runs a plugin's PreFilter (if any) and Filter as the
// framework would, and returns the Filter's code and message.
func runFilter(t *testing.T, pl framework.Plugin, p *framework.PodInfo, n *framework.NodeInfo) (framework.Code, string) {
	t.Helper()
	ctx, state := context.Background(), framework.NewCycleState()
	if pf, ok := pl.(framework.PreFilterPlugin); ok {
		st := pf.PreFilter(ctx, state, p)
		if st.Code() == framework.Skip {
			return framework.Success, ""
		}
		if !st.IsSuccess() {
			return st.Code(), st.Message()
		}
	}
	st := pl.(framework.FilterPlugin).Filter(ctx, state, p, n)
	return st.Code(), st.Message()
}

func TestFilters(t *testing.T) {
	cordoned := func(n *kplanev1.Node) { n.Spec.Unschedulable = true }
	tainted := func(effect string) func(n *kplanev1.Node) {
		return func(n *kplanev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, &kplanev1.Taint{Key: "dedicated", Value: "db", Effect: effect})
		}
	}
	notReady := func(n *kplanev1.Node) { n.Status.Conditions[0].Status = "False" }
	labelled := func(n *kplanev1.Node) { n.Metadata.Labels["disktype"] = "ssd" }
	tolerate := func(key string) func(*kplanev1.Pod) {
		return func(p *kplanev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, &kplanev1.Toleration{Key: key, Operator: "Exists"})
		}
	}
	selector := func(p *kplanev1.Pod) { p.Spec.NodeSelector = map[string]string{"disktype": "ssd"} }
	fit := &NodeResourcesFit{}
	for _, tc := range []struct {
		name     string
		plugin   framework.Plugin
		pod      *kplanev1.Pod
		node     *kplanev1.Node
		existing []*kplanev1.Pod
		code     framework.Code
		msg      string
	}{
		{"ready", NodeReady{}, pod("p"), nodeObj("n"), nil, framework.Success, ""},
		{"not ready", NodeReady{}, pod("p"), nodeObj("n", notReady), nil, framework.UnschedulableAndUnresolvable, "node(s) were not ready"},
		{"schedulable", NodeUnschedulable{}, pod("p"), nodeObj("n"), nil, framework.Success, ""},
		{"cordoned", NodeUnschedulable{}, pod("p"), nodeObj("n", cordoned), nil, framework.UnschedulableAndUnresolvable, "node(s) were unschedulable"},
		{"cordoned, tolerated", NodeUnschedulable{}, pod("p", tolerate(kplanev1.TaintNodeUnschedulable)), nodeObj("n", cordoned), nil, framework.Success, ""},
		{"NoSchedule taint", TaintToleration{}, pod("p"), nodeObj("n", tainted("NoSchedule")), nil, framework.UnschedulableAndUnresolvable, "node(s) had untolerated taint {dedicated: db}"},
		{"NoExecute taint", TaintToleration{}, pod("p"), nodeObj("n", tainted("NoExecute")), nil, framework.UnschedulableAndUnresolvable, "node(s) had untolerated taint {dedicated: db}"},
		{"PreferNoSchedule taint only scores", TaintToleration{}, pod("p"), nodeObj("n", tainted("PreferNoSchedule")), nil, framework.Success, ""},
		{"taint tolerated", TaintToleration{}, pod("p", tolerate("dedicated")), nodeObj("n", tainted("NoSchedule")), nil, framework.Success, ""},
		{"nodeSelector matches", NodeAffinity{}, pod("p", selector), nodeObj("n", labelled), nil, framework.Success, ""},
		{"nodeSelector misses", NodeAffinity{}, pod("p", selector), nodeObj("n"), nil, framework.UnschedulableAndUnresolvable, "node(s) didn't match Pod's node affinity/selector"},
		{"host port free", NodePorts{}, pod("p", withHostPort(8080, "")), nodeObj("n"), []*kplanev1.Pod{pod("q", withHostPort(8081, ""))}, framework.Success, ""},
		{"host port taken", NodePorts{}, pod("p", withHostPort(8080, "")), nodeObj("n"), []*kplanev1.Pod{pod("q", withHostPort(8080, "TCP"))}, framework.Unschedulable, ReasonNodePorts},
		{"same port, other protocol", NodePorts{}, pod("p", withHostPort(53, "UDP")), nodeObj("n"), []*kplanev1.Pod{pod("q", withHostPort(53, "TCP"))}, framework.Success, ""},
		{"no host ports skips", NodePorts{}, pod("p"), nodeObj("n"), []*kplanev1.Pod{pod("q", withHostPort(8080, ""))}, framework.Success, ""},
		{"resources fit", fit, pod("p", requests("2", "4Gi")), nodeObj("n"), []*kplanev1.Pod{pod("q", requests("2", "4Gi"))}, framework.Success, ""},
		{"cpu short", fit, pod("p", requests("3", "")), nodeObj("n"), []*kplanev1.Pod{pod("q", requests("2", ""))}, framework.Unschedulable, "Insufficient cpu"},
		{"cpu and memory short", fit, pod("p", requests("3", "5Gi")), nodeObj("n"), []*kplanev1.Pod{pod("q", requests("2", "4Gi"))}, framework.Unschedulable, "Insufficient cpu, Insufficient memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg := runFilter(t, tc.plugin, info(t, tc.pod), nodeInfo(t, tc.node, tc.existing...))
			if code != tc.code || msg != tc.msg {
				t.Fatalf("got %v %q, want %v %q", code, msg, tc.code, tc.msg)
			}
		})
	}
}

func TestNodeResourcesFitStrategies(t *testing.T) {
	// A 4-cpu/8Gi node with 1 cpu/2Gi used; the pod asks 1 cpu/2Gi: after
	// placing it half of each is used.
	mk := func(args string) *NodeResourcesFit {
		pl, err := NewNodeResourcesFit(json.RawMessage(args), nil)
		if err != nil {
			t.Fatal(err)
		}
		return pl.(*NodeResourcesFit)
	}
	ctx := context.Background()
	p := info(t, pod("p", requests("1", "2Gi")))
	half := nodeInfo(t, nodeObj("n"), pod("q", requests("1", "2Gi")))
	quarter := nodeInfo(t, nodeObj("m"))
	for _, tc := range []struct {
		name          string
		args          string
		half, quarter int64
	}{
		{"default is LeastAllocated", ``, 50, 75},
		{"LeastAllocated", `{"scoringStrategy":{"type":"LeastAllocated"}}`, 50, 75},
		{"MostAllocated", `{"scoringStrategy":{"type":"MostAllocated"}}`, 50, 25},
		// linear 0→0, 100→10 (×10): utilization 50% and 25% score 50 and 25.
		{"RequestedToCapacityRatio linear", `{"scoringStrategy":{"type":"RequestedToCapacityRatio","requestedToCapacityRatio":{"shape":[{"utilization":0,"score":0},{"utilization":100,"score":10}]}}}`, 50, 25},
		// 0→10, 50→0: 50% scores 0, 25% halfway, 50.
		{"RequestedToCapacityRatio bin", `{"scoringStrategy":{"type":"RequestedToCapacityRatio","requestedToCapacityRatio":{"shape":[{"utilization":0,"score":10},{"utilization":50,"score":0}]}}}`, 0, 50},
		{"cpu only, weighted", `{"scoringStrategy":{"type":"MostAllocated","resources":[{"name":"cpu","weight":3}]}}`, 50, 25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := mk(tc.args)
			h, _ := pl.Score(ctx, nil, p, half)
			q, _ := pl.Score(ctx, nil, p, quarter)
			if h != tc.half || q != tc.quarter {
				t.Fatalf("scores half=%d quarter=%d, want %d %d", h, q, tc.half, tc.quarter)
			}
		})
	}
}

func TestReverseNormalize(t *testing.T) {
	scores := framework.NodeScoreList{{Name: "a", Score: 0}, {Name: "b", Score: 2}, {Name: "c", Score: 4}}
	reverse{}.NormalizeScore(context.Background(), nil, nil, scores)
	if scores[0].Score != 100 || scores[1].Score != 50 || scores[2].Score != 0 {
		t.Fatalf("got %v", scores)
	}
	same := framework.NodeScoreList{{Name: "a"}, {Name: "b"}}
	reverse{}.NormalizeScore(context.Background(), nil, nil, same)
	if same[0].Score != 100 || same[1].Score != 100 {
		t.Fatalf("all equal: got %v", same)
	}
}

// TaintToleration scores by untolerated PreferNoSchedule taints: fewer is
// better (reversed onto 0..100); a pod that tolerates them sees no
// difference.
func TestTaintTolerationScore(t *testing.T) {
	prefer := func(keys ...string) func(*kplanev1.Node) {
		return func(n *kplanev1.Node) {
			for _, k := range keys {
				n.Spec.Taints = append(n.Spec.Taints, &kplanev1.Taint{Key: k, Effect: "PreferNoSchedule"})
			}
		}
	}
	c := &cluster{t: t, nodes: []*framework.NodeInfo{
		nodeInfo(t, nodeObj("a", prefer("x", "y"))),
		nodeInfo(t, nodeObj("b", prefer("x"))),
		nodeInfo(t, nodeObj("c")),
	}}
	if got := c.scores(TaintToleration{}, pod("p")); got["a"] != 0 || got["b"] != 50 || got["c"] != 100 {
		t.Errorf("untolerated: scores %v, want a 0, b 50, c 100", got)
	}
	tolerant := pod("p", func(p *kplanev1.Pod) {
		p.Spec.Tolerations = []*kplanev1.Toleration{{Operator: "Exists", Effect: "PreferNoSchedule"}}
	})
	if got := c.scores(TaintToleration{}, tolerant); got["a"] != 100 || got["b"] != 100 || got["c"] != 100 {
		t.Errorf("tolerated: scores %v, want 100 each", got)
	}
}
