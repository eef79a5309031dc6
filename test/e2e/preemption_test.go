package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/test/e2e/stack"
)

// TestPreemptionFullCluster fills every cpu of a three-node cluster with
// priority-10 pods and then asks for room: an urgent pod (no node
// selector, so every node is a candidate) preempts exactly one victim,
// which is marked DisruptionTarget, deleted gracefully and gets a
// Preempted Event, and the urgent pod runs on the victim's node. Pods that
// may not preempt (equal priority; preemptionPolicy Never) stay Pending
// and evict nobody.
func TestPreemptionFullCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{
		BinDir: binDir, DataDir: t.TempDir(), Nodes: 3, NoProxy: true, Runtime: stack.RuntimeFake,
		Controllers: []string{"scheduler", "ipamctl"},
		Args: map[string][]string{
			"ipamctl":   {"--cluster-cidr", fmt.Sprintf("127.%d.0.0/16", 150+os.Getpid()%50)},
			"scheduler": {"--pod-initial-backoff", "200ms", "--pod-max-backoff", "1s"},
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
	seen := watchPodConditions(t, c)

	never := kplanev1.PreemptNever
	c.create(kplanev1.MustWrap(&kplanev1.PriorityClass{Metadata: &kplanev1.ObjectMeta{Name: "batch"}, Value: 10}))
	c.create(kplanev1.MustWrap(&kplanev1.PriorityClass{Metadata: &kplanev1.ObjectMeta{Name: "urgent"}, Value: 100000}))
	c.create(kplanev1.MustWrap(&kplanev1.PriorityClass{Metadata: &kplanev1.ObjectMeta{Name: "polite"}, Value: 100000, PreemptionPolicy: &never}))
	pod := func(name, cpu, class string) {
		c.create(kplanev1.MustWrap(&kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: name},
			Spec: &kplanev1.PodSpec{PriorityClassName: class, TerminationGracePeriodSeconds: proto.Int64(1),
				Containers: []*kplanev1.Container{{Name: "c", Image: "busybox",
					Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"cpu": cpu}}}}},
		}))
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
	unschedulable := func(name string) {
		c.eventually(name+" Unschedulable", func() string {
			p := c.pod(name)
			for _, cond := range p.GetStatus().GetConditions() {
				if cond.GetType() == kplanev1.PodScheduled && cond.GetStatus() == kplanev1.ConditionFalse && cond.GetReason() == "Unschedulable" {
					return ""
				}
			}
			return fmt.Sprintf("node %q conditions %v", p.GetSpec().GetNodeName(), p.GetStatus().GetConditions())
		})
	}
	alive := func() []string {
		ctx, opt := call(t)
		resp, err := c.api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Namespace: "default"}, opt)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, o := range resp.GetItems() {
			if o.GetPod().GetMetadata().GetDeletionTimestamp() == nil {
				out = append(out, o.GetPod().GetMetadata().GetName())
			}
		}
		return out
	}

	// Six 2-cpu batch pods: two per 4-cpu node, every cpu taken.
	batchNode := map[string]string{}
	for i := range 6 {
		name := fmt.Sprintf("batch-%d", i)
		pod(name, "2", "batch")
		batchNode[name] = running(name)
	}

	// Equal priority never preempts, nor does preemptionPolicy Never.
	pod("peer", "1", "batch")
	unschedulable("peer")
	pod("polite", "1", "polite")
	unschedulable("polite")
	if got := len(alive()); got != 8 {
		t.Fatalf("%d pods alive after the non-preempting pods, want 8: %v", got, alive())
	}

	pod("vip", "1", "urgent")
	node := running("vip")

	var victims []string
	for name := range batchNode {
		if p := c.pod(name); p == nil || p.GetMetadata().GetDeletionTimestamp() != nil {
			victims = append(victims, name)
		}
	}
	if len(victims) != 1 {
		t.Fatalf("victims %v, want exactly one batch pod", victims)
	}
	victim := victims[0]
	if batchNode[victim] != node {
		t.Fatalf("vip runs on %s but the victim %s ran on %s", node, victim, batchNode[victim])
	}
	if !seen.had(victim, kplanev1.DisruptionTarget, kplanev1.ReasonPreemptionByScheduler) {
		t.Fatalf("victim %s never carried DisruptionTarget/%s", victim, kplanev1.ReasonPreemptionByScheduler)
	}
	c.eventually("a Preempted Event for "+victim, func() string {
		ctx, opt := call(t)
		resp, err := c.api.List(ctx, &kplanev1.ListRequest{Kind: "Event", Namespace: "default"}, opt)
		if err != nil {
			return err.Error()
		}
		var reasons []string
		for _, o := range resp.GetItems() {
			ev := o.GetEvent()
			if ev.GetInvolvedObject().GetName() != victim {
				continue
			}
			if ev.GetReason() == "Preempted" && strings.Contains(ev.GetMessage(), node) {
				return ""
			}
			reasons = append(reasons, ev.GetReason())
		}
		return fmt.Sprintf("events of %s: %v", victim, reasons)
	})
	c.eventually(victim+" gone", func() string {
		if c.gone("Pod", "default", victim) {
			return ""
		}
		return "still there"
	})
	// The freed 2 cpu held vip (1 cpu); 1 is left, which peer or polite
	// (1 cpu each) may now take, but not both: one stays Pending.
	c.eventually("one of peer and polite placed", func() string {
		placed := 0
		for _, n := range []string{"peer", "polite"} {
			if c.pod(n).GetSpec().GetNodeName() != "" {
				placed++
			}
		}
		if placed != 1 {
			return fmt.Sprintf("%d of peer and polite placed", placed)
		}
		return ""
	})
	if got := len(alive()); got != 8 {
		t.Fatalf("%d pods alive at the end, want 8 (5 batch, vip, peer, polite): %v", got, alive())
	}
}

// podConditions remembers every (type, reason) condition each pod carried
// on a watch, so a test can see a state that lasted only until deletion.
type podConditions struct {
	mu   sync.Mutex
	seen map[string]map[string]bool // pod name -> "type/reason"
}

func watchPodConditions(t *testing.T, c *epCluster) *podConditions {
	t.Helper()
	w := &podConditions{seen: map[string]map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.api.Watch(ctx, &kplanev1.WatchRequest{Kind: "Pod", Namespace: "default"})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			p := ev.GetObject().GetPod()
			w.mu.Lock()
			for _, cond := range p.GetStatus().GetConditions() {
				if cond.GetStatus() != kplanev1.ConditionTrue {
					continue
				}
				m := w.seen[p.GetMetadata().GetName()]
				if m == nil {
					m = map[string]bool{}
					w.seen[p.GetMetadata().GetName()] = m
				}
				m[cond.GetType()+"/"+cond.GetReason()] = true
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *podConditions) had(pod, condType, reason string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[pod][condType+"/"+reason]
}
