package scheduler

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/apiutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func (f *fixture) priorityClass(name string, value int32, never bool) {
	f.t.Helper()
	pc := &kplanev1.PriorityClass{Metadata: &kplanev1.ObjectMeta{Name: name}, Value: value}
	if never {
		pc.PreemptionPolicy = proto.String(kplanev1.PreemptNever)
	}
	if _, err := f.api.Create(f.ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(pc)}); err != nil {
		f.t.Fatal(err)
	}
}

func class(name string) func(*kplanev1.Pod) {
	return func(p *kplanev1.Pod) { p.Spec.PriorityClassName = name }
}

// A high-priority pod on a full cluster preempts the fewest, least
// important pods: on "low-node" one pod of the lowest priority (not the
// slightly more important ones, and nothing on the node full of pods of
// its own priority); the victim gets DisruptionTarget and a Preempted
// Event and is deleted; the pod is nominated and then bound there. A pod
// with preemptionPolicy Never preempts nothing.
func TestPreemption(t *testing.T) {
	f := newFixture(t)
	f.priorityClass("lowest", 10, false)
	f.priorityClass("low", 20, false)
	f.priorityClass("high", 1000, false)
	f.priorityClass("high-polite", 1000, true)
	f.createNode("low-node", "4", "8Gi", 110)
	f.createNode("peer-node", "2", "8Gi", 110)
	f.startScheduler("s1")
	for i, c := range []string{"lowest", "lowest", "low", "low"} {
		f.createPod(fmt.Sprintf("v-%d", i), "1", "", class(c), func(p *kplanev1.Pod) { p.Spec.NodeName = "low-node" })
	}
	for i := range 2 {
		f.createPod(fmt.Sprintf("peer-%d", i), "1", "", class("high"), func(p *kplanev1.Pod) { p.Spec.NodeName = "peer-node" })
	}

	f.createPod("polite", "1", "", class("high-polite"))
	eventually(t, 20*time.Second, "the polite pod to be refused without preempting", func() bool {
		c := podScheduledCondition(f.pod("polite"))
		return c != nil && c.GetMessage() == "0/2 nodes are available: 2 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
	})

	f.createPod("urgent", "1", "", class("high"))
	var victim string
	eventually(t, 20*time.Second, "a victim to be marked and deleted", func() bool {
		for i := range 4 {
			p := f.pod(fmt.Sprintf("v-%d", i))
			c := apiutil.FindCondition(p.GetStatus().GetConditions(), kplanev1.DisruptionTarget)
			if p.GetMetadata().GetDeletionTimestamp() != nil {
				if c == nil || c.GetReason() != "PreemptionByScheduler" || c.GetStatus() != "True" {
					t.Fatalf("victim %s deleted without the DisruptionTarget condition: %v", p.GetMetadata().GetName(), c)
				}
				victim = p.GetMetadata().GetName()
				return true
			}
		}
		return false
	})
	if victim != "v-0" && victim != "v-1" {
		t.Fatalf("victim %s, want one of the lowest-priority pods", victim)
	}
	eventually(t, 20*time.Second, "the urgent pod nominated on low-node", func() bool {
		return f.pod("urgent").GetStatus().GetNominatedNodeName() == "low-node"
	})
	eventually(t, 20*time.Second, "a Preempted event", func() bool { return len(f.events(victim, "Preempted")) == 1 })
	// The node agent's part: the victim's containers are gone.
	if _, err := f.api.Delete(f.ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: victim, GracePeriodSeconds: proto.Int64(0)}); err != nil {
		t.Fatal(err)
	}
	if got := f.waitBound("urgent"); got != "low-node" {
		t.Fatalf("urgent bound to %s, want low-node", got)
	}
	for _, name := range []string{"v-0", "v-1", "v-2", "v-3", "peer-0", "peer-1"} {
		if name == victim {
			continue
		}
		if p := f.pod(name); p.GetMetadata().GetDeletionTimestamp() != nil {
			t.Fatalf("%s was evicted too", name)
		}
	}
	if f.pod("polite").GetSpec().GetNodeName() != "" {
		t.Fatal("the polite pod took the room")
	}
}
