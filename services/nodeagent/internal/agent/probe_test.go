package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/record"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// events lists the reasons and messages of the pod's events.
func (e *env) events(pod *kplanev1.Pod) []string {
	e.t.Helper()
	evs, _, err := client.For[*kplanev1.Event](e.api).List(e.ctx, "default", client.ListOptions{})
	if err != nil {
		e.t.Fatalf("list events: %v", err)
	}
	var out []string
	for _, ev := range evs {
		if ev.GetInvolvedObject().GetUid() == pod.GetMetadata().GetUid() {
			out = append(out, ev.GetReason()+": "+ev.GetMessage())
		}
	}
	return out
}

func (e *env) hasEvent(pod *kplanev1.Pod, prefix string) bool {
	for _, ev := range e.events(pod) {
		if strings.HasPrefix(ev, prefix) {
			return true
		}
	}
	return false
}

func restarts(p *kplanev1.Pod) int32 {
	if len(p.GetStatus().GetContainerStatuses()) == 0 {
		return 0
	}
	return p.GetStatus().GetContainerStatuses()[0].GetRestartCount()
}

// A container whose liveness probe fails is stopped and restarted: its
// restartCount grows, lastState shows the killed run, and Unhealthy and
// Killing events say why.
func TestLivenessProbeRestartsContainer(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	p := e.createPod("live", "node-a", func(p *kplanev1.Pod) {
		p.Spec.Containers[0].LivenessProbe = &kplanev1.Probe{
			Exec: &kplanev1.ExecAction{Command: []string{"test", "-f", "alive"}},
			// The delay lets each run create its file before the first probe.
			InitialDelaySeconds: 1, PeriodSeconds: 1, FailureThreshold: 1, TerminationGracePeriodSeconds: proto.Int64(1),
		}
	}, "sh", "-c", "touch alive; exec sleep 300")
	p = e.waitCreated(p, "Running and Ready", func(p *kplanev1.Pod) bool { return phase(kplanev1.PodRunning)(p) && isReady(p) })
	if restarts(p) != 0 {
		t.Fatalf("restartCount = %d before the probe failed", restarts(p))
	}
	first := e.containerPid(p, "main")
	// Running is reported once the process started; its shell may not
	// have made the file yet.
	alive := filepath.Join(e.root, podsDir, p.GetMetadata().GetUid(), "main", "alive")
	waitFor(t, e.ctx, "the container's alive file", func() bool { _, err := os.Stat(alive); return err == nil })
	if err := os.Remove(alive); err != nil {
		t.Fatal(err)
	}
	p = e.waitPod("live", "restarted and running again", func(p *kplanev1.Pod) bool {
		cs := p.GetStatus().GetContainerStatuses()[0]
		return cs.GetRestartCount() >= 1 && cs.GetState().GetRunning() != nil && cs.GetReady()
	})
	cs := p.GetStatus().GetContainerStatuses()[0]
	if term := cs.GetLastState().GetTerminated(); term == nil || term.GetExitCode() == 0 || term.GetReason() != ReasonError {
		t.Fatalf("lastState = %v, want the killed run", cs.GetLastState())
	}
	if pidAlive(first) {
		t.Fatalf("the first run (pid %d) still runs", first)
	}
	waitFor(t, e.ctx, "Unhealthy and Killing events", func() bool {
		return e.hasEvent(p, "Unhealthy: Liveness probe failed: command \"test -f alive\"") &&
			e.hasEvent(p, "Killing: Container main failed liveness probe, will be restarted")
	})
}

// A startup probe holds the liveness probe back: a liveness probe that
// always fails does nothing until the startup probe succeeds.
func TestStartupProbeHoldsLivenessBack(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	p := e.createPod("slow", "node-a", func(p *kplanev1.Pod) {
		c := p.Spec.Containers[0]
		c.StartupProbe = &kplanev1.Probe{
			Exec:          &kplanev1.ExecAction{Command: []string{"test", "-f", "started"}},
			PeriodSeconds: 1, FailureThreshold: 1000,
		}
		c.LivenessProbe = &kplanev1.Probe{Exec: &kplanev1.ExecAction{Command: []string{"false"}}, PeriodSeconds: 1, FailureThreshold: 1,
			TerminationGracePeriodSeconds: proto.Int64(1)}
		c.ReadinessProbe = &kplanev1.Probe{Exec: &kplanev1.ExecAction{Command: []string{"true"}}, PeriodSeconds: 1}
	}, "sleep", "300")
	e.waitCreated(p, "Running", phase(kplanev1.PodRunning))
	// Two failed startup probes are a second in which the liveness probe
	// would have killed the container, were it not held back.
	p = e.waitPod("slow", "startup probe failed twice", func(p *kplanev1.Pod) bool {
		evs, _, _ := client.For[*kplanev1.Event](e.api).List(e.ctx, "default", client.ListOptions{})
		for _, ev := range evs {
			if ev.GetInvolvedObject().GetUid() == p.GetMetadata().GetUid() && ev.GetReason() == "Unhealthy" && ev.GetCount() >= 2 {
				return true
			}
		}
		return false
	})
	cs := p.GetStatus().GetContainerStatuses()[0]
	if cs.GetRestartCount() != 0 || cs.GetStarted() || cs.GetReady() {
		t.Fatalf("before the startup probe passed: restartCount %d started %v ready %v, want 0/false/false", cs.GetRestartCount(), cs.GetStarted(), cs.GetReady())
	}
	if e.hasEvent(p, "Unhealthy: Liveness") || e.hasEvent(p, "Unhealthy: Readiness") {
		t.Fatalf("liveness or readiness probed before startup passed: %v", e.events(p))
	}
	if err := os.WriteFile(filepath.Join(e.root, podsDir, p.GetMetadata().GetUid(), "main", "started"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Now the liveness probe runs, fails and restarts the container.
	e.waitPod("slow", "restarted by its liveness probe", func(p *kplanev1.Pod) bool { return restarts(p) >= 1 })
	waitFor(t, e.ctx, "a Liveness Unhealthy event", func() bool { return e.hasEvent(p, "Unhealthy: Liveness probe failed") })
}

// A startup probe that reaches its failure threshold restarts the container.
func TestStartupProbeFailureRestarts(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	p := e.createPod("never-starts", "node-a", func(p *kplanev1.Pod) {
		p.Spec.Containers[0].StartupProbe = &kplanev1.Probe{Exec: &kplanev1.ExecAction{Command: []string{"false"}},
			PeriodSeconds: 1, FailureThreshold: 2, TerminationGracePeriodSeconds: proto.Int64(1)}
	}, "sleep", "300")
	p = e.waitCreated(p, "restarted", func(p *kplanev1.Pod) bool { return restarts(p) >= 1 })
	waitFor(t, e.ctx, "a Killing event", func() bool {
		return e.hasEvent(p, "Killing: Container main failed startup probe, will be restarted")
	})
}

// With the fake runtime the probes' verdicts come from annotations: a
// readiness flip is one annotation change, and a failing liveness
// "probe" restarts the fake container.
func TestFakeRuntimeProbeAnnotations(t *testing.T) {
	e := newEnv(t)
	e.startAgent("--runtime", "fake", "--fake-nodes", "1", "--node-name", "fake")
	waitFor(t, e.ctx, "node fake-0 registered", func() bool {
		_, err := client.For[*kplanev1.Node](e.api).Get(e.ctx, "", "fake-0")
		return err == nil
	})
	e.assignPodCIDR("fake-0", "10.201.0.0/24")
	p := e.createPod("flip", "fake-0", func(p *kplanev1.Pod) {
		p.Spec.Containers[0].ReadinessProbe = &kplanev1.Probe{HttpGet: &kplanev1.HTTPGetAction{Port: kplanev1.IntOrStringFromInt32(80)},
			PeriodSeconds: 1, FailureThreshold: 1}
		p.Spec.Containers[0].LivenessProbe = &kplanev1.Probe{TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromInt32(80)},
			PeriodSeconds: 1, FailureThreshold: 1, TerminationGracePeriodSeconds: proto.Int64(1)}
	})
	p = e.waitCreated(p, "Ready", isReady)
	setAnn := func(k, v string) {
		t.Helper()
		for {
			cur, err := client.For[*kplanev1.Pod](e.api).Get(e.ctx, "default", "flip")
			if err != nil {
				t.Fatal(err)
			}
			if cur.Metadata.Annotations == nil {
				cur.Metadata.Annotations = map[string]string{}
			}
			cur.Metadata.Annotations[k] = v
			if _, err = client.For[*kplanev1.Pod](e.api).Update(e.ctx, cur); err == nil {
				return
			} else if !client.IsConflict(err) {
				t.Fatal(err)
			}
		}
	}
	setAnn(AnnotationFakeProbePrefix+"readiness", "failure")
	e.waitPod("flip", "not Ready", func(p *kplanev1.Pod) bool { return !isReady(p) })
	setAnn(AnnotationFakeProbePrefix+"readiness", "success")
	e.waitPod("flip", "Ready again", isReady)
	if restarts(p) != 0 {
		t.Fatalf("restarted before the liveness annotation: %d", restarts(p))
	}
	setAnn(AnnotationFakeProbePrefix+"liveness", "failure")
	p = e.waitPod("flip", "restarted twice", func(p *kplanev1.Pod) bool { return restarts(p) >= 2 })
	if lt := p.GetStatus().GetContainerStatuses()[0].GetLastState().GetTerminated(); lt.GetExitCode() != 143 {
		t.Fatalf("lastState = %v, want exit 143 (SIGTERM)", lt)
	}
}

// Probe events are rate-limited per pod: a burst of 25, then none for
// minutes, whatever the probe's period.
func TestProbeEventsRateLimited(t *testing.T) {
	e := newEnv(t)
	pod := e.createPod("noisy", "node-x", nil, "true")
	a := &Agent{exec: &execRuntime{}, rec: record.New(e.api, Name, "node-x", nil), log: hclog.NewNullLogger()}
	st := &podState{}
	for range 40 {
		a.probeEvent(e.ctx, pod, st, record.Warning, "Unhealthy", "Readiness probe failed: %s", "connection refused")
	}
	evs, _, err := client.For[*kplanev1.Event](e.api).List(e.ctx, "default", client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var total int32
	for _, ev := range evs {
		if ev.GetInvolvedObject().GetUid() == pod.GetMetadata().GetUid() && ev.GetReason() == "Unhealthy" {
			total += max(ev.GetCount(), 1)
		}
	}
	if total != probeEventBurst {
		t.Fatalf("%d Unhealthy events recorded for 40 failures, want the burst of %d", total, probeEventBurst)
	}
}
