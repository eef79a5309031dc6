package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// setUp builds a scheduler as the binary does (setup) on the fixture's
// apiserver and runs its informers, without leading: what it caches and
// what its handlers and writers do can be checked directly.
func (f *fixture) setUp() *Scheduler {
	f.t.Helper()
	factory, err := informer.NewFactory(f.c, informer.FactoryOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	cfg := DefaultConfig()
	s := &Scheduler{cfg: &cfg}
	ac := &app.Context{Name: Name, Logger: hclog.NewNullLogger(), Client: f.c, Informers: factory, Registry: prometheus.NewRegistry(), Identity: "test"}
	if _, err := s.setup(ac); err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	factory.Start(ctx)
	f.t.Cleanup(func() {
		cancel()
		factory.Wait()
	})
	if !factory.WaitForCacheSync(f.ctx) {
		f.t.Fatal("informers did not sync")
	}
	return s
}

// createRunning creates pod name on node with the status a node agent
// reports for a running pod (conditions, container status, IPs), and
// returns it as stored.
func (f *fixture) createRunning(name, node, cpu string, mods ...func(*kplanev1.Pod)) *kplanev1.Pod {
	f.t.Helper()
	f.createPod(name, cpu, "", append(mods, func(p *kplanev1.Pod) { p.Spec.NodeName = node })...)
	p := f.pod(name)
	p.Status = runningPod(name, node).Status
	p.Status.Conditions = slicesWithout(p.Status.Conditions, kplanev1.PodScheduled)
	out, err := client.Pods(f.c).UpdateStatus(f.ctx, p)
	if err != nil {
		f.t.Fatalf("status of %s: %v", name, err)
	}
	return out
}

func slicesWithout(cs []*kplanev1.Condition, typ string) []*kplanev1.Condition {
	var out []*kplanev1.Condition
	for _, c := range cs {
		if c.GetType() != typ {
			out = append(out, c)
		}
	}
	return out
}

// cached returns the scheduler's cached copy of pod name once it is at
// least at resourceVersion rv.
func (f *fixture) cached(s *Scheduler, name, rv string) *kplanev1.Pod {
	f.t.Helper()
	var p *kplanev1.Pod
	eventually(f.t, 20*time.Second, "the scheduler's cache to hold "+name+" at "+rv, func() bool {
		o, ok := s.pods.Store().Get("default/" + name)
		if !ok {
			return false
		}
		p = o.GetPod()
		have, err1 := apiutil.ParseResourceVersion(p.GetMetadata().GetResourceVersion())
		want, err2 := apiutil.ParseResourceVersion(rv)
		return err1 == nil && err2 == nil && have >= want
	})
	return p
}

// The scheduler's pod informer holds a pending pod whole (the scheduler
// binds it by updating that copy) and, once it is bound, only what
// trimAssignedPod keeps; the cache accounts the bound pod from the
// trimmed copy.
func TestPodCachedWholeWhilePendingTrimmedOnceAssigned(t *testing.T) {
	f := newFixture(t)
	f.createNode("n1", "4", "8Gi", 110)
	s := f.setUp()
	f.createPod("web", "500m", "64Mi", func(p *kplanev1.Pod) {
		p.Metadata.Labels = map[string]string{"app": "web"}
		p.Metadata.Annotations = map[string]string{"note": "kept while pending"}
		p.Spec.Containers[0].Command = []string{"/bin/web", "--port=8080"}
		p.Spec.Containers[0].Env = []*kplanev1.EnvVar{{Name: "MODE", Value: "prod"}}
	})
	pending := f.pod("web")
	if got := f.cached(s, "web", pending.GetMetadata().GetResourceVersion()); !proto.Equal(got, pending) {
		t.Fatalf("pending pod cached as\n%v\nwant it whole:\n%v", got, pending)
	}

	// Bound as DefaultBinder binds: a conditional Update of the whole pod.
	bind := proto.Clone(pending).(*kplanev1.Pod)
	bind.Spec.NodeName = "n1"
	if _, err := client.Pods(f.c).Update(f.ctx, bind); err != nil {
		t.Fatal(err)
	}
	bound := f.pod("web")
	got := f.cached(s, "web", bound.GetMetadata().GetResourceVersion())
	if want := trim(bound); !proto.Equal(got, want) {
		t.Fatalf("assigned pod cached as\n%v\nwant it trimmed:\n%v", got, want)
	}
	if got.GetMetadata().GetAnnotations() != nil || got.GetSpec().GetContainers()[0].GetCommand() != nil {
		t.Fatalf("assigned pod cached with fields the scheduler does not read: %v", got)
	}
	eventually(t, 20*time.Second, "the cache to account the bound pod", func() bool {
		n := s.cache.Summary()["n1"]
		return n.Pods == 1 && n.Requested.MilliCPU == 500 && n.Requested.Memory == 64<<20
	})
}

// A status write about an assigned pod starts from the pod as the
// apiserver has it, not from the cache's trimmed copy: PodScheduled is
// set and the node agent's status (container statuses, IPs, conditions)
// stays, although the trimmed copy's resourceVersion is current.
func TestStatusWriteOfAssignedPodKeepsItsStatus(t *testing.T) {
	f := newFixture(t)
	f.createNode("n1", "4", "8Gi", 110)
	s := f.setUp()
	running := f.createRunning("web", "n1", "500m")
	cached := f.cached(s, "web", running.GetMetadata().GetResourceVersion())
	if cached.GetStatus().GetPodIp() != "" {
		t.Fatalf("cached copy keeps the pod IP: %v (not trimmed, the test proves nothing)", cached.GetStatus())
	}

	s.statusWant["default/web"] = statusWant{uid: running.GetMetadata().GetUid(), scheduled: true}
	if err := s.writeStatus(f.ctx, "default/web"); err != nil {
		t.Fatal(err)
	}
	after := f.pod("web")
	if c := podScheduledCondition(after); c == nil || c.GetStatus() != kplanev1.ConditionTrue {
		t.Fatalf("PodScheduled %v, want True", c)
	}
	want := proto.Clone(running.GetStatus()).(*kplanev1.PodStatus)
	got := proto.Clone(after.GetStatus()).(*kplanev1.PodStatus)
	got.Conditions = slicesWithout(got.Conditions, kplanev1.PodScheduled)
	if !proto.Equal(got, want) {
		t.Fatalf("status after the write:\n%v\nwant the node agent's kept:\n%v", after.GetStatus(), running.GetStatus())
	}
}

// Preemption marks its victim with DisruptionTarget on the victim as the
// apiserver has it: with the scheduler's cache holding the victim trimmed
// at its current resourceVersion, the victim's container statuses, IPs
// and conditions survive the write.
func TestPreemptionKeepsTheVictimsStatus(t *testing.T) {
	f := newFixture(t)
	f.priorityClass("low", 10, false)
	f.priorityClass("high", 1000, false)
	f.createNode("n1", "2", "8Gi", 110)
	// The victim and its status exist before the scheduler starts, so its
	// cache holds the victim at the current resourceVersion.
	victim := f.createRunning("victim", "n1", "2", class("low"))
	f.startScheduler("s1")
	f.createPod("urgent", "2", "", class("high"))
	var marked *kplanev1.Pod
	eventually(t, 20*time.Second, "the victim marked and deleted", func() bool {
		marked = f.pod("victim")
		return marked.GetMetadata().GetDeletionTimestamp() != nil
	})
	c := apiutil.FindCondition(marked.GetStatus().GetConditions(), kplanev1.DisruptionTarget)
	if c == nil || c.GetReason() != kplanev1.ReasonPreemptionByScheduler {
		t.Fatalf("victim's DisruptionTarget %v", c)
	}
	got := proto.Clone(marked.GetStatus()).(*kplanev1.PodStatus)
	got.Conditions = slicesWithout(got.Conditions, kplanev1.DisruptionTarget)
	if want := victim.GetStatus(); !proto.Equal(got, want) {
		t.Fatalf("victim's status after preemption:\n%v\nwant it kept (plus DisruptionTarget):\n%v", marked.GetStatus(), want)
	}
}
