package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// readPodFile reads a file the pod's containers share (in the pod's
// directory, each container's ..).
func (e *env) readPodFile(p *kplanev1.Pod, name string) string {
	b, _ := os.ReadFile(filepath.Join(e.root, podsDir, p.GetMetadata().GetUid(), name))
	return string(b)
}

func initStatus(p *kplanev1.Pod, i int) *kplanev1.ContainerStatus {
	if ics := p.GetStatus().GetInitContainerStatuses(); i < len(ics) {
		return ics[i]
	}
	return nil
}

// Init containers run one by one to completion before the app container.
func TestInitContainersRunInOrder(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	p := e.createPod("inits", "node-a", func(p *kplanev1.Pod) {
		p.Spec.InitContainers = []*kplanev1.Container{
			{Name: "first", Image: "local", Command: []string{"sh", "-c", "echo first >> ../order"}},
			{Name: "second", Image: "local", Command: []string{"sh", "-c", "echo second >> ../order"}},
		}
	}, "sh", "-c", "echo app >> ../order; exec sleep 300")
	p = e.waitCreated(p, "Running", phase(kplanev1.PodRunning))
	waitFor(t, e.ctx, "the app's line", func() bool { return strings.Contains(e.readPodFile(p, "order"), "app") })
	if got := e.readPodFile(p, "order"); got != "first\nsecond\napp\n" {
		t.Fatalf("order of runs = %q", got)
	}
	for i := range 2 {
		if term := initStatus(p, i).GetState().GetTerminated(); term.GetReason() != ReasonCompleted {
			t.Fatalf("init container %d: %v", i, initStatus(p, i))
		}
	}
	if c := apiutil.FindCondition(p.GetStatus().GetConditions(), kplanev1.PodInitialized); c.GetStatus() != kplanev1.ConditionTrue {
		t.Fatalf("Initialized = %v", c)
	}
}

// A failing init container is restarted with back-off and blocks the app
// (Init:CrashLoopBackOff); under restartPolicy Never it fails the pod.
func TestFailingInitContainerBlocksApp(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	p := e.createPod("blocked", "node-a", func(p *kplanev1.Pod) {
		p.Spec.InitContainers = []*kplanev1.Container{{Name: "check", Image: "local", Command: []string{"sh", "-c", "echo checking; exit 2"}}}
	}, "sleep", "300")
	e.waitCreated(p, "init restarted twice", func(p *kplanev1.Pod) bool { return initStatus(p, 0).GetRestartCount() >= 2 })
	p = e.waitPod("blocked", "in Init:CrashLoopBackOff", func(p *kplanev1.Pod) bool {
		return initStatus(p, 0).GetState().GetWaiting().GetReason() == ReasonCrashLoopBackOff
	})
	if p.GetStatus().GetPhase() != kplanev1.PodPending {
		t.Fatalf("phase = %s, want Pending", p.GetStatus().GetPhase())
	}
	app := p.GetStatus().GetContainerStatuses()[0]
	if app.GetState().GetWaiting().GetReason() != ReasonPodInitializing || app.GetRestartCount() != 0 {
		t.Fatalf("app container = %v, want waiting PodInitializing", app)
	}
	if c := apiutil.FindCondition(p.GetStatus().GetConditions(), kplanev1.PodInitialized); c.GetStatus() != kplanev1.ConditionFalse ||
		c.GetReason() != ReasonNotInitialized || c.GetMessage() != "containers with incomplete status: [check]" {
		t.Fatalf("Initialized = %v", c)
	}
	if lt := initStatus(p, 0).GetLastState().GetTerminated(); lt.GetExitCode() != 2 || lt.GetReason() != ReasonError {
		t.Fatalf("init lastState = %v", lt)
	}

	never := e.createPod("init-fails", "node-a", func(p *kplanev1.Pod) {
		p.Spec.RestartPolicy = kplanev1.RestartPolicyNever
		p.Spec.InitContainers = []*kplanev1.Container{{Name: "check", Image: "local", Command: []string{"false"}}}
	}, "sleep", "300")
	never = e.waitCreated(never, "Failed", phase(kplanev1.PodFailed))
	if term := initStatus(never, 0).GetState().GetTerminated(); term.GetExitCode() != 1 || term.GetReason() != ReasonError {
		t.Fatalf("init container = %v, want terminated Error", initStatus(never, 0))
	}
	if app := never.GetStatus().GetContainerStatuses()[0]; app.GetState().GetWaiting().GetReason() != ReasonPodInitializing {
		t.Fatalf("app container ran: %v", app)
	}
}

// A sidecar starts before the app, runs beside it and is stopped after
// the app finished: its preStop hook runs before its SIGTERM. The pod
// then Succeeds.
func TestSidecarStopsAfterAppWithPreStop(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	p := e.createPod("sidecar", "node-a", func(p *kplanev1.Pod) {
		p.Spec.RestartPolicy = kplanev1.RestartPolicyNever
		p.Spec.InitContainers = []*kplanev1.Container{{
			Name:          "proxy",
			Image:         "local",
			RestartPolicy: func() *string { s := "Always"; return &s }(),
			Command:       []string{"sh", "-c", `trap 'echo sigterm >> ../log; exit 0' TERM; touch ../proxy-up; while :; do sleep 0.05; done`},
			StartupProbe:  &kplanev1.Probe{Exec: &kplanev1.ExecAction{Command: []string{"test", "-f", "../proxy-up"}}, PeriodSeconds: 1, FailureThreshold: 30},
			Lifecycle:     &kplanev1.Lifecycle{PreStop: &kplanev1.LifecycleHandler{Exec: &kplanev1.ExecAction{Command: []string{"sh", "-c", "echo prestop >> ../log"}}}},
		}}
	}, "sh", "-c", "test -f ../proxy-up && echo app-saw-proxy >> ../log")
	p = e.waitCreated(p, "Succeeded", phase(kplanev1.PodSucceeded))
	if got := e.readPodFile(p, "log"); got != "app-saw-proxy\nprestop\nsigterm\n" {
		t.Fatalf("log = %q, want the app, then preStop, then SIGTERM", got)
	}
	sc := initStatus(p, 0)
	if term := sc.GetState().GetTerminated(); term == nil || term.GetExitCode() != 0 {
		t.Fatalf("sidecar = %v, want terminated", sc)
	}
	if sc.GetRestartCount() != 0 {
		t.Fatalf("sidecar restarted after its app finished: %v", sc)
	}
}

// postStart runs after the start; a failing one kills the container.
func TestPostStartHook(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	p := e.createPod("hooked", "node-a", func(p *kplanev1.Pod) {
		p.Spec.Containers[0].Lifecycle = &kplanev1.Lifecycle{PostStart: &kplanev1.LifecycleHandler{
			Exec: &kplanev1.ExecAction{Command: []string{"sh", "-c", `echo "hook saw $MODE" > ../poststart`}}}}
		p.Spec.Containers[0].Env = []*kplanev1.EnvVar{{Name: "MODE", Value: "prod"}}
	}, "sleep", "300")
	p = e.waitCreated(p, "Running", phase(kplanev1.PodRunning))
	waitFor(t, e.ctx, "the hook's file", func() bool { return e.readPodFile(p, "poststart") == "hook saw prod\n" })

	bad := e.createPod("bad-hook", "node-a", func(p *kplanev1.Pod) {
		p.Spec.Containers[0].Lifecycle = &kplanev1.Lifecycle{PostStart: &kplanev1.LifecycleHandler{Exec: &kplanev1.ExecAction{Command: []string{"false"}}}}
	}, "sleep", "300")
	bad = e.waitCreated(bad, "restarted", func(p *kplanev1.Pod) bool { return restarts(p) >= 1 })
	waitFor(t, e.ctx, "a FailedPostStartHook event", func() bool { return e.hasEvent(bad, "FailedPostStartHook: PostStartHook failed") })
}

// The termination message file becomes the terminated state's message;
// FallbackToLogsOnError takes the log's tail when the file is empty.
func TestTerminationMessage(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	never := func(policy string) func(*kplanev1.Pod) {
		return func(p *kplanev1.Pod) {
			p.Spec.RestartPolicy = kplanev1.RestartPolicyNever
			p.Spec.Containers[0].TerminationMessagePolicy = policy
		}
	}
	file := e.createPod("msg-file", "node-a", never("File"), "sh", "-c", `echo noise; printf 'disk full' > "$`+EnvTerminationMessagePath+`"; exit 3`)
	logs := e.createPod("msg-logs", "node-a", never("FallbackToLogsOnError"), "sh", "-c", "echo first; echo last words; exit 4")
	quiet := e.createPod("msg-none", "node-a", never("File"), "sh", "-c", "echo only logs; exit 5")
	for _, tc := range []struct {
		pod  *kplanev1.Pod
		want string
	}{{file, "disk full"}, {logs, "first\nlast words\n"}, {quiet, ""}} {
		p := e.waitCreated(tc.pod, "Failed", phase(kplanev1.PodFailed))
		if got := p.GetStatus().GetContainerStatuses()[0].GetState().GetTerminated().GetMessage(); got != tc.want {
			t.Errorf("pod %s: message %q, want %q", p.GetMetadata().GetName(), got, tc.want)
		}
	}
}

// activeDeadlineSeconds fails a pod that runs too long and stops it.
func TestActiveDeadlineSeconds(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	p := e.createPod("deadline", "node-a", func(p *kplanev1.Pod) {
		one := int64(1)
		p.Spec.ActiveDeadlineSeconds = &one
		p.Spec.TerminationGracePeriodSeconds = &one
	}, "sleep", "300")
	p = e.waitCreated(p, "Running", phase(kplanev1.PodRunning))
	pid := e.containerPid(p, "main")
	p = e.waitPod("deadline", "Failed", phase(kplanev1.PodFailed))
	if p.GetStatus().GetReason() != ReasonDeadlineExceeded || p.GetStatus().GetMessage() != messageDeadlineExceeded {
		t.Fatalf("status reason %q message %q", p.GetStatus().GetReason(), p.GetStatus().GetMessage())
	}
	waitFor(t, e.ctx, "the process to stop", func() bool { return !pidAlive(pid) })
	e.waitPod("deadline", "showing the container terminated", func(p *kplanev1.Pod) bool {
		return p.GetStatus().GetContainerStatuses()[0].GetState().GetTerminated() != nil
	})
}

// On deletion the app containers stop first (preStop, then SIGTERM) and
// the sidecar only after they have exited.
func TestDeletionStopsSidecarLast(t *testing.T) {
	e := newEnv(t)
	e.startAgent()
	out := filepath.Join(t.TempDir(), "log") // outlives the pod's directory
	always := "Always"
	p := e.createPod("ordered-stop", "node-a", func(p *kplanev1.Pod) {
		p.Spec.InitContainers = []*kplanev1.Container{{
			Name: "proxy", Image: "local", RestartPolicy: &always,
			Env:     []*kplanev1.EnvVar{{Name: "OUT", Value: out}},
			Command: []string{"sh", "-c", `trap 'echo proxy-term >> "$OUT"; exit 0' TERM; touch "$OUT.proxy"; while :; do sleep 0.05; done`},
		}}
		c := p.Spec.Containers[0]
		c.Env = []*kplanev1.EnvVar{{Name: "OUT", Value: out}}
		c.Lifecycle = &kplanev1.Lifecycle{PreStop: &kplanev1.LifecycleHandler{
			Exec: &kplanev1.ExecAction{Command: []string{"sh", "-c", `echo app-prestop >> "$OUT"`}}}}
	}, "sh", "-c", `trap 'sleep 0.3; echo app-term >> "$OUT"; exit 0' TERM; touch "$OUT.app"; while :; do sleep 0.05; done`)
	e.waitCreated(p, "Running", phase(kplanev1.PodRunning))
	// A signal before a shell's trap is set would end it at once.
	waitFor(t, e.ctx, "both traps set", func() bool {
		_, err1 := os.Stat(out + ".proxy")
		_, err2 := os.Stat(out + ".app")
		return err1 == nil && err2 == nil
	})
	if _, err := client.For[*kplanev1.Pod](e.api).Delete(e.ctx, "default", "ordered-stop", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGone("ordered-stop")
	if b, _ := os.ReadFile(out); string(b) != "app-prestop\napp-term\nproxy-term\n" {
		t.Fatalf("stop order %q: want the app's preStop, the app's SIGTERM, then the sidecar's", b)
	}
}

// An agent restarted on the same root adopts a pod whose init container
// completed: the init container does not run again and the app keeps
// its process.
func TestRestartDoesNotRerunInitContainers(t *testing.T) {
	e := newEnv(t)
	a1 := e.startAgent()
	p := e.createPod("adopted-init", "node-a", func(p *kplanev1.Pod) {
		p.Spec.InitContainers = []*kplanev1.Container{{Name: "setup", Image: "local", Command: []string{"sh", "-c", "echo ran >> ../setup-ran"}}}
	}, "sleep", "300")
	p = e.waitCreated(p, "Running", phase(kplanev1.PodRunning))
	pid := e.containerPid(p, "main")
	if err := a1.stop(); err != nil {
		t.Fatal(err)
	}
	e.startAgent()
	// A pod created after the restart runs only once the new agent is
	// reconciling; by then it has synced the adopted pod too.
	later := e.createPod("after-restart", "node-a", nil, "sleep", "300")
	e.waitCreated(later, "Running", phase(kplanev1.PodRunning))
	p = e.waitPod("adopted-init", "still Running and initialized", func(p *kplanev1.Pod) bool {
		return phase(kplanev1.PodRunning)(p) && initStatus(p, 0).GetState().GetTerminated().GetReason() == ReasonCompleted
	})
	if got := e.readPodFile(p, "setup-ran"); got != "ran\n" {
		t.Fatalf("init container ran %q, want once", got)
	}
	if !pidAlive(pid) || e.containerPid(p, "main") != pid || restarts(p) != 0 {
		t.Fatalf("app container not adopted: pid %d alive %v, restarts %d", pid, pidAlive(pid), restarts(p))
	}
}
