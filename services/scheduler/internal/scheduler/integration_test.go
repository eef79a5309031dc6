package scheduler

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
	"github.com/kplane/kplane/services/scheduler/framework"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, d, what, cond)
}

type fixture struct {
	t   *testing.T
	srv *testserver.Server
	api kplanev1.ResourcesClient
	c   *client.Client
	ctx context.Context
}

func newFixture(t *testing.T) *fixture {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	c, err := client.Dial(ctx, client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &fixture{t: t, srv: srv, api: c, c: c, ctx: ctx}
}

// startScheduler runs a scheduler in-process as the binary would run it;
// the returned stop function shuts it down (SIGTERM-like) and waits.
func (f *fixture) startScheduler(id string, extra ...string) (stop func()) {
	f.t.Helper()
	return f.startSchedulerWith(id, nil, extra...)
}

// startSchedulerWith is startScheduler with out-of-tree plugins.
func (f *fixture) startSchedulerWith(id string, registry framework.Registry, extra ...string) (stop func()) {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, NewService(registry), append([]string{
			"--apiserver", f.srv.Addr(), "--health-addr", "127.0.0.1:0", "--log-level", "warn", "--id", id,
			"--leader-elect-lease-duration", "10s", "--leader-elect-renew-deadline", "8s",
			"--leader-elect-retry-period", "200ms", "--shutdown-grace-period", "1s",
			"--pod-initial-backoff", "100ms", "--pod-max-backoff", "500ms",
		}, extra...))
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				f.t.Errorf("scheduler %s exited with %v", id, err)
			}
		})
	}
	f.t.Cleanup(stop)
	return stop
}

func (f *fixture) createNode(name, cpu, mem string, pods int, mods ...func(*kplanev1.Node)) {
	f.t.Helper()
	alloc := map[string]string{"cpu": cpu, "memory": mem, "pods": fmt.Sprint(pods)}
	n := &kplanev1.Node{
		Metadata: &kplanev1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec:     &kplanev1.NodeSpec{},
		Status: &kplanev1.NodeStatus{Capacity: alloc, Allocatable: alloc,
			Conditions: []*kplanev1.Condition{{Type: "Ready", Status: "True", Reason: "KubeletReady"}}},
	}
	for _, m := range mods {
		m(n)
	}
	created, err := client.Nodes(f.c).Create(f.ctx, n)
	if err != nil {
		f.t.Fatalf("create node %s: %v", name, err)
	}
	if len(created.GetStatus().GetAllocatable()) == 0 {
		// Status is not taken on create: set it as the node agent would.
		created.Status = n.Status
		if _, err := client.Nodes(f.c).UpdateStatus(f.ctx, created); err != nil {
			f.t.Fatalf("node %s status: %v", name, err)
		}
	}
}

func (f *fixture) updateNode(name string, mod func(*kplanev1.Node)) {
	f.t.Helper()
	nodes := client.Nodes(f.c)
	err := client.RetryOnConflict(f.ctx, client.DefaultRetry, func() error {
		n, err := nodes.Get(f.ctx, "", name)
		if err != nil {
			return err
		}
		mod(n)
		_, err = nodes.Update(f.ctx, n)
		return err
	})
	if err != nil {
		f.t.Fatalf("update node %s: %v", name, err)
	}
}

func (f *fixture) createPod(name, cpu, mem string, mods ...func(*kplanev1.Pod)) {
	f.t.Helper()
	req := map[string]string{}
	if cpu != "" {
		req["cpu"] = cpu
	}
	if mem != "" {
		req["memory"] = mem
	}
	p := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "app", Image: "busybox",
			Resources: &kplanev1.ResourceRequirements{Requests: req}}}},
	}
	for _, m := range mods {
		m(p)
	}
	if _, err := client.Pods(f.c).Create(f.ctx, p); err != nil {
		f.t.Fatalf("create pod %s: %v", name, err)
	}
}

func (f *fixture) pod(name string) *kplanev1.Pod {
	f.t.Helper()
	p, err := client.Pods(f.c).Get(f.ctx, "default", name)
	if err != nil {
		f.t.Fatalf("get pod %s: %v", name, err)
	}
	return p
}

func (f *fixture) waitBound(name string) string {
	f.t.Helper()
	var node string
	eventually(f.t, 20*time.Second, "pod "+name+" to be bound", func() bool {
		node = f.pod(name).GetSpec().GetNodeName()
		return node != ""
	})
	return node
}

// events returns the events about pod name with reason.
func (f *fixture) events(name, reason string) []*kplanev1.Event {
	f.t.Helper()
	evs, _, err := client.Events(f.c).List(f.ctx, "default", client.ListOptions{})
	if err != nil {
		f.t.Fatalf("list events: %v", err)
	}
	var out []*kplanev1.Event
	for _, e := range evs {
		if e.GetInvolvedObject().GetName() == name && e.GetReason() == reason {
			out = append(out, e)
		}
	}
	return out
}

func TestPodsAreBoundWithoutOverCommit(t *testing.T) {
	f := newFixture(t)
	f.startScheduler("s1")
	for i := range 3 {
		f.createNode(fmt.Sprintf("node-%d", i), "2", "4Gi", 10)
	}
	// 12 pods of 500m fill the three nodes' cpu exactly.
	for i := range 12 {
		f.createPod(fmt.Sprintf("web-%d", i), "500m", "256Mi")
	}
	perNode := map[string]int{}
	for i := range 12 {
		perNode[f.waitBound(fmt.Sprintf("web-%d", i))]++
	}
	for n, c := range perNode {
		if c != 4 {
			t.Fatalf("pods per node = %v: node %s has %d, want 4 each (2 cpu / 500m)", perNode, n, c)
		}
	}
	eventually(t, 30*time.Second, "a Scheduled event", func() bool {
		evs := f.events("web-0", "Scheduled")
		return len(evs) == 1 && strings.HasPrefix(evs[0].GetMessage(), "Successfully assigned default/web-0 to node-")
	})

	// The 13th does not fit anywhere.
	f.createPod("web-12", "500m", "")
	// Equal priority: preemption finds no victims.
	want := "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
	eventually(t, 30*time.Second, "PodScheduled=False", func() bool {
		c := podScheduledCondition(f.pod("web-12"))
		return c != nil && c.GetStatus() == "False" && c.GetReason() == "Unschedulable" && c.GetMessage() == want
	})
	// Deleting a pod frees room: it is bound at once (a pod event retries it).
	if _, err := f.api.Delete(f.ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "web-3", GracePeriodSeconds: proto.Int64(0)}); err != nil {
		t.Fatal(err)
	}
	f.waitBound("web-12")
}

func TestUnschedulablePodReportsWhyAndIsBoundWhenANodeFits(t *testing.T) {
	f := newFixture(t)
	f.startScheduler("s1")
	f.createNode("small-a", "1", "2Gi", 10)
	f.createNode("small-b", "1", "2Gi", 10)
	f.createNode("gone", "8", "8Gi", 10, func(n *kplanev1.Node) {
		n.Spec.Taints = []*kplanev1.Taint{{Key: "node.kubernetes.io/unreachable", Effect: "NoExecute"}}
	})
	f.createPod("big", "2", "1Gi")

	want := "0/3 nodes are available: 2 Insufficient cpu, 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }." +
		" preemption: 0/3 nodes are available: 2 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
	eventually(t, 30*time.Second, "PodScheduled=False with the reasons", func() bool {
		c := podScheduledCondition(f.pod("big"))
		return c != nil && c.GetStatus() == "False" && c.GetReason() == "Unschedulable" && c.GetMessage() == want
	})
	eventually(t, 30*time.Second, "a FailedScheduling event", func() bool {
		evs := f.events("big", "FailedScheduling")
		return len(evs) == 1 && evs[0].GetMessage() == want && evs[0].GetType() == "Warning"
	})
	if n := f.pod("big").GetSpec().GetNodeName(); n != "" {
		t.Fatalf("an impossible pod was bound to %s", n)
	}

	f.createNode("large", "4", "8Gi", 10)
	if node := f.waitBound("big"); node != "large" {
		t.Fatalf("bound to %s, want large", node)
	}
	eventually(t, 30*time.Second, "PodScheduled=True after binding", func() bool {
		c := podScheduledCondition(f.pod("big"))
		return c != nil && c.GetStatus() == "True"
	})
}

func TestCordonStopsNewPlacements(t *testing.T) {
	f := newFixture(t)
	f.startScheduler("s1")
	f.createNode("a", "4", "8Gi", 50)
	f.createNode("b", "4", "8Gi", 50)
	f.updateNode("a", func(n *kplanev1.Node) { n.Spec.Unschedulable = true })
	// The scheduler must have seen the cordon before the pods arrive:
	// wait until a probe pod that only fits "a" is reported unschedulable.
	f.createPod("probe", "", "", func(p *kplanev1.Pod) {
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "a"}
	})
	eventually(t, 30*time.Second, "the probe to be refused", func() bool {
		c := podScheduledCondition(f.pod("probe"))
		return c != nil && c.GetMessage() == "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) were unschedulable."+
			" preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
	})
	for i := range 10 {
		f.createPod(fmt.Sprintf("p-%d", i), "100m", "")
	}
	for i := range 10 {
		if node := f.waitBound(fmt.Sprintf("p-%d", i)); node != "b" {
			t.Fatalf("p-%d went to cordoned node %s", i, node)
		}
	}
	// Uncordon: the probe is retried (node changed) and bound to a.
	f.updateNode("a", func(n *kplanev1.Node) { n.Spec.Unschedulable = false })
	if node := f.waitBound("probe"); node != "a" {
		t.Fatalf("probe bound to %s", node)
	}
}

func TestOnlyTheLeaderBinds(t *testing.T) {
	f := newFixture(t)
	stopA := f.startScheduler("sched-a")
	eventually(t, 30*time.Second, "sched-a to lead", func() bool {
		l, err := client.Leases(f.c).Get(f.ctx, "kplane-system", Name)
		return err == nil && l.GetSpec().GetHolderIdentity() == "sched-a"
	})
	f.startScheduler("sched-b")
	f.createNode("n", "8", "16Gi", 100)
	for i := range 10 {
		f.createPod(fmt.Sprintf("a-%d", i), "100m", "")
	}
	reporter := func(name string) string {
		var src string
		eventually(t, 30*time.Second, "the Scheduled event of "+name, func() bool {
			evs := f.events(name, "Scheduled")
			if len(evs) == 0 {
				return false
			}
			src = evs[0].GetReportingInstance()
			return true
		})
		return src
	}
	for i := range 10 {
		f.waitBound(fmt.Sprintf("a-%d", i))
		if got := reporter(fmt.Sprintf("a-%d", i)); got != "sched-a" {
			t.Fatalf("a-%d was bound by %q, want the leader sched-a", i, got)
		}
	}
	// The leader steps down (releasing the lease): the standby takes over.
	stopA()
	eventually(t, 30*time.Second, "sched-b to lead", func() bool {
		l, err := client.Leases(f.c).Get(f.ctx, "kplane-system", Name)
		return err == nil && l.GetSpec().GetHolderIdentity() == "sched-b"
	})
	for i := range 5 {
		f.createPod(fmt.Sprintf("b-%d", i), "100m", "")
	}
	for i := range 5 {
		f.waitBound(fmt.Sprintf("b-%d", i))
		if got := reporter(fmt.Sprintf("b-%d", i)); got != "sched-b" {
			t.Fatalf("b-%d was bound by %q, want sched-b", i, got)
		}
	}
	// The standby's warm cache counted the pods sched-a bound: 15 pods of
	// 100m on one node, all accounted, nothing doubled.
	pods, _, err := client.Pods(f.c).List(f.ctx, "default", client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 15 {
		t.Fatalf("%d pods, want 15", len(pods))
	}
}

func TestSetPodScheduled(t *testing.T) {
	now := time.Unix(100, 0)
	pod := &kplanev1.Pod{}
	if !setPodScheduled(pod, statusWant{message: "m1"}, now) {
		t.Fatal("first write must change")
	}
	if setPodScheduled(pod, statusWant{message: "m1"}, now.Add(time.Second)) {
		t.Fatal("the same message must not be written again")
	}
	if !setPodScheduled(pod, statusWant{message: "m2"}, now.Add(2*time.Second)) {
		t.Fatal("a new message must be written")
	}
	c := podScheduledCondition(pod)
	if c.GetMessage() != "m2" || !c.GetLastTransitionTime().AsTime().Equal(now) || pod.Status.Phase != "Pending" {
		t.Fatalf("condition %v: the transition time must stay while the status stays False", c)
	}
	if !setPodScheduled(pod, statusWant{scheduled: true}, now.Add(3*time.Second)) {
		t.Fatal("scheduling must be written")
	}
	if c = podScheduledCondition(pod); c.GetStatus() != kplanev1.ConditionTrue ||
		c.GetReason() != "" || !c.GetLastTransitionTime().AsTime().Equal(now.Add(3*time.Second)) {
		t.Fatalf("condition after scheduling: %v", c)
	}
	if len(pod.Status.Conditions) != 1 {
		t.Fatalf("conditions %v", pod.Status.Conditions)
	}
}

func TestBackoff(t *testing.T) {
	now := time.Unix(1000, 0)
	s := &Scheduler{cfg: &Config{InitialBackoff: time.Second, MaxBackoff: 10 * time.Second}, now: func() time.Time { return now }}
	for attempts, want := range map[int]time.Duration{0: 0, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 40: 10 * time.Second} {
		if got := s.backoffLeftLocked(&pendingPod{attempts: attempts, lastAttempt: now}); got != want {
			t.Errorf("attempts %d: back-off %v, want %v", attempts, got, want)
		}
	}
	if got := s.backoffLeftLocked(&pendingPod{attempts: 3, lastAttempt: now.Add(-3 * time.Second)}); got != time.Second {
		t.Errorf("back-off counts from the last attempt: %v left, want 1s", got)
	}
}
