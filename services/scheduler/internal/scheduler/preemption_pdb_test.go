package scheduler

import (
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// The running scheduler reads PodDisruptionBudgets (policy/v1) through
// its informer and preempts around them: of two pods in the way, the
// less important one is covered by a budget that allows no disruption,
// so the more important one (still below the preemptor) is evicted
// instead; without the budget the less important one would go.
func TestPreemptionHonoursPodDisruptionBudget(t *testing.T) {
	f := newFixture(t)
	f.priorityClass("lower", 5, false)
	f.priorityClass("low", 10, false)
	f.priorityClass("top", 1000, false)
	f.createNode("n1", "4", "8Gi", 110)
	app := func(v string) func(*kplanev1.Pod) {
		return func(p *kplanev1.Pod) {
			p.Metadata.Labels = map[string]string{"app": v}
			p.Spec.NodeName = "n1"
		}
	}
	f.createPod("guarded", "2", "", class("lower"), app("guarded"))
	f.createPod("free", "2", "", class("low"), app("free"))
	// No disruptionctl runs here: the budget's status, as it would
	// write it, allows no disruption.
	f.create(&kplanev1.PodDisruptionBudget{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "guarded"},
		Spec: &kplanev1.PodDisruptionBudgetSpec{MinAvailable: kplanev1.IntOrStringFromInt32(1),
			Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}}})
	f.startScheduler("s1")

	f.createPod("urgent", "2", "", class("top"))
	eventually(t, 20*time.Second, "urgent nominated on n1 and one pod preempted", func() bool {
		return nominatedNode(f.pod("urgent")) == "n1" && len(f.terminating("guarded", "free")) == 1
	})
	if got := f.terminating("guarded", "free"); got[0] != "free" {
		t.Fatalf("preempted %v, want free (guarded is covered by a budget with no disruption allowed)", got)
	}
	f.forceDelete("free")
	if got := f.waitBound("urgent"); got != "n1" {
		t.Fatalf("urgent bound to %s, want n1", got)
	}
	if len(f.terminating("guarded")) != 0 {
		t.Fatal("guarded was preempted too")
	}
}
