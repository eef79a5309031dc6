package nodelifecycle

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controllertest"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Short timings for the in-process tests.
var fastArgs = []string{
	"--node-monitor-period", "300ms",
	"--node-monitor-grace-period", "2s",
	"--log-level", "warn",
	"--resync-period", "0",
}

// cluster is an apiserver with nodes whose leases the test renews, playing
// the node agents.
type cluster struct {
	t     *testing.T
	srv   *testserver.Server
	api   *client.Client
	ctx   context.Context
	mu    sync.Mutex
	alive map[string]bool
}

func newCluster(t *testing.T, nodes, podsPerNode int) *cluster {
	t.Helper()
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	api, err := client.Dial(ctx, client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, srv: srv, api: api, ctx: ctx, alive: map[string]bool{}}
	for i := 0; i < nodes; i++ {
		c.addNode(fmt.Sprintf("n%d", i), podsPerNode)
	}
	renewCtx, stopRenew := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.renewLoop(renewCtx)
	}()
	t.Cleanup(func() {
		stopRenew()
		<-done
		_ = api.Close()
		cancel()
	})
	return c
}

func (c *cluster) addNode(name string, pods int) {
	c.t.Helper()
	n, err := client.Nodes(c.api).Create(c.ctx, &kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: name}})
	if err != nil {
		c.t.Fatal(err)
	}
	n.Status = &kplanev1.NodeStatus{Conditions: []*kplanev1.Condition{{
		Type: kplanev1.NodeReady, Status: kplanev1.ConditionTrue, Reason: "AgentReady", LastTransitionTime: timestamppb.Now(),
	}}}
	if _, err := client.Nodes(c.api).UpdateStatus(c.ctx, n); err != nil {
		c.t.Fatal(err)
	}
	if _, err := client.Leases(c.api).Create(c.ctx, &kplanev1.Lease{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: kplanev1.NamespaceNodeLease},
		Spec:     &kplanev1.LeaseSpec{HolderIdentity: name, LeaseDurationSeconds: 2, RenewTime: timestamppb.Now()},
	}); err != nil {
		c.t.Fatal(err)
	}
	c.setAlive(name, true)
	for i := 0; i < pods; i++ {
		c.addPod(fmt.Sprintf("%s-p%d", name, i), name)
	}
}

func (c *cluster) addPod(name, node string, tols ...*kplanev1.Toleration) *kplanev1.Pod {
	c.t.Helper()
	p, err := client.Pods(c.api).Create(c.ctx, &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:     &kplanev1.PodSpec{NodeName: node, Tolerations: tols, Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
	})
	if err != nil {
		c.t.Fatal(err)
	}
	p.Status.Phase = "Running"
	p.Status.Conditions = []*kplanev1.Condition{{Type: kplanev1.NodeReady, Status: kplanev1.ConditionTrue, LastTransitionTime: timestamppb.Now()}}
	p, err = client.Pods(c.api).UpdateStatus(c.ctx, p)
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

func (c *cluster) setAlive(node string, alive bool) {
	c.mu.Lock()
	c.alive[node] = alive
	c.mu.Unlock()
}

// renewLoop renews the lease of every live node, as its agent would.
func (c *cluster) renewLoop(ctx context.Context) {
	t := time.NewTicker(300 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		var names []string
		for n, ok := range c.alive {
			if ok {
				names = append(names, n)
			}
		}
		c.mu.Unlock()
		for _, n := range names {
			_ = client.RetryOnConflict(ctx, client.DefaultRetry, func() error {
				l, err := client.Leases(c.api).Get(ctx, kplanev1.NamespaceNodeLease, n)
				if err != nil {
					return err
				}
				l.Spec.RenewTime = timestamppb.Now()
				_, err = client.Leases(c.api).Update(ctx, l)
				return err
			})
		}
	}
}

func (c *cluster) node(name string) *kplanev1.Node {
	c.t.Helper()
	n, err := client.Nodes(c.api).Get(c.ctx, "", name)
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

func (c *cluster) podsOf(node string) []*kplanev1.Pod {
	c.t.Helper()
	pods, _, err := client.Pods(c.api).List(c.ctx, "default", client.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		c.t.Fatal(err)
	}
	return pods
}

func (c *cluster) eventually(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting until %s", what)
		}
		select {
		case <-c.ctx.Done():
			c.t.Fatalf("waiting until %s: %v", what, c.ctx.Err())
		case <-time.After(50 * time.Millisecond): // polling interval
		}
	}
}

// holdsFor checks that cond stays true until the deadline passes.
func (c *cluster) holdsUntil(what string, until time.Time, cond func() bool) {
	c.t.Helper()
	for time.Now().Before(until) {
		if !cond() {
			c.t.Fatalf("%s no longer holds", what)
		}
		select {
		case <-c.ctx.Done():
			c.t.Fatal(c.ctx.Err())
		case <-time.After(100 * time.Millisecond): // polling interval
		}
	}
}

func (c *cluster) events(reason string) []*kplanev1.Event {
	c.t.Helper()
	evs, _, err := client.Events(c.api).List(c.ctx, "default", client.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	var out []*kplanev1.Event
	for _, e := range evs {
		if e.GetReason() == reason {
			out = append(out, e)
		}
	}
	return out
}

func readyOf(n *kplanev1.Node) *kplanev1.Condition {
	return apiutil.FindCondition(n.GetStatus().GetConditions(), kplanev1.NodeReady)
}

func taint(n *kplanev1.Node, key, effect string) *kplanev1.Taint {
	var found *kplanev1.Taint
	for _, t := range n.GetSpec().GetTaints() {
		if t.GetKey() == key && t.GetEffect() == effect {
			found = t
		}
	}
	return found
}

func unreachableTainted(n *kplanev1.Node) bool {
	return taint(n, kplanev1.TaintNodeUnreachable, kplanev1.TaintEffectNoSchedule) != nil && taint(n, kplanev1.TaintNodeUnreachable, kplanev1.TaintEffectNoExecute) != nil
}

// nodectlProc is nodectl running in-process.
type nodectlProc struct {
	*controllertest.Controller
	ctl *nodeController
}

// context returns the process's app.Context once Setup ran.
func (p nodectlProc) context(t *testing.T) *app.Context { return p.Context(t) }

func (p nodectlProc) stop(t *testing.T) {
	if err := p.Stop(); err != nil {
		t.Errorf("nodectl: %v", err)
	}
}

// startNodectl runs nodectl with the fast timings; args override them.
// Leader election is on unless args turn it off.
func startNodectl(t *testing.T, api string, args ...string) nodectlProc {
	t.Helper()
	all := append(append([]string{"--leader-elect=true"}, fastArgs...), args...)
	ctl := newController()
	return nodectlProc{controllertest.Run(t, api, ctl.service(), all...), ctl}
}

// nodeHistory watches Nodes and counts, per node, how often its Ready
// condition turned Unknown and how often an unreachable NoExecute taint
// appeared: each must happen once per outage, whatever restarts or
// replicas do.
type nodeHistory struct {
	mu          sync.Mutex
	toUnknown   map[string]int
	taintsAdded map[string]int
}

func watchNodes(c *cluster) *nodeHistory {
	h := &nodeHistory{toUnknown: map[string]int{}, taintsAdded: map[string]int{}}
	w, err := client.Nodes(c.api).Watch(c.ctx, "", client.WatchOptions{ResourceVersion: "0"})
	if err != nil {
		c.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := map[string]*kplanev1.Node{}
		for {
			ev, err := w.Recv()
			if err != nil {
				return
			}
			n := ev.Object
			if n == nil {
				continue
			}
			name := n.GetMetadata().GetName()
			prev := last[name]
			h.mu.Lock()
			if readyOf(n).GetStatus() == kplanev1.ConditionUnknown && readyOf(prev).GetStatus() != kplanev1.ConditionUnknown {
				h.toUnknown[name]++
			}
			if taint(n, kplanev1.TaintNodeUnreachable, kplanev1.TaintEffectNoExecute) != nil && taint(prev, kplanev1.TaintNodeUnreachable, kplanev1.TaintEffectNoExecute) == nil {
				h.taintsAdded[name]++
			}
			h.mu.Unlock()
			last[name] = n
		}
	}()
	c.t.Cleanup(func() {
		w.Stop()
		<-done
	})
	return h
}

func (h *nodeHistory) counts(node string) (int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.toUnknown[node], h.taintsAdded[node]
}

func TestLeaseStopsNodeUnknownTaintedPodsNotReadyThenEvicted(t *testing.T) {
	c := newCluster(t, 3, 2)
	tolerant := c.addPod("n0-tolerant", "n0", &kplanev1.Toleration{Key: kplanev1.TaintNodeUnreachable, Operator: "Exists", Effect: kplanev1.TaintEffectNoExecute})
	hist := watchNodes(c)
	nc := startNodectl(t, c.srv.Addr(), "--pod-eviction-timeout", "3s", "--leader-elect=false")

	c.setAlive("n0", false)
	c.eventually("n0 is Unknown and tainted unreachable", func() bool {
		n := c.node("n0")
		return readyOf(n).GetStatus() == kplanev1.ConditionUnknown && unreachableTainted(n)
	})
	n0 := c.node("n0")
	ready := readyOf(n0)
	if ready.GetReason() != reasonStatusUnknown || ready.GetMessage() == "" || ready.GetLastTransitionTime() == nil {
		t.Fatalf("Ready condition %v", ready)
	}
	added := taint(n0, kplanev1.TaintNodeUnreachable, kplanev1.TaintEffectNoExecute).GetTimeAdded()
	if added == nil || taint(n0, kplanev1.TaintNodeUnreachable, kplanev1.TaintEffectNoSchedule).GetTimeAdded() == nil {
		t.Fatalf("taints without timeAdded: %v", n0.GetSpec().GetTaints())
	}
	c.eventually("n0's pods are not ready", func() bool {
		for _, p := range c.podsOf("n0") {
			if apiutil.FindCondition(p.GetStatus().GetConditions(), kplanev1.NodeReady).GetStatus() != kplanev1.ConditionFalse {
				return false
			}
		}
		return true
	})
	deadline := added.AsTime().Add(3 * time.Second)
	c.eventually("n0's pods are evicted", func() bool {
		pods := c.podsOf("n0")
		if len(pods) > 0 && time.Now().Before(deadline) {
			return false
		}
		return len(pods) == 1 && pods[0].GetMetadata().GetName() == "n0-tolerant"
	})
	if got := c.podsOf("n0")[0]; got.GetMetadata().GetUid() != tolerant.GetMetadata().GetUid() {
		t.Fatal("the pod tolerating the taint without seconds was replaced")
	}
	// Events follow the deletions; wait for them, then count.
	c.eventually("two eviction events", func() bool { return len(c.events("TaintManagerEviction")) >= 2 })
	evs := c.events("TaintManagerEviction")
	if len(evs) != 2 {
		t.Fatalf("%d TaintManagerEviction events, want 2", len(evs))
	}
	for _, e := range evs {
		if e.GetFirstTimestamp().AsTime().Before(deadline) {
			t.Fatalf("pod %s evicted at %v, before its deadline %v", e.GetInvolvedObject().GetName(), e.GetFirstTimestamp().AsTime(), deadline)
		}
	}
	if len(c.events("NodeNotReady")) != 1 {
		t.Fatalf("NodeNotReady events: %v", c.events("NodeNotReady"))
	}
	for _, name := range []string{"n1", "n2"} {
		n := c.node(name)
		if readyOf(n).GetStatus() != kplanev1.ConditionTrue || len(n.GetSpec().GetTaints()) != 0 || len(c.podsOf(name)) != 2 {
			t.Fatalf("healthy node %s touched: %v", name, n)
		}
	}
	if u, a := hist.counts("n0"); u != 1 || a != 1 {
		t.Fatalf("n0 marked Unknown %d times, tainted %d times; want once each", u, a)
	}
	mfs, err := nc.context(t).Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "kplane_nodectl_evictions_total":
				found[mf.GetName()] = m.GetCounter().GetValue()
			case "kplane_nodectl_nodes":
				found[mf.GetName()+"/"+m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	if found["kplane_nodectl_evictions_total"] != 2 {
		t.Fatalf("evictions metric: %v", found)
	}
	c.eventually("the nodes gauge to count n0 as Unknown", func() bool {
		mfs, _ := nc.context(t).Registry.Gather()
		for _, mf := range mfs {
			if mf.GetName() != "kplane_nodectl_nodes" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == kplanev1.ConditionUnknown && m.GetGauge().GetValue() == 1 {
					return true
				}
			}
		}
		return false
	})
}

func TestLeaseResumesBeforeTimeout(t *testing.T) {
	c := newCluster(t, 3, 2)
	startNodectl(t, c.srv.Addr(), "--pod-eviction-timeout", "1m", "--leader-elect=false")
	before := c.podsOf("n0")

	c.setAlive("n0", false)
	c.eventually("n0 is Unknown and tainted", func() bool {
		n := c.node("n0")
		return readyOf(n).GetStatus() == kplanev1.ConditionUnknown && unreachableTainted(n)
	})
	c.setAlive("n0", true)
	c.eventually("n0 is Ready again without taints", func() bool {
		n := c.node("n0")
		return readyOf(n).GetStatus() == kplanev1.ConditionTrue && len(n.GetSpec().GetTaints()) == 0
	})
	after := c.podsOf("n0")
	if len(after) != len(before) {
		t.Fatalf("pods before %d, after %d", len(before), len(after))
	}
	for i := range after {
		if after[i].GetMetadata().GetUid() != before[i].GetMetadata().GetUid() {
			t.Fatalf("pod %s replaced", after[i].GetMetadata().GetName())
		}
	}
	// The event follows the node's update; wait for it, then count.
	c.eventually("a NodeReady event", func() bool { return len(c.events("NodeReady")) >= 1 })
	if ready, evicted := len(c.events("NodeReady")), len(c.events("TaintManagerEviction")); ready != 1 || evicted != 0 {
		t.Fatalf("events: NodeReady %d, evictions %d", ready, evicted)
	}
}

func TestThresholdStopsEvictionsAndRateLimits(t *testing.T) {
	c := newCluster(t, 10, 1)
	nc := startNodectl(t, c.srv.Addr(), "--pod-eviction-timeout", "2s", "--node-eviction-rate", "0.5", "--leader-elect=false")

	down := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6"}
	for _, n := range down {
		c.setAlive(n, false)
	}
	var lastAdded time.Time
	c.eventually("7 of 10 nodes are Unknown and tainted", func() bool {
		for _, name := range down {
			n := c.node(name)
			if readyOf(n).GetStatus() != kplanev1.ConditionUnknown || !unreachableTainted(n) {
				return false
			}
			if at := taint(n, kplanev1.TaintNodeUnreachable, kplanev1.TaintEffectNoExecute).GetTimeAdded().AsTime(); at.After(lastAdded) {
				lastAdded = at
			}
		}
		return true
	})
	// Well past every eviction deadline, nothing is evicted.
	c.holdsUntil("no pod evicted while 7 of 10 nodes are down", lastAdded.Add(2*time.Second+time.Second), func() bool {
		for _, name := range down {
			if len(c.podsOf(name)) != 1 {
				return false
			}
		}
		return true
	})
	nc.ctl.mu.Lock()
	halted := nc.ctl.halted
	nc.ctl.mu.Unlock()
	if !halted {
		t.Fatal("evictions not recorded as halted")
	}

	// Back to 2 of 10 down: both nodes are overdue, and are evicted one
	// after the other at 0.5 nodes/s.
	for _, n := range down[2:] {
		c.setAlive(n, true)
	}
	c.eventually("the pods of the 2 nodes still down are evicted", func() bool {
		return len(c.podsOf("n0")) == 0 && len(c.podsOf("n1")) == 0
	})
	for _, n := range down[2:] {
		if len(c.podsOf(n)) != 1 {
			t.Fatalf("pod of recovered node %s evicted", n)
		}
	}
	// Events follow the deletions; wait for them, then count.
	c.eventually("two eviction events", func() bool { return len(c.events("TaintManagerEviction")) >= 2 })
	evs := c.events("TaintManagerEviction")
	if len(evs) != 2 {
		t.Fatalf("%d evictions, want 2", len(evs))
	}
	gap := evs[0].GetFirstTimestamp().AsTime().Sub(evs[1].GetFirstTimestamp().AsTime()).Abs()
	if gap < 2*time.Second-100*time.Millisecond {
		t.Fatalf("two nodes evicted %v apart; the rate allows one per 2s", gap)
	}
}

func TestRestartMidWindow(t *testing.T) {
	c := newCluster(t, 3, 2)
	hist := watchNodes(c)
	const timeout = 6 * time.Second
	args := []string{"--pod-eviction-timeout", timeout.String(), "--leader-elect=false"}
	first := startNodectl(t, c.srv.Addr(), args...)

	c.setAlive("n0", false)
	c.eventually("n0 is tainted", func() bool { return unreachableTainted(c.node("n0")) })
	marked := c.node("n0")
	first.stop(t)
	deadline := taint(marked, kplanev1.TaintNodeUnreachable, kplanev1.TaintEffectNoExecute).GetTimeAdded().AsTime().Add(timeout)
	if !time.Now().Before(deadline) {
		t.Skip("the machine is too slow to stop nodectl within the eviction window")
	}
	if len(c.podsOf("n0")) != 2 {
		t.Fatal("pods evicted before the restart")
	}

	startNodectl(t, c.srv.Addr(), args...)
	c.eventually("n0's pods are evicted after the restart", func() bool { return len(c.podsOf("n0")) == 0 })
	for _, e := range c.events("TaintManagerEviction") {
		if e.GetFirstTimestamp().AsTime().Before(deadline) {
			t.Fatalf("evicted at %v, before the deadline %v", e.GetFirstTimestamp().AsTime(), deadline)
		}
	}
	now := c.node("n0")
	if !proto.Equal(readyOf(now), readyOf(marked)) {
		t.Fatalf("Ready condition rewritten after the restart:\nbefore %v\nafter  %v", readyOf(marked), readyOf(now))
	}
	if !proto.Equal(&kplanev1.NodeSpec{Taints: now.GetSpec().GetTaints()}, &kplanev1.NodeSpec{Taints: marked.GetSpec().GetTaints()}) {
		t.Fatalf("taints changed after the restart: %v → %v", marked.GetSpec().GetTaints(), now.GetSpec().GetTaints())
	}
	if u, a := hist.counts("n0"); u != 1 || a != 1 {
		t.Fatalf("n0 marked Unknown %d times, tainted %d times; want once each", u, a)
	}
	for _, name := range []string{"n1", "n2"} {
		if n := c.node(name); readyOf(n).GetStatus() != kplanev1.ConditionTrue || len(n.GetSpec().GetTaints()) != 0 {
			t.Fatalf("healthy node %s marked after the restart", name)
		}
	}
}

func TestRestartBeforeMarkingForgetsNothing(t *testing.T) {
	c := newCluster(t, 3, 1)
	args := []string{"--pod-eviction-timeout", "1s", "--leader-elect=false"}
	first := startNodectl(t, c.srv.Addr(), args...)
	// Stop n0's lease and restart nodectl before n0 goes stale: the new
	// process must still notice the silence (after a full grace period).
	first.context(t)
	c.setAlive("n0", false)
	first.stop(t)
	startNodectl(t, c.srv.Addr(), args...)
	c.eventually("n0 marked and its pod evicted", func() bool {
		return unreachableTainted(c.node("n0")) && len(c.podsOf("n0")) == 0
	})
}

func TestDeletedNodeLosesItsPods(t *testing.T) {
	c := newCluster(t, 2, 2)
	startNodectl(t, c.srv.Addr(), "--leader-elect=false")
	c.setAlive("n0", false)
	if _, err := client.Nodes(c.api).Delete(c.ctx, "", "n0", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually("the deleted node's pods are deleted", func() bool { return len(c.podsOf("n0")) == 0 })
	if len(c.podsOf("n1")) != 2 {
		t.Fatal("pods of a live node deleted")
	}
}

// TestStatefulSetPodEvictedGracefully: a StatefulSet's pod on an
// unreachable node is deleted gracefully, not force-deleted, so it stays
// (Terminating) and its identity is not free for a replacement while the
// partitioned node may still run it; other pods go at once. Deleting the
// node object then removes it, as Kubernetes' pod GC does.
func TestStatefulSetPodEvictedGracefully(t *testing.T) {
	c := newCluster(t, 2, 1)
	sts := c.addPod("db-0", "n0")
	sts.Metadata.OwnerReferences = []*kplanev1.OwnerReference{{
		ApiVersion: "apps/v1", Kind: "StatefulSet", Name: "db", Uid: "uid-db", Controller: true,
	}}
	if _, err := client.Pods(c.api).Update(c.ctx, sts); err != nil {
		t.Fatal(err)
	}
	startNodectl(t, c.srv.Addr(), "--pod-eviction-timeout", "1s", "--leader-elect=false")
	c.setAlive("n0", false)
	c.eventually("n0's other pod to be force-deleted and db-0 to be terminating", func() bool {
		pods := c.podsOf("n0")
		return len(pods) == 1 && pods[0].GetMetadata().GetName() == "db-0" && pods[0].GetMetadata().GetDeletionTimestamp() != nil
	})
	c.eventually("one eviction event for db-0", func() bool {
		for _, e := range c.events("TaintManagerEviction") {
			if e.GetInvolvedObject().GetName() == "db-0" {
				return true
			}
		}
		return false
	})
	c.holdsUntil("db-0 to stay while its node may still run it", time.Now().Add(2*time.Second), func() bool {
		pods := c.podsOf("n0")
		return len(pods) == 1 && pods[0].GetMetadata().GetUid() == sts.GetMetadata().GetUid()
	})
	if _, err := client.Nodes(c.api).Delete(c.ctx, "", "n0", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually("db-0 to be removed with its node", func() bool { return len(c.podsOf("n0")) == 0 })
}
