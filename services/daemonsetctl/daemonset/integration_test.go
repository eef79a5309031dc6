package daemonset

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controllertest"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
	schedapp "github.com/kplane/kplane/services/scheduler/app"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 30 * time.Second

// cluster is an apiserver with daemonsetctl and the scheduler in-process
// (the scheduler binds the pods daemonsetctl creates unbound) and a fake
// kubelet for every node: it makes each pod Running and Ready a delay
// after it is bound, and finishes a graceful deletion after the same
// delay. A watcher
// tracks the pods of the DaemonSet "logs" and records the most nodes
// ever without a Ready pod during a rollout (from the moment watching
// starts).
type cluster struct {
	api kplanev1.ResourcesClient

	mu       sync.Mutex
	pods     map[string]*kplanev1.Pod
	watching map[string]bool // nodes the rollout check covers
	worst    int
}

func startCluster(t *testing.T, delay time.Duration) *cluster {
	t.Helper()
	srv := testserver.Start(t)
	api := srv.Client()
	controllertest.Run(t, srv.Addr(), NewService(), controllertest.LeaderElection("ds")...)
	controllertest.Run(t, srv.Addr(), schedapp.NewService())
	c := &cluster{api: api, pods: map[string]*kplanev1.Pod{}}
	started := map[string]bool{} // pod uids the kubelet has started
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	stream, err := api.Watch(ctx, &kplanev1.WatchRequest{Kind: "Pod", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	later := func(fn func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
			case <-time.After(delay):
				fn()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			pod := ev.GetObject().GetPod()
			if pod == nil {
				continue
			}
			c.observe(ev.GetType(), pod)
			switch {
			case ev.GetType() != kplanev1.EventType_EVENT_TYPE_DELETED && pod.GetSpec().GetNodeName() != "" &&
				pod.GetMetadata().GetDeletionTimestamp() == nil && !started[pod.GetMetadata().GetUid()]:
				started[pod.GetMetadata().GetUid()] = true
				later(func() {
					p := proto.Clone(pod).(*kplanev1.Pod)
					p.Metadata.ResourceVersion = ""
					p.Status = &kplanev1.PodStatus{Phase: kplanev1.PodRunning,
						Conditions: []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: kplanev1.ConditionTrue, LastTransitionTime: timestamppb.Now()}}}
					_, _ = api.UpdateStatus(ctx, &kplanev1.UpdateStatusRequest{Object: kplanev1.MustWrap(p)})
				})
			case ev.GetType() == kplanev1.EventType_EVENT_TYPE_MODIFIED && pod.GetMetadata().GetDeletionTimestamp() != nil:
				later(func() {
					zero := int64(0)
					_, _ = api.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: pod.GetMetadata().GetName(),
						GracePeriodSeconds: &zero, Preconditions: &kplanev1.Preconditions{Uid: pod.GetMetadata().GetUid()}})
				})
			}
		}
	}()
	return c
}

func (c *cluster) observe(typ kplanev1.EventType, pod *kplanev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if typ == kplanev1.EventType_EVENT_TYPE_DELETED {
		delete(c.pods, pod.GetMetadata().GetName())
	} else {
		c.pods[pod.GetMetadata().GetName()] = pod
	}
	if c.watching == nil {
		return
	}
	ready := map[string]bool{}
	for _, p := range c.pods {
		if apiutil.IsPodReady(p) && p.GetMetadata().GetDeletionTimestamp() == nil {
			ready[p.GetSpec().GetNodeName()] = true
		}
	}
	without := 0
	for n := range c.watching {
		if !ready[n] {
			without++
		}
	}
	c.worst = max(c.worst, without)
}

// watchRollout starts counting nodes without a Ready pod.
func (c *cluster) watchRollout(nodes ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watching = map[string]bool{}
	for _, n := range nodes {
		c.watching[n] = true
	}
	c.worst = 0
}

func (c *cluster) worstUnavailable() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.worst
}

// addNode adds a Ready node with room for 2 cpus and 110 pods.
func (c *cluster) addNode(t *testing.T, name string, mutate ...func(*kplanev1.Node)) {
	t.Helper()
	alloc := map[string]string{"cpu": "2", "memory": "4Gi", "pods": "110"}
	n := &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}, Spec: &kplanev1.NodeSpec{},
		Status: &kplanev1.NodeStatus{Capacity: alloc, Allocatable: alloc,
			Conditions: []*kplanev1.Condition{{Type: "Ready", Status: kplanev1.ConditionTrue}}}}
	for _, m := range mutate {
		m(n)
	}
	resp, err := c.api.Create(t.Context(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(n)})
	if err != nil {
		t.Fatal(err)
	}
	if created := resp.GetObject().GetNode(); len(created.GetStatus().GetAllocatable()) == 0 {
		created.Status = n.Status
		if _, err := c.api.UpdateStatus(t.Context(), &kplanev1.UpdateStatusRequest{Object: kplanev1.MustWrap(created)}); err != nil {
			t.Fatal(err)
		}
	}
}

func (c *cluster) changeNode(t *testing.T, name string, mutate func(*kplanev1.Node)) {
	t.Helper()
	err := client.RetryOnConflict(t.Context(), client.DefaultRetry, func() error {
		g, err := c.api.Get(t.Context(), &kplanev1.GetRequest{Kind: "Node", Name: name})
		if err != nil {
			return err
		}
		mutate(g.GetObject().GetNode())
		_, err = c.api.Update(t.Context(), &kplanev1.UpdateRequest{Object: g.GetObject()})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func newDS(name, image string) *kplanev1.DaemonSet {
	l := map[string]string{"app": name}
	return &kplanev1.DaemonSet{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: &kplanev1.DaemonSetSpec{
			Selector: &kplanev1.LabelSelector{MatchLabels: l},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: l},
				Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: image}}}},
		},
	}
}

func (c *cluster) create(t *testing.T, ds *kplanev1.DaemonSet) {
	t.Helper()
	if _, err := c.api.Create(t.Context(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(ds)}); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) get(t *testing.T, name string) *kplanev1.DaemonSet {
	t.Helper()
	resp, err := c.api.Get(t.Context(), &kplanev1.GetRequest{Kind: "DaemonSet", Namespace: "default", Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetObject().GetDaemonSet()
}

func (c *cluster) change(t *testing.T, name string, mutate func(*kplanev1.DaemonSet)) {
	t.Helper()
	err := client.RetryOnConflict(t.Context(), client.DefaultRetry, func() error {
		ds := c.get(t, name)
		mutate(ds)
		_, err := c.api.Update(t.Context(), &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(ds)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// nodesWithPods lists, per node, the set's bound pods that are not
// terminating.
func (c *cluster) nodesWithPods(t *testing.T, set string) map[string][]*kplanev1.Pod {
	t.Helper()
	resp, err := c.api.List(t.Context(), &kplanev1.ListRequest{Kind: "Pod", Namespace: "default", LabelSelector: "app=" + set})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*kplanev1.Pod{}
	for _, o := range resp.GetItems() {
		if p := o.GetPod(); p.GetMetadata().GetDeletionTimestamp() == nil && p.GetSpec().GetNodeName() != "" {
			out[p.GetSpec().GetNodeName()] = append(out[p.GetSpec().GetNodeName()], p)
		}
	}
	return out
}

// onExactly: exactly one Ready pod on each of nodes, none elsewhere, all
// at the set's current template, and the status agrees.
func (c *cluster) onExactly(t *testing.T, set string, nodes ...string) func() bool {
	return func() bool {
		got := c.nodesWithPods(t, set)
		if len(got) != len(nodes) {
			return false
		}
		ds := c.get(t, set)
		img := ds.GetSpec().GetTemplate().GetSpec().GetContainers()[0].GetImage()
		for _, n := range nodes {
			ps := got[n]
			if len(ps) != 1 || !apiutil.IsPodReady(ps[0]) || ps[0].GetSpec().GetContainers()[0].GetImage() != img {
				return false
			}
		}
		st := ds.GetStatus()
		k := int32(len(nodes))
		return st.GetDesiredNumberScheduled() == k && st.GetCurrentNumberScheduled() == k && st.GetNumberReady() == k &&
			st.GetUpdatedNumberScheduled() == k && st.GetNumberAvailable() == k && st.GetNumberMisscheduled() == 0 &&
			st.GetObservedGeneration() == ds.GetMetadata().GetGeneration()
	}
}

func names(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("node-%d", i+1))
	}
	sort.Strings(out)
	return out
}

// TestOnePodPerNode: 5 nodes get 5 pods, a 6th node its own; a removed
// node's pod goes; every pod carries the default tolerations.
func TestOnePodPerNode(t *testing.T) {
	c := startCluster(t, 50*time.Millisecond)
	for _, n := range names(5) {
		c.addNode(t, n)
	}
	c.create(t, newDS("logs", "tail:1"))
	testutil.Eventually(t, wait, "5 pods", c.onExactly(t, "logs", names(5)...))
	c.addNode(t, "node-6")
	testutil.Eventually(t, wait, "6 pods", c.onExactly(t, "logs", names(6)...))
	p := c.nodesWithPods(t, "logs")["node-6"][0]
	if len(p.Spec.Tolerations) != len(DefaultTolerations()) || p.Metadata.Labels[kplanev1.LabelControllerRevisionHash] == "" {
		t.Fatalf("pod: tolerations %v labels %v", p.Spec.Tolerations, p.Metadata.Labels)
	}
	if _, err := c.api.Delete(t.Context(), &kplanev1.DeleteRequest{Kind: "Node", Name: "node-6"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "node-6's pod gone", c.onExactly(t, "logs", names(5)...))
}

// TestTaintsCordonAndSelector: a node tainted NoSchedule keeps its pod
// but a new tainted node gets none; NoExecute removes the pod; a
// cordoned node still gets one; a node that stops matching the
// nodeSelector loses its pod.
func TestTaintsCordonAndSelector(t *testing.T) {
	c := startCluster(t, 50*time.Millisecond)
	for _, n := range names(3) {
		c.addNode(t, n, func(n *kplanev1.Node) { n.Metadata.Labels["role"] = "worker" })
	}
	ds := newDS("logs", "tail:1")
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"role": "worker"}
	c.create(t, ds)
	testutil.Eventually(t, wait, "3 pods", c.onExactly(t, "logs", names(3)...))

	c.changeNode(t, "node-1", func(n *kplanev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, &kplanev1.Taint{Key: "dedicated", Value: "db", Effect: kplanev1.TaintEffectNoSchedule})
	})
	c.addNode(t, "node-4", func(n *kplanev1.Node) {
		n.Metadata.Labels["role"] = "worker"
		n.Spec.Taints = []*kplanev1.Taint{{Key: "dedicated", Value: "db", Effect: kplanev1.TaintEffectNoSchedule}}
	})
	c.addNode(t, "node-5", func(n *kplanev1.Node) {
		n.Metadata.Labels["role"] = "worker"
		n.Spec.Unschedulable = true
		n.Spec.Taints = []*kplanev1.Taint{{Key: kplanev1.TaintNodeUnschedulable, Effect: kplanev1.TaintEffectNoSchedule}}
	})
	c.addNode(t, "node-6") // not a worker
	testutil.Eventually(t, wait, "cordoned node-5 gets a pod, node-4 none, node-1 keeps its own", func() bool {
		got := c.nodesWithPods(t, "logs")
		st := c.get(t, "logs").GetStatus()
		return len(got) == 4 && len(got["node-1"]) == 1 && len(got["node-5"]) == 1 && len(got["node-4"]) == 0 &&
			st.GetDesiredNumberScheduled() == 3 && st.GetNumberMisscheduled() == 1
	})
	c.changeNode(t, "node-1", func(n *kplanev1.Node) {
		n.Spec.Taints = []*kplanev1.Taint{{Key: "dedicated", Value: "db", Effect: kplanev1.TaintEffectNoExecute}}
	})
	c.changeNode(t, "node-2", func(n *kplanev1.Node) { delete(n.Metadata.Labels, "role") })
	testutil.Eventually(t, wait, "NoExecute and selector remove pods", c.onExactly(t, "logs", "node-3", "node-5"))
}

// TestRollingUpdateMaxUnavailable: with maxUnavailable 1 on 5 nodes, a
// new template reaches every node and at no pod event are two nodes
// without a Ready pod; with maxSurge 1 and maxUnavailable 0, no node is
// ever without one.
func TestRollingUpdateMaxUnavailable(t *testing.T) {
	c := startCluster(t, 50*time.Millisecond)
	nodes := names(5)
	for _, n := range nodes {
		c.addNode(t, n)
	}
	c.create(t, newDS("logs", "tail:1"))
	testutil.Eventually(t, wait, "5 pods", c.onExactly(t, "logs", nodes...))

	c.watchRollout(nodes...)
	c.change(t, "logs", func(ds *kplanev1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "tail:2" })
	testutil.Eventually(t, wait, "rolled to tail:2", c.onExactly(t, "logs", nodes...))
	if w := c.worstUnavailable(); w != 1 {
		t.Fatalf("maxUnavailable 1: at worst %d nodes without a Ready pod (want exactly 1: the update must move)", w)
	}

	c.watchRollout(nodes...)
	c.change(t, "logs", func(ds *kplanev1.DaemonSet) {
		ds.Spec.UpdateStrategy.RollingUpdate = &kplanev1.RollingUpdateDaemonSet{
			MaxSurge: kplanev1.IntOrStringFromInt32(1), MaxUnavailable: kplanev1.IntOrStringFromInt32(0)}
		ds.Spec.Template.Spec.Containers[0].Image = "tail:3"
	})
	testutil.Eventually(t, wait, "rolled to tail:3", c.onExactly(t, "logs", nodes...))
	if w := c.worstUnavailable(); w != 0 {
		t.Fatalf("maxSurge 1, maxUnavailable 0: %d nodes were without a Ready pod", w)
	}

	// Three revisions now, one per template.
	resp, err := c.api.List(t.Context(), &kplanev1.ListRequest{Kind: "ControllerRevision", Namespace: "default"})
	if err != nil || len(resp.GetItems()) != 3 {
		t.Fatalf("revisions: %d, %v", len(resp.GetItems()), err)
	}
}

// TestOnDelete: OnDelete leaves old pods alone until they are deleted.
func TestOnDelete(t *testing.T) {
	c := startCluster(t, 50*time.Millisecond)
	for _, n := range names(2) {
		c.addNode(t, n)
	}
	ds := newDS("logs", "tail:1")
	ds.Spec.UpdateStrategy = &kplanev1.DaemonSetUpdateStrategy{Type: kplanev1.UpdateStrategyOnDelete}
	c.create(t, ds)
	testutil.Eventually(t, wait, "2 pods", c.onExactly(t, "logs", names(2)...))
	c.change(t, "logs", func(ds *kplanev1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "tail:2" })
	testutil.Eventually(t, wait, "status sees the new revision", func() bool {
		st := c.get(t, "logs").GetStatus()
		return st.GetObservedGeneration() == 2 && st.GetUpdatedNumberScheduled() == 0
	})
	old := c.nodesWithPods(t, "logs")["node-1"][0]
	if _, err := c.api.Delete(t.Context(), &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: old.Metadata.Name}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "node-1 replaced at tail:2, node-2 untouched", func() bool {
		got := c.nodesWithPods(t, "logs")
		return len(got["node-1"]) == 1 && got["node-1"][0].Spec.Containers[0].Image == "tail:2" && apiutil.IsPodReady(got["node-1"][0]) &&
			len(got["node-2"]) == 1 && got["node-2"][0].Spec.Containers[0].Image == "tail:1" && c.get(t, "logs").GetStatus().GetUpdatedNumberScheduled() == 1
	})
}

// TestSchedulerPlacement: pods are created unbound with the template's
// required node affinity ANDed with matchFields metadata.name, and the
// scheduler binds each to its node; nodes outside the template's
// affinity get none; a node without room for the pod keeps it Pending
// with the scheduler's reason (not forced onto the node, not recreated).
func TestSchedulerPlacement(t *testing.T) {
	c := startCluster(t, 50*time.Millisecond)
	zone := func(z string) func(*kplanev1.Node) { return func(n *kplanev1.Node) { n.Metadata.Labels["zone"] = z } }
	small := func(n *kplanev1.Node) {
		n.Status.Allocatable = map[string]string{"cpu": "1", "memory": "4Gi", "pods": "110"}
		n.Status.Capacity = n.Status.Allocatable
	}
	c.addNode(t, "node-1", zone("a"))
	c.addNode(t, "node-2", zone("a"))
	c.addNode(t, "node-3", zone("a"), small)
	c.addNode(t, "node-4", zone("b"))
	ds := newDS("logs", "tail:1")
	inA := &kplanev1.NodeSelectorRequirement{Key: "zone", Operator: "In", Values: []string{"a"}}
	ds.Spec.Template.Spec.Affinity = &kplanev1.Affinity{NodeAffinity: &kplanev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &kplanev1.NodeSelector{
		NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{{MatchExpressions: []*kplanev1.NodeSelectorRequirement{inA}}}}}}
	ds.Spec.Template.Spec.Containers[0].Resources = &kplanev1.ResourceRequirements{Requests: map[string]string{"cpu": "1500m"}}
	c.create(t, ds)

	pending := func() *kplanev1.Pod {
		resp, err := c.api.List(t.Context(), &kplanev1.ListRequest{Kind: "Pod", Namespace: "default", LabelSelector: "app=logs"})
		if err != nil {
			t.Fatal(err)
		}
		var out []*kplanev1.Pod
		for _, o := range resp.GetItems() {
			if TargetNode(o.GetPod()) == "node-3" {
				out = append(out, o.GetPod())
			}
		}
		if len(out) != 1 {
			return nil
		}
		return out[0]
	}
	unschedulable := func(p *kplanev1.Pod) bool {
		cond := apiutil.FindCondition(p.GetStatus().GetConditions(), kplanev1.PodScheduled)
		return p.GetSpec().GetNodeName() == "" && cond.GetStatus() == kplanev1.ConditionFalse && cond.GetReason() == "Unschedulable" &&
			strings.Contains(cond.GetMessage(), "Insufficient cpu")
	}
	var stuck *kplanev1.Pod
	testutil.Eventually(t, wait, "node-1 and node-2 run the pod; node-3's waits Unschedulable; node-4 has none", func() bool {
		got := c.nodesWithPods(t, "logs")
		st := c.get(t, "logs").GetStatus()
		stuck = pending()
		return len(got) == 2 && len(got["node-1"]) == 1 && apiutil.IsPodReady(got["node-1"][0]) && len(got["node-2"]) == 1 && apiutil.IsPodReady(got["node-2"][0]) &&
			stuck != nil && unschedulable(stuck) &&
			st.GetDesiredNumberScheduled() == 3 && st.GetCurrentNumberScheduled() == 3 && st.GetNumberReady() == 2 && st.GetNumberUnavailable() == 1
	})
	bound := c.nodesWithPods(t, "logs")["node-1"][0]
	want := &kplanev1.NodeSelector{NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{{MatchExpressions: []*kplanev1.NodeSelectorRequirement{inA},
		MatchFields: []*kplanev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: "In", Values: []string{"node-1"}}}}}}
	if got := bound.GetSpec().GetAffinity().GetNodeAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution(); !proto.Equal(got, want) {
		t.Fatalf("node-1's pod affinity %v, want %v", got, want)
	}

	// Another zone-a node gets its pod; meanwhile node-3's pod is the same
	// one, still waiting.
	c.addNode(t, "node-5", zone("a"))
	testutil.Eventually(t, wait, "node-5 runs the pod", func() bool {
		got := c.nodesWithPods(t, "logs")
		return len(got["node-5"]) == 1 && apiutil.IsPodReady(got["node-5"][0])
	})
	if p := pending(); p == nil || p.GetMetadata().GetUid() != stuck.GetMetadata().GetUid() || !unschedulable(p) {
		t.Fatalf("node-3's pod was replaced or bound: %v", p)
	}
	// Room on node-3: the scheduler binds the waiting pod.
	c.changeNodeStatus(t, "node-3", func(n *kplanev1.Node) {
		n.Status.Allocatable["cpu"], n.Status.Capacity["cpu"] = "2", "2"
	})
	testutil.Eventually(t, wait, "node-3's pod bound and Ready", c.onExactly(t, "logs", "node-1", "node-2", "node-3", "node-5"))
	if p := c.nodesWithPods(t, "logs")["node-3"][0]; p.GetMetadata().GetUid() != stuck.GetMetadata().GetUid() {
		t.Fatal("node-3's pod was recreated instead of bound")
	}
}

func (c *cluster) changeNodeStatus(t *testing.T, name string, mutate func(*kplanev1.Node)) {
	t.Helper()
	err := client.RetryOnConflict(t.Context(), client.DefaultRetry, func() error {
		g, err := c.api.Get(t.Context(), &kplanev1.GetRequest{Kind: "Node", Name: name})
		if err != nil {
			return err
		}
		mutate(g.GetObject().GetNode())
		_, err = c.api.UpdateStatus(t.Context(), &kplanev1.UpdateStatusRequest{Object: g.GetObject()})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
