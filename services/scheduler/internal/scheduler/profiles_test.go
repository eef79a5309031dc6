package scheduler

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/app"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Two profiles in one process: the default spreads, "packer" (MostAllocated)
// fills the fuller node; a pod naming a scheduler no profile serves is left
// alone (no node, no PodScheduled condition).
func TestProfilesBySchedulerName(t *testing.T) {
	f := newFixture(t)
	cfg := filepath.Join(t.TempDir(), "sched.yaml")
	if err := os.WriteFile(cfg, []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
- schedulerName: packer
  plugins:
    score:
      disabled:
      - name: NodeResourcesBalancedAllocation
      - name: SelectorSpread
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
`), 0o600); err != nil {
		t.Fatal(err)
	}
	f.createNode("n1", "4", "8Gi", 110)
	f.createNode("n2", "4", "8Gi", 110)
	f.startScheduler("s1", "--config", cfg)

	f.createPod("first", "2", "4Gi")
	full := f.waitBound("first")
	empty := map[string]string{"n1": "n2", "n2": "n1"}[full]

	f.createPod("packed", "1", "1Gi", func(p *kplanev1.Pod) { p.Spec.SchedulerName = "packer" })
	f.createPod("spread", "1", "1Gi")
	f.createPod("other", "1", "1Gi", func(p *kplanev1.Pod) { p.Spec.SchedulerName = "someone-else" })
	if got := f.waitBound("packed"); got != full {
		t.Errorf("packer put its pod on %s, want the fuller node %s", got, full)
	}
	if got := f.waitBound("spread"); got != empty {
		t.Errorf("default profile put its pod on %s, want the emptier node %s", got, empty)
	}
	// The scheduler has decided on later pods; "other" is still untouched.
	f.createPod("marker", "", "")
	f.waitBound("marker")
	o := f.pod("other")
	if o.GetSpec().GetNodeName() != "" || len(o.GetStatus().GetConditions()) != 0 {
		t.Fatalf("pod of an unknown scheduler was touched: node %q, conditions %v", o.GetSpec().GetNodeName(), o.GetStatus().GetConditions())
	}
}

func TestBadConfigStopsTheScheduler(t *testing.T) {
	f := newFixture(t)
	cfg := filepath.Join(t.TempDir(), "sched.yaml")
	if err := os.WriteFile(cfg, []byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- plugins:\n    score:\n      enabled:\n      - name: NoSuchPlugin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := app.Run(ctx, NewService(nil), []string{"--apiserver", f.srv.Addr(), "--health-addr", "127.0.0.1:0", "--log-level", "error", "--id", "bad", "--config", cfg})
	if err == nil || !strings.Contains(err.Error(), `profiles[0].plugins.score.enabled[0].name: Unsupported value: "NoSuchPlugin"`) {
		t.Fatalf("run = %v, want the bad plugin named", err)
	}
}

// Pods that exist before the scheduler starts are decided by priority:
// with room for one pod, the highest-priority pod (created last) gets it.
func TestQueueOrdersByPriority(t *testing.T) {
	f := newFixture(t)
	for name, v := range map[string]int32{"low": 10, "high": 1000} {
		if _, err := f.api.Create(f.ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.PriorityClass{
			Metadata: &kplanev1.ObjectMeta{Name: name}, Value: v})}); err != nil {
			t.Fatal(err)
		}
	}
	f.createNode("n1", "1", "1Gi", 110)
	for i := range 5 {
		f.createPod("low-"+string(rune('a'+i)), "800m", "", func(p *kplanev1.Pod) { p.Spec.PriorityClassName = "low" })
	}
	f.createPod("high", "800m", "", func(p *kplanev1.Pod) { p.Spec.PriorityClassName = "high" })
	if p := f.pod("high"); p.GetSpec().GetPriority() != 1000 {
		t.Fatalf("admission gave priority %d", p.GetSpec().GetPriority())
	}
	f.startScheduler("s1")
	if got := f.waitBound("high"); got != "n1" {
		t.Fatalf("high bound to %q", got)
	}
	eventually(t, 20*time.Second, "the low pods to be reported unschedulable", func() bool {
		for i := range 5 {
			p := f.pod("low-" + string(rune('a'+i)))
			if p.GetSpec().GetNodeName() != "" {
				t.Fatalf("%s was bound before the higher-priority pod", p.GetMetadata().GetName())
			}
			if c := podScheduledCondition(p); c == nil || c.GetReason() != "Unschedulable" {
				return false
			}
		}
		return true
	})
}

// PodTopologySpread's default constraints from --config (defaultingType
// List): a pod with no constraints of its own that a Service selects is
// spread by hostname with maxSkew 1 (its group fills n1, so it goes to
// the smaller n2 that scoring alone would not pick); a pod no Service
// selects is placed by scoring alone (n1).
func TestPodTopologySpreadListDefaults(t *testing.T) {
	f := newFixture(t)
	cfg := filepath.Join(t.TempDir(), "sched.yaml")
	if err := os.WriteFile(cfg, []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  pluginConfig:
  - name: PodTopologySpread
    args:
      defaultingType: List
      defaultConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.api.Create(f.ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Service{
		Metadata: &kplanev1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: &kplanev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []*kplanev1.ServicePort{{Port: 80, Protocol: "TCP"}}}})}); err != nil {
		t.Fatal(err)
	}
	f.createNode("n1", "8", "16Gi", 110)
	f.createNode("n2", "1", "2Gi", 110)
	app := func(v string) func(*kplanev1.Pod) {
		return func(p *kplanev1.Pod) { p.Metadata.Labels = map[string]string{"app": v} }
	}
	onN1 := func(p *kplanev1.Pod) { p.Spec.NodeName = "n1" }
	f.createPod("web-0", "100m", "", app("web"), onN1)
	f.createPod("web-1", "100m", "", app("web"), onN1)
	f.startScheduler("s1", "--config", cfg)

	f.createPod("web-2", "100m", "", app("web"))
	if got := f.waitBound("web-2"); got != "n2" {
		t.Fatalf("web-2 bound to %s, want n2 (hostname spread of the Service's pods)", got)
	}
	f.createPod("other", "100m", "", app("other"))
	if got := f.waitBound("other"); got != "n1" {
		t.Fatalf("other bound to %s, want n1 (no Service selects it: scoring alone)", got)
	}
}
