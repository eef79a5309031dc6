package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/test/e2e/stack"
)

func init() {
	binaries["scheduler-plugin"] = "examples/scheduler-plugin"
	binaries["nodeagent"] = "services/nodeagent"
}

// TestScheduling runs the apiserver, the example custom scheduler binary
// (bin/scheduler-plugin: every in-tree plugin plus NodeLabelPreference,
// profiles default-scheduler and ssd-scheduler from
// examples/scheduler-plugin/config.yaml), replicactl and a fake node
// agent with four 4-cpu nodes, as processes. node-0 and node-1 are in
// zone-a, node-2 and node-3 in zone-b; node-0..2 are in pool "web";
// node-3 has disktype=ssd.
func TestScheduling(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{
		BinDir: binDir, DataDir: t.TempDir(), Nodes: 4, NoProxy: true, Runtime: stack.RuntimeFake,
		Controllers: []string{"scheduler-plugin", "ipamctl", "replicactl"},
		Args: map[string][]string{
			"ipamctl": {"--cluster-cidr", fmt.Sprintf("127.%d.0.0/16", 150+os.Getpid()%50)},
			"scheduler-plugin": {"--config", filepath.Join("..", "..", "examples", "scheduler-plugin", "config.yaml"),
				"--pod-initial-backoff", "200ms", "--pod-max-backoff", "1s"},
			"nodeagent": {"--cpu", "4", "--memory", "16Gi"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if err := s.Stop(sctx); err != nil {
			t.Errorf("stop stack: %v", err)
		}
		if t.Failed() {
			t.Logf("logs in %s", s.Options().LogDir)
		}
	})
	c := &epCluster{t: t, s: s, api: dialStack(context.Background(), t, s)}

	labels := map[string]map[string]string{
		"node-0": {"topology.kubernetes.io/zone": "zone-a", "pool": "web"},
		"node-1": {"topology.kubernetes.io/zone": "zone-a", "pool": "web"},
		"node-2": {"topology.kubernetes.io/zone": "zone-b", "pool": "web"},
		"node-3": {"topology.kubernetes.io/zone": "zone-b", "disktype": "ssd"},
	}
	for name, l := range labels {
		c.eventually("node "+name+" labelled", func() string {
			ctx, opt := call(t)
			resp, err := c.api.Get(ctx, &kplanev1.GetRequest{Kind: "Node", Name: name}, opt)
			if err != nil {
				return err.Error()
			}
			n := resp.GetObject().GetNode()
			for k, v := range l {
				n.Metadata.Labels[k] = v
			}
			if _, err := c.api.Update(ctx, &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(n)}, opt); err != nil {
				return err.Error()
			}
			return ""
		})
	}
	pod := func(name string, cpu string, mods ...func(*kplanev1.Pod)) {
		p := &kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{}},
			Spec: &kplanev1.PodSpec{TerminationGracePeriodSeconds: proto.Int64(1), Containers: []*kplanev1.Container{{Name: "c", Image: "busybox",
				Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"cpu": cpu}}}}},
		}
		for _, m := range mods {
			m(p)
		}
		c.create(kplanev1.MustWrap(p))
	}
	running := func(name string) string {
		var node string
		c.eventually(name+" Running", func() string {
			p := c.pod(name)
			node = p.GetSpec().GetNodeName()
			if p.GetStatus().GetPhase() != kplanev1.PodRunning {
				return fmt.Sprintf("node %q phase %q conditions %v", node, p.GetStatus().GetPhase(), p.GetStatus().GetConditions())
			}
			return ""
		})
		return node
	}
	zone := func(node string) string { return labels[node]["topology.kubernetes.io/zone"] }

	// anti-affinity spreads and leaves the fourth Pending.
	{
		web := func(p *kplanev1.Pod) {
			p.Metadata.Labels["app"] = "web"
			p.Spec.NodeSelector = map[string]string{"pool": "web"}
			p.Spec.Affinity = &kplanev1.Affinity{PodAntiAffinity: &kplanev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []*kplanev1.PodAffinityTerm{{
				TopologyKey: kplanev1.LabelHostname, LabelSelector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}}
		}
		seen := map[string]string{}
		for i := range 3 {
			name := fmt.Sprintf("web-%d", i)
			pod(name, "100m", web)
			n := running(name)
			if other, dup := seen[n]; dup {
				t.Fatalf("%s and %s both on %s", name, other, n)
			}
			seen[n] = name
		}
		pod("web-3", "100m", web)
		want := "0/4 nodes are available: 3 node(s) didn't match pod anti-affinity rules, 1 node(s) didn't match Pod's node affinity/selector."
		c.eventually("web-3 Pending with the reason", func() string {
			p := c.pod("web-3")
			for _, cond := range p.GetStatus().GetConditions() {
				if cond.GetType() == kplanev1.PodScheduled && cond.GetStatus() == "False" && strings.HasPrefix(cond.GetMessage(), want) {
					return ""
				}
			}
			return fmt.Sprintf("node %q conditions %v", p.GetSpec().GetNodeName(), p.GetStatus().GetConditions())
		})
		if p := c.pod("web-3"); p.GetSpec().GetNodeName() != "" || p.GetStatus().GetPhase() != kplanev1.PodPending {
			t.Fatalf("web-3 on %q phase %q", p.GetSpec().GetNodeName(), p.GetStatus().GetPhase())
		}
	}

	// The same with a ReplicaSet of 4 replicas: 3 run on the 3 pool
	// nodes, one each, and the 4th stays Pending with the reason.
	{
		labels := map[string]string{"app": "replicas"}
		c.create(kplanev1.MustWrap(&kplanev1.ReplicaSet{
			Metadata: &kplanev1.ObjectMeta{Name: "replicas", Namespace: "default"},
			Spec: &kplanev1.ReplicaSetSpec{
				Replicas: proto.Int32(4),
				Selector: &kplanev1.LabelSelector{MatchLabels: labels},
				Template: &kplanev1.PodTemplateSpec{
					Metadata: &kplanev1.ObjectMeta{Labels: labels},
					Spec: &kplanev1.PodSpec{
						TerminationGracePeriodSeconds: proto.Int64(1),
						NodeSelector:                  map[string]string{"pool": "web"},
						Affinity: &kplanev1.Affinity{PodAntiAffinity: &kplanev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []*kplanev1.PodAffinityTerm{{
							TopologyKey: kplanev1.LabelHostname, LabelSelector: &kplanev1.LabelSelector{MatchLabels: labels}}}}},
						Containers: []*kplanev1.Container{{Name: "c", Image: "busybox",
							Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"cpu": "100m"}}}},
					},
				},
			},
		}))
		want := "0/4 nodes are available: 3 node(s) didn't match pod anti-affinity rules, 1 node(s) didn't match Pod's node affinity/selector."
		c.eventually("3 replicas Running on 3 nodes, the 4th Pending with the reason", func() string {
			ctx, opt := call(t)
			resp, err := c.api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default", LabelSelector: "app=replicas"}, opt)
			if err != nil {
				return err.Error()
			}
			nodes, pending := map[string]bool{}, 0
			var state []string
			for _, o := range resp.GetItems() {
				p := o.GetPod()
				state = append(state, fmt.Sprintf("%s node=%q phase=%s", p.GetMetadata().GetName(), p.GetSpec().GetNodeName(), p.GetStatus().GetPhase()))
				switch {
				case p.GetStatus().GetPhase() == kplanev1.PodRunning:
					nodes[p.GetSpec().GetNodeName()] = true
				case p.GetSpec().GetNodeName() == "":
					for _, cond := range p.GetStatus().GetConditions() {
						if cond.GetType() == kplanev1.PodScheduled && cond.GetStatus() == "False" && strings.HasPrefix(cond.GetMessage(), want) {
							pending++
						}
					}
				}
			}
			if len(resp.GetItems()) != 4 || len(nodes) != 3 || pending != 1 {
				return fmt.Sprintf("%d pods, Running on %d distinct nodes, %d Pending with the reason: %v", len(resp.GetItems()), len(nodes), pending, state)
			}
			return ""
		})
	}

	// topology spread across zones.
	{
		spread := func(p *kplanev1.Pod) {
			p.Metadata.Labels["app"] = "spread"
			p.Spec.TopologySpreadConstraints = []*kplanev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone",
				WhenUnsatisfiable: "DoNotSchedule", LabelSelector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}}}}
		}
		perZone := map[string]int{}
		for i := range 6 {
			name := fmt.Sprintf("spread-%d", i)
			pod(name, "100m", spread)
			perZone[zone(running(name))]++
			if d := perZone["zone-a"] - perZone["zone-b"]; d > 1 || d < -1 {
				t.Fatalf("after %s: %v, skew above 1", name, perZone)
			}
		}
		if perZone["zone-a"] != 3 || perZone["zone-b"] != 3 {
			t.Fatalf("per zone %v, want 3 and 3", perZone)
		}
	}

	// custom profile with the example plugin.
	{
		for i := range 3 {
			name := fmt.Sprintf("fast-%d", i)
			pod(name, "100m", func(p *kplanev1.Pod) { p.Spec.SchedulerName = "ssd-scheduler" })
			if n := running(name); n != "node-3" {
				t.Fatalf("%s on %s, want the ssd node node-3", name, n)
			}
		}
		pod("nobody", "100m", func(p *kplanev1.Pod) { p.Spec.SchedulerName = "no-such-scheduler" })
		pod("marker", "100m")
		running("marker")
		if p := c.pod("nobody"); p.GetSpec().GetNodeName() != "" || len(p.GetStatus().GetConditions()) != 0 {
			t.Fatalf("a pod of an unknown scheduler was touched: %q %v", p.GetSpec().GetNodeName(), p.GetStatus().GetConditions())
		}
	}

	// a high-priority pod preempts on a full node.
	{
		c.create(kplanev1.MustWrap(&kplanev1.PriorityClass{Metadata: &kplanev1.ObjectMeta{Name: "batch"}, Value: 10}))
		c.create(kplanev1.MustWrap(&kplanev1.PriorityClass{Metadata: &kplanev1.ObjectMeta{Name: "urgent"}, Value: 100000}))
		onSSD := func(p *kplanev1.Pod) { p.Spec.NodeSelector = map[string]string{"disktype": "ssd"} }
		// node-3 has 4 cpu and 0.3 in use (fast-*): fill it.
		for i := range 3 {
			pod(fmt.Sprintf("batch-%d", i), "1", onSSD, func(p *kplanev1.Pod) { p.Spec.PriorityClassName = "batch" })
			running(fmt.Sprintf("batch-%d", i))
		}
		dump := func() string {
			ctx, opt := call(t)
			resp, err := c.api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default"}, opt)
			if err != nil {
				return err.Error()
			}
			var b strings.Builder
			for _, o := range resp.GetItems() {
				p := o.GetPod()
				fmt.Fprintf(&b, "%s node=%s prio=%d cpu=%s deleting=%v; ", p.GetMetadata().GetName(), p.GetSpec().GetNodeName(),
					p.GetSpec().GetPriority(), p.GetSpec().GetContainers()[0].GetResources().GetRequests()["cpu"], p.GetMetadata().GetDeletionTimestamp() != nil)
			}
			return b.String()
		}
		before := dump()
		pod("vip", "1", onSSD, func(p *kplanev1.Pod) { p.Spec.PriorityClassName = "urgent" })
		if n := running("vip"); n != "node-3" {
			t.Fatalf("vip on %s", n)
		}
		// Victims are taken least important first: the priority-0 pods on
		// node-3 (fast-*, and any default pods placed there) free exactly
		// the 1 cpu needed, so every batch pod (priority 10) stays.
		for i := range 3 {
			if p := c.pod(fmt.Sprintf("batch-%d", i)); p == nil || p.GetMetadata().GetDeletionTimestamp() != nil {
				t.Fatalf("batch-%d was preempted though the lower-priority pods made room; before: %s; after: %s", i, before, dump())
			}
		}
		for _, name := range []string{"fast-0", "fast-1", "fast-2"} {
			if p := c.pod(name); p != nil && p.GetMetadata().GetDeletionTimestamp() == nil {
				t.Fatalf("%s (priority 0, in the way) was not preempted", name)
			}
		}
	}
}
