package agent

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// A finished pod gives its address back, as the kubelet's sandbox
// teardown does: on a node whose range holds six addresses, a dozen pods
// that run to completion all get one, each keeps the address its status
// reports, and a pod after them still runs.
func TestFinishedPodsGiveTheirAddressBack(t *testing.T) {
	e := newEnv(t)
	e.startAgent("--runtime", "fake", "--fake-nodes", "1", "--node-name", "small")
	waitFor(t, e.ctx, "node small-0 registered", func() bool {
		_, err := client.For[*kplanev1.Node](e.api).Get(e.ctx, "", "small-0")
		return err == nil
	})
	e.assignPodCIDR("small-0", "10.201.0.0/29") // .1 to .6
	cidr := netip.MustParsePrefix("10.201.0.0/29")
	done := func(p *kplanev1.Pod) {
		p.Metadata.Annotations = map[string]string{AnnotationFakeExitAfter: "50ms", AnnotationFakeExitCode: "0"}
		p.Spec.RestartPolicy = kplanev1.RestartPolicyNever
	}
	for i := 0; i < 12; i++ {
		name := fmt.Sprintf("job-%d", i)
		e.createPod(name, "small-0", done)
		p := e.waitPod(name, "Succeeded", phase(kplanev1.PodSucceeded))
		ip, err := netip.ParseAddr(p.GetStatus().GetPodIp())
		if err != nil || !cidr.Contains(ip) {
			t.Fatalf("%s finished with podIP %q, want one of %s", name, p.GetStatus().GetPodIp(), cidr)
		}
	}
	p := e.waitPod("job-0", "still reporting its address", func(p *kplanev1.Pod) bool { return p.GetStatus().GetPodIp() != "" })
	if p.GetStatus().GetPhase() != kplanev1.PodSucceeded {
		t.Fatalf("job-0 is %s", p.GetStatus().GetPhase())
	}
	e.createPod("server", "small-0", nil)
	e.waitPod("server", "Running", phase(kplanev1.PodRunning))
}
