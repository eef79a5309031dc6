package scheduler

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// recorder is an out-of-tree plugin at every extension point but
// QueueSort and PostFilter (the in-tree PrioritySort and
// DefaultPreemption have their own tests). It writes down, per pod, each
// call the running scheduler makes, and fails or holds a pod as its
// "step" label says: reserve-fails-once, prebind-fails-once and
// bind-fails-once return Error on their first call, permit-wait holds the
// pod at Permit until the test allows or rejects it through the Handle.
type recorder struct {
	mu     sync.Mutex
	calls  map[string][]string // pod name -> extension points, in order
	failed map[string]bool     // pod name -> its one failure happened
	h      framework.Handle
}

const recorderName = "Recorder"

func (r *recorder) Name() string { return recorderName }

// note records point for pod; consecutive repeats (Filter and Score run
// once per node) are kept once.
func (r *recorder) note(pod *framework.PodInfo, point string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := pod.Pod.GetMetadata().GetName()
	if c := r.calls[name]; len(c) == 0 || c[len(c)-1] != point {
		r.calls[name] = append(c, point)
	}
}

// failOnce reports whether pod should fail at step now (the first time).
func (r *recorder) failOnce(pod *framework.PodInfo, step string) bool {
	if pod.Pod.GetMetadata().GetLabels()["step"] != step {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	name := pod.Pod.GetMetadata().GetName()
	if r.failed[name] {
		return false
	}
	r.failed[name] = true
	return true
}

func (r *recorder) trace(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.calls[name], ",")
}

func (r *recorder) PreFilter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo) *framework.Status {
	r.note(pod, "PreFilter")
	return nil
}

func (r *recorder) Filter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, _ *framework.NodeInfo) *framework.Status {
	r.note(pod, "Filter")
	return nil
}

func (r *recorder) PreScore(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, _ []*framework.NodeInfo) *framework.Status {
	r.note(pod, "PreScore")
	return nil
}

func (r *recorder) Score(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, _ *framework.NodeInfo) (int64, *framework.Status) {
	r.note(pod, "Score")
	return 0, nil
}

func (r *recorder) ScoreExtensions() framework.ScoreExtensions { return r }

func (r *recorder) NormalizeScore(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, _ framework.NodeScoreList) *framework.Status {
	r.note(pod, "NormalizeScore")
	return nil
}

func (r *recorder) Reserve(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, _ string) *framework.Status {
	r.note(pod, "Reserve")
	if r.failOnce(pod, "reserve-fails-once") {
		return framework.NewStatus(framework.Error, "reserve failed on purpose")
	}
	return nil
}

func (r *recorder) Unreserve(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, _ string) {
	r.note(pod, "Unreserve")
}

func (r *recorder) Permit(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, _ string) (*framework.Status, time.Duration) {
	r.note(pod, "Permit")
	if pod.Pod.GetMetadata().GetLabels()["step"] == "permit-wait" {
		return framework.NewStatus(framework.Wait), time.Minute
	}
	return nil, 0
}

func (r *recorder) PreBind(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, _ string) *framework.Status {
	r.note(pod, "PreBind")
	if r.failOnce(pod, "prebind-fails-once") {
		return framework.NewStatus(framework.Error, "prebind failed on purpose")
	}
	return nil
}

// Bind leaves the binding to DefaultBinder (Skip), after failing once
// when asked to.
func (r *recorder) Bind(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, _ string) *framework.Status {
	r.note(pod, "Bind")
	if r.failOnce(pod, "bind-fails-once") {
		return framework.NewStatus(framework.Error, "bind failed on purpose")
	}
	return framework.NewStatus(framework.Skip)
}

func (r *recorder) PostBind(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, _ string) {
	r.note(pod, "PostBind")
}

// The running scheduler calls every extension point of a plugin in
// Kubernetes' order, and on each failure path undoes Reserve: a failed
// Reserve, PreBind or Bind unreserves and the pod is retried and bound; a
// pod held at Permit is bound once allowed through Handle.WaitingPod,
// and a rejected one is unreserved, left unbound and reported.
func TestExtensionPointsAreCalled(t *testing.T) {
	f := newFixture(t)
	cfg := filepath.Join(t.TempDir(), "sched.yaml")
	// Recorder everywhere; at bind, before DefaultBinder (which it
	// leaves the binding to).
	if err := os.WriteFile(cfg, []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: Recorder
    bind:
      disabled:
      - name: DefaultBinder
      enabled:
      - name: Recorder
      - name: DefaultBinder
`), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{calls: map[string][]string{}, failed: map[string]bool{}}
	f.startSchedulerWith("s1", framework.Registry{recorderName: func(_ json.RawMessage, h framework.Handle) (framework.Plugin, error) {
		rec.mu.Lock()
		rec.h = h
		rec.mu.Unlock()
		return rec, nil
	}}, "--config", cfg)
	// Two nodes with room, so every pod has two feasible nodes and is
	// scored (one feasible node is taken without scoring). A pod pinned
	// to each shows the scheduler has seen both before the test's pods.
	for _, n := range []string{"n1", "n2"} {
		f.createNode(n, "4", "8Gi", 110)
		f.createPod("on-"+n, "", "", func(p *kplanev1.Pod) { p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": n} })
	}
	f.waitBound("on-n1")
	f.waitBound("on-n2")
	step := func(s string) func(*kplanev1.Pod) {
		return func(p *kplanev1.Pod) { p.Metadata.Labels = map[string]string{"step": s} }
	}
	const cycle = "PreFilter,Filter,PreScore,Score,NormalizeScore,Reserve"
	const binding = "Permit,PreBind,Bind,PostBind"
	for _, tc := range []struct {
		name, step, want string
	}{
		{"plain", "", cycle + "," + binding},
		{"reserve-fails", "reserve-fails-once", cycle + ",Unreserve," + cycle + "," + binding},
		{"prebind-fails", "prebind-fails-once", cycle + ",Permit,PreBind,Unreserve," + cycle + "," + binding},
		{"bind-fails", "bind-fails-once", cycle + ",Permit,PreBind,Bind,Unreserve," + cycle + "," + binding},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.createPod(tc.name, "100m", "", step(tc.step))
			f.waitBound(tc.name)
			eventually(t, 20*time.Second, tc.name+"'s calls", func() bool { return rec.trace(tc.name) == tc.want })
		})
	}

	rec.mu.Lock()
	h := rec.h
	rec.mu.Unlock()
	waiting := func(name string) framework.WaitingPod {
		uid := f.pod(name).GetMetadata().GetUid()
		var w framework.WaitingPod
		eventually(t, 20*time.Second, name+" held at Permit", func() bool {
			w = h.WaitingPod(uid)
			return w != nil
		})
		return w
	}
	t.Run("permit-allowed", func(t *testing.T) {
		f.createPod("allowed", "100m", "", step("permit-wait"))
		w := waiting("allowed")
		if n := f.pod("allowed").GetSpec().GetNodeName(); n != "" {
			t.Fatalf("bound to %s while held at Permit", n)
		}
		w.Allow(recorderName)
		f.waitBound("allowed")
		eventually(t, 20*time.Second, "allowed's calls", func() bool { return rec.trace("allowed") == cycle+","+binding })
	})
	t.Run("permit-rejected", func(t *testing.T) {
		f.createPod("rejected", "100m", "", step("permit-wait"))
		waiting("rejected").Reject(recorderName, "the gate says no")
		eventually(t, 20*time.Second, "rejected reported unschedulable", func() bool {
			c := podScheduledCondition(f.pod("rejected"))
			return c != nil && c.GetReason() == "Unschedulable" && strings.Contains(c.GetMessage(), "the gate says no")
		})
		if got, want := rec.trace("rejected"), cycle+",Permit,Unreserve"; !strings.HasPrefix(got, want) {
			t.Fatalf("calls %s, want them to start %s", got, want)
		}
		if slices.Contains(strings.Split(rec.trace("rejected"), ","), "PostBind") {
			t.Fatalf("a rejected pod reached PostBind: %s", rec.trace("rejected"))
		}
		if n := f.pod("rejected").GetSpec().GetNodeName(); n != "" {
			t.Fatalf("a rejected pod was bound to %s", n)
		}
	})
}
