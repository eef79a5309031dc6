package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/apiutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
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
	f.forceDelete(victim)
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

// forceDelete deletes a pod at once, as the node agent does once its
// containers are gone (these tests run none: victims stay terminating
// until then).
func (f *fixture) forceDelete(name string) {
	f.t.Helper()
	if _, err := f.api.Delete(f.ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: name, GracePeriodSeconds: proto.Int64(0)}); err != nil {
		f.t.Fatal(err)
	}
}

// terminating returns the names among names that are being deleted.
func (f *fixture) terminating(names ...string) []string {
	f.t.Helper()
	var out []string
	for _, n := range names {
		if f.pod(n).GetMetadata().GetDeletionTimestamp() != nil {
			out = append(out, n)
		}
	}
	return out
}

func nominatedNode(p *kplanev1.Pod) string { return p.GetStatus().GetNominatedNodeName() }

// status.nominatedNodeName follows the room kept for the pod: set by
// preemption; cleared on a lower-priority pod when a more important one
// takes the room made on its node; cleared when preemption finds it can
// no longer help (its nominated node is cordoned); and a pod nominated to
// one node but bound to another does not keep the nomination.
func TestNominatedNodeNameIsCleared(t *testing.T) {
	f := newFixture(t)
	f.priorityClass("low", 10, false)
	f.priorityClass("mid", 500, false)
	f.priorityClass("top", 1000, false)
	f.createNode("n1", "4", "8Gi", 110)
	f.startScheduler("s1")
	onN1 := func(p *kplanev1.Pod) { p.Spec.NodeName = "n1" }
	f.createPod("low-a", "2", "", class("low"), onN1)
	f.createPod("low-b", "2", "", class("low"), onN1)

	// mid preempts one low pod (which stays terminating: no node agent).
	f.createPod("mid", "2", "", class("mid"))
	eventually(t, 20*time.Second, "mid nominated on n1 with one victim terminating", func() bool {
		return nominatedNode(f.pod("mid")) == "n1" && len(f.terminating("low-a", "low-b")) == 1
	})
	// top needs the same room: the terminating victim still counts and
	// mid's nomination does not (mid is less important), so top evicts
	// the other low pod and mid loses its nomination.
	f.createPod("top", "2", "", class("top"))
	eventually(t, 20*time.Second, "top nominated on n1, mid's nomination cleared", func() bool {
		return nominatedNode(f.pod("top")) == "n1" && nominatedNode(f.pod("mid")) == "" && len(f.terminating("low-a", "low-b")) == 2
	})

	// Cordoned, n1 cannot take mid whatever is evicted: mid stays
	// un-nominated and is told preemption does not help.
	f.updateNode("n1", func(n *kplanev1.Node) { n.Spec.Unschedulable = true })
	eventually(t, 20*time.Second, "mid told preemption does not help", func() bool {
		c := podScheduledCondition(f.pod("mid"))
		return c != nil && strings.Contains(c.GetMessage(), "Preemption is not helpful for scheduling")
	})
	// top was nominated to n1, which is cordoned now: it gives the
	// nomination up (preemption cannot help there) ...
	eventually(t, 20*time.Second, "top's nomination cleared", func() bool { return nominatedNode(f.pod("top")) == "" })

	// ... and binds to a new node; nothing stays nominated.
	f.createNode("n2", "4", "8Gi", 110)
	if got := f.waitBound("top"); got != "n2" {
		t.Fatalf("top bound to %s, want n2", got)
	}
	if got := f.waitBound("mid"); got != "n2" {
		t.Fatalf("mid bound to %s, want n2", got)
	}
	for _, n := range []string{"top", "mid"} {
		if nn := nominatedNode(f.pod(n)); nn != "" {
			t.Errorf("%s bound but still nominated to %q", n, nn)
		}
	}
}

// A pod nominated to a node whose victims are still terminating, bound
// to a node that appears meanwhile, has its nomination cleared.
func TestNominationClearedWhenBoundElsewhere(t *testing.T) {
	f := newFixture(t)
	f.priorityClass("low", 10, false)
	f.priorityClass("top", 1000, false)
	f.createNode("n1", "2", "8Gi", 110)
	f.startScheduler("s1")
	f.createPod("low", "2", "", class("low"), func(p *kplanev1.Pod) { p.Spec.NodeName = "n1" })
	f.createPod("top", "2", "", class("top"))
	eventually(t, 20*time.Second, "top nominated on n1", func() bool {
		return nominatedNode(f.pod("top")) == "n1" && len(f.terminating("low")) == 1
	})
	f.createNode("n2", "2", "8Gi", 110)
	if got := f.waitBound("top"); got != "n2" {
		t.Fatalf("top bound to %s, want n2 (n1's victim is still terminating)", got)
	}
	eventually(t, 20*time.Second, "top's nomination cleared", func() bool { return nominatedNode(f.pod("top")) == "" })
}

// rejectByLabel is a PreFilter plugin that rejects pods labelled
// reject=unschedulable (Unschedulable) or reject=unresolvable
// (UnschedulableAndUnresolvable).
type rejectByLabel struct{}

func (rejectByLabel) Name() string { return "RejectByLabel" }

func (rejectByLabel) PreFilter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo) *framework.Status {
	switch pod.Labels["reject"] {
	case "unschedulable":
		return framework.NewStatus(framework.Unschedulable, "rejected by label")
	case "unresolvable":
		return framework.NewStatus(framework.UnschedulableAndUnresolvable, "rejected by label for good")
	}
	return nil
}

// A PreFilter rejection does not skip preemption, as in Kubernetes: every
// node gets the rejection's status, so an Unschedulable one leaves the
// nodes candidates (here the victim makes room for the pod's cpu) and an
// UnschedulableAndUnresolvable one makes preemption say it cannot help.
func TestPreemptionAfterPreFilterRejection(t *testing.T) {
	f := newFixture(t)
	cfg := filepath.Join(t.TempDir(), "sched.yaml")
	if err := os.WriteFile(cfg, []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    preFilter:
      enabled:
      - name: RejectByLabel
`), 0o600); err != nil {
		t.Fatal(err)
	}
	f.priorityClass("low", 10, false)
	f.priorityClass("top", 1000, false)
	f.createNode("n1", "2", "8Gi", 110)
	f.startSchedulerWith("s1", framework.Registry{"RejectByLabel": func(json.RawMessage, framework.Handle) (framework.Plugin, error) {
		return rejectByLabel{}, nil
	}}, "--config", cfg)
	f.createPod("low", "2", "", class("low"), func(p *kplanev1.Pod) { p.Spec.NodeName = "n1" })
	label := func(v string) func(*kplanev1.Pod) {
		return func(p *kplanev1.Pod) { p.Metadata.Labels = map[string]string{"reject": v} }
	}

	f.createPod("hopeless", "2", "", class("top"), label("unresolvable"))
	eventually(t, 20*time.Second, "hopeless told preemption does not help", func() bool {
		c := podScheduledCondition(f.pod("hopeless"))
		return c != nil && c.GetMessage() == "0/1 nodes are available: rejected by label for good. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
	})
	if got := f.terminating("low"); len(got) != 0 {
		t.Fatalf("evicted %v for a pod preemption cannot help", got)
	}

	f.createPod("rejected", "2", "", class("top"), label("unschedulable"))
	eventually(t, 20*time.Second, "rejected nominated on n1 and low preempted", func() bool {
		return nominatedNode(f.pod("rejected")) == "n1" && len(f.terminating("low")) == 1
	})
	c := apiutil.FindCondition(f.pod("low").GetStatus().GetConditions(), kplanev1.DisruptionTarget)
	if c == nil || c.GetReason() != kplanev1.ReasonPreemptionByScheduler {
		t.Fatalf("victim's DisruptionTarget condition %v", c)
	}
}
