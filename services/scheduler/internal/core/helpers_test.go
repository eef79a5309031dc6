package core

import (
	"fmt"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// testNode builds a Ready node with the given allocatable cpu, memory and pods.
func testNode(name, cpu, mem string, pods int, mods ...func(*kplanev1.Node)) *kplanev1.Node {
	alloc := map[string]string{ResourcePods: fmt.Sprint(pods)}
	if cpu != "" {
		alloc[ResourceCPU] = cpu
	}
	if mem != "" {
		alloc[ResourceMemory] = mem
	}
	n := &kplanev1.Node{
		Metadata: &kplanev1.ObjectMeta{Name: name},
		Spec:     &kplanev1.NodeSpec{},
		Status: &kplanev1.NodeStatus{
			Capacity: alloc, Allocatable: alloc,
			Conditions: []*kplanev1.Condition{{Type: kplanev1.NodeReady, Status: "True"}},
		},
	}
	for _, m := range mods {
		m(n)
	}
	return n
}

func withTaint(key, value, effect string) func(*kplanev1.Node) {
	return func(n *kplanev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, &kplanev1.Taint{Key: key, Value: value, Effect: effect})
	}
}

func withLabels(kv ...string) func(*kplanev1.Node) {
	return func(n *kplanev1.Node) {
		if n.Metadata.Labels == nil {
			n.Metadata.Labels = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			n.Metadata.Labels[kv[i]] = kv[i+1]
		}
	}
}

func cordoned(n *kplanev1.Node) { n.Spec.Unschedulable = true }

func notReady(status string) func(*kplanev1.Node) {
	return func(n *kplanev1.Node) { n.Status.Conditions[0].Status = status }
}

// testPod builds a pod with one container per request pair ("cpu,mem";
// empty parts are left out).
func testPod(name string, requests ...[2]string) *kplanev1.Pod {
	p := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default", Uid: "uid-" + name},
		Spec:     &kplanev1.PodSpec{},
	}
	for i, r := range requests {
		req := map[string]string{}
		if r[0] != "" {
			req[ResourceCPU] = r[0]
		}
		if r[1] != "" {
			req[ResourceMemory] = r[1]
		}
		p.Spec.Containers = append(p.Spec.Containers, &kplanev1.Container{
			Name: fmt.Sprintf("c%d", i), Image: "busybox",
			Resources: &kplanev1.ResourceRequirements{Requests: req},
		})
	}
	if len(requests) == 0 {
		p.Spec.Containers = []*kplanev1.Container{{Name: "c0", Image: "busybox"}}
	}
	return p
}

func mustInfo(p *kplanev1.Pod) *PodInfo {
	info, err := NewPodInfo(p)
	if err != nil {
		panic(err)
	}
	return info
}

func nodeInfo(n *kplanev1.Node, pods ...*kplanev1.Pod) *NodeInfo {
	infos := make([]*PodInfo, len(pods))
	for i, p := range pods {
		infos[i] = mustInfo(p)
	}
	return NewNodeInfo(NewNodeState(n), infos...)
}
