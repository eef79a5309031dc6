package disruption

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/controllertest"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 30 * time.Second

// TestDisruptionController runs disruptionctl against a real apiserver:
// the status follows the pods a budget selects (a number minAvailable
// counts them) and its owners' scale (maxUnavailable, percents), evicted
// pods stay in disruptedPods (not counted healthy) until deleted or
// expired, and a pod with no controller makes a percent budget fail safe.
func TestDisruptionController(t *testing.T) {
	srv := testserver.Start(t)
	controllertest.Run(t, srv.Addr(), NewService())
	api := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	create := func(m proto.Message) *kplanev1.Object {
		t.Helper()
		r, err := api.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(m)})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetObject()
	}
	web := map[string]string{"app": "web"}
	four := int32(4)
	rs := create(&kplanev1.ReplicaSet{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: &kplanev1.ReplicaSetSpec{
		Replicas: &four, Selector: &kplanev1.LabelSelector{MatchLabels: web},
		Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: web},
			Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "i"}}}}}})
	pod := func(name string, owned bool) {
		t.Helper()
		m := &kplanev1.ObjectMeta{Namespace: "default", Name: name, Labels: web}
		if owned {
			m.OwnerReferences = []*kplanev1.OwnerReference{{Kind: "ReplicaSet", Name: "web", Uid: rs.Meta().GetUid(), Controller: true}}
		}
		o := create(&kplanev1.Pod{Metadata: m, Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "i"}}}})
		o.GetPod().Status = &kplanev1.PodStatus{Phase: kplanev1.PodRunning,
			Conditions: []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: kplanev1.ConditionTrue}}}
		if _, err := api.UpdateStatus(ctx, &kplanev1.UpdateStatusRequest{Object: o}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		pod(fmt.Sprintf("web-%d", i), true)
	}
	get := func() *kplanev1.PodDisruptionBudget {
		r, err := api.Get(ctx, &kplanev1.GetRequest{Kind: "PodDisruptionBudget", Namespace: "default", Name: "web"})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetObject().GetPodDisruptionBudget()
	}
	// waitStatus waits for observedGeneration to reach the spec and the
	// counts expected/current/desired/allowed.
	waitStatus := func(what string, expected, current, desired, allowed int32, cond string) *kplanev1.PodDisruptionBudget {
		t.Helper()
		var b *kplanev1.PodDisruptionBudget
		testutil.Eventually(t, wait, what, func() bool {
			b = get()
			st := b.GetStatus()
			c := st.GetConditions()
			return st.GetObservedGeneration() == b.GetMetadata().GetGeneration() && st.GetExpectedPods() == expected &&
				st.GetCurrentHealthy() == current && st.GetDesiredHealthy() == desired && st.GetDisruptionsAllowed() == allowed &&
				len(c) == 1 && c[0].GetType() == "DisruptionAllowed" && c[0].GetReason() == cond
		})
		return b
	}

	create(&kplanev1.PodDisruptionBudget{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: &kplanev1.PodDisruptionBudgetSpec{MinAvailable: kplanev1.IntOrStringFromInt32(2), Selector: &kplanev1.LabelSelector{MatchLabels: web}}})
	// A number minAvailable counts the 3 pods there are.
	b := waitStatus("minAvailable 2 of 3 pods", 3, 3, 2, 1, "SufficientPods")

	// maxUnavailable counts the owner's scale, 4: 3 of 4 must stay, none may go.
	b.Spec.MinAvailable, b.Spec.MaxUnavailable = nil, kplanev1.IntOrStringFromInt32(1)
	if _, err := api.Update(ctx, &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(b)}); err != nil {
		t.Fatal(err)
	}
	b = waitStatus("maxUnavailable 1 of scale 4", 4, 3, 3, 0, "InsufficientPods")
	// A percent rounds up: 50% of 4 must stay.
	b.Spec.MaxUnavailable, b.Spec.MinAvailable = nil, kplanev1.IntOrStringFromString("50%")
	if _, err := api.Update(ctx, &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(b)}); err != nil {
		t.Fatal(err)
	}
	b = waitStatus("minAvailable 50% of scale 4", 4, 3, 2, 1, "SufficientPods")

	// An evicted pod (as the eviction subresource records it) is not
	// healthy while it is in disruptedPods; an entry past its timeout is
	// dropped.
	b.Status.DisruptedPods = map[string]*timestamppb.Timestamp{
		"web-0": timestamppb.Now(),
		"web-1": timestamppb.New(time.Now().Add(-3 * time.Minute)),
	}
	b.Status.DisruptionsAllowed = 0
	if _, err := api.UpdateStatus(ctx, &kplanev1.UpdateStatusRequest{Object: kplanev1.MustWrap(b)}); err != nil {
		t.Fatal(err)
	}
	b = waitStatus("web-0 disrupted", 4, 2, 2, 0, "InsufficientPods")
	if d := b.GetStatus().GetDisruptedPods(); len(d) != 1 || d["web-0"] == nil {
		t.Fatalf("disruptedPods: %v", d)
	}
	// Once the evicted pod is gone, its entry goes.
	if _, err := api.Delete(ctx, &kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "web-0"}); err != nil {
		t.Fatal(err)
	}
	waitStatus("web-0 gone", 4, 2, 2, 0, "InsufficientPods")
	testutil.Eventually(t, wait, "disruptedPods emptied", func() bool { return len(get().GetStatus().GetDisruptedPods()) == 0 })

	// A selected pod with no controller: the scale is unknown, nothing may go.
	pod("stray", false)
	testutil.Eventually(t, wait, "fail safe on a pod with no controller", func() bool {
		st := get().GetStatus()
		c := st.GetConditions()
		return st.GetDisruptionsAllowed() == 0 && len(c) == 1 && c[0].GetReason() == "SyncFailed" && c[0].GetStatus() == "False"
	})
}
