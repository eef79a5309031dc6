package agent

import (
	"fmt"
	"testing"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// A fake node with --max-pods 2 runs two pods and refuses a third
// (Failed, OutOfpods, no address); once one of the two is deleted a new
// pod is admitted. A finished pod does not count.
func TestMaxPodsAdmission(t *testing.T) {
	e := newEnv(t)
	e.startAgent("--runtime", "fake", "--fake-nodes", "1", "--node-name", "small", "--max-pods", "2")
	waitFor(t, e.ctx, "node small-0 registered", func() bool {
		_, err := client.For[*kplanev1.Node](e.api).Get(e.ctx, "", "small-0")
		return err == nil
	})
	e.assignPodCIDR("small-0", "10.201.0.0/24")
	a := e.createPod("a", "small-0", nil)
	e.waitCreated(a, "Running", phase(kplanev1.PodRunning))
	b := e.createPod("b", "small-0", nil)
	e.waitCreated(b, "Running", phase(kplanev1.PodRunning))
	c := e.createPod("c", "small-0", nil)
	refused := e.waitCreated(c, "Failed (OutOfpods)", phase(kplanev1.PodFailed))
	if st := refused.GetStatus(); st.GetReason() != ReasonOutOfPods || st.GetPodIp() != "" ||
		st.GetMessage() != "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2" {
		t.Fatalf("refused pod: reason %q, message %q, podIP %q", st.GetReason(), st.GetMessage(), st.GetPodIp())
	}

	// A pod that finishes frees its place.
	done := func(p *kplanev1.Pod) {
		p.Metadata.Annotations = map[string]string{AnnotationFakeExitAfter: "50ms", AnnotationFakeExitCode: "0"}
		p.Spec.RestartPolicy = kplanev1.RestartPolicyNever
	}
	zero := int64(0)
	if _, err := client.For[*kplanev1.Pod](e.api).Delete(e.ctx, "default", "b", client.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	e.waitGone("b")
	d := e.createPod("d", "small-0", done)
	e.waitCreated(d, "Succeeded", phase(kplanev1.PodSucceeded))
	for i := range 2 {
		p := e.createPod(fmt.Sprintf("after-%d", i), "small-0", nil)
		want := kplanev1.PodRunning
		if i == 1 {
			want = kplanev1.PodFailed // a, after-0: full again
		}
		got := e.waitCreated(p, want, phase(want))
		if want == kplanev1.PodFailed && got.GetStatus().GetReason() != ReasonOutOfPods {
			t.Fatalf("after-1: reason %q, want %s", got.GetStatus().GetReason(), ReasonOutOfPods)
		}
	}
}
