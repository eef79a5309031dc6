package integration

import (
	"context"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// TestRESTEvictionPDB: pods/eviction honours PodDisruptionBudgets as
// Kubernetes does. An eviction the budget allows takes one disruption
// (status.disruptionsAllowed down, the pod in status.disruptedPods) and
// deletes the pod; one it does not is 429 with the DisruptionBudget cause
// and writes nothing; a budget its controller has not observed refuses
// too; a Pending pod needs no budget; two budgets selecting the pod are a
// 500.
func TestRESTEvictionPDB(t *testing.T) {
	srv := testserver.Start(t)
	c := srv.Client()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	must := func(err error, what string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	meta := func(name string) *kplanev1.ObjectMeta { return &kplanev1.ObjectMeta{Namespace: "default", Name: name} }
	create := func(o *kplanev1.Object) *kplanev1.Object {
		t.Helper()
		r, err := c.Create(ctx, &kplanev1.CreateRequest{Object: o})
		must(err, "create "+o.Key())
		return r.GetObject()
	}
	newPod := func(name string, labels map[string]string) *kplanev1.Object {
		m := meta(name)
		m.Labels = labels
		return kplanev1.MustWrap(&kplanev1.Pod{Metadata: m, Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "main", Image: "busybox"}}}})
	}
	rc := &restClient{t: t, base: "http://" + srv.Addr()}
	const pods = "/api/v1/namespaces/default/pods"
	web := map[string]string{"app": "web"}

	running := func(name string, labels map[string]string) {
		o := create(newPod(name, labels))
		o.GetPod().Status = &kplanev1.PodStatus{Phase: kplanev1.PodRunning,
			Conditions: []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: kplanev1.ConditionTrue}}}
		_, err := c.UpdateStatus(ctx, &kplanev1.UpdateStatusRequest{Object: o})
		must(err, "pod status")
	}
	for _, n := range []string{"a", "b", "c"} {
		running(n, web)
	}
	pdb := create(kplanev1.MustWrap(&kplanev1.PodDisruptionBudget{Metadata: meta("web"),
		Spec: &kplanev1.PodDisruptionBudgetSpec{MinAvailable: kplanev1.IntOrStringFromInt32(2), Selector: &kplanev1.LabelSelector{MatchLabels: web}}}))
	// What the disruption controller would write: 3 healthy, 2 needed.
	pdb.GetPodDisruptionBudget().Status = &kplanev1.PodDisruptionBudgetStatus{ObservedGeneration: 1, DisruptionsAllowed: 1,
		CurrentHealthy: 3, DesiredHealthy: 2, ExpectedPods: 3}
	_, err := c.UpdateStatus(ctx, &kplanev1.UpdateStatusRequest{Object: pdb})
	must(err, "pdb status")

	evict := func(name string) restResp {
		return rc.do("POST", pods+"/"+name+"/eviction", "application/json",
			map[string]any{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": map[string]any{"name": name, "namespace": "default"}})
	}
	getPDB := func() *kplanev1.PodDisruptionBudget {
		r, err := c.Get(ctx, &kplanev1.GetRequest{Kind: "PodDisruptionBudget", Namespace: "default", Name: "web"})
		must(err, "get pdb")
		return r.GetObject().GetPodDisruptionBudget()
	}
	podGone := func(name string) bool {
		_, err := c.Get(ctx, &kplanev1.GetRequest{Kind: "Pod", Namespace: "default", Name: name})
		return err != nil
	}

	if r := evict("a"); r.code != 201 {
		t.Fatalf("allowed eviction: %d %s", r.code, r.raw)
	}
	got := getPDB()
	if st := got.GetStatus(); st.GetDisruptionsAllowed() != 0 || st.GetDisruptedPods()["a"] == nil {
		t.Fatalf("budget after the eviction: %v", st)
	}
	if !podGone("a") {
		t.Fatal("evicted unbound pod a still exists")
	}

	// None left: 429, the cause names the budget, nothing written.
	rv := got.GetMetadata().GetResourceVersion()
	r := evict("b")
	if r.code != 429 || r.str("reason") != "TooManyRequests" || r.str("message") != "Cannot evict pod as it would violate the pod's disruption budget." {
		t.Fatalf("refused eviction: %d %s", r.code, r.raw)
	}
	causes, _ := r.body["details"].(map[string]any)["causes"].([]any)
	if len(causes) != 1 || causes[0].(map[string]any)["reason"] != "DisruptionBudget" ||
		causes[0].(map[string]any)["message"] != "The disruption budget web needs 2 healthy pods and has 3 currently" {
		t.Fatalf("refusal causes: %s", r.raw)
	}
	if podGone("b") || getPDB().GetMetadata().GetResourceVersion() != rv {
		t.Fatal("a refused eviction wrote something")
	}

	// A changed spec the controller has not observed yet refuses too.
	got = getPDB()
	got.Spec.MinAvailable = kplanev1.IntOrStringFromInt32(1)
	got.Status.DisruptionsAllowed = 5
	_, err = c.UpdateStatus(ctx, &kplanev1.UpdateStatusRequest{Object: kplanev1.MustWrap(got)})
	must(err, "pdb status")
	o := getPDB()
	o.Spec.MinAvailable = kplanev1.IntOrStringFromInt32(1)
	_, err = c.Update(ctx, &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(o)})
	must(err, "pdb spec")
	if r := evict("b"); r.code != 429 || !contains(string(r.raw), "is still being processed by the server") {
		t.Fatalf("eviction under an unobserved budget: %d %s", r.code, r.raw)
	}

	// A Pending pod is not counted by any budget.
	create(newPod("pending", web))
	if r := evict("pending"); r.code != 201 || !podGone("pending") {
		t.Fatalf("eviction of a pending pod: %d %s", r.code, r.raw)
	}

	// Two budgets selecting the pod: Kubernetes does not support that.
	create(kplanev1.MustWrap(&kplanev1.PodDisruptionBudget{Metadata: meta("all"),
		Spec: &kplanev1.PodDisruptionBudgetSpec{MaxUnavailable: kplanev1.IntOrStringFromInt32(1), Selector: &kplanev1.LabelSelector{}}}))
	if r := evict("c"); r.code != 500 || !contains(r.str("message"), "more than one PodDisruptionBudget") || podGone("c") {
		t.Fatalf("eviction under two budgets: %d %s", r.code, r.raw)
	}
}
