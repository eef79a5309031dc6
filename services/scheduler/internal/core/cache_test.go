package core

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func bound(p *kplanev1.Pod, node string) *kplanev1.Pod {
	q := proto.Clone(p).(*kplanev1.Pod)
	q.Spec.NodeName = node
	return q
}

func requested(t *testing.T, c *Cache, node string) Resources {
	t.Helper()
	return c.Summary()[node].Requested
}

func TestCacheAssumeConfirmForgetExpire(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	c := NewCache(30*time.Second, clock.now, 1)
	c.SetNode(testNode("n", "2", "2Gi", 10))
	p := testPod("p", [2]string{"1", "1Gi"})

	node, err := c.ScheduleDefault(mustInfo(p))
	if err != nil || node != "n" {
		t.Fatalf("Schedule = %q, %v", node, err)
	}
	if !c.IsAssumed("uid-p") {
		t.Fatal("a scheduled pod must be assumed")
	}
	if got := requested(t, c, "n"); got != (Resources{MilliCPU: 1000, Memory: 1 << 30, Pods: 1}) {
		t.Fatalf("requested after assume = %+v", got)
	}
	if _, err := c.ScheduleDefault(mustInfo(p)); !errors.Is(err, ErrAlreadyAssigned) {
		t.Fatalf("scheduling an assumed pod again: %v", err)
	}
	// A stale, unbound view of the pod does not drop the assumption.
	c.SyncPod(p)
	if !c.IsAssumed("uid-p") {
		t.Fatal("an unbound watch event must not drop an assumed pod")
	}
	// The watch confirms it: counted once, no longer assumed, never expires.
	c.FinishBinding("uid-p")
	c.SyncPod(bound(p, "n"))
	if c.IsAssumed("uid-p") || requested(t, c, "n").Pods != 1 {
		t.Fatalf("after confirmation: assumed=%v requested=%+v", c.IsAssumed("uid-p"), requested(t, c, "n"))
	}
	clock.t = clock.t.Add(time.Hour)
	if exp := c.Expire(); len(exp) != 0 {
		t.Fatalf("a confirmed pod expired: %v", exp)
	}
	// Finishing frees.
	done := bound(p, "n")
	done.Status = &kplanev1.PodStatus{Phase: "Succeeded"}
	if !c.SyncPod(done) || requested(t, c, "n") != (Resources{}) {
		t.Fatalf("a finished pod must free its node: %+v", requested(t, c, "n"))
	}

	// Forget after a failed binding.
	q := testPod("q", [2]string{"1", ""})
	if _, err := c.ScheduleDefault(mustInfo(q)); err != nil {
		t.Fatal(err)
	}
	if !c.Forget("uid-q") || requested(t, c, "n") != (Resources{}) {
		t.Fatalf("forget must free the node: %+v", requested(t, c, "n"))
	}
	if c.Forget("uid-q") {
		t.Fatal("forgetting twice reported success")
	}

	// Expiry: only after the binding was written and the TTL passed.
	r := testPod("r", [2]string{"1", ""})
	if _, err := c.ScheduleDefault(mustInfo(r)); err != nil {
		t.Fatal(err)
	}
	clock.t = clock.t.Add(time.Hour)
	if exp := c.Expire(); len(exp) != 0 {
		t.Fatal("a pod whose binding is still in flight must not expire")
	}
	c.FinishBinding("uid-r")
	clock.t = clock.t.Add(29 * time.Second)
	if exp := c.Expire(); len(exp) != 0 {
		t.Fatal("expired before the TTL")
	}
	clock.t = clock.t.Add(2 * time.Second)
	if exp := c.Expire(); len(exp) != 1 || exp[0].UID != "uid-r" || requested(t, c, "n") != (Resources{}) {
		t.Fatalf("expired %v, requested %+v", exp, requested(t, c, "n"))
	}
}

func TestCacheNodeRemovalKeepsBoundPods(t *testing.T) {
	c := NewCache(0, nil, 1)
	p := testPod("p", [2]string{"1", ""})
	// A pod bound to a node the cache has not seen yet is counted there.
	c.SyncPod(bound(p, "n"))
	if !c.SetNode(testNode("n", "1", "1Gi", 10)) {
		t.Fatal("a new node must report a change")
	}
	if _, err := c.ScheduleDefault(mustInfo(testPod("q", [2]string{"500m", ""}))); err == nil {
		t.Fatal("the node is full with the pod bound before it appeared")
	}
	c.RemoveNode("n")
	if s := c.Summary()["n"]; s.Known || s.Pods != 1 {
		t.Fatalf("after removal: %+v", s)
	}
	if _, err := c.ScheduleDefault(mustInfo(testPod("q"))); err == nil || err.Error() != "0/0 nodes are available: no nodes to schedule pods on." {
		t.Fatalf("a removed node must not be a candidate: %v", err)
	}
	c.SetNode(testNode("n", "1", "1Gi", 10))
	if _, err := c.ScheduleDefault(mustInfo(testPod("q", [2]string{"500m", ""}))); err == nil {
		t.Fatal("the node came back: its bound pod must still count")
	}
	c.RemovePod(bound(p, "n"))
	c.RemoveNode("n")
	if _, ok := c.Summary()["n"]; ok {
		t.Fatal("an unknown node without pods must be forgotten")
	}
}

func TestSetNodeReportsOnlySchedulingChanges(t *testing.T) {
	c := NewCache(0, nil, 1)
	n := testNode("n", "1", "1Gi", 10, withLabels("a", "b"))
	c.SetNode(n)
	hb := proto.Clone(n).(*kplanev1.Node)
	hb.Status.NodeInfo = &kplanev1.NodeSystemInfo{KernelVersion: "6.1"}
	if c.SetNode(hb) {
		t.Fatal("a heartbeat-like change must not count")
	}
	for name, mod := range map[string]func(*kplanev1.Node){
		"cordon":      cordoned,
		"not ready":   notReady("False"),
		"taint":       withTaint("x", "", "NoSchedule"),
		"label":       withLabels("a", "c"),
		"allocatable": func(n *kplanev1.Node) { n.Status.Allocatable = map[string]string{ResourcePods: "11"} },
	} {
		m := proto.Clone(n).(*kplanev1.Node)
		mod(m)
		if !c.SetNode(m) {
			t.Errorf("%s: not reported as a change", name)
		}
		c.SetNode(n)
	}
}

func TestScheduleSpreadsIdenticalNodes(t *testing.T) {
	c := NewCache(0, nil, 7)
	for _, name := range []string{"a", "b", "c"} {
		c.SetNode(testNode(name, "100", "100Gi", 1000))
	}
	count := map[string]int{}
	for i := range 30 {
		p := ownedBy("rs", testPod(string(rune('A'+i))))
		node, err := c.ScheduleDefault(mustInfo(p))
		if err != nil {
			t.Fatal(err)
		}
		count[node]++
	}
	if count["a"] != 10 || count["b"] != 10 || count["c"] != 10 {
		t.Fatalf("pods of one owner per node = %v, want 10 each", count)
	}
}

// A node's generation changes when its pods' labels or deletion marks
// change, not when a pod's status is written.
func TestNodeGenerationFollowsWhatCountsRead(t *testing.T) {
	c := NewCache(30*time.Second, nil, 1)
	c.SetNode(testNode("n", "2", "2Gi", 10))
	p := bound(testPod("p", [2]string{"100m", "100Mi"}), "n")
	p.Metadata.Labels = map[string]string{"app": "web"}
	c.SyncPod(p)
	gen := func() uint64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.nodes["n"].Generation()
	}
	g0 := gen()
	running := proto.Clone(p).(*kplanev1.Pod)
	running.Status = &kplanev1.PodStatus{Phase: kplanev1.PodRunning}
	c.SyncPod(running)
	if gen() != g0 {
		t.Fatal("a status write changed the node's generation")
	}
	relabelled := proto.Clone(running).(*kplanev1.Pod)
	relabelled.Metadata.Labels = map[string]string{"app": "db"}
	c.SyncPod(relabelled)
	g1 := gen()
	if g1 == g0 {
		t.Fatal("a label change left the node's generation")
	}
	deleting := proto.Clone(relabelled).(*kplanev1.Pod)
	deleting.Metadata.DeletionTimestamp = timestamppb.Now()
	c.SyncPod(deleting)
	if gen() == g1 {
		t.Fatal("a deletion mark left the node's generation")
	}
}
