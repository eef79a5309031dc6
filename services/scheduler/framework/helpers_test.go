package framework_test

import (
	"fmt"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
)

func newPod(name, cpu, mem string) *kplanev1.Pod {
	req := map[string]string{}
	if cpu != "" {
		req["cpu"] = cpu
	}
	if mem != "" {
		req["memory"] = mem
	}
	return &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default", Uid: "uid-" + name},
		Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox",
			Resources: &kplanev1.ResourceRequirements{Requests: req}}}},
	}
}

func mustPod(t *testing.T, p *kplanev1.Pod) *framework.PodInfo {
	t.Helper()
	info, err := framework.NewPodInfo(p)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// node returns a maker of a Ready node with allocatable cpu/mem and, if
// usedCPU is set, one pod using usedCPU/usedMem.
func node(name, cpu, mem, usedCPU, usedMem string) func(*testing.T) *framework.NodeInfo {
	return func(t *testing.T) *framework.NodeInfo {
		t.Helper()
		alloc := map[string]string{"cpu": cpu, "memory": mem, "pods": "110"}
		n := &kplanev1.Node{
			Metadata: &kplanev1.ObjectMeta{Name: name, Labels: map[string]string{}},
			Spec:     &kplanev1.NodeSpec{},
			Status: &kplanev1.NodeStatus{Allocatable: alloc, Capacity: alloc,
				Conditions: []*kplanev1.Condition{{Type: "Ready", Status: "True"}}},
		}
		var pods []*kplanev1.Pod
		if usedCPU != "" {
			p := newPod(fmt.Sprintf("on-%s", name), usedCPU, usedMem)
			p.Spec.NodeName = name
			pods = append(pods, p)
		}
		info, err := framework.NewNodeInfo(n, pods...)
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
}
