package scheduler

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// The unschedulable set is left on cluster events, not by a timer: with
// the periodic retry an hour away, a parked pod is bound within seconds
// of a pod's deletion freeing room, and of a node being added.
func TestClusterEventsMoveUnschedulablePods(t *testing.T) {
	f := newFixture(t)
	f.createNode("a", "2", "4Gi", 110)
	f.startScheduler("s1", "--unschedulable-retry-interval", "1h")
	parked := func(name string) {
		t.Helper()
		eventually(t, 30*time.Second, name+" reported unschedulable", func() bool {
			c := podScheduledCondition(f.pod(name))
			return c != nil && c.GetStatus() == kplanev1.ConditionFalse && c.GetReason() == "Unschedulable"
		})
		if n := f.pod(name).GetSpec().GetNodeName(); n != "" {
			t.Fatalf("%s bound to %s though nothing fits", name, n)
		}
	}

	// A pod deleted.
	f.createPod("hog", "2", "")
	f.waitBound("hog")
	f.createPod("waiter", "1", "")
	parked("waiter")
	if _, err := f.api.Delete(f.ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "hog", GracePeriodSeconds: proto.Int64(0)}); err != nil {
		t.Fatal(err)
	}
	if node := f.waitBound("waiter"); node != "a" {
		t.Fatalf("waiter bound to %s, want a", node)
	}

	// A node added.
	f.createPod("big", "4", "")
	parked("big")
	f.createNode("large", "8", "16Gi", 110)
	if node := f.waitBound("big"); node != "large" {
		t.Fatalf("big bound to %s, want large", node)
	}
}
